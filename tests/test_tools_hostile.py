"""Hostile tool calls: lone surrogates and deep nesting are invalid turns, never a crash or unwritable text.

A model's JSON is read once, where it enters (:class:`~searchenv.protocols.ToolsProtocol` and
:func:`~searchenv.protocols.tool_turn_text`), through :mod:`searchenv.utils.jsonsafe`: whatever a
turn holds, the action is either valid with every string writable as UTF-8, or ``Invalid``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.env import SearchQAEnv
from searchenv.protocols import INVALID_CODES, Answer, Invalid, Open, Search, get_protocol, tool_turn_text

_SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
_TEXT = st.lists(st.characters() | _SURROGATE, max_size=8).map("".join)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_NAMES = st.sampled_from(["search", "answer", "open"]) | _TEXT
_KEYS = st.sampled_from(["query", "queries", "answer", "number", "page"]) | _TEXT


@st.composite
def _calls(draw: st.DrawFn) -> tuple[str, str, Any, str]:
    """``(name, id, arguments as JSON text, arguments escaped?)`` of an arbitrary call.

    Strings anywhere (name, id, keys, values) may hold lone surrogates, written raw or as
    ``\\ud800`` escapes; one argument is nested up to ~1500 levels (built as text: ``json``
    itself would overflow writing it).
    """
    ascii_only = draw(st.booleans())
    dump = lambda v: json.dumps(v, ensure_ascii=ascii_only)  # noqa: E731
    depth = draw(st.integers(0, 1500))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"k": ', "}")]))
    nested = opener * depth + dump(draw(_VALUE)) + closer * depth
    args = "{" + dump(draw(_KEYS)) + ": " + nested + "}"
    return draw(_NAMES), draw(_TEXT), args, ascii_only


def _strings(value: Any) -> Iterator[str]:
    """Every string in an action: its fields, its call's name, id, content, argument keys and values."""
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _strings(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _check(action: Any, protocol: Any) -> None:
    """A valid action whose every string encodes as UTF-8, or an Invalid with a stable code and writable reason."""
    assert isinstance(action, Search | Answer | Open | Invalid)
    for text in _strings(action):
        text.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    if isinstance(action, Invalid):
        assert action.code in INVALID_CODES and action.message
    else:
        assert action.call is not None and action.call.name in protocol.tool_names
    if action.call is not None:  # what env.messages() copies and an episode log writes
        copy.deepcopy(action)
        json.dumps(action.call.message(), ensure_ascii=False).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(call=_calls(), wrap=st.booleans(), as_string=st.booleans(), name=st.sampled_from(["tools", "tools-browse"]))
def test_any_call_is_a_writable_action_or_invalid(call: tuple[str, str, str, bool], wrap: bool, as_string: bool,
                                                  name: str) -> None:
    tool, call_id, args, ascii_only = call
    protocol = get_protocol(name)
    arguments = json.dumps(args, ensure_ascii=ascii_only) if as_string else args
    body = ('{"id": ' + json.dumps(call_id, ensure_ascii=ascii_only) + ', "name": '
            + json.dumps(tool, ensure_ascii=ascii_only) + ', "arguments": ' + arguments + "}")
    _check(protocol.parse(f"<tool_call>\n{body}\n</tool_call>" if wrap else body), protocol)


@settings(max_examples=200, deadline=None)
@given(call=_calls(), decoded=st.booleans(), name=st.sampled_from(["tools", "tools-browse"]))
def test_any_served_call_is_written_as_utf8_and_parses_to_a_writable_action_or_invalid(
    call: tuple[str, str, str, bool], decoded: bool, name: str
) -> None:
    """A served reply's ``tool_calls`` (arguments a JSON string, or an object) through :func:`tool_turn_text`."""
    tool, call_id, args, _ = call
    arguments: Any = args
    if decoded:  # a server that sends the arguments as an object (within the client's depth limit)
        try:
            arguments = json.loads(args)
            json.dumps(arguments)
        except (ValueError, RecursionError):
            arguments = args
    text = tool_turn_text("Thinking.", [{"id": call_id, "function": {"name": tool, "arguments": arguments}}],
                          ids=True)
    text.encode("utf-8")
    protocol = get_protocol(name)
    _check(protocol.parse(text), protocol)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"name": "answer", "arguments": {"answer": "\\ud800"}}', "arguments.answer"),
        ('{"name": "search", "arguments": {"query": "a \\udfff b"}}', "arguments.query"),
        ('{"name": "search", "arguments": {"queries": ["a", "\\udc00"]}}', "arguments.queries[1]"),
        ('{"name": "\\ud800", "arguments": {}}', "name"),
        ('{"id": "\\ud83d", "name": "answer", "arguments": {"answer": "a"}}', "id"),
        ('{"name": "answer", "arguments": {"\\ud800": "a"}}', "the key 'arguments.\\ud800'"),
        ('{"name": "answer", "arguments": "{\\"answer\\": \\"\\\\ud800\\"}"}', "answer"),
        ('{"name": "answer", "arguments": {"answer": "\ud800"}}', "arguments.answer"),  # raw, not escaped
    ],
)
def test_a_lone_surrogate_anywhere_in_a_call_is_bad_json_naming_the_field(body: str, field: str) -> None:
    action = get_protocol("tools", max_queries=2).parse(f"<tool_call>\n{body}\n</tool_call>")
    assert isinstance(action, Invalid) and action.code == Invalid.BAD_JSON, action
    assert f"{field} is not Unicode text" in action.message and "lone surrogate" in action.message
    action.message.encode("utf-8")
    paired = get_protocol("tools").parse('{"name": "answer", "arguments": {"answer": "\\ud83d\\ude00"}}')
    assert isinstance(paired, Answer) and paired.text == "\U0001f600"  # a pair is one character, accepted


