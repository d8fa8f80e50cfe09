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
    ``tools``: native tool calls, the function-calling format instruct models are trained on:
    ``search`` and ``answer`` declared as JSON-schema tools, a turn is one
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes/Qwen) or that JSON
    object alone, and results come back as ``tool`` messages with the call's id
    (:class:`ToolsProtocol`). ``tools-browse`` adds ``open`` with ``browse``'s snippets and pages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, ClassVar

from searchenv.retrievers.base import Hit


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as a turn made it (``tools`` protocols; every other protocol leaves it None).

    Attributes:
        name: The tool's name.
        arguments: The call's arguments, decoded from JSON (not part of the hash).
        id: The call's id: the model's or the server's when it gave one, else ``call_<turn>``
            (the environment fills it in); a tool message answering it carries it.
        content: The turn's text before the call (its reasoning), stripped.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)
    id: str = ""
    content: str = ""

    def message(self) -> dict[str, Any]:
        """The call as an OpenAI/Hugging Face chat ``tool_calls`` entry (arguments as an object)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": dict(self.arguments)}}


@dataclass(frozen=True, slots=True)
class Search:
    """Search for each query (one retriever call for all of them).

    Attributes:
        queries: The queries.
        call: The tool call the turn made (``tools`` protocols), else None.
    """

    queries: tuple[str, ...]
    call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """Give the final answer.

    Attributes:
        text: The answer, whitespace collapsed.
        cited: Document numbers the turn cites as its evidence (``arena``: the ``<relevance>``
            block; ``()`` when it cites none); None when the turn has no citation block.
        call: The tool call the turn made (``tools`` protocols), else None.
    """

    text: str
    cited: tuple[int, ...] | None = None
    call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class Open:
    """Read one page of a document shown earlier in the episode (``browse``).

    Attributes:
        number: The document's number as shown (``Doc 3`` -> 3).
        page: 1-based page.
        call: The tool call the turn made (``tools-browse``), else None.
    """

    number: int
    page: int = 1
    call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class Invalid:
    """A malformed turn.

    Attributes:
        code: A stable machine-readable reason (one of the ``Invalid.*`` constants below).
        message: What was wrong and how to fix it, shown to the model.
        call: The tool call, when the turn made one the protocol could read (``tools``: a call
            of an unknown tool or with bad arguments; its reply is a ``tool`` message), else None.
    """

    code: str
    message: str
    call: ToolCall | None = None

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
    BAD_JSON: ClassVar[str] = "bad_json"
    UNKNOWN_TOOL: ClassVar[str] = "unknown_tool"
    BAD_ARGUMENTS: ClassVar[str] = "bad_arguments"
    TEXT_AFTER_CALL: ClassVar[str] = "text_after_call"


#: Every stable invalid-turn code, in the order of the constants above.
INVALID_CODES: tuple[str, ...] = tuple(
    v for k, v in vars(Invalid).items() if k.isupper() and isinstance(v, str)
)


Action = Search | Answer | Open | Invalid


def invalid_share(reasons: Iterable[str | None]) -> dict[str, float]:
    """Parse telemetry: the share of turns that were invalid, by code.

    Args:
        reasons: Each turn's invalid code (``info["invalid_reason"]``), None for a well-formed turn.

    Returns:
        ``{code: turns with it / all turns}`` for each code that occurred, codes in the order of
        :data:`INVALID_CODES` (unknown codes after them); empty when no turn was invalid.
    """
    counts: dict[str, int] = {}
    total = 0
    for reason in reasons:
        total += 1
        if reason is not None:
            counts[str(reason)] = counts.get(str(reason), 0) + 1
    order = {code: i for i, code in enumerate(INVALID_CODES)}
    return {code: counts[code] / total for code in sorted(counts, key=lambda c: (order.get(c, len(order)), c))}

#: Every tag any built-in protocol uses; :func:`sanitize` neutralises all of them in documents.
ALL_TAGS = ("think", "search", "answer", "information", "open", "relevance", "analysis", "tool_call",
            "tool_response")
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
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


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
    #: Turns are native tool calls (:class:`ToolsProtocol`): the chat template, not the
    #: protocol, lays out the replies, so token-level rollouts take the markup between turns
    #: from the template (:func:`agents.chat.reply_text`).
    native_tools: ClassVar[bool] = False

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
    def _too_long(self, text: str) -> Invalid | None:
        """The ``too_long`` verdict for a turn over ``max_turn_chars``, else None.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"an action must be a str (one model turn), got {type(text).__name__}")
        if len(text) > self.max_turn_chars:
            return Invalid(
                Invalid.TOO_LONG, f"The turn has {len(text)} characters; the limit is {self.max_turn_chars}."
            )
        return None

    def parse(self, text: str) -> Action:
        """Parse one model turn.

        Args:
            text: The turn, exactly as generated.

        Returns:
            :class:`Search`, :class:`Answer` or :class:`Invalid`; never raises on content.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        too_long = self._too_long(text)
        if too_long is not None:
            return too_long
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

    # ---- chat messages -------------------------------------------------------------------
    def turn_messages(self, turn: str, action: Action, new_text: str) -> list[dict[str, Any]]:
        """A step as chat messages: the agent's turn, then the environment's reply (if any).

        Args:
            turn: The turn as stored (cut to the action space).
            action: The parsed action.
            new_text: What the environment appended after it.

        Returns:
            ``assistant`` with the turn, then ``tool`` with the reply stripped (tag protocols).
        """
        out: list[dict[str, Any]] = [{"role": "assistant", "content": turn}]
        if new_text:
            out.append({"role": "tool", "content": new_text.strip()})
        return out

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The actions as OpenAI function definitions; none for a tag protocol (see :class:`ToolsProtocol`)."""
        return []

    def from_tags(self, turn: str) -> str:
        """A turn written in the tag format (``<think>``, ``<search>``...) said in this protocol.

        Scripted agents write tag turns; a tag protocol takes them as they are, ``tools``
        rewrites them as tool calls.
        """
        return turn


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
        return "\n\n<information>" + _grouped(self, queries, hits, numbers) + "</information>\n\n"


