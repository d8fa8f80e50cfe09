"""verifiers' bundled ``openenv`` taskset playing ``searchenv serve-openenv`` (run in .venv-verifiers).

The TOML of docs/serving/verifiers.md is run with ``vf-eval`` as written, with only its three
addresses and the model replaced: the SearchQA-v0 OpenEnv server runs from .venv-openenv (OpenEnv
0.10, as ``make test`` builds it), verifiers' taskset and OpenEnv's client (0.4.1, which
``verifiers[openenv]`` installs beside verifiers' ``mcp`` pin) from here, and a scripted model plays
the oracle's actions as JSON, opening every other episode with a malformed call. Each trace's
``openenv_reward`` must equal the return of in-process ``SearchQA-v0`` for the same seed and actions.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import pytest
import tomllib
from tests.vf_env.scripted_model import scripted_model

import searchenv  # noqa: F401  (registers SearchQA-v0)
from searchenv.make import resolve_task
from searchenv.protocols.tools import tool_turn_text

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OPENENV_BIN = ROOT / ".venv-openenv" / "bin"
DOC = ROOT / "docs" / "serving" / "verifiers.md"
SETTINGS: dict[str, Any] = {"task": "synthetic-2hop", "split": "dev", "retriever": "bm25", "protocol": "tools",
                            "top_k": 3, "max_turns": 4}


def _doc_toml() -> str:
    found = re.search(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    if found is None:
        raise AssertionError(f"{DOC} has no TOML block")
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _in_process(seed: int, replies: list[str], reward: str = "default") -> tuple[str, float]:
    """The question id and return of in-process SearchQA-v0 for ``seed`` and the model's JSON actions."""
    env = gym.make("SearchQA-v0", **SETTINGS, reward=reward).unwrapped
    _, info = env.reset(seed=seed)
    total = 0.0
    for reply in replies:
        action = json.loads(reply)
        _, reward, terminated, truncated, info = env.step(
            tool_turn_text("", [{"function": {"name": action["tool_name"], "arguments": action["arguments"]}}]))
        total += float(reward)
        if terminated or truncated:
            break
    return env.example.id, total


def _seeds_and_ids() -> tuple[list[int], dict[int, str]]:
    config = tomllib.loads(_doc_toml())
    seeds = [reset["seed"] for reset in config["env"]["taskset"]["resets"]]
    env = gym.make("SearchQA-v0", **SETTINGS).unwrapped
    ids = {}
    for seed in seeds:
        env.reset(seed=seed)
        ids[seed] = env.example.id
    return seeds, ids


