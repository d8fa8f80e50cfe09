"""Action protocols: how a model turn is parsed into an action and how results are shown.

Each published format is one :class:`Protocol` subclass, selectable by name with
:func:`get_protocol`. A protocol never raises on model text: anything malformed
becomes an :class:`Invalid` action with a code and a message that tells the
model how to fix the turn. Only the agent's own turn is parsed; retrieved text
is never read for answers.

Formats:
    ``search-r1``: ``<think>..</think>``, one ``<search>query</search>`` or one
    ``<answer>..</answer>`` per turn; results come back as
    ``<information>Doc 1(Title: ...) text ...</information>`` (Search-R1, ReSearch).
    ``multi-query``: as ``search-r1`` but one ``<search>`` block may hold several
    queries, one per line, searched together, up to ``max_queries`` (RAG-R1).
    ``arena``: as ``search-r1``, with documents numbered across the episode (the first search
    shows Doc 1-3, the next Doc 4-6; a document shown again keeps its number), and a final turn
    that cites the documents it relies on: ``<relevance>1, 4</relevance><analysis>..</analysis>
    <answer>..</answer>`` (ARENA). A citation of a number never shown earns nothing.
    ``browse``: a search returns each hit's title and the first ``snippet_chars`` characters;
    ``<open>3</open>`` reads shown document 3 in full, ``page_chars`` characters a page
    (``<open>3 page 2</open>`` for the next), as web agents do (DeepResearcher).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar

from searchenv.retrievers.base import Hit


@dataclass(frozen=True, slots=True)
class Search:
    """Search for each query (one retriever call for all of them)."""

    queries: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """Give the final answer.

    Attributes:
        text: The answer, whitespace collapsed.
        cited: Document numbers the turn cites as its evidence (``arena``: the ``<relevance>``
            block; ``()`` when it cites none); None when the turn has no citation block.
    """

    text: str
    cited: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Open:
    """Read one page of a document shown earlier in the episode (``browse``).

    Attributes:
        number: The document's number as shown (``Doc 3`` -> 3).
        page: 1-based page.
    """

    number: int
    page: int = 1


@dataclass(frozen=True, slots=True)
class Invalid:
    """A malformed turn.

    Attributes:
        code: A stable machine-readable reason (one of the ``Invalid.*`` constants below).
        message: What was wrong and how to fix it, shown to the model.
    """

    code: str
    message: str

    NO_ACTION: ClassVar[str] = "no_action"
    UNCLOSED_TAG: ClassVar[str] = "unclosed_tag"
    EMPTY_QUERY: ClassVar[str] = "empty_query"
    EMPTY_ANSWER: ClassVar[str] = "empty_answer"
    MULTIPLE_ANSWERS: ClassVar[str] = "multiple_answers"
    TEXT_AFTER_ANSWER: ClassVar[str] = "text_after_answer"
    SEARCH_AFTER_ANSWER: ClassVar[str] = "search_after_answer"
    SEARCH_AND_ANSWER: ClassVar[str] = "search_and_answer"
    TOO_LONG: ClassVar[str] = "too_long"
    TOO_MANY_QUERIES: ClassVar[str] = "too_many_queries"
    QUERY_TOO_LONG: ClassVar[str] = "query_too_long"
    FAKE_INFORMATION: ClassVar[str] = "fake_information"
    MULTIPLE_ACTIONS: ClassVar[str] = "multiple_actions"
    BAD_OPEN: ClassVar[str] = "bad_open"
    UNKNOWN_DOCUMENT: ClassVar[str] = "unknown_document"
    PAGE_OUT_OF_RANGE: ClassVar[str] = "page_out_of_range"
    MULTIPLE_RELEVANCE: ClassVar[str] = "multiple_relevance"


Action = Search | Answer | Open | Invalid

#: Every tag any built-in protocol uses; :func:`sanitize` neutralises all of them in documents.
ALL_TAGS = ("think", "search", "answer", "information", "open", "relevance", "analysis")
_TAG_RE = re.compile(rf"<(/?)({'|'.join(ALL_TAGS)})\s*>", re.IGNORECASE)
_BASE_TAGS = ("think", "search", "answer", "information")
_NUMBER = re.compile(r"\d{1,9}")  # bounded: int() of a huge digit string is slow or refused
_OPEN_BODY = re.compile(
    r"\s*(?:doc(?:ument)?\s*)?#?\s*(\d{1,9})(?:\s*(?:,|:|;)?\s*(?:page|p\.?)?\s*(\d{1,9}))?\s*", re.IGNORECASE
)


@lru_cache(maxsize=64)
def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"<(/?)({'|'.join(tags)})\s*>", re.IGNORECASE)


def sanitize(text: str) -> str:
    """Neutralise protocol tags inside retrieved text (``<answer>`` -> ``[answer]``).

    A document can then neither close the ``<information>`` block nor look like an
    agent action to a model or to a transcript parser.
    """
    return _TAG_RE.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", text)


@dataclass(frozen=True, slots=True)
class _Block:
    tag: str
    start: int  # index of '<' of the opening tag
    end: int  # index just past the closing tag
    body: str


def _blocks(text: str, pattern: re.Pattern[str]) -> tuple[list[_Block], str | None]:
    """Split ``text`` into tag blocks; return (blocks, error message or None)."""
    blocks: list[_Block] = []
    open_tag: tuple[str, int, int] | None = None  # (tag, start, body_start)
    for m in pattern.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2).lower()
        if open_tag is None:
            if closing:
                return blocks, f"</{tag}> closes a tag that was never opened"
            open_tag = (tag, m.start(), m.end())
        elif closing and tag == open_tag[0]:
            blocks.append(_Block(tag, open_tag[1], m.end(), text[open_tag[2] : m.start()]))
            open_tag = None
        else:
            return blocks, f"<{open_tag[0]}> is not closed before <{'/' if closing else ''}{tag}>"
    if open_tag is not None:
        return blocks, f"<{open_tag[0]}> is never closed; close it with </{open_tag[0]}>"
    return blocks, None


def _check_positive(**values: object) -> None:
    """Raise ``ValueError`` naming the first option that is not a positive integer."""
    for field, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field} must be a positive integer, got {value!r}")


class Protocol:
    """Base class: parse a model turn, render search results and format errors.

    Args:
        max_turn_chars: A longer turn is invalid (``too_long``).
        max_query_chars: A longer query is invalid (``query_too_long``).
        max_queries: Queries allowed in one turn.
    """

    name: ClassVar[str] = ""
    #: Strings at which generation should stop (the end of an action).
    stop: ClassVar[tuple[str, ...]] = ("</search>", "</answer>")
    #: Tags this protocol parses in a turn; other ``<...>`` text is plain text to it.
    tags: ClassVar[tuple[str, ...]] = _BASE_TAGS
    #: Documents are numbered across the episode (the environment passes ``numbers`` to
    #: :meth:`render_hits` and resolves citations and opens by them).
    episode_numbering: ClassVar[bool] = False
    #: The protocol has an ``open`` action (see :meth:`paginate`).
    can_open: ClassVar[bool] = False

    def __init__(
        self, *, max_turn_chars: int = 4096, max_query_chars: int = 512, max_queries: int = 1
    ) -> None:
        _check_positive(max_turn_chars=max_turn_chars, max_query_chars=max_query_chars, max_queries=max_queries)
        self.max_turn_chars = max_turn_chars
        self.max_query_chars = max_query_chars
        self.max_queries = max_queries

    # ---- prompts -------------------------------------------------------------------------
    def system_prompt(self) -> str:
        """Instructions that teach the format."""
        raise NotImplementedError

    def user_prompt(self, question: str) -> str:
        """The user message for ``question``."""
        return f"Question: {question}"

    def prompt(self, question: str) -> str:
        """The whole prompt as plain text (system instructions, then the question)."""
        return f"{self.system_prompt()}\n\n{self.user_prompt(question)}\n"

    # ---- parsing -------------------------------------------------------------------------
    def parse(self, text: str) -> Action:
        """Parse one model turn.

        Args:
            text: The turn, exactly as generated.

        Returns:
            :class:`Search`, :class:`Answer` or :class:`Invalid`; never raises on content.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"an action must be a str (one model turn), got {type(text).__name__}")
        if len(text) > self.max_turn_chars:
            return Invalid(
                Invalid.TOO_LONG, f"The turn has {len(text)} characters; the limit is {self.max_turn_chars}."
            )
        # Checked before tag balance: advice to close an <information> the agent opened would
        # only lead it to write a whole fake block.
        pattern = _tag_pattern(self.tags)
        if any(m.group(2).lower() == "information" for m in pattern.finditer(text)):
            return Invalid(
                Invalid.FAKE_INFORMATION,
                "Do not write <information> or </information> yourself; end your turn after </search> "
                "and the search engine returns the information.",
            )
        blocks, error = _blocks(text, pattern)
        if error is not None:
            return Invalid(Invalid.UNCLOSED_TAG, f"Malformed tags: {error}.")
        answers = [b for b in blocks if b.tag == "answer"]
        searches = [b for b in blocks if b.tag == "search"]
        opens = [b for b in blocks if b.tag == "open"]
        if opens:
            return self._parse_open(opens, answers, searches)
        if len(answers) > 1:
            return Invalid(
                Invalid.MULTIPLE_ANSWERS, f"The turn has {len(answers)} <answer> blocks; give exactly one."
            )
        if answers:
            ans = answers[0]
            if any(s.start > ans.start for s in searches):
                return Invalid(
                    Invalid.SEARCH_AFTER_ANSWER,
                    "A search after <answer> is not allowed; the answer is final.",
                )
            if searches:
                return Invalid(
                    Invalid.SEARCH_AND_ANSWER,
                    "Search and answer in separate turns: wait for the <information> before answering.",
                )
            if text[ans.end :].strip():
                return Invalid(Invalid.TEXT_AFTER_ANSWER, "Nothing may follow </answer>; end the turn there.")
            if not ans.body.strip():
                return Invalid(Invalid.EMPTY_ANSWER, "The <answer> block is empty.")
            return self._answer(ans, blocks)
        if searches:
            return self._parse_search(searches)
        return Invalid(
            Invalid.NO_ACTION,
            "No action found. Search with <search> query </search> or answer with <answer> answer </answer>.",
        )

    def _answer(self, ans: _Block, blocks: Sequence[_Block]) -> Action:
        """The :class:`Answer` of a well-formed answer turn (a protocol may read more blocks)."""
        return Answer(" ".join(ans.body.split()))

    def _parse_open(self, opens: Sequence[_Block], answers: Sequence[_Block], searches: Sequence[_Block]) -> Action:
        """An ``<open>`` turn (only protocols whose :attr:`tags` include ``open`` get here)."""
        if answers or searches or len(opens) > 1:
            return Invalid(
                Invalid.MULTIPLE_ACTIONS,
                "One action per turn: a single <open>, <search> or <answer> block.",
            )
        m = _OPEN_BODY.fullmatch(opens[0].body)
        if m is None or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
            return Invalid(
                Invalid.BAD_OPEN,
                "Open a document by its number: <open> 2 </open>, or a later page with <open> 2 page 2 </open>.",
            )
        return Open(int(m.group(1)), int(m.group(2)) if m.group(2) is not None else 1)

    def _split_queries(self, searches: Sequence[_Block]) -> list[str] | Invalid:
        queries = []
        for b in searches:
            if not b.body.strip():
                return Invalid(Invalid.EMPTY_QUERY, "The <search> block is empty; put a query inside it.")
            queries.extend(self._queries_in(b.body))
        return queries

    def _queries_in(self, body: str) -> list[str]:
        return [" ".join(body.split())]

    def _parse_search(self, searches: Sequence[_Block]) -> Action:
        queries = self._split_queries(searches)
        if isinstance(queries, Invalid):
            return queries
        if len(queries) > self.max_queries:
            return Invalid(
                Invalid.TOO_MANY_QUERIES,
                f"The turn has {len(queries)} queries; at most {self.max_queries} per turn.",
            )
        for q in queries:
            if len(q) > self.max_query_chars:
                return Invalid(
                    Invalid.QUERY_TOO_LONG,
                    f"A query has {len(q)} characters; the limit is {self.max_query_chars}.",
                )
        return Search(tuple(queries))

    # ---- rendering -----------------------------------------------------------------------
    @staticmethod
    def render_docs(hits: Sequence[Hit], numbers: Sequence[int] | None = None) -> str:
        """Render one query's hits as ``Doc i(Title: t) text`` lines.

        Args:
            hits: The hits.
            numbers: Each hit's number (default 1, 2, ...).
        """
        if not hits:
            return "No documents found."
        nums = numbers if numbers is not None else range(1, len(hits) + 1)
        return "\n".join(
            f"Doc {i}(Title: {sanitize(h.title)}) {sanitize(h.text)}" for i, h in zip(nums, hits, strict=True)
        )

    def render_hits(
        self, queries: Sequence[str], hits: Sequence[Sequence[Hit]], numbers: Sequence[Sequence[int]] | None = None
    ) -> str:
        """The text appended after a search turn.

        Args:
            queries: The turn's queries.
            hits: Hits per query.
            numbers: Each hit's episode-wide number, per query; the environment passes it only
                to protocols with :attr:`episode_numbering`.
        """
        return f"\n\n<information>{self.render_docs(hits[0], numbers[0] if numbers else None)}</information>\n\n"

    def as_shown(self, hits: Sequence[Hit]) -> tuple[Hit, ...]:
        """The hits as a search turn shows them (whole by default; ``browse`` shows snippets)."""
        return tuple(hits)

    def paginate(self, text: str) -> list[str]:
        """A document's text as the pages ``open`` shows (the whole text as one page by default)."""
        return [text]

    def render_page(self, number: int, hit: Hit, page: int, pages: int, text: str) -> str:
        """The text appended after an ``open`` turn: one page of document ``number``."""
        return (
            f"\n\n<information>Doc {number}(Title: {sanitize(hit.title)}) page {page} of {pages}: "
            f"{sanitize(text)}</information>\n\n"
        )

    def render_invalid(self, action: Invalid) -> str:
        """The text appended after a malformed turn."""
        return f"\n\n<information>Invalid turn ({action.code}): {action.message}</information>\n\n"

    def render_error(self, message: str) -> str:
        """The text appended when the search engine failed (an infrastructure error)."""
        return f"\n\n<information>Search failed: {sanitize(message)}</information>\n\n"


