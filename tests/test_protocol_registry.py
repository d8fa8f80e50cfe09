"""The protocol registry is the one list of protocols and their features; the integrations ask it.

A protocol registered in a test is served by the TRL tool env by its features (an ``open`` action,
cited answers, native tool calls) or refused with the reason. OpenEnv's and verifiers' checks of a
registered protocol run in their own environments (``tests/openenv/check_server.py``,
``tests/vf_env/check_searchqa.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from searchenv.protocols import (
    ActionProtocol,
    Answer,
    BrowseProtocol,
    Invalid,
    Search,
    get_protocol,
    protocol_names,
    register_protocol,
)
from searchenv.retrievers.bm25 import BM25Retriever
from tests.conftest import DOCS, EXAMPLES
from tests.registered import PlainTools, isolate_registry


@pytest.fixture()
def register(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[type[ActionProtocol]], None]]:
    """``register_protocol`` for this test only: the registry is as it was afterwards."""
    isolate_registry(monkeypatch)
    yield register_protocol


class ShortBrowse(BrowseProtocol):
    """``browse`` with shorter snippets."""

    name = "test-short-browse"

    def __init__(self, **kwargs: int) -> None:
        super().__init__(snippet_chars=40, **kwargs)


class CitingBrowse(BrowseProtocol):
    """Opens documents and cites them in its answer: no tool env offers both."""

    name = "test-citing-browse"
    tags = (*BrowseProtocol.tags, "relevance", "analysis")


class Lines(ActionProtocol):
    """A turn is one line, ``SEARCH: query`` or ``ANSWER: text`` (no tags, no tool calls)."""

    name = "test-lines"

    def system_prompt(self) -> str:
        return "SEARCH: a query, or ANSWER: the answer."

    def parse(self, text: str):  # type: ignore[no-untyped-def]
        verb, _, body = text.strip().partition(":")
        if verb == "SEARCH" and body.strip():
            return Search((body.strip(),))
        if verb == "ANSWER" and body.strip():
            return Answer(body.strip())
        return Invalid(Invalid.NO_ACTION, self.system_prompt())


class TaggedLines(Lines):
    """:class:`Lines` that says a tag turn in its own format, so whoever writes tag turns can use it."""

    name = "test-tagged-lines"

    def from_tags(self, turn: str) -> str:
        for tag, verb in (("search", "SEARCH"), ("answer", "ANSWER")):
            if f"<{tag}>" in turn:
                return f"{verb}: {turn.split(f'<{tag}>')[1].split(f'</{tag}>')[0].strip()}"
        return turn


def test_protocol_names_filters_by_the_features_the_classes_declare(register) -> None:  # type: ignore[no-untyped-def]
    assert protocol_names(native_tools=True) == ["tools", "tools-browse"]
    assert protocol_names(native_tools=True, can_open=False, episode_numbering=False) == ["tools"]
    assert protocol_names(can_open=True) == ["browse", "tools-browse"]
    register(PlainTools)
    register(ShortBrowse)
    assert protocol_names(native_tools=True) == ["test-plain-tools", "tools", "tools-browse"]
    assert protocol_names(native_tools=True, can_open=False, episode_numbering=False) == ["test-plain-tools", "tools"]
    assert "test-short-browse" in protocol_names(can_open=True) and "test-short-browse" in protocol_names()
    assert isinstance(get_protocol("test-plain-tools"), PlainTools)
    with pytest.raises(ValueError, match="features are can_open, episode_numbering, native_tools"):
        protocol_names(tools=True)


def test_the_registry_is_restored_after_a_test_that_registers() -> None:
    assert not any(name.startswith("test-") for name in protocol_names())


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("registry") / "idx")


def test_the_trl_tool_env_follows_the_protocols_features(register, bm25: BM25Retriever) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("trl")
    from agents.integrations.trl import SearchQAArenaToolEnv, SearchQABrowseToolEnv, SearchQAToolEnv

    def tool_env(protocol: str) -> SearchQAToolEnv:
        return SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, protocol=protocol, max_turns=4)()

    for protocol, cls in (("search-r1", SearchQAToolEnv), ("multi-query", SearchQAToolEnv), ("tools", SearchQAToolEnv),
                          ("browse", SearchQABrowseToolEnv), ("tools-browse", SearchQABrowseToolEnv),
                          ("arena", SearchQAArenaToolEnv)):
        assert type(tool_env(protocol)) is cls, protocol
    register(PlainTools)
    register(ShortBrowse)
    register(TaggedLines)
    plain = tool_env("test-plain-tools")
    plain.reset(example_id="q1")
    assert type(plain) is SearchQAToolEnv and "Tobin Quenn: Tobin Quenn is an engineer" in plain.search("Tobin Quenn")
    short = tool_env("test-short-browse")
    short.reset(example_id="q1")
    assert type(short) is SearchQABrowseToolEnv and "Doc 1" in short.search("Tobin Quenn")
    assert "page 1 of 1" in short.open(1)
    lines = tool_env("test-tagged-lines")  # a format of its own that says tag turns: it works
    lines.reset(example_id="q1")
    assert "Tobin Quenn" in lines.search("Tobin Quenn") and lines.answer("Karsk") == "Answer recorded."
    assert lines.final_metrics["em"] == 1.0
    register(Lines)
    with pytest.raises(ValueError, match="'test-lines' does not read tag turns"):
        tool_env("test-lines")
    register(CitingBrowse)
    with pytest.raises(ValueError, match="'test-citing-browse' both opens documents and cites them"):
        tool_env("test-citing-browse")