def _grouped(
    protocol: Protocol, queries: Sequence[str], hits: Sequence[Sequence[Hit]], numbers: Sequence[Sequence[int]] | None
) -> str:
    """Each query's documents under a ``Query i: q`` line (several queries searched in one turn)."""
    return "\n\n".join(
        f"Query {i}: {sanitize(q)}\n{protocol.render_docs(h, numbers[i - 1] if numbers else None)}"
        for i, (q, h) in enumerate(zip(queries, hits, strict=True), 1)
    )


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


_TOOL_CALL_RE = _tag_pattern(("tool_call",))
_TOOL_RESPONSE_RE = re.compile(r"</?tool_response\s*>", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_FENCE_RE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)
_CALL_EXAMPLE = '<tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>'


def _short(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a model's text quoted in an error message)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type (for error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def tool_turn_text(content: str, tool_calls: Sequence[Any], *, ids: bool = False) -> str:
    r"""An assistant message with ``tool_calls`` as the text a Hermes/Qwen template renders for it.

    ``content`` (stripped) on its own line, then each call as ``<tool_call>\n{"name": ..,
    "arguments": {..}}\n</tool_call>`` (JSON as the templates' ``tojson`` writes it). What
    :meth:`ToolsProtocol.format_action` writes, how a demonstration's turns are laid out for
    training (:func:`agents.trainers.sft.messages_to_sample`), and (``ids=True``) how a served
    model's ``tool_calls`` reach the environment, ids kept.

    Args:
        content: The message's content.
        tool_calls: Its calls, each ``{"id": .., "function": {"name": .., "arguments": {..}}}`` (an
            OpenAI entry; arguments given as a JSON string are decoded where they are JSON, else
            kept as the string, which :class:`ToolsProtocol` calls ``bad_json``; an entry of
            another shape is written as it is).
        ids: Write each call's ``"id"`` first (when it has one).
    """
    parts = [content.strip()] if content.strip() else []
    for call in tool_calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            parts.append(f"<tool_call>\n{json.dumps(call, ensure_ascii=False, default=str)}\n</tool_call>")
            continue
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                pass
        obj = {"id": call["id"]} if ids and call.get("id") else {}
        obj.update(name=fn.get("name"), arguments=args)
        parts.append(f"<tool_call>\n{json.dumps(obj, ensure_ascii=False, default=str)}\n</tool_call>")
    return "\n".join(parts)


class ToolsProtocol(Protocol):
    """Native tool calls: the actions as JSON-schema tools, a turn as one call (Hermes/Qwen layout).

    The tools (:attr:`tools`, OpenAI function format) are ``search`` (``{"query": str}``, or
    ``{"queries": [str, ...]}`` with up to ``max_queries`` when ``max_queries > 1``) and
    ``answer`` (``{"answer": str}``); ``tools-browse`` adds ``open`` (``{"number": int,
    "page": int}``). A turn is optional reasoning followed by one call, in the Hermes/Qwen
    markup the chat templates of Qwen2.5/3 and Hermes models render::

        The film's director comes first.
        <tool_call>
        {"name": "search", "arguments": {"query": "who directed The Glass Orchard"}}
        </tool_call>

    or the JSON object alone (Llama 3.x style; ``"parameters"`` is read as ``"arguments"``, and
    arguments given as a JSON string, as the OpenAI API sends them, are decoded). An ``"id"`` in
    the object is kept as the call's id (the OpenAI-compatible policy passes the server's ids
    this way); otherwise the environment names the call ``call_<turn>``.

    Malformed turns get the stable codes: ``bad_json`` (the call is not a JSON object),
    ``unknown_tool``, ``bad_arguments`` (missing, unexpected or mistyped arguments),
    ``text_after_call``, ``multiple_actions`` (more than one call), ``unclosed_tag``,
    ``fake_information`` (the turn writes ``<tool_response>``), ``no_action`` and the value codes
    of the tag protocols (``empty_query``, ``too_many_queries``, ``query_too_long``,
    ``empty_answer``, ``bad_open``, ``too_long``); each message says what to fix.

    Results: the environment's chat messages (:meth:`turn_messages`) are what a tool-calling chat
    template renders: the ``assistant`` message has the reasoning as ``content`` and the call in
    ``tool_calls`` (arguments as an object, as Hugging Face templates take them), and the reply is a
    ``tool`` message with ``tool_call_id`` and ``name`` (a ``user`` message after a turn with no
    readable call). The plain-text transcript shows each reply inside ``<tool_response>`` tags.

    Args:
        declare_tools: Write the tools' signatures and the call format into the system prompt
            (the Hermes system prompt; a chat template that renders ``tools=`` itself does the
            same, so set False when passing :attr:`tools` to the template or to a server).
        **kwargs: As for :class:`Protocol`.
    """

    name = "tools"
    stop = ("</tool_call>",)
    tags = ("tool_call",)
    native_tools = True

    def __init__(self, *, declare_tools: bool = True, **kwargs: int) -> None:
        super().__init__(**kwargs)
        if not isinstance(declare_tools, bool):
            raise ValueError(f"declare_tools must be a bool, got {declare_tools!r}")
        self.declare_tools = declare_tools

    # ---- tools and prompts ----------------------------------------------------------------
    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function definitions (JSON schema parameters)."""
        if self.max_queries > 1:
            search_params: dict[str, Any] = {
                "queries": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                            "maxItems": self.max_queries,
                            "description": f"1 to {self.max_queries} queries, searched together, a few words each."},
            }
            required = ["queries"]
        else:
            search_params = {"query": {"type": "string", "description": "What to look for, in a few words."}}
            required = ["query"]
        what = "snippets of the top documents, numbered" if self.can_open else "the top documents, numbered"
        tools = [
            _function("search", f"Search the document collection; returns {what}.", search_params, required),
            _function("answer", "Give the final answer to the question (ends the episode).",
                      {"answer": {"type": "string",
                                  "description": "The answer, as short as possible (a name, a place, a year)."}},
                      ["answer"]),
        ]
        if self.can_open:
            tools.append(_function(
                "open", "Read a document an earlier search showed, in full, one page at a time.",
                {"number": {"type": "integer", "minimum": 1, "description": "The document's number (Doc 3 is 3)."},
                 "page": {"type": "integer", "minimum": 1, "description": "The page, 1 for the first."}},
                ["number"],
            ))
        return tools

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of :attr:`tools`."""
        return tuple(t["function"]["name"] for t in self.tools)

    def system_prompt(self) -> str:
        """Instructions for the task, and (``declare_tools``) the Hermes tool declaration."""
        opening = (
            " A search shows each document's title and a snippet, numbered across the episode; call "
            "open with a document's number to read it in full (a long one has pages)." if self.can_open else ""
        )
        several = f" One search may hold up to {self.max_queries} queries." if self.max_queries > 1 else ""
        task = (
            "Answer the question. If you lack knowledge, call the search tool; the results come back in a "
            f"tool message. You may search several times.{several}{opening} You may reason before a call. "
            "Make one tool call per turn. When you know the answer, call the answer tool with it, with no "
            "explanation."
        )
        if not self.declare_tools:
            return task
        signatures = "\n".join(json.dumps(t, ensure_ascii=False) for t in self.tools)
        return (
            f"{task}\n\n# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{signatures}\n</tools>\n\nFor each function call, return a json object with function name "
            "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )

    # ---- parsing --------------------------------------------------------------------------
    def parse(self, text: str) -> Action:
        """Parse one model turn (class docstring); never raises on content.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        too_long = self._too_long(text)
        if too_long is not None:
            return too_long
        if _TOOL_RESPONSE_RE.search(text):
            return Invalid(
                Invalid.FAKE_INFORMATION,
                "Do not write <tool_response> yourself; end your turn after </tool_call> and the tool's "
                "result comes back.",
            )
        blocks, error = _blocks(text, _TOOL_CALL_RE)
        if error is not None:
            return Invalid(Invalid.UNCLOSED_TAG, f"Malformed tags: {error}.")
        if len(blocks) > 1:
            return Invalid(
                Invalid.MULTIPLE_ACTIONS,
                f"The turn has {len(blocks)} tool calls; make exactly one call per turn and wait for its result.",
            )
        if blocks:
            block = blocks[0]
            if text[block.end :].strip():
                return Invalid(Invalid.TEXT_AFTER_CALL, "Nothing may follow </tool_call>; end the turn there.")
            return self._read_call(block.body, text[: block.start].strip())
        body = text.strip()
        fenced = _FENCE_RE.match(body)
        if fenced is not None:
            body = fenced.group(1)
        if body.startswith("{"):
            return self._read_call(body, "")
        return Invalid(
            Invalid.NO_ACTION,
            f"No tool call found. Call a tool: {_CALL_EXAMPLE}, or answer with "
            '<tool_call>\n{"name": "answer", "arguments": {"answer": "..."}}\n</tool_call>.',
        )

    def _read_call(self, body: str, content: str) -> Action:
        """The action of one call's JSON text."""
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            where = f" ({exc.msg} at character {exc.pos})" if isinstance(exc, json.JSONDecodeError) else ""
            return Invalid(Invalid.BAD_JSON, f"The tool call is not valid JSON{where}; write {_CALL_EXAMPLE}.")
        if isinstance(obj, dict) and isinstance(obj.get("function"), dict) and "name" not in obj:
            obj = {**obj["function"], "id": obj.get("id")}  # the OpenAI form {"type": "function", "function": {...}}
        if not isinstance(obj, dict):
            return Invalid(Invalid.BAD_JSON, f"The tool call must be a JSON object, not {_json_type(obj)}; "
                                             f"write {_CALL_EXAMPLE}.")
        name, call_id = obj.get("name"), obj.get("id")
        names = ", ".join(self.tool_names)
        if not isinstance(name, str) or not name.strip():
            return Invalid(Invalid.UNKNOWN_TOOL, f"The call names no tool; give \"name\", one of: {names}.")
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # the OpenAI API sends arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                return Invalid(Invalid.BAD_JSON, f"The arguments of {name[:40]!r} are a string that is not JSON; "
                                                 "give them as an object.")
        call = ToolCall(name, args if isinstance(args, dict) else {}, call_id if isinstance(call_id, str) else "",
                        content)
        if name not in self.tool_names:
            return Invalid(Invalid.UNKNOWN_TOOL, f"There is no tool {_short(name)}; the tools are: {names}.", call)
        if not isinstance(args, dict):
            return Invalid(Invalid.BAD_ARGUMENTS, f"The arguments of {name} must be a JSON object, not "
                                                  f"{_json_type(args)}.", call)
        if name == "search":
            return self._search_call(args, call)
        if name == "answer":
            return self._answer_call(args, call)
        return self._open_call(args, call)

    def _unexpected(self, args: Mapping[str, Any], allowed: Sequence[str], call: ToolCall) -> Invalid | None:
        extra = [k for k in args if k not in allowed]
        if not extra:
            return None
        listed = ", ".join(_short(k, 30) for k in extra[:3])
        return Invalid(Invalid.BAD_ARGUMENTS, f"{call.name} takes only {', '.join(map(repr, allowed))}; "
                                              f"unexpected: {listed}.", call)

    def _search_call(self, args: Mapping[str, Any], call: ToolCall) -> Action:
        key = "queries" if self.max_queries > 1 else "query"
        bad = self._unexpected(args, ("query", "queries"), call)
        if bad is not None:
            return bad
        if ("query" in args) == ("queries" in args):
            return Invalid(Invalid.BAD_ARGUMENTS, f"search needs {key!r} (and only one of 'query' and 'queries').",
                           call)
        given = args.get("query", args.get("queries"))
        raw = [given] if "query" in args else given
        if not isinstance(raw, list) or not all(isinstance(q, str) for q in raw):
            want = "a string" if "query" in args else "an array of strings"
            return Invalid(Invalid.BAD_ARGUMENTS, f"{'query' if 'query' in args else 'queries'!r} must be {want}, "
                                                  f"got {_json_type(given)}.", call)
        queries = [" ".join(q.split()) for q in raw]
        if not queries or not all(queries):
            return Invalid(Invalid.EMPTY_QUERY, "A search query is empty; put what to look for in it.", call)
        if len(queries) > self.max_queries:
            return Invalid(Invalid.TOO_MANY_QUERIES,
                           f"The call has {len(queries)} queries; at most {self.max_queries} per turn.", call)
        for q in queries:
            if len(q) > self.max_query_chars:
                return Invalid(Invalid.QUERY_TOO_LONG,
                               f"A query has {len(q)} characters; the limit is {self.max_query_chars}.", call)
        return Search(tuple(queries), call=call)

    def _answer_call(self, args: Mapping[str, Any], call: ToolCall) -> Action:
        bad = self._unexpected(args, ("answer",), call)
        if bad is not None:
            return bad
        value = args.get("answer")
        if isinstance(value, int | float) and not isinstance(value, bool):  # a year given as a number
            value = str(value)
        if not isinstance(value, str):
            return Invalid(Invalid.BAD_ARGUMENTS, f"answer needs 'answer', a string, got {_json_type(value)}.", call)
        text = " ".join(value.split())
        if not text:
            return Invalid(Invalid.EMPTY_ANSWER, "The answer is empty.", call)
        return Answer(text, call=call)

    def _open_call(self, args: Mapping[str, Any], call: ToolCall) -> Action:
        bad = self._unexpected(args, ("number", "page"), call)
        if bad is not None:
            return bad
        values = []
        for key, default in (("number", None), ("page", 1)):
            value = args.get(key, default)
            if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
                value = int(value.strip())
            if isinstance(value, bool) or not isinstance(value, int):
                return Invalid(Invalid.BAD_ARGUMENTS, f"open needs {key!r}, an integer, got {_json_type(value)}.",
                               call)
            values.append(value)
        if values[0] < 1 or values[1] < 1:
            return Invalid(Invalid.BAD_OPEN, "Open a shown document by its number (1 or more), page 1 or more.",
                           call)
        return Open(values[0], values[1], call=call)

    # ---- writing turns --------------------------------------------------------------------
    def format_action(self, action: Search | Answer | Open, content: str = "") -> str:
        """The canonical turn for ``action``: ``content``, then the call as Hermes/Qwen templates render it.

        ``parse(format_action(a, c))`` gives ``a`` back (with the call attached), and the text is
        what a Qwen2.5-style template renders for an assistant message with that content and call.

        Raises:
            ValueError: For an action this protocol has no tool for (an :class:`Invalid`, or an
                open under plain ``tools``).
        """
        if isinstance(action, Search):
            args: dict[str, Any] = (
                {"queries": list(action.queries)} if self.max_queries > 1 else {"query": action.queries[0]}
            )
            name = "search"
        elif isinstance(action, Answer):
            name, args = "answer", {"answer": action.text}
        elif isinstance(action, Open) and self.can_open:
            name, args = "open", {"number": action.number, **({"page": action.page} if action.page != 1 else {})}
        else:
            raise ValueError(f"action must be a search, an answer or (tools-browse) an open, got {action!r}")
        return tool_turn_text(content, [{"function": {"name": name, "arguments": args}}])

    def from_tags(self, turn: str) -> str:
        """A tag turn (``<think>`` then ``<search>``/``<answer>``/``<open>``) as a tool call.

        The ``<think>`` text becomes the reasoning before the call; a turn the tag format does not
        read as an action is returned unchanged (the environment then calls it invalid).
        """
        twin = _TagTwin(max_turn_chars=self.max_turn_chars, max_query_chars=self.max_query_chars,
                        max_queries=self.max_queries)
        action = twin.parse(turn)
        if isinstance(action, Invalid) or (isinstance(action, Open) and not self.can_open):
            return turn
        thought = _THINK_RE.search(turn)
        return self.format_action(action, " ".join(thought.group(1).split()) if thought else "")

    # ---- rendering ------------------------------------------------------------------------
    @staticmethod
    def _wrap(body: str) -> str:
        return f"\n<tool_response>\n{body}\n</tool_response>\n"

    def render_hits(
        self, queries: Sequence[str], hits: Sequence[Sequence[Hit]], numbers: Sequence[Sequence[int]] | None = None
    ) -> str:
        """The search's documents inside ``<tool_response>`` (grouped per query for several)."""
        if len(queries) > 1:
            return self._wrap(_grouped(self, queries, hits, numbers))
        return self._wrap(self.render_docs(hits[0], numbers[0] if numbers else None))

    def render_page(self, number: int, hit: Hit, page: int, pages: int, text: str) -> str:
        """One page of an opened document inside ``<tool_response>``."""
        return self._wrap(f"Doc {number}(Title: {sanitize(hit.title)}) page {page} of {pages}: {sanitize(text)}")

    def render_invalid(self, action: Invalid) -> str:
        """The code and what to fix, inside ``<tool_response>``."""
        return self._wrap(f"Invalid turn ({action.code}): {action.message}")

    def render_error(self, message: str) -> str:
        """The search engine's failure inside ``<tool_response>``."""
        return self._wrap(f"Search failed: {sanitize(message)}")

    def turn_messages(self, turn: str, action: Action, new_text: str) -> list[dict[str, Any]]:
        """The turn as an ``assistant`` message with ``tool_calls``, the reply as a ``tool`` message.

        A turn without a readable call is an ``assistant`` message with the turn as its content,
        and its reply (the invalid-turn message) a ``user`` message: a ``tool`` message must
        answer a call.
        """
        call = action.call
        out: list[dict[str, Any]] = (
            [{"role": "assistant", "content": call.content, "tool_calls": [call.message()]}] if call is not None
            else [{"role": "assistant", "content": turn}]
        )
        if new_text:
            body = new_text.strip().removeprefix("<tool_response>").removesuffix("</tool_response>").strip()
            if call is not None:
                out.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": body})
            else:
                out.append({"role": "user", "content": body})
        return out


class _TagTwin(BrowseProtocol):
    """Reads every tag action (one query a line when ``max_queries > 1``), for :meth:`ToolsProtocol.from_tags`."""

    def _queries_in(self, body: str) -> list[str]:
        if self.max_queries > 1:
            return MultiQueryProtocol._queries_in(self, body)  # type: ignore[arg-type]
        return super()._queries_in(body)


class ToolsBrowseProtocol(ToolsProtocol, BrowseProtocol):
    """``tools`` with ``browse``'s actions: ``search`` shows snippets, ``open`` reads a shown document.

    Args:
        snippet_chars: Characters of each hit's text a search shows.
        page_chars: Characters per page of an opened document.
        declare_tools: As for :class:`ToolsProtocol`.
        **kwargs: As for :class:`Protocol`.
    """

    name = "tools-browse"
    stop = ToolsProtocol.stop
    tags = ToolsProtocol.tags


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """One tool in the OpenAI function format."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


_PROTOCOLS: dict[str, type[Protocol]] = {
    p.name: p for p in (SearchR1Protocol, MultiQueryProtocol, ArenaProtocol, BrowseProtocol, ToolsProtocol,
                        ToolsBrowseProtocol)
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
