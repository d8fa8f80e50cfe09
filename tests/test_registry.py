"""One registry type behind every name lookup, and each registry's ``register_*`` making a name selectable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searchenv.errors import UnknownNameError
from searchenv.utils.registry import Registry
from tests.conftest import DOCS, EXAMPLES

_NAMES = st.text(st.characters(codec="ascii", categories=["L", "N", "Pd"]), min_size=1, max_size=8)


@given(entries=st.dictionaries(_NAMES, st.integers(), max_size=6), extra=_NAMES, missing=_NAMES)
def test_a_registry_registers_looks_up_and_names_what_it_holds(entries: dict[str, int], extra: str,
                                                              missing: str) -> None:
    reg: Registry[int] = Registry("widget", entries)
    reg.register(extra, -1)
    held = {**entries, extra: -1}
    assert reg.names() == sorted(held) and dict(reg) == held and len(reg) == len(held)
    assert all(reg[name] == value for name, value in held.items())
    if missing not in held:
        assert missing not in reg and reg.get(missing) is None  # a mapping: get's default, no error
        with pytest.raises(UnknownNameError) as err:
            reg[missing]
        assert str(err.value) == f"unknown widget {missing!r}; known: {', '.join(sorted(held))}"
        assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)


def test_a_registry_refuses_an_empty_name_and_its_copy_is_its_own() -> None:
    reg: Registry[int] = Registry("widget", {"a": 1})
    for bad in ("", "  ", None, 3):
        with pytest.raises(ValueError, match="widget name must be a non-empty string"):
            reg.register(bad, 2)  # type: ignore[arg-type]
    copy = reg.copy()
    copy.register("b", 2)
    assert reg.names() == ["a"] and copy.names() == ["a", "b"] and copy.kind == "widget"
    makers: Registry[Callable[[], int]] = Registry("maker", {"one": lambda: 1}, callables=True)
    with pytest.raises(TypeError, match="a maker must be callable, got 3"):
        makers.copy().register("three", 3)  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError, match="unknown widget"):
        reg[["unhashable"]]  # type: ignore[index]


def test_built_ins_load_once_on_first_use_and_a_later_registration_replaces_one() -> None:
    calls: list[int] = []

    def load() -> dict[str, int]:
        calls.append(1)
        return {"builtin": 1, "other": 2}

    reg: Registry[int] = Registry("widget", load=load)
    assert calls == []
    reg.register("builtin", 10)  # registered before any lookup: still replaces the built-in
    assert reg["builtin"] == 10 and reg["other"] == 2 and reg.names() == ["builtin", "other"] and calls == [1]


# ---- every registry, through its own register_* and its public lookup --------------------------------


@pytest.fixture()
def isolated(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``isolated(module, "NAME", also=[module2, ...])``: this test's own copy of a module-level registry."""

    def isolate(module: Any, attr: str, also: tuple[Any, ...] = ()) -> None:
        copy = getattr(module, attr).copy()
        for where in (module, *also):
            monkeypatch.setattr(where, attr, copy)

    return isolate


def test_a_registered_protocol_task_and_index_kind_are_selected_by_name(isolated: Any, tmp_path: Path) -> None:
    from searchenv.corpus import write_corpus
    from searchenv.protocols import get_protocol, register_protocol
    from searchenv.protocols import registry as protocols
    from searchenv.retrievers import build_index, index_kinds, kinds, register_index_kind
    from searchenv.tasks import load_task, register_task
    from searchenv.tasks import registry as tasks
    from searchenv.tasks.example import Task, TaskSpec
    from tests.registered import PlainTools

    isolated(protocols, "_PROTOCOLS")
    register_protocol(PlainTools)
    assert isinstance(get_protocol("test-plain-tools"), PlainTools)
    with pytest.raises(ValueError, match="unknown protocol 'nope'; known: .*test-plain-tools"):
        get_protocol("nope")

    isolated(tasks, "_TASKS")
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, DOCS)
    own = Task("mine", corpus, {"dev": EXAMPLES})
    register_task(TaskSpec("mine", lambda root: own))
    assert load_task("mine") is own
    with pytest.raises(ValueError, match="unknown task 'nope'; known: .*mine.*synthetic-2hop"):
        load_task("nope")

    isolated(kinds, "_KINDS")
    register_index_kind("bm25-again", "searchenv.retrievers.bm25:BM25Retriever")
    assert "bm25-again" in index_kinds() and len(build_index("bm25-again", corpus, tmp_path / "idx")) == len(DOCS)
    with pytest.raises(ValueError, match="unknown retriever 'nope'; known: bm25, bm25-again, dense"):
        build_index("nope", corpus, tmp_path / "idx2")