class SearchR1Protocol(Protocol):
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


class MultiQueryProtocol(Protocol):
    """RAG-R1 style: several queries per turn, one per line in a single ``<search>`` block.

    Args:
        max_queries: Queries allowed per turn (default 3).
        **kwargs: As for :class:`Protocol`.
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
        parts = [
            f"Query {i}: {sanitize(q)}\n{self.render_docs(h, numbers[i - 1] if numbers else None)}"
            for i, (q, h) in enumerate(zip(queries, hits, strict=True), 1)
        ]
        return "\n\n<information>" + "\n\n".join(parts) + "</information>\n\n"


class ArenaProtocol(Protocol):
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


class BrowseProtocol(Protocol):
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
        **kwargs: As for :class:`Protocol`.
    """

    name = "browse"
    stop = ("</search>", "</answer>", "</open>")
    tags = (*_BASE_TAGS, "open")
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


_PROTOCOLS: dict[str, type[Protocol]] = {
    p.name: p for p in (SearchR1Protocol, MultiQueryProtocol, ArenaProtocol, BrowseProtocol)
}


def register_protocol(cls: type[Protocol]) -> None:
    """Make a protocol class selectable by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty class attribute `name`")
    _PROTOCOLS[cls.name] = cls


def protocol_names() -> list[str]:
    """Registered protocol names."""
    return sorted(_PROTOCOLS)


def get_protocol(spec: str | Protocol, **kwargs: int) -> Protocol:
    """Return a protocol instance from a name (with options) or pass an instance through.

    Raises:
        ValueError: For an unknown name.
    """
    if isinstance(spec, Protocol):
        if kwargs:
            raise ValueError(
                f"protocol options {sorted(kwargs)} given with a protocol instance; set them on it"
            )
        return spec
    if spec not in _PROTOCOLS:
        raise ValueError(f"unknown protocol {spec!r}; known: {', '.join(protocol_names())}")
    return _PROTOCOLS[spec](**kwargs)