def test_arguments_nested_too_deeply_are_bad_json() -> None:
    p = get_protocol("tools")
    for depth in (65, 500, 1500):
        action = p.parse('{"name": "answer", "arguments": {"answer": ' + "[" * depth + "]" * depth + "}}")
        assert isinstance(action, Invalid) and action.code == Invalid.BAD_JSON
        assert "nested" in action.message
    shallow = p.parse('{"name": "answer", "arguments": {"answer": ' + "[" * 40 + "]" * 40 + "}}")
    assert shallow.code == Invalid.BAD_ARGUMENTS  # within the limit: read, and refused for what it is


def test_served_tool_calls_with_surrogates_or_deep_arguments_become_escaped_text_and_bad_json() -> None:
    deep = '{"answer": ' + "[" * 800 + "]" * 800 + "}"
    p = get_protocol("tools")
    for arguments in ('{"answer": "\\ud800"}', deep, {"answer": "\ud800"}):
        text = tool_turn_text("", [{"id": "srv_1", "function": {"name": "answer", "arguments": arguments}}],
                              ids=True)
        text.encode("utf-8")
        action = p.parse(text)
        assert isinstance(action, Invalid) and action.code == Invalid.BAD_JSON, action
    assert p.format_action(Answer("Karsk")) == tool_turn_text("", [
        {"function": {"name": "answer", "arguments": {"answer": "Karsk"}}}])  # ordinary calls are written as before


def test_a_hostile_call_is_an_invalid_turn_and_the_episode_goes_on(make_env: Any) -> None:
    """The issue's calls: the episode's messages and transcript stay writable and the model is told why."""
    env: SearchQAEnv = make_env(protocol="tools", max_turns=5)
    env.reset(options={"example_id": "q1"})
    hostile = [
        '<tool_call>\n{"name": "answer", "arguments": {"answer": "\\ud800"}}\n</tool_call>',
        '{"name": "answer", "arguments": {"answer": ' + "[" * 500 + "]" * 500 + "}}",
        '{"name": "search", "arguments": {"query": "x", "more": ' + "{\"a\": " * 300 + "1" + "}" * 300 + "}}",
    ]
    for turn in hostile:
        _, _, terminated, truncated, info = env.step(turn)
        assert not (terminated or truncated) and info["invalid_reason"] == "bad_json"
        assert "Invalid turn (bad_json)" in info["new_text"]
    messages = env.messages()  # copied: a deep call overflowed the stack here
    json.dumps(messages, ensure_ascii=False).encode("utf-8")
    env.transcript.encode("utf-8")
    _, _, terminated, _, info = env.step('{"name": "answer", "arguments": {"answer": "Karsk"}}')
    assert terminated and info["episode"]["em"] == 1.0
    assert info["episode"]["invalid_reasons"] == {"bad_json": 3}
