"""The tag parser and :class:`ActionProtocol`, the base class of every action protocol.

The parser splits a turn into tag blocks and never raises on model text: anything malformed becomes
an :class:`~searchenv.actions.Invalid` action. :func:`sanitize` neutralises protocol tags in
retrieved text, so a document can never look like an agent action.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from searchenv.actions import Action, Answer, Invalid, Open, Search
from searchenv.retrievers.base import Hit

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


class ActionProtocol:
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
    #: from the template (:func:`agents.policies.chat.reply_text`).
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

