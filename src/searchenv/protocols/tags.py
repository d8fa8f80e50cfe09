"""The tag protocols: Search-R1, multi-query (RAG-R1), ARENA citations and browse (snippets and pages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from searchenv.actions import Action, Answer, Invalid
from searchenv.protocols.base import (
    _BASE_TAGS,
    _NUMBER,
    ActionProtocol,
    _Block,
    _check_positive,
    sanitize,
)
from searchenv.retrievers.base import Hit


class SearchR1Protocol(ActionProtocol):
    """The Search-R1 tag format: think, then one search or one answer per turn."""

    name = "search-r1"

    def system_prompt(self) -> str:
        """Instructions that teach the Search-R1 format."""
        return (
            "Answer the question. Reason step by step inside <think> and </think> each time you receive "
            "new information. If you lack knowledge, search by writing <search> your query </search>; "
            "the top results come back between <information> and </information>. You may search several "
            "times. When you know the answer, write it inside <answer> and </answer> with no explanation, "
            "for example <answer> Ostrava </answer>."
        )


class MultiQueryProtocol(ActionProtocol):
    """RAG-R1 style: several queries per turn, one per line in a single ``<search>`` block.

    Args:
        max_queries: Queries allowed per turn (default 3).
        **kwargs: As for :class:`ActionProtocol`.
    """

    name = "multi-query"

    def __init__(self, *, max_queries: int = 3, **kwargs: int) -> None:
        super().__init__(max_queries=max_queries, **kwargs)

    def system_prompt(self) -> str:
        """Instructions that teach the multi-query format."""
        return (
            "Answer the question. Reason step by step inside <think> and </think> each time you receive "
            "new information. If you lack knowledge, search by writing up to "
            f"{self.max_queries} queries inside one <search> block, one query per line, for example "
            "<search>\nfirst query\nsecond query\n</search>. The results for every query come back "
            "between <information> and </information>. When you know the answer, write it inside "
            "<answer> and </answer> with no explanation."
        )

    def _queries_in(self, body: str) -> list[str]:
        return [" ".join(line.split()) for line in body.splitlines() if line.strip()]

    def render_hits(
        self, queries: Sequence[str], hits: Sequence[Sequence[Hit]], numbers: Sequence[Sequence[int]] | None = None
    ) -> str:
        """Results grouped by query."""
        return "\n\n<information>" + _grouped(self, queries, hits, numbers) + "</information>\n\n"


def _grouped(
    protocol: ActionProtocol,
    queries: Sequence[str],
    hits: Sequence[Sequence[Hit]],
    numbers: Sequence[Sequence[int]] | None,
) -> str:
    """Each query's documents under a ``Query i: q`` line (several queries searched in one turn)."""
    return "\n\n".join(
        f"Query {i}: {sanitize(q)}\n{protocol.render_docs(h, numbers[i - 1] if numbers else None)}"
        for i, (q, h) in enumerate(zip(queries, hits, strict=True), 1)
    )


