r"""Relevance verifiers for the process reward: is what a search newly retrieved relevant?

A verifier is a callable ``verifier(ctx) -> float in [0, 1]`` over a
:class:`searchenv.rewards.StepContext`. Verifiers look only at ``ctx.new_hits`` /
``ctx.new_doc_ids`` (documents not retrieved earlier in the episode), so a document earns
relevance once per episode; :func:`searchenv.rewards.relevance_score` calls them only on
search steps that retrieved something new.

Verifiers (by name with :func:`get_verifier`, or as objects):

- ``gold-evidence`` (:func:`gold_evidence`): share of the question's gold evidence documents
  newly retrieved. Over an episode these shares sum to at most 1.
- ``answer-in-doc`` (:func:`answer_in_doc`): 1 if a new document contains a gold answer or an
  intermediate answer of the question's decomposition (whole words, normalised), else 0.
- ``embedding`` (:class:`EmbeddingVerifier`): cosine similarity between the question (and its
  sub-questions) and each new document under the packaged all-MiniLM-L6-v2 encoder, mapped to
  [0, 1] by a fixed logistic calibration; the step score is the best new document's.
- judge (:class:`JudgeVerifier`): any callable ``judge(question, hits) -> scores in [0, 1]``,
  for example :class:`agents.evaluation.judges.PolicyRelevanceJudge`, which asks an LLM as R3-RAG does.

Embedding calibration: ``p = 1 / (1 + exp(-(EMBEDDING_SLOPE * cos + EMBEDDING_INTERCEPT)))``,
a logistic regression of "is a gold evidence passage of this question or sub-question" on the
cosine similarity, fitted once on the ``synthetic-mixed`` world (positives: each question and
sub-question against its gold evidence passages; negatives: the same texts against BM25 top-10
passages that are not evidence, and against random passages). The script
``benchmarks/relevance_calibration.py`` refits it and reports how well it separates the two
(AUC and mean calibrated score per class); the constants below are its output, stored so the
reward never depends on fitting at run time.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from searchenv.metrics import answer_in_text
from searchenv.retrievers.base import Hit
from searchenv.utils.registry import Registry

if TYPE_CHECKING:
    from searchenv.encoders import EncoderLike
    from searchenv.rewards.context import StepContext

Verifier = Callable[["StepContext"], float]

#: Logistic calibration of MiniLM cosine similarity (see the module docstring).
EMBEDDING_SLOPE = 22.37
EMBEDDING_INTERCEPT = -15.15

_AGGREGATES = ("max", "mean")
_TARGETS = ("question", "question+subquestions")


def gold_evidence(ctx: StepContext) -> float:
    """Share of the question's gold evidence documents that this step newly retrieved.

    Args:
        ctx: The step.

    Returns:
        ``|gold ∩ new| / |gold|``, or 0.0 when the example has no gold evidence.
    """
    gold = set(ctx.example.evidence_ids)
    if not gold:
        return 0.0
    return len(gold & set(ctx.new_doc_ids)) / len(gold)


def answer_in_doc(ctx: StepContext) -> float:
    """1.0 if a newly retrieved document contains a gold or intermediate answer, else 0.0.

    Matching is on whole normalised words over ``title + text`` (see
    :func:`searchenv.metrics.answer_in_text`); intermediate answers come from the example's
    decomposition.

    Args:
        ctx: The step.

    Returns:
        1.0 or 0.0.
    """
    targets = list(ctx.example.answers) + [s.answer for s in ctx.example.decomposition]
    return float(any(answer_in_text(f"{h.title} {h.text}", targets) for h in ctx.new_hits))


def _aggregate(scores: Sequence[float], how: str) -> float:
    if not scores:
        return 0.0
    return float(max(scores)) if how == "max" else float(sum(scores) / len(scores))


def _check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


class _LRU:
    """A small thread-safe LRU map."""

    def __init__(self, maxsize: int) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"cache_size must be a non-negative integer, got {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: Hashable, value: Any) -> None:
        if self.maxsize == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


def doc_text(hit: Hit) -> str:
    r"""The text a verifier embeds or shows for a hit: ``title\ntext`` (FlashRAG ``contents``)."""
    return f"{hit.title}\n{hit.text}" if hit.title else hit.text


class EmbeddingVerifier:
    """Relevance as calibrated cosine similarity under a sentence encoder.

    Each new document's score is ``sigmoid(slope * cos + intercept)`` where ``cos`` is its best
    cosine similarity to the question (``targets="question"``) or to the question and each
    sub-question of its decomposition (``"question+subquestions"``, the default: later hops of
    a multi-hop question are about the sub-questions' entities). The step score aggregates the
    new documents' scores (``max`` by default; ``mean`` does not grow with more documents).

    Embeddings are cached by text (LRU), so repeated questions and documents are encoded once.
    The encoder is loaded on first use (``torch`` and ``sentence_transformers`` are imported
    only then).

    Args:
        encoder: An encoder object (``encode(texts, batch_size) -> unit float32 rows``), a name or
            folder for :func:`searchenv.encoders.load_encoder`, or None for the packaged
            all-MiniLM-L6-v2.
        targets: ``question`` or ``question+subquestions``.
        aggregate: ``max`` or ``mean`` over the step's new documents.
        slope: Calibration slope (see :data:`EMBEDDING_SLOPE`).
        intercept: Calibration intercept (see :data:`EMBEDDING_INTERCEPT`).
        cache_size: Embeddings kept in the cache.
        batch_size: Texts per encoder call.
    """

    def __init__(
        self,
        encoder: EncoderLike | str | None = None,
        *,
        targets: str = "question+subquestions",
        aggregate: str = "max",
        slope: float = EMBEDDING_SLOPE,
        intercept: float = EMBEDDING_INTERCEPT,
        cache_size: int = 65536,
        batch_size: int = 64,
    ) -> None:
        self.targets = _check_choice("targets", targets, _TARGETS)
        self.aggregate = _check_choice("aggregate", aggregate, _AGGREGATES)
        for name, value in (("slope", slope), ("intercept", intercept)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.slope = float(slope)
        self.intercept = float(intercept)
        self.batch_size = batch_size
        self._encoder_spec = encoder
        self._encoder: Any = None if encoder is None or isinstance(encoder, str) else encoder
        self._cache = _LRU(cache_size)
        self._lock = threading.Lock()

    @property
    def encoder(self) -> EncoderLike:
        """The encoder (loaded on first use)."""
        with self._lock:
            if self._encoder is None:
                from searchenv.encoders import load_encoder

                spec = self._encoder_spec if isinstance(self._encoder_spec, str) else None
                self._encoder = load_encoder(spec)
            enc: EncoderLike = self._encoder
            return enc

    @property
    def cache_info(self) -> dict[str, int]:
        """Embedding cache hits, misses and size."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit embeddings of ``texts`` (cached), one row per text."""
        rows: list[np.ndarray | None] = [self._cache.get(t) for t in texts]
        missing = sorted({t for t, r in zip(texts, rows, strict=True) if r is None})
        if missing:
            fresh = np.asarray(self.encoder.encode(missing, batch_size=self.batch_size), dtype=np.float32)
            if fresh.ndim != 2 or fresh.shape[0] != len(missing):
                raise ValueError(f"encoder returned shape {fresh.shape} for {len(missing)} texts")
            made = dict(zip(missing, fresh, strict=True))
            for t, v in made.items():
                self._cache.put(t, v)
            rows = [made[t] if r is None else r for t, r in zip(texts, rows, strict=True)]
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.asarray(r, dtype=np.float32) for r in rows])

    def calibrate(self, cosine: np.ndarray | float) -> np.ndarray:
        """Map cosine similarity to [0, 1] with the logistic calibration."""
        z = self.slope * np.asarray(cosine, dtype=np.float64) + self.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-z)))

    def target_texts(self, ctx: StepContext) -> list[str]:
        """The question, plus sub-questions for ``question+subquestions``."""
        texts = [ctx.example.question]
        if self.targets == "question+subquestions":
            texts += [s.question for s in ctx.example.decomposition if s.question not in texts]
        return texts

    def doc_scores(self, ctx: StepContext) -> list[float]:
        """Calibrated score of each new document, in ``ctx.new_hits`` order."""
        hits = ctx.new_hits
        if not hits:
            return []
        targets = self.target_texts(ctx)
        emb = self.embed(targets + [doc_text(h) for h in hits])
        q, d = emb[: len(targets)], emb[len(targets) :]
        best_cos = (d @ q.T).max(axis=1)
        return [float(x) for x in self.calibrate(best_cos)]

    def __call__(self, ctx: StepContext) -> float:
        """Relevance of the step's new documents in [0, 1]."""
        return _aggregate(self.doc_scores(ctx), self.aggregate)