def _run_doc_toml(tmp_path: Path, *server_args: str, **model: Any) -> list[dict[str, Any]]:
    """``vf-eval`` of the docs' TOML against ``serve-openenv`` (defaults, then ``server_args``) and a scripted model."""
    if not (OPENENV_BIN / "searchenv").exists():
        pytest.skip(".venv-openenv is not built here (make test builds it)")
    config = tomllib.loads(_doc_toml())
    examples, _ = resolve_task(SETTINGS["task"], SETTINGS["split"], None)
    port = _free_port()
    log = tmp_path / "serve-openenv.log"  # a file, not a pipe nobody reads while the server runs
    with log.open("wb") as sink:
        server = subprocess.Popen([str(OPENENV_BIN / "searchenv"), "serve-openenv", "--task", SETTINGS["task"],
                                   "--split", SETTINGS["split"], "--index", "bm25", "--port", str(port),
                                   "--log-level", "warning", *server_args], stdout=subprocess.DEVNULL, stderr=sink)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve-openenv did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        with scripted_model(examples, json_actions=True, **model) as model_url:
            text = _doc_toml()
            text = text.replace(config["client"]["base_url"], model_url)
            text = text.replace(config["env"]["taskset"]["base_url"], url)
            text = re.sub(r'^model = ".*"$', 'model = "oracle"', text, flags=re.M)
            (tmp_path / "eval.toml").write_text(text)
            proc = subprocess.run([str(BIN / "vf-eval"), "@", str(tmp_path / "eval.toml"), "-o", str(tmp_path / "ev"),
                                   "--no-push"], env={**os.environ, "OPENAI_API_KEY": "local"},
                                  capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [traces_file] = (tmp_path / "ev").glob("*/traces.jsonl")
    return [t for line in traces_file.read_text().splitlines() for t in json.loads(line)["traces"]]


def test_bundled_openenv_taskset_rewards_equal_in_process_searchqa(tmp_path: Path) -> None:
    seeds, ids = _seeds_and_ids()
    assert len(seeds) >= 4
    traces = _run_doc_toml(tmp_path, bad_first={ids[s] for s in seeds if s % 2 == 1})
    assert len(traces) == len(seeds)
    returns = []
    for trace in traces:
        assert trace["errors"] == [], trace["errors"]
        seed = trace["task"]["data"]["reset"]["seed"]
        replies = [node["message"]["content"] for node in trace["nodes"] if node["message"]["role"] == "assistant"]
        example_id, want = _in_process(seed, replies)
        first = json.loads(trace["nodes"][0]["message"]["content"])["observation"]
        assert first["example_id"] == example_id == ids[seed]
        assert trace["rewards"]["openenv_reward"]["score"] == pytest.approx(want)
        returns.append(want)
    # the malformed opening call costs its turn's penalty, so both kinds of episode were played
    assert len({round(r, 6) for r in returns}) >= 2, returns


def test_a_slow_model_that_copies_what_it_is_shown_scores_nothing(tmp_path: Path) -> None:
    """2.5 s a turn (past the server's 1 s ``--request-timeout``) and a copier: the episodes live, and score 0."""
    seeds, ids = _seeds_and_ids()
    examples, _ = resolve_task(SETTINGS["task"], SETTINGS["split"], None)
    golds = {e.id: e.answers for e in examples}
    traces = _run_doc_toml(tmp_path, "--request-timeout", "1", copier=True, delay_s=2.5)
    assert len(traces) == len(seeds)
    for trace in traces:
        assert trace["errors"] == [], trace["errors"]
        seed = trace["task"]["data"]["reset"]["seed"]
        contents = [node["message"]["content"] for node in trace["nodes"]]
        assert len(contents) >= 4  # reset, search, its observation, answer
        answer = json.loads(contents[3])["arguments"]["answer"]
        assert answer not in golds[ids[seed]], (answer, golds[ids[seed]])
        assert trace["rewards"]["openenv_reward"]["score"] <= 0.0


def test_against_an_evaluation_server_the_model_is_shown_no_reward_and_the_score_is_the_same(tmp_path: Path) -> None:
    """``serve-openenv --mode evaluation``: the observations written into the prompt hold no reward or term."""
    seeds, ids = _seeds_and_ids()
    traces = _run_doc_toml(tmp_path, "--mode", "evaluation", "--reward", "process",
                           bad_first={ids[s] for s in seeds if s % 2 == 1})
    assert len(traces) == len(seeds)
    for trace in traces:
        assert trace["errors"] == [], trace["errors"]
        shown = [json.loads(node["message"]["content"])["observation"] for node in trace["nodes"]
                 if node["message"]["role"] == "user"]
        assert len(shown) >= 2  # the reset and at least one step before the answer
        for observation in shown[1:]:
            assert observation["reward_terms"] == {}, observation
            assert not {"reward_terms", "reward_signals", "em", "gold_answers"} & set(observation["metadata"])
        seed = trace["task"]["data"]["reset"]["seed"]
        replies = [node["message"]["content"] for node in trace["nodes"] if node["message"]["role"] == "assistant"]
        _, want = _in_process(seed, replies, reward="process")
        assert trace["rewards"]["openenv_reward"]["score"] == pytest.approx(want)
