"""Actions: what one parsed model turn asks of the environment (search, open, answer, or nothing valid).

Every protocol parses a turn into one of these; :data:`INVALID_CODES` lists the stable codes an
:class:`Invalid` turn carries, for parse telemetry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


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