class RelevanceJudge(Protocol):
    """Scores documents for a question: ``judge(question, hits) -> one score in [0, 1] per hit``."""

    def __call__(self, question: str, hits: Sequence[Hit]) -> Sequence[float]:
        """Score ``hits`` for ``question``."""
        ...


class JudgeVerifier:
    """Relevance from any judge callable (an LLM, a cross-encoder, a human label table...).

    All new documents of a step that are not in the cache go to the judge in one call; scores
    are cached by (question, document id, title, text), so a document shown again for the same
    question (in another episode, e.g. the other samples of a GRPO group) is not judged again.

    Args:
        judge: ``judge(question, hits) -> scores``; see :class:`RelevanceJudge`.
        aggregate: ``max`` or ``mean`` over the step's new documents.
        cache_size: Judgements kept in the cache (0 disables it).
    """

    def __init__(self, judge: RelevanceJudge, *, aggregate: str = "max", cache_size: int = 65536) -> None:
        if not callable(judge):
            raise TypeError(f"judge must be callable (question, hits) -> scores, got {judge!r}")
        self.judge = judge
        self.aggregate = _check_choice("aggregate", aggregate, _AGGREGATES)
        self._cache = _LRU(cache_size)

    @property
    def cache_info(self) -> dict[str, int]:
        """Judgement cache hits, misses and size."""
        return {"hits": self._cache.hits, "misses": self._cache.misses, "size": len(self._cache)}

    def doc_scores(self, ctx: StepContext) -> list[float]:
        """The judge's score of each new document (clipped to [0, 1]), in ``ctx.new_hits`` order.

        Raises:
            ValueError: If the judge returns the wrong number of scores or a non-finite one.
        """
        hits = ctx.new_hits
        question = ctx.example.question
        keys = [(question, h.doc_id, h.title, h.text) for h in hits]
        scores: list[float | None] = [self._cache.get(k) for k in keys]
        todo = [i for i, s in enumerate(scores) if s is None]
        if todo:
            fresh = list(self.judge(question, [hits[i] for i in todo]))
            if len(fresh) != len(todo):
                raise ValueError(f"judge returned {len(fresh)} scores for {len(todo)} documents")
            for i, value in zip(todo, fresh, strict=True):
                v = float(value)
                if not math.isfinite(v):
                    raise ValueError(f"judge returned {value!r} for document {hits[i].doc_id!r}")
                v = min(1.0, max(0.0, v))
                scores[i] = v
                self._cache.put(keys[i], v)
        return [float(s) for s in scores if s is not None]

    def __call__(self, ctx: StepContext) -> float:
        """Relevance of the step's new documents in [0, 1]."""
        return _aggregate(self.doc_scores(ctx), self.aggregate)


def _embedding() -> dict[str, Verifier]:
    """``embedding``: one :class:`EmbeddingVerifier` per process (its cache shared), made on first use."""
    return {"embedding": EmbeddingVerifier()}


_VERIFIERS: Registry[Verifier] = Registry(
    "relevance verifier", {"gold-evidence": gold_evidence, "answer-in-doc": answer_in_doc}, load=_embedding,
    callables=True)


def register_verifier(name: str, fn: Verifier) -> None:
    """Make a verifier selectable by name.

    Raises:
        TypeError: If ``fn`` is not callable.
    """
    _VERIFIERS.register(name, fn)


def verifier_names() -> list[str]:
    """Names accepted by :func:`get_verifier`."""
    return _VERIFIERS.names()


def get_verifier(name: str) -> Verifier:
    """Look up a verifier by name (``embedding`` is one instance per process, made on first use).

    Raises:
        ValueError: For an unknown name (:class:`~searchenv.errors.UnknownNameError`, naming the verifiers).
    """
    return _VERIFIERS[name]
