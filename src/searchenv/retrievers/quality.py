"""Retrieval quality: recall of gold evidence and answer-in-document rate at several cut-offs.

For each question (searched as-is, once, at the largest cut-off):

* ``recall@k``: the fraction of its gold evidence documents (``QAExample.evidence_ids``) among
  the top k hits, averaged over the questions that have gold evidence;
* ``all_evidence@k``: the fraction of those questions with *every* evidence document in the top k
  (what a multi-hop question needs from a single search);
* ``answer_in_docs@k``: the fraction of all questions for which some gold answer occurs (as
  whole words, after SQuAD normalisation) in the title or text of a top-k hit;
* ``chars_read@k``: the mean number of characters (titles and texts) of the top k hits, what an
  agent reads.

With a ``refiner`` (:mod:`searchenv.refiners`) the hits are refined first, as the environment
would show them: the same documents (recall unchanged), less text, and the answer-in-document
rate of what is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from searchenv.retrievers.base import Retriever, check_k
from searchenv.tasks.base import QAExample


@dataclass(frozen=True)
class RetrievalQuality:
    """Quality of one retriever on one question set.

    Attributes:
        name: Label of the retriever (e.g. the index folder).
        num_examples: Questions evaluated.
        num_with_evidence: Questions that have gold evidence ids.
        recall: k -> mean recall of gold evidence in the top k (None: no question has evidence).
        all_evidence: k -> fraction of questions with all their evidence in the top k (None: no
            question has evidence).
        answer_in_docs: k -> fraction of questions with a gold answer in a top-k document.
    """

    name: str
    num_examples: int
    num_with_evidence: int
    recall: dict[int, float | None] = field(default_factory=dict)
    all_evidence: dict[int, float | None] = field(default_factory=dict)
    answer_in_docs: dict[int, float] = field(default_factory=dict)
    chars_read: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict; cut-offs become string keys like ``"recall@5"``."""
        out: dict[str, object] = {
            "name": self.name,
            "num_examples": self.num_examples,
            "num_with_evidence": self.num_with_evidence,
        }
        for k in sorted(self.recall):
            out[f"recall@{k}"] = self.recall[k]
            out[f"all_evidence@{k}"] = self.all_evidence[k]
            out[f"answer_in_docs@{k}"] = self.answer_in_docs[k]
            if k in self.chars_read:
                out[f"chars_read@{k}"] = self.chars_read[k]
        return out


def evaluate_retrieval(
    retriever: Retriever,
    examples: Sequence[QAExample],
    ks: Sequence[int] = (1, 5, 10),
    *,
    name: str = "",
    batch_size: int = 256,
    refiner: Any = None,
) -> RetrievalQuality:
    """Measure recall of gold evidence and answer-in-document rate at each cut-off in ``ks``.

    Args:
        retriever: The retriever to evaluate.
        examples: Questions with answers and (optionally) evidence ids.
        ks: Cut-offs (positive integers).
        name: Label stored in the result.
        batch_size: Questions per ``search_batch`` call.
        refiner: A refiner name or object (see :func:`searchenv.refiners.get_refiner`) applied to
            each question's hits before the answer-in-document rate and characters are counted.

    Returns:
        The metrics; a metric over zero questions is 0.0.

    Raises:
        ValueError: If ``ks`` is empty or holds a non-positive value.
    """
    from searchenv.metrics import answer_in_text
    from searchenv.refiners import get_refiner

    refine = get_refiner(refiner)
    if not ks:
        raise ValueError("ks must name at least one cut-off")
    cutoffs = sorted({check_k(k) for k in ks})
    check_k(batch_size)
    top = cutoffs[-1]
    recall_sum = dict.fromkeys(cutoffs, 0.0)
    all_sum = dict.fromkeys(cutoffs, 0)
    answer_sum = dict.fromkeys(cutoffs, 0)
    chars_sum = dict.fromkeys(cutoffs, 0)
    n_evidence = 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        queries = [ex.question for ex in chunk]
        results: Sequence[Sequence[Any]] = retriever.search_batch(queries, top)
        if refine is not None:
            results = refine.refine(queries, results)[0]
        for ex, hits in zip(chunk, results, strict=True):
            gold = set(ex.evidence_ids)
            if gold:
                n_evidence += 1
            # rank (1-based) of the first hit that contains a gold answer; None if none does
            first_answer = next(
                (rank for rank, h in enumerate(hits, 1) if answer_in_text(f"{h.title} {h.text}", ex.answers)),
                None,
            )
            for k in cutoffs:
                ids = {h.doc_id for h in hits[:k]}
                if gold:
                    found = len(gold & ids)
                    recall_sum[k] += found / len(gold)
                    all_sum[k] += int(found == len(gold))
                answer_sum[k] += int(first_answer is not None and first_answer <= k)
                chars_sum[k] += sum(len(h.title) + len(h.text) for h in hits[:k])
    n = len(examples)
    return RetrievalQuality(
        name=name,
        num_examples=n,
        num_with_evidence=n_evidence,
        recall={k: recall_sum[k] / n_evidence if n_evidence else None for k in cutoffs},
        all_evidence={k: all_sum[k] / n_evidence if n_evidence else None for k in cutoffs},
        answer_in_docs={k: answer_sum[k] / n if n else 0.0 for k in cutoffs},
        chars_read={k: chars_sum[k] / n if n else 0.0 for k in cutoffs},
    )
