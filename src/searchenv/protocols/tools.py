"""Native tool-call protocols: ``search``/``answer`` (and ``open``) as JSON-schema tools.

A turn is one Hermes/Qwen ``<tool_call>{...}</tool_call>`` (or that JSON object alone); results come
back as ``tool`` messages with the call's id, so :meth:`~searchenv.env.SearchQAEnv.messages` is exactly
what the model's chat template renders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from searchenv.actions import Action, Answer, Invalid, Open, Search, ToolCall
from searchenv.protocols.base import (
    _NUMBER,
    ActionProtocol,
    _blocks,
    _tag_pattern,
    sanitize,
)
from searchenv.protocols.tags import (
    BrowseProtocol,
    MultiQueryProtocol,
    _grouped,
)
from searchenv.retrievers.base import Hit
from searchenv.utils.jsonsafe import DEFAULT_MAX_DEPTH, JSONInputError, loads

_TOOL_CALL_RE = _tag_pattern(("tool_call",))
_TOOL_RESPONSE_RE = re.compile(r"</?tool_response\s*>", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_FENCE_RE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)
_CALL_EXAMPLE = '<tool_call>\n{"name": "search", "arguments": {"query": "..."}}\n</tool_call>'
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")


def _decode(text: str, where: str) -> tuple[Any, str | None]:
    r"""``(value, None)`` for usable JSON text, else ``(None, why)``: the model's JSON read once, here.

    :func:`searchenv.utils.jsonsafe.loads` refuses what ``json`` would let through into the
    episode: a lone surrogate (a ``\ud800`` escape without its pair, which cannot be written as
    UTF-8), nesting deeper than :data:`~searchenv.utils.jsonsafe.DEFAULT_MAX_DEPTH` (which
    overflows the stack when the episode's messages are copied or written), and integers too long
    to convert.
    """
    try:
        return loads(text, where, max_depth=DEFAULT_MAX_DEPTH), None
    except JSONInputError as exc:
        return None, str(exc).removeprefix(f"{where}: ")


def _call_json(obj: Any) -> str:
    r"""One call as JSON text (as a template's ``tojson`` writes it); never raises.

    A string holding a lone surrogate is written as its ``\ud800`` escape, so the text is valid
    UTF-8 and the parser refuses the call naming the field; a value nested too deeply for ``json``
    to write becomes a string saying so (the parser then refuses its arguments).
    """
    try:
        text = json.dumps(obj, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):  # nested beyond Python's stack, or circular
        name = obj.get("name") if isinstance(obj, dict) else None
        return json.dumps({"name": name if isinstance(name, str) else None,
                           "arguments": "(nested too deeply to write as JSON)"})
    return json.dumps(obj, default=str) if _SURROGATE_RE.search(text) else text


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
            OpenAI entry; arguments given as a JSON string are decoded where they are usable JSON,
            else kept as the string, which :class:`ToolsProtocol` calls ``bad_json``; an entry of
            another shape is written as it is). Never raises on content: a lone surrogate is
            written as its ``\ud800`` escape (valid UTF-8, refused by the parser with the field),
            arguments nested too deeply stay the string they came as.
        ids: Write each call's ``"id"`` first (when it has one).
    """
    parts = [content.strip()] if content.strip() else []
    for call in tool_calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            parts.append(f"<tool_call>\n{_call_json(call)}\n</tool_call>")
            continue
        args = fn.get("arguments", {})
        if isinstance(args, str):
            decoded, why = _decode(args, "arguments")
            args = args if why is not None else decoded
        obj = {"id": call["id"]} if ids and call.get("id") else {}
        obj.update(name=fn.get("name"), arguments=args)
        parts.append(f"<tool_call>\n{_call_json(obj)}\n</tool_call>")
    return "\n".join(parts)


class ToolsProtocol(ActionProtocol):
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

    Malformed turns get the stable codes: ``bad_json`` (the call is not a JSON object, or JSON
    that cannot be used: a string with a lone surrogate, which cannot be written as UTF-8, or
    nesting deeper than :data:`~searchenv.utils.jsonsafe.DEFAULT_MAX_DEPTH` levels; the message
    names the field),
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
        **kwargs: As for :class:`ActionProtocol`.
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
        obj, why = _decode(body, "the tool call")
        if why is not None:
            return Invalid(Invalid.BAD_JSON, f"The tool call cannot be read: {why}; write {_CALL_EXAMPLE}.")
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
            args, why = _decode(args, "arguments") if args.strip() else ({}, None)
            if why is not None:
                return Invalid(Invalid.BAD_JSON, f"The arguments of {_short(name)} cannot be read: {why}; "
                                                 "give them as a JSON object.")
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
        **kwargs: As for :class:`ActionProtocol`.
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
