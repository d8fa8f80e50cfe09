"""BM25 retrieval: the fast path on bm25s, and rank-bm25 as a reference implementation.

Both use the same tokenizer (:func:`tokenize`) so their rankings can be compared.
Rankings are canonical: ties in score are broken by corpus order.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.corpus import Document
from searchenv.retrievers.base import Hit, RetrieverError, check_k
from searchenv.retrievers.index.docstore import DocStore
from searchenv.retrievers.index.metadata import check_count, load_index, publish_index

_TOKEN = re.compile(r"\w+", re.UNICODE)
# A short English stop list (articles, auxiliaries, pronouns, prepositions, wh-words).
STOPWORDS = frozenset(
    """a an the and or but if of at by for with about against between into through during before after
    above below to from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too very s t can
    will just don should now is are was were be been being have has had having do does did doing i me my
    myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself
    it its itself they them their theirs themselves what which who whom this that these those am would
    could""".split()
)


#: Stemmers an index can use (``stemmer=`` of :meth:`BM25Retriever.build`): Snowball (PyStemmer).
STEMMERS = ("english",)


@functools.lru_cache(maxsize=4)
def _stemmer(name: str) -> Any:
    if name not in STEMMERS:
        raise ValueError(f"stemmer must be one of {STEMMERS} or None, got {name!r}")
    import Stemmer

    return Stemmer.Stemmer(name)


def tokenize(text: str, stemmer: str | None = None) -> list[str]:
    """Lower-case word tokens of ``text`` without English stop words, optionally stemmed.

    Args:
        text: Any string.
        stemmer: ``"english"`` (Snowball, as Pyserini's default analyzer stems) or None.

    Returns:
        The tokens in order.
    """
    tokens = [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    if stemmer is None:
        return tokens
    stemmed: list[str] = _stemmer(stemmer).stemWords(tokens)
    return stemmed


BACKENDS = ("numpy", "numba")


def top_k_canonical(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best positive scores, by score then by index.

    Args:
        scores: One score per document.
        k: How many to return.

    Returns:
        Row indices, best first; only rows with a score above zero.
    """
    # Only positive scores can rank; selecting them first also keeps np.partition away from the
    # long runs of tied zeros that make it slow.
    cand = np.flatnonzero(scores > 0)
    if cand.size > k:
        sub = scores[cand]
        kth = np.partition(sub, sub.size - k)[sub.size - k]
        cand = cand[sub >= kth]
    order = np.lexsort((cand, -scores[cand]))
    return cand[order[:k]]


class BM25Retriever:
    """BM25 over a corpus, backed by bm25s (sparse matrix of precomputed term scores).

    Defaults follow Pyserini's BM25 (k1=0.9, b=0.4), as used by Search-R1 and FlashRAG.
    Build with :meth:`build`, persist with :meth:`save`, reopen with :meth:`load`.

    Args:
        model: A fitted ``bm25s.BM25``.
        docs: The document store, row-aligned with the model.
        fingerprint: Corpus fingerprint.
        stemmer: The stemmer the index was built with (queries are stemmed the same way).
        backend: ``numpy`` (default) or ``numba``: bm25s's JIT-compiled scoring and top-k
            selection, faster per query once compiled, but the compile runs on the first search
            of each process, so it pays in servers and long evaluations (``searchenv serve
            --search-option backend=numba``). Rankings are the same: where bm25s's top k ends
            inside a run of tied scores, that query is ranked exactly as with ``numpy``.

    Raises:
        ValueError: On an unknown backend, or ``numba`` when numba is not installed.
    """

    kind = "bm25"

    def __init__(self, model: Any, docs: DocStore, fingerprint: str, *, stemmer: str | None = None,
                 backend: str = "numpy") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend == "numba":
            if importlib.util.find_spec("numba") is None:
                raise ValueError("backend 'numba' needs numba: pip install 'searchenv[bm25-numba]'")
            model.backend = "numba"
            model.compile(activate_numba=True)
        self._model = model
        self.backend = backend
        self.stemmer = stemmer
        self._docs = docs
        self.fingerprint = fingerprint
        self._vocab: dict[str, int] = model.vocab_dict

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        folder: str | os.PathLike[str],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        method: str = "lucene",
        stemmer: str | None = None,
        source_sha256: str = "",
        source_path: str = "",
    ) -> BM25Retriever:
        """Index ``documents`` and swap the new index into ``folder`` atomically.

        The index is written to a fresh folder and replaces the old one only when complete (see
        :mod:`searchenv.retrievers.index.metadata`), so a failed or killed build loses nothing. The
        vocabulary is numbered in sorted token order: one corpus gives byte-identical files.

        Args:
            documents: The corpus (any iterable; read once).
            folder: Index folder (created; a previous index in it is replaced).
            k1: BM25 term-frequency saturation.
            b: BM25 length normalisation.
            method: bm25s scoring variant (``lucene``, ``robertson``, ``atire``, ``bm25l``, ``bm25+``).
            stemmer: ``"english"`` to stem documents and queries (Snowball via PyStemmer; closer to
                Pyserini's default analyzer, which stems), or None (default: exact word forms).
            source_sha256: Hash of the corpus file the documents came from, stored for cache checks.
            source_path: The corpus file, named in rebuild hints.

        Returns:
            The retriever over the saved index.

        Raises:
            ValueError: On an empty corpus.
        """
        import bm25s

        if stemmer is not None:
            _stemmer(stemmer)  # refuse an unknown stemmer before anything is written

        def write(data: Path) -> dict[str, Any]:
            n, fingerprint = DocStore.write(data, documents)
            if n == 0:
                raise ValueError("cannot build a BM25 index over an empty corpus")
            # Two passes over the stored documents: the vocabulary first, then each document's token
            # ids as a compact int32 array, so no list of token strings for the whole corpus is ever
            # held (a much lower peak memory than lists of strings; the index is byte-identical).
            store = DocStore(data)
            words: set[str] = set()
            for d in store:
                words.update(tokenize(d.contents, stemmer))
            vocab = {t: i for i, t in enumerate(sorted(words))}
            del words
            ids = [np.fromiter((vocab[t] for t in tokenize(d.contents, stemmer)), dtype=np.int32) for d in store]
            model = bm25s.BM25(k1=k1, b=b, method=method)
            model.index((ids, vocab), create_empty_token=False, show_progress=False)
            del ids
            model.save(str(data / "bm25"), show_progress=False)
            return {"kind": cls.kind, "fingerprint": fingerprint, "num_docs": n, "source_sha256": source_sha256,
                    "source_path": source_path, "params": {"k1": k1, "b": b, "method": method, "stemmer": stemmer}}

        publish_index(folder, write)
        return cls.load(folder)

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, mmap: bool = False, verify: bool = False,
             backend: str = "numpy") -> BM25Retriever:
        """Open a saved index (no pickle; optionally memory-mapped), checking it on the way.

        Args:
            folder: The index folder.
            mmap: Memory-map the score matrix and documents instead of reading them.
            verify: Also compare every file's SHA-256 with the metadata (reads every byte).
            backend: ``numpy`` or ``numba`` (see the class).

        Returns:
            The retriever.

        Raises:
            RetrieverError: If the folder holds no BM25 index.
            IndexIntegrityError: If files are missing or differ in size (or checksum) from the
                metadata, or the documents, score matrix and vocabulary disagree in number.
        """
        import bm25s

        def open_data(meta: dict[str, Any], data: Path) -> BM25Retriever:
            model = bm25s.BM25.load(str(data / "bm25"), mmap=mmap, allow_pickle=False, show_progress=False)
            docs = DocStore(data, mmap_mode=mmap)
            scores = model.scores
            n = meta["num_docs"]
            check_count(folder, meta, "documents in docs.jsonl vs metadata", len(docs), n)
            check_count(folder, meta, "rows of the BM25 matrix vs metadata", int(scores["num_docs"]), n)
            check_count(folder, meta, "vocab.index.json entries vs BM25 matrix columns", len(model.vocab_dict),
                        len(scores["indptr"]) - 1)
            check_count(folder, meta, "BM25 matrix entries vs indptr", len(scores["data"]), int(scores["indptr"][-1]))
            check_count(folder, meta, "BM25 matrix entries vs indices", len(scores["data"]), len(scores["indices"]))
            stemmer = meta.get("params", {}).get("stemmer")
            if stemmer is not None:
                _stemmer(stemmer)  # a ValueError now (a damaged index), not at the first search
            return cls(model, docs, str(meta["fingerprint"]), stemmer=stemmer, backend=backend)

        if backend not in BACKENDS:  # before load_index, which reports a ValueError as a damaged index
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        return load_index(folder, cls.kind, open_data, verify=verify)

    def __len__(self) -> int:
        return len(self._docs)

    def doc_ids(self) -> list[str]:
        """The ids of the indexed documents, in row order (read once, then cached)."""
        return self._docs.ids()

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query``."""
        ids = [self._vocab[t] for t in tokenize(query, self.stemmer) if t in self._vocab]
        if not ids:
            return np.zeros(len(self._docs), dtype=np.float32)
        return np.asarray(self._model.get_scores(ids))

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Rank documents for each query (see :class:`searchenv.retrievers.base.Retriever`)."""
        check_k(k)
        out: list[list[Hit]] = []
        try:
            ranked = self._rank_numba(queries, k) if self.backend == "numba" else [None] * len(queries)
            for q, found in zip(queries, ranked, strict=True):
                if found is None:
                    s = self.scores(q)
                    rows = top_k_canonical(s, k)
                    found = (rows, s[rows])
                hits = []
                for row, score in zip(found[0].tolist(), found[1].tolist(), strict=True):
                    d = self._docs[int(row)]
                    hits.append(Hit(d.id, d.title, d.text, float(score)))
                out.append(hits)
        except (OSError, ValueError) as exc:  # a damaged or vanished memory-mapped index
            raise RetrieverError(f"BM25 search failed: {exc}") from exc
        return out

    def _rank_numba(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Top ``k`` (rows, scores) per query from bm25s's numba retrieval, ``None`` where it may be inexact.

        bm25s returns ``k + 8`` candidates in no defined order among ties; they are put in the
        canonical order (score, then row). The top ``k`` is exact unless the k-th score equals the
        last candidate's positive score (a tie that may continue beyond the candidates): then the
        query gets ``None`` and is ranked by the full score vector.
        """
        ids = [[self._vocab[t] for t in tokenize(q, self.stemmer) if t in self._vocab] for q in queries]
        asked = [i for i, x in enumerate(ids) if x]
        out: list[tuple[np.ndarray, np.ndarray] | None] = [
            (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))] * len(queries)
        if not asked:
            return out
        n = len(self._docs)
        fetch = min(n, k + 8)
        rows, scores = self._model.retrieve([ids[i] for i in asked], k=fetch, show_progress=False,
                                            backend_selection="numba", n_threads=1)
        for i, r, s in zip(asked, rows, scores, strict=True):
            positive = s > 0
            r, s = r[positive].astype(np.int64), s[positive]
            order = np.lexsort((r, -s))
            r, s = r[order], s[order]
            if fetch < n and len(s) == fetch and len(s) >= k and s[k - 1] == s[-1]:
                out[i] = None
            else:
                out[i] = (r[:k], s[:k])
        return out


class RankBM25Retriever:
    """BM25 with rank-bm25's ``BM25Okapi``: a slow, simple reference implementation.

    Args:
        documents: The corpus (kept in memory).
        k1: Term-frequency saturation.
        b: Length normalisation.
        epsilon: rank-bm25's floor for negative idf, as a fraction of the mean idf.
    """

    kind = "rank-bm25"

    def __init__(
        self, documents: Sequence[Document], *, k1: float = 0.9, b: float = 0.4, epsilon: float = 0.25
    ):
        from rank_bm25 import BM25Okapi

        if not documents:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        self._docs = list(documents)
        self._model = BM25Okapi([tokenize(d.contents) for d in self._docs], k1=k1, b=b, epsilon=epsilon)

    def __len__(self) -> int:
        return len(self._docs)

    def doc_ids(self) -> list[str]:
        """The ids of the indexed documents, in order."""
        return [d.id for d in self._docs]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query``."""
        return np.asarray(self._model.get_scores(tokenize(query)), dtype=np.float64)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Rank documents for each query, one at a time."""
        check_k(k)
        out = []
        for q in queries:
            s = self.scores(q)
            out.append(
                [
                    Hit(self._docs[r].id, self._docs[r].title, self._docs[r].text, float(s[r]))
                    for r in top_k_canonical(s, k)
                ]
            )
        return out
