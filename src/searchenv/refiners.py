"""Refiners between the retriever and the reasoner (IM-RAG): what the agent reads of each hit.

A refiner takes one search step's queries and hits and returns the hits the agent will read,
with a record of what it chose. The environment applies it after retrieval and before rendering
(``SearchQAEnv(refiner=...)``) and reports the choices in ``info["refined"]``, so its effect can be
evaluated beside the unrefined environment. Document ids are never changed: evidence recall and
the relevance terms count the same documents; only the text shown is cut.

:class:`SentenceRefiner` keeps, in their original order, the ``max_sentences`` sentences of each
hit that match its query best: by shared content words (``lexical``, the BM25 tokenizer: lower
case, English stop words removed) or by cosine similarity of sentence embeddings (``embedding``,
the packaged all-MiniLM-L6-v2 or any encoder). Ties go to the earlier sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from searchenv.retrievers.base import Hit
from searchenv.utils.registry import Registry

__all__ = ["REFINERS", "Refiner", "SentenceRefiner", "get_refiner", "register_refiner", "split_sentences"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@runtime_checkable
class Refiner(Protocol):
    """Turns a step's hits into what the agent reads.

    Attributes:
        name: A stable name (reported in ``info``).
    """

    name: str

    def refine(
        self, queries: Sequence[str], hits: Sequence[Sequence[Hit]]
    ) -> tuple[tuple[tuple[Hit, ...], ...], list[list[dict[str, Any]]]]:
        """Refine one step.

        Args:
            queries: The step's queries.
            hits: One hit list per query.

        Returns:
            ``(refined hits, choices)``: the same shape as ``hits``, and per query per hit a dict
            (``doc_id``, ``kept``: the sentence indices kept, ``sentences``, ``chars_before``,
            ``chars_after``).
        """
        ...


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by white space; none empty."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


class SentenceRefiner:
    """Keep the sentences of each hit that best match its query (see the module docstring).

    Args:
        max_sentences: Sentences kept per hit.
        scorer: ``lexical`` or ``embedding``.
        encoder: The encoder for ``embedding`` (default: the packaged all-MiniLM-L6-v2, loaded on first use).

    Raises:
        ValueError: On a bad ``max_sentences`` or ``scorer``.
    """

    def __init__(self, max_sentences: int = 2, scorer: str = "lexical", encoder: Any = None) -> None:
        if isinstance(max_sentences, bool) or not isinstance(max_sentences, int) or max_sentences < 1:
            raise ValueError(f"max_sentences must be a positive integer, got {max_sentences!r}")
        if scorer not in ("lexical", "embedding"):
            raise ValueError(f"scorer must be lexical or embedding, got {scorer!r}")
        self.max_sentences = max_sentences
        self.scorer = scorer
        self._encoder = encoder
        self.name = f"sentences:{scorer}:{max_sentences}"

    def _scores(self, query: str, sentences: Sequence[str]) -> list[float]:
        if self.scorer == "lexical":
            from searchenv.retrievers.bm25 import tokenize

            words = set(tokenize(query))
            return [float(len(words & set(tokenize(s)))) for s in sentences]
        if self._encoder is None:
            from searchenv.encoders import load_encoder

            self._encoder = load_encoder()
        vectors = self._encoder.encode([query, *sentences])
        return [float(v) for v in vectors[1:] @ vectors[0]]

    def refine(
        self, queries: Sequence[str], hits: Sequence[Sequence[Hit]]
    ) -> tuple[tuple[tuple[Hit, ...], ...], list[list[dict[str, Any]]]]:
        """Refine one step (see :class:`Refiner`)."""
        out: list[tuple[Hit, ...]] = []
        choices: list[list[dict[str, Any]]] = []
        for query, per_query in zip(queries, hits, strict=True):
            kept_hits, kept_choices = [], []
            for hit in per_query:
                sentences = split_sentences(hit.text)
                if len(sentences) <= self.max_sentences:
                    keep = list(range(len(sentences)))
                    text = hit.text
                else:
                    scores = self._scores(query, sentences)
                    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
                    keep = sorted(ranked[: self.max_sentences])
                    text = " ".join(sentences[i] for i in keep)
                kept_hits.append(replace(hit, text=text))
                kept_choices.append({"doc_id": hit.doc_id, "kept": keep, "sentences": len(sentences),
                                     "chars_before": len(hit.text), "chars_after": len(text)})
            out.append(tuple(kept_hits))
            choices.append(kept_choices)
        return tuple(out), choices


#: Refiners by name for ``SearchQAEnv(refiner=...)``, each a factory called with no argument:
#: ``sentences`` (lexical, 2 per hit) and ``sentences-embedding``; :func:`register_refiner` adds one.
REFINERS: Registry[Callable[[], Refiner]] = Registry("refiner", {
    "sentences": lambda: SentenceRefiner(),
    "sentences-embedding": lambda: SentenceRefiner(scorer="embedding"),
}, callables=True)


def register_refiner(name: str, factory: Callable[[], Refiner]) -> None:
    """Make a refiner selectable as ``refiner="name"``: ``factory()`` makes one for each environment.

    Raises:
        TypeError: If ``factory`` is not callable.
        ValueError: If ``name`` is not a non-empty string.
    """
    REFINERS.register(name, factory)


def get_refiner(spec: str | Refiner | None) -> Refiner | None:
    """A refiner from a name of :data:`REFINERS`, an object with ``refine``, or ``None``.

    Raises:
        ValueError: On an unknown name or an object without ``refine``.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        refiner: Refiner = REFINERS[spec]()  # an unknown name: UnknownNameError (a ValueError)
        return refiner
    if not callable(getattr(spec, "refine", None)):
        raise ValueError(f"refiner must be a name or an object with refine(), got {type(spec).__name__}")
    return spec
