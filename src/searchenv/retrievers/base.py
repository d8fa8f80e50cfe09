"""The retriever interface: a batched search that returns scored hits.

Every retriever in searchenv (BM25, dense, hybrid, cached, remote) implements
:class:`Retriever`. The environment and the rollout engine gather all queries of
a turn (across many episodes) into one :meth:`Retriever.search_batch` call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from searchenv.errors import RetrieverError

__all__ = ["CLOSED_BOOK", "Hit", "NoDocuments", "Retriever", "RetrieverError", "check_k", "check_queries",
           "search_or_error"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved document.

    Attributes:
        doc_id: The document id in the corpus.
        title: The document title (may be empty).
        text: The document body without the title.
        score: The retriever's score; higher is better. Scales differ between retrievers.
    """

    doc_id: str
    title: str
    text: str
    score: float

    def to_dict(self) -> dict[str, object]:
        """Return the hit as a JSON-ready dict with keys ``id``, ``title``, ``text``, ``score``."""
        return {"id": self.doc_id, "title": self.title, "text": self.text, "score": float(self.score)}


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with ranked hits.

    Implementations must be deterministic: the same index and query give the same ranking.
    Failures raise :class:`RetrieverError`.
    """

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search all ``queries`` at once.

        Args:
            queries: The query strings.
            k: How many hits to return per query (fewer if the corpus is smaller).

        Returns:
            One ranked list of hits per query, best first.
        """
        ...


#: The retriever name of the closed-book control: every search finds nothing.
CLOSED_BOOK = "closed-book"


class NoDocuments:
    """The closed-book control: every query finds no document (``retriever="closed-book"``).

    A policy evaluated with it keeps its own prompt and protocol, searches as it learned to, and
    reads "No documents found." after each search: what it still answers comes from its weights
    (memorised, leaked, or guessed), which is what the control measures.
    """

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """An empty list of hits for every query (``k`` is checked as any retriever checks it)."""
        check_k(k)
        return [[] for _ in queries]


def check_k(k: int) -> int:
    """Validate a top-k value.

    Args:
        k: Requested number of hits.

    Returns:
        ``k`` unchanged.

    Raises:
        ValueError: If ``k`` is not a positive integer.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return k


def check_queries(queries: Sequence[str]) -> list[str]:
    """Validate a batch of queries: every one a string (empty strings are queries too).

    Args:
        queries: The queries of one ``search_batch`` call.

    Returns:
        The queries as a new list.

    Raises:
        ValueError: If a query is not a string, naming its type.
    """
    queries = list(queries)
    for query in queries:  # a loop, not next(..., None): a None query must be refused too
        if not isinstance(query, str):
            raise ValueError(f"queries must be strings, got {type(query).__name__}")
    return queries


def search_or_error(retriever: Retriever, queries: Sequence[str], k: int) -> list[list[Hit]] | Exception:
    """Search ``queries`` in one ``search_batch`` call; a failure is returned, never raised.

    Any ``Exception`` the retriever raises (a :class:`RetrieverError`, or e.g. a
    ``RecursionError``, ``ValueError`` or ``IndexError`` from a damaged index or a user's
    retriever) is returned as is, and an answer of the wrong shape (not one list of
    :class:`Hit` per query) or with a score that is not a finite number as a
    :class:`RetrieverError`. :meth:`searchenv.env.SearchQAEnv.finish_step`
    turns either into an infrastructure-error step. ``KeyboardInterrupt`` and ``SystemExit``
    still propagate.

    Args:
        retriever: Anything with ``search_batch(queries, k)``.
        queries: The queries.
        k: Hits per query.

    Returns:
        One list of hits per query, or the exception.
    """
    try:
        hits = retriever.search_batch(list(queries), k)
    except Exception as exc:  # any retriever failure is an infra error, not a crash
        return exc
    if not isinstance(hits, Sequence) or len(hits) != len(queries):
        got = f"{len(hits)} hit lists" if isinstance(hits, Sequence) else f"a {type(hits).__name__}"
        return RetrieverError(f"retriever returned {got} for {len(queries)} queries")
    for per_query in hits:
        if not isinstance(per_query, Sequence) or not all(map(_is_hit, per_query)):
            return RetrieverError("retriever returned something other than a list of Hit objects per query")
        for hit in per_query:
            if isinstance(hit.score, bool) or not isinstance(hit.score, numbers.Real):
                return RetrieverError(f"retriever returned a score that is not a number: {hit.score!r:.40} "
                                      f"({type(hit.score).__name__}) for document {hit.doc_id!r:.80}")
            if not math.isfinite(hit.score):
                return RetrieverError(f"retriever returned a score that is not a finite number ({hit.score}) for "
                                      f"document {hit.doc_id!r:.80} (a damaged index?)")
    return [list(per_query) for per_query in hits]


def _is_hit(hit: object) -> bool:
    return isinstance(hit, Hit) and all(isinstance(v, str) for v in (hit.doc_id, hit.title, hit.text))
