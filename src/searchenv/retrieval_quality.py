"""Retrieval quality: recall of gold evidence and answer-in-document rate at several cut-offs.

A measurement of a retriever against a task's gold labels (and, with a refiner, of what the agent
would read), so it sits beside the parts it joins (retrievers, tasks, refiners), not inside one.

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

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from searchenv.metrics import answer_in_text
from searchenv.refiners import get_refiner
from searchenv.retrievers.base import Retriever, RetrieverError, check_k
from searchenv.retrievers.index.metadata import read_meta
from searchenv.tasks.example import QAExample


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


#: An index of up to this many documents has its ids read to check questions' evidence against.
MAX_IDS_CHECKED = 2_000_000
_CORPUS_FINGERPRINT = re.compile(r"[0-9a-f]{32}")  # searchenv.corpus.corpus_fingerprint


def _gold_ids(example: QAExample) -> list[str]:
    """The example's evidence ids and its decomposition steps', in order, each once."""
    ids = dict.fromkeys(example.evidence_ids)
    for step in example.decomposition:
        ids.update(dict.fromkeys(step.evidence_ids))
    return list(ids)


def index_doc_ids(retriever: Any) -> set[str] | None:
    """The ids of the documents ``retriever`` can return, where it can list them cheaply.

    A local index lists them (``doc_ids()``) when it holds at most :data:`MAX_IDS_CHECKED`
    documents; a server, a custom retriever or a larger index gives ``None``.
    """
    list_ids = getattr(retriever, "doc_ids", None)
    if not callable(list_ids):
        return None
    try:
        if len(retriever) > MAX_IDS_CHECKED:
            return None
    except TypeError:
        return None
    ids = list_ids()
    return set(ids) if ids is not None else None


def _source_path(index: str) -> str | None:
    """The corpus file an index folder was built from, as its metadata records it (None if unknown)."""
    try:
        source = read_meta(index).get("source_path") if index and os.path.isdir(index) else None
    except (RetrieverError, OSError):
        return None
    return source if isinstance(source, str) and source else None


def evidence_warning(
    retriever: Any, examples: Sequence[QAExample], *, index: str = "", questions: str = "the questions"
) -> str | None:
    """Why evidence recall (and the oracle) on these questions and this index would read 0, or None.

    Gold evidence ids that the index does not hold are never retrieved: recall counts them as
    misses and the oracle cannot find them, and nothing else says so. The check:

    1. Questions converted by ``searchenv convert`` carry the fingerprint of the corpus their
       evidence ids name (``metadata["corpus_fingerprint"]``); an index built from that corpus
       has the same fingerprint: nothing to say.
    2. Otherwise, where the index lists its document ids (:func:`index_doc_ids`), the gold ids
       it lacks are counted (an index over a larger corpus that holds them all is fine).
    3. Where it cannot list them, differing fingerprints alone are reported.

    Args:
        retriever: The retriever (an index, a server client, ...).
        examples: The questions.
        index: How to name the index in the message (its folder).
        questions: How to name the questions (their file).

    Returns:
        One message naming the index, the questions, how many ids are missing, the corpora's
        fingerprints where known and what to do; None if nothing is wrong or nothing can be checked.
    """
    wanted = list(dict.fromkeys(e for ex in examples for e in _gold_ids(ex)))
    if not wanted:
        return None
    converted = sorted({fp for ex in examples if isinstance(fp := ex.metadata.get("corpus_fingerprint"), str)})
    held = getattr(retriever, "fingerprint", None)
    held = held if isinstance(held, str) and _CORPUS_FINGERPRINT.fullmatch(held) else None
    if held is not None and converted == [held]:
        return None
    name = f"index {index}" if index else "the index"
    origin = ""
    if converted and held is not None:
        source = _source_path(index)
        origin = (f"; the questions were converted with a corpus of fingerprint {', '.join(converted)}, "
                  f"{name} was built from {source or 'a corpus'} (fingerprint {held})")
    advice = ("search an index of the corpus the questions were converted with (searchenv index --corpus "
              "THAT_CORPUS --out NEW_FOLDER)" if converted else
              "give the questions' evidence_ids in the ids of the corpus this index was built from")
    ids = index_doc_ids(retriever)
    if ids is None:
        if not origin:
            return None
        return (f"{questions} may name passages that {name} lacks{origin}: evidence recall and the oracle "
                f"may read 0; {advice}")
    missing = [e for e in wanted if e not in ids]
    if not missing:
        return None
    n_questions = sum(1 for ex in examples if any(e not in ids for e in _gold_ids(ex)))
    return (
        f"{len(missing)} of the {len(wanted)} gold evidence ids of {questions} ({n_questions} of "
        f"{len(examples)} questions) are not in {name} (e.g. {missing[0]!r}): evidence recall counts them as "
        f"never retrieved and the oracle cannot find them{origin}; {advice}"
    )