class ArenaProtocol(ActionProtocol):
    """ARENA (Ren et al., 2025): answers that cite the documents they rely on.

    Searches work as in ``search-r1``, but documents are numbered across the episode, so a
    number names one document for the whole episode. The final turn is structured::

        <relevance> 1, 4 </relevance>
        <analysis> Doc 1 says ..., Doc 4 says ..., so ... </analysis>
        <answer> ... </answer>

    The parsed :class:`Answer` carries the cited numbers (every number in the ``<relevance>``
    block; ``()`` for none, ``None`` when the block is missing). A turn with several
    ``<relevance>`` blocks is invalid (``multiple_relevance``). Whether the turn has the full
    structure is for the reward to judge (:func:`searchenv.rewards.arena_turn_valid`); the
    environment maps numbers to documents and drops numbers it never showed.
    """

    name = "arena"
    tags = (*_BASE_TAGS, "relevance", "analysis")
    episode_numbering = True

    def system_prompt(self) -> str:
        """Instructions that teach the ARENA format."""
        return (
            "Answer the question. Reason step by step inside <think> and </think>. If you lack knowledge, "
            "search by writing <search> your query </search>; the results come back between <information> "
            "and </information> as numbered documents (Doc 1, Doc 2, ...; numbers continue across searches). "
            "When you know the answer, end with three parts: the numbers of the documents you rely on inside "
            "<relevance> and </relevance>, your reasoning over them inside <analysis> and </analysis>, and the "
            "answer inside <answer> and </answer>, for example <relevance> 1, 4 </relevance> <analysis> Doc 1 "
            "says ... </analysis> <answer> Ostrava </answer>."
        )

    def _answer(self, ans: _Block, blocks: Sequence[_Block]) -> Action:
        relevance = [b for b in blocks if b.tag == "relevance"]
        if len(relevance) > 1:
            return Invalid(Invalid.MULTIPLE_RELEVANCE, "Give one <relevance> block with every document you rely on.")
        cited = None
        if relevance:
            cited = tuple(dict.fromkeys(int(n) for n in _NUMBER.findall(relevance[0].body)))
        return Answer(" ".join(ans.body.split()), cited)


class BrowseProtocol(ActionProtocol):
    """Search returns snippets; ``<open>`` reads a shown document page by page (DeepResearcher).

    A search shows each hit's title and the first ``snippet_chars`` characters of its text
    (cut at a word), numbered across the episode. ``<open> 3 </open>`` shows page 1 of
    document 3 in full (``page_chars`` characters a page, cut at words), ``<open> 3 page 2
    </open>`` the next page. Opening a number never shown or a page past the end is an
    invalid turn (``unknown_document``, ``page_out_of_range``); ``open`` costs a turn like any
    action, and reward terms can price it (``cost`` with ``per_open``).

    Args:
        snippet_chars: Characters of each hit's text a search shows.
        page_chars: Characters per page of an opened document.
        **kwargs: As for :class:`ActionProtocol`.
    """

    name = "browse"
    stop: ClassVar[tuple[str, ...]] = ("</search>", "</answer>", "</open>")
    tags: ClassVar[tuple[str, ...]] = (*_BASE_TAGS, "open")
    episode_numbering = True
    can_open = True

    def __init__(self, *, snippet_chars: int = 160, page_chars: int = 1000, **kwargs: int) -> None:
        super().__init__(**kwargs)
        _check_positive(snippet_chars=snippet_chars, page_chars=page_chars)
        self.snippet_chars = snippet_chars
        self.page_chars = page_chars

    def system_prompt(self) -> str:
        """Instructions that teach the browse format."""
        return (
            "Answer the question. Reason step by step inside <think> and </think>. Search by writing "
            "<search> your query </search>; the results come back between <information> and </information> "
            "as numbered documents (Doc 1, Doc 2, ...; numbers continue across searches) with a title and a "
            "short snippet. To read a document in full, write <open> its number </open>, for example "
            "<open> 2 </open>; a long document has pages: <open> 2 page 2 </open>. One action per turn. "
            "When you know the answer, write it inside <answer> and </answer>, for example "
            "<answer> Ostrava </answer>."
        )

    def as_shown(self, hits: Sequence[Hit]) -> tuple[Hit, ...]:
        """Each hit with its text cut to the snippet a search shows."""
        return tuple(replace(h, text=_cut_words(h.text, self.snippet_chars)) for h in hits)

    def paginate(self, text: str) -> list[str]:
        """Pages of at most ``page_chars`` characters, cut at whitespace where there is any."""
        pages: list[str] = []
        rest = text.strip()
        while len(rest) > self.page_chars:
            cut = rest.rfind(" ", 0, self.page_chars + 1)
            cut = cut if cut > 0 else self.page_chars
            pages.append(rest[:cut].rstrip())
            rest = rest[cut:].lstrip()
        pages.append(rest)
        return pages


def _cut_words(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word, with ``...`` when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit + 1)
    return (text[:cut] if cut > 0 else text[:limit]).rstrip() + "..."