def test_a_registered_term_preset_verifier_and_refiner_are_selected_by_name(isolated: Any) -> None:
    from searchenv import refiners, rewards
    from searchenv.refiners import SentenceRefiner, get_refiner, register_refiner
    from searchenv.rewards import custom, get_reward, presets, register_preset, register_term, terms, verifiers
    from searchenv.rewards.verifiers import get_verifier, register_verifier

    isolated(terms, "TERMS", also=(presets, rewards))
    isolated(terms, "TERM_BOUNDS", also=(rewards,))
    register_term("always-one", lambda ctx: 1.0, lambda max_queries: (1.0, 1.0))
    assert "always-one" in terms.TERMS and terms.TERM_BOUNDS["always-one"](3) == (1.0, 1.0)
    assert custom({"always-one": 0.5}).terms == {"always-one": (0.5, {})}
    with pytest.raises(ValueError, match="unknown reward term 'nope'"):
        custom({"nope": 1.0})
    with pytest.raises(TypeError, match="bounds must be callable"):
        register_term("no-bounds", lambda ctx: 1.0, None)  # type: ignore[arg-type]

    isolated(presets, "PRESETS", also=(rewards,))
    register_preset("half-outcome", lambda: custom({"outcome": 0.5}))
    assert get_reward("half-outcome").terms == {"outcome": (0.5, {})}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown reward preset 'nope'; known: .*half-outcome"):
        get_reward("nope")

    isolated(verifiers, "_VERIFIERS")
    register_verifier("never", lambda ctx: 0.0)
    assert get_verifier("never")(None) == 0.0  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown relevance verifier 'nope'; known: .*embedding.*never"):
        get_verifier("nope")
    assert get_verifier("embedding") is get_verifier("embedding")  # one per process

    isolated(refiners, "REFINERS")
    register_refiner("one-sentence", lambda: SentenceRefiner(max_sentences=1))
    assert get_refiner("one-sentence").max_sentences == 1  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown refiner 'nope'; known: one-sentence, sentences"):
        get_refiner("nope")


def test_a_registered_agent_is_made_by_name_with_the_settings(isolated: Any) -> None:
    pytest.importorskip("torch")
    from agents.baselines import AgentSettings, agent_names, make_agent, register_agent
    from agents.baselines import registry as agents
    from agents.baselines.scripted import RandomAgent

    isolated(agents, "_AGENTS")
    seen: list[AgentSettings] = []

    def lucky(settings: AgentSettings) -> RandomAgent:
        seen.append(settings)
        return RandomAgent(seed=settings.seed + 1)

    register_agent("lucky", lucky)
    assert make_agent("lucky", seed=4).name == "random" and seen == [AgentSettings("lucky", seed=4)]
    assert "lucky" in agent_names() and {"oracle", "rag", "searcher"} <= set(agent_names())
    with pytest.raises(ValueError, match="unknown agent 'nope'; known: direct, heuristic, iterative, llm, lucky"):
        make_agent("nope")
    with pytest.raises(ValueError, match="cannot hold ':'"):
        register_agent("pkg:Agent", lucky)
