"""Hybrid retrieval: reciprocal-rank fusion (RRF) of any retrievers.

Each sub-retriever is asked once per batch (one ``search_batch`` call each) for its top
``depth`` hits; a document's fused score is

    score(d) = sum_i  w_i / (rrf_k + rank_i(d))

over the retrievers that returned it, with ranks starting at 1 (Cormack, Clarke and
Buettcher, SIGIR 2009; ``rrf_k = 60`` as there). Scores of different retrievers are never
compared, so BM25 and cosine scores mix without calibration. Ties are broken by the best
single rank, then by the order of the retrievers, then by document id, so fusion is
deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from searchenv.retrievers.base import Hit, Retriever, RetrieverError, check_k


def rrf_fuse(
    rankings: Sequence[Sequence[Hit]], k: int, *, weights: Sequence[float] | None = None, rrf_k: float = 60.0
) -> list[Hit]:
    """Fuse ranked lists of one query with weighted reciprocal-rank fusion.

    Args:
        rankings: One ranked hit list per retriever, best first. A document listed twice in
            one ranking counts at its best place only.
        k: Number of fused hits to return.
        weights: One non-negative weight per ranking (default all 1); a ranking with weight 0
            is ignored.
        rrf_k: The RRF constant added to each rank.

    Returns:
        Up to ``k`` hits, best first; ``score`` is the fused RRF score. Title and text come
        from the first ranking that holds the document.

    Raises:
        ValueError: On a bad ``k``, ``rrf_k`` or weights.
    """
    check_k(k)
    w = _check_weights(weights, len(rankings))
    _check_rrf_k(rrf_k)
    score: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}  # doc id -> (best rank, first retriever holding it)
    first_hit: dict[str, Hit] = {}
    for i, ranking in enumerate(rankings):
        if w[i] == 0:  # a switched-off retriever contributes no documents
            continue
        seen: set[str] = set()
        for rank, hit in enumerate(ranking, start=1):
            if hit.doc_id in seen:
                continue
            seen.add(hit.doc_id)
            score[hit.doc_id] = score.get(hit.doc_id, 0.0) + w[i] / (rrf_k + rank)
            if hit.doc_id not in first_hit:
                first_hit[hit.doc_id] = hit
                best[hit.doc_id] = (rank, i)
            elif rank < best[hit.doc_id][0]:
                best[hit.doc_id] = (rank, best[hit.doc_id][1])
    order = sorted(score, key=lambda d: (-score[d], best[d][0], best[d][1], d))
    return [Hit(d, first_hit[d].title, first_hit[d].text, score[d]) for d in order[:k]]


def _check_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0] * n
    w = [float(x) for x in weights]
    if len(w) != n:
        raise ValueError(f"got {len(w)} weights for {n} retrievers")
    if any(not math.isfinite(x) or x < 0 for x in w):
        raise ValueError(f"weights must be finite and non-negative, got {w}")
    if n and not any(w):
        raise ValueError("at least one weight must be positive")
    return w


def _check_rrf_k(rrf_k: float) -> float:
    if not math.isfinite(rrf_k) or rrf_k < 0:
        raise ValueError(f"rrf_k must be a finite non-negative number, got {rrf_k!r}")
    return rrf_k


class HybridRetriever:
    """Reciprocal-rank fusion of several retrievers (see the module docstring).

    Args:
        retrievers: The retrievers to fuse (at least one).
        weights: One non-negative weight per retriever (default all 1).
        rrf_k: The RRF rank constant (60 in the original paper).
        depth: Hits requested from each retriever per query (at least the call's ``k``);
            default ``2 * k``.

    Raises:
        ValueError: On no retrievers, bad weights, ``rrf_k`` or ``depth``.
    """

    kind = "hybrid"

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        weights: Sequence[float] | None = None,
        rrf_k: float = 60.0,
        depth: int | None = None,
    ) -> None:
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        self.retrievers = list(retrievers)
        self.weights = _check_weights(weights, len(self.retrievers))
        self.rrf_k = _check_rrf_k(float(rrf_k))
        self.depth = check_k(depth) if depth is not None else None

    def __len__(self) -> int:
        return max((len(r) for r in self.retrievers if hasattr(r, "__len__")), default=0)  # type: ignore[arg-type]

    def doc_ids(self) -> list[str] | None:
        """The ids any fused retriever can return (None if one cannot list them)."""
        out: dict[str, None] = {}
        for r in self.retrievers:
            ids = r.doc_ids() if callable(getattr(r, "doc_ids", None)) else None  # type: ignore[attr-defined]
            if ids is None:
                return None
            out.update(dict.fromkeys(ids))
        return list(out)

    @property
    def fingerprint(self) -> str:
        """The sub-retrievers' fingerprints joined with ``+`` (empty parts for unknown ones)."""
        return "+".join(str(getattr(r, "fingerprint", "")) for r in self.retrievers)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Fuse the rankings of every retriever for each query (one batch call per retriever)."""
        check_k(k)
        queries = list(queries)
        if not queries:
            return []
        depth = max(k, self.depth) if self.depth is not None else 2 * k
        per_retriever = [r.search_batch(queries, depth) for r in self.retrievers]
        for r, res in zip(self.retrievers, per_retriever, strict=True):
            if len(res) != len(queries):
                raise RetrieverError(f"{type(r).__name__} answered {len(res)} of {len(queries)} queries")
        return [
            rrf_fuse([res[qi] for res in per_retriever], k, weights=self.weights, rrf_k=self.rrf_k)
            for qi in range(len(queries))
        ]
