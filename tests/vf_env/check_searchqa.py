"""``searchqa`` through verifiers' own CLIs (run in .venv-verifiers by tests/test_verifiers_env.py).

``vf-validate`` must pass on 50 tasks; ``vf-eval searchqa`` against a model server (a scripted oracle
here, ``transformers serve`` when ``SEARCHQA_MODEL_URL`` names one) must exit 0 with each trace's reward
equal to the return in-process ``SearchQA-v0`` gives the trace's assistant turns. ``transformers serve``
is reached through :func:`~tests.vf_env.done_relay.done_relay`, which adds the ``data: [DONE]`` line
its streams leave out and verifiers' relay requires (nothing else is changed).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from tests.leak import assert_no_gold
from tests.vf_env.done_relay import done_relay
from tests.vf_env.scripted_model import scripted_model

import searchenv  # noqa: F401  (registers SearchQA-v0)
from searchenv.integrations.verifiers import (
    SearchQASettings,
    SearchQAToolset,
    SearchQAToolsetConfig,
    _opened,
    _settings,
)
from searchenv.protocols.tools import tool_turn_text

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def _in_process_return(index: int, nodes: list[dict[str, Any]]) -> tuple[float, float]:
    """The return and EM of in-process SearchQA-v0 (the settings' defaults) on a trace's assistant turns."""
    env = gym.make("SearchQA-v0", task="synthetic-2hop", split="dev", retriever="bm25", protocol="tools",
                   top_k=3, max_turns=4).unwrapped
    env.reset(options={"index": index})
    total, info = 0.0, {}
    for node in nodes:
        m = node["message"]
        if m["role"] != "assistant":
            continue
        calls = [{"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for c in m.get("tool_calls") or []]
        _, reward, terminated, truncated, info = env.step(tool_turn_text(m.get("content") or "", calls, ids=True))
        total += float(reward)
        if terminated or truncated:
            break
    return total, float(info.get("em", 0.0))


def _vf_eval(url: str, out: Path, n: int, model: str, *extra: str) -> list[dict[str, Any]]:
    proc = subprocess.run([str(BIN / "vf-eval"), "searchqa", "-n", str(n), "-m", model, "--client.base-url", url,
                           "--client.api-key-var", "OPENAI_API_KEY", "--no-push", "-o", str(out), *extra],
                          env={**os.environ, "OPENAI_API_KEY": "local"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [traces] = out.glob("*/traces.jsonl")
    return [t for line in traces.read_text().splitlines() for t in json.loads(line)["traces"]]


def test_vf_validate_passes_on_50_tasks(tmp_path: Path) -> None:
    proc = subprocess.run([str(BIN / "vf-validate"), "searchqa", "-n", "50", "-o", str(tmp_path),
                           "--runtime.type", "subprocess"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [summary] = tmp_path.glob("*/summary.json")
    got = json.loads(summary.read_text())
    assert got["total"] == 50 and got["outcomes"]["valid"] == 50, got
    assert got["checks"]["gold"]["valid"] == 50 and got["checks"]["noop"]["valid"] == 50


def test_searchqa_is_the_installed_environment_package_and_loads_with_settings() -> None:
    """``make`` installs env-packages/verifiers/searchqa from its folder: its module is the one verifiers imports."""
    import pydantic

    import searchqa
    from searchenv.integrations.verifiers import SearchQAHarness, SearchQATaskset, SearchQAVerifiersEnv

    where = Path(searchqa.__file__).resolve()
    assert "site-packages" in where.parts and ROOT / "src" not in where.parents, where
    assert searchqa.__all__ == ["SearchQAHarness", "SearchQATaskset", "SearchQAVerifiersEnv", "load_environment"]
    assert (searchqa.SearchQATaskset, searchqa.SearchQAHarness) == (SearchQATaskset, SearchQAHarness)
    env = searchqa.load_environment(split="dev", top_k=2, max_turns=3)
    assert isinstance(env, SearchQAVerifiersEnv)
    assert (env.config.taskset.id, env.config.taskset.top_k, env.config.taskset.max_turns) == ("searchqa", 2, 3)
    first = next(iter(SearchQATaskset(env.config.taskset).load()))
    assert first.data.example_index == 0 and "search" in str(first.data.system_prompt)
    with pytest.raises(pydantic.ValidationError, match="topk"):
        searchqa.load_environment(topk=2)


def test_the_searchqa_module_inside_searchenv_warns_and_gives_the_same_classes() -> None:
    import importlib.util

    from searchenv.integrations.verifiers import SearchQATaskset

    spec = importlib.util.spec_from_file_location("old_searchqa", ROOT / "src" / "searchqa" / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.warns(DeprecationWarning, match="pip install env-packages/verifiers/searchqa"):
        spec.loader.exec_module(module)
    assert module.SearchQATaskset is SearchQATaskset


def test_vf_eval_rewards_equal_in_process_searchqa(tmp_path: Path) -> None:
    examples, _ = _opened(_settings(SearchQASettings()))
    with scripted_model(examples) as url:
        traces = _vf_eval(url, tmp_path / "ev", 4, "oracle")
    assert len(traces) == 4
    for trace in traces:
        assert trace["errors"] == [] and trace["stop_condition"] == "episode_over", trace["errors"]
        want, em = _in_process_return(trace["task"]["data"]["example_index"], trace["nodes"])
        assert trace["rewards"]["episode_return"]["score"] == pytest.approx(want)
        assert trace["metrics"]["em"] == em == 1.0 and trace["metrics"]["searches"] >= 1
        assert 0.0 <= trace["metrics"]["evidence_recall"] <= 1.0


def test_a_model_that_copies_what_it_is_shown_scores_nothing(tmp_path: Path) -> None:
    """The copier searches ``zzz`` and answers any answer-like text it was shown: nothing, so EM 0."""
    examples, _ = _opened(_settings(SearchQASettings()))
    with scripted_model(examples, copier=True) as url:
        traces = _vf_eval(url, tmp_path / "ev", 4, "copier")
    assert len(traces) == 4
    for trace in traces:
        assert trace["errors"] == [], trace["errors"]
        golds = examples[trace["task"]["data"]["example_index"]].answers
        shown = [n["message"] for n in trace["nodes"] if n["message"]["role"] != "assistant"]
        assert_no_gold(shown, golds, f"searchqa trace {trace['task']['data']['example_index']}")
        assert trace["metrics"]["em"] == 0.0 and trace["rewards"]["episode_return"]["score"] <= 0.0


def test_the_tool_server_acknowledges_an_answer_and_explains_a_bad_call() -> None:
    toolset = SearchQAToolset(SearchQAToolsetConfig(**json.loads(_settings(SearchQASettings()))))
    answered = asyncio.run(toolset.call_tool("answer", {"answer": "Karsk"}))
    assert answered.content[0].text == "Answer received." and not answered.is_error
    examples, _ = _opened(_settings(SearchQASettings()))
    searched = asyncio.run(toolset.call_tool("search", {"query": examples[0].question}))
    assert "Doc 1" in searched.content[0].text and not searched.is_error
    bad = asyncio.run(toolset.call_tool("answer", {"answer": ["Karsk"]}))
    assert bad.is_error and bad.content[0].text


def test_a_registered_stateless_tool_call_protocol_is_served_and_one_that_needs_earlier_calls_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool server answers each call on its own: tool-call protocols without open or episode-wide numbers."""
    from tests.registered import register_plain_tools

    register_plain_tools(monkeypatch)
    settings = SearchQASettings(protocol="test-plain-tools")
    toolset = SearchQAToolset(SearchQAToolsetConfig(**json.loads(_settings(settings))))
    assert [t.name for t in asyncio.run(toolset.list_tools())] == ["search", "answer"]
    examples, _ = _opened(_settings(settings))
    searched = asyncio.run(toolset.call_tool("search", {"query": examples[0].question}))
    assert "Doc 1" not in searched.content[0].text and ": " in searched.content[0].text and not searched.is_error
    for name in ("tools-browse", "search-r1"):
        with pytest.raises(ValueError, match=r"one of test-plain-tools, tools \(tool calls the stateless tool server"):
            _opened(_settings(SearchQASettings(protocol=name)))


@pytest.mark.skipif(not os.environ.get("SEARCHQA_MODEL_URL"), reason="no served model (SEARCHQA_MODEL_URL)")
def test_vf_eval_with_a_served_model(tmp_path: Path) -> None:
    with done_relay(os.environ["SEARCHQA_MODEL_URL"]) as url:
        traces = _vf_eval(url, tmp_path / "ev", 2, os.environ["SEARCHQA_MODEL"], "--env.agent.max-output-tokens", "48")
    assert len(traces) == 2
    for trace in traces:
        assert trace["errors"] == [], trace["errors"]
        want, _ = _in_process_return(trace["task"]["data"]["example_index"], trace["nodes"])
        assert trace["rewards"]["episode_return"]["score"] == pytest.approx(want)
