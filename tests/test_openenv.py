"""The OpenEnv server: reward bounds and the CLI here, OpenEnv's validator and client in .venv-openenv.

OpenEnv pins mcp and fastmcp, so ``make test`` builds ``.venv-openenv`` and the slow test runs
``tests/openenv/check_server.py`` there: OpenEnv's runtime validator against ``searchenv
serve-openenv``, OpenEnv's client driving 32 concurrent sessions that must equal in-process
SearchQA-v0, and hostile input (malformed arguments, 10 MB payloads, sessions never closed, 1,000
sessions at once).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.env import SearchQAEnv
from searchenv.integrations.openenv_manifest import check_range, manifest, step_reward_range
from searchenv.protocols import get_protocol
from searchenv.rewards import get_reward
from tests.conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
OPENENV_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"


@pytest.mark.parametrize(("reward", "expected"), [
    ("default", (-0.1, 1.0)), ("frugal", (-0.1, 1.0)), ("search-r1", (0.0, 1.0)), ("process", (0.0, 1.5)),
    ({"outcome": 1, "cost": {"weight": 0.05, "per_query": 0.5}}, (-0.05 * 2.5, 1.0)),
])
def test_step_reward_range_bounds_the_presets(reward: object, expected: tuple[float, float]) -> None:
    low, high = step_reward_range(get_reward(reward), get_protocol("multi-query"))  # type: ignore[arg-type]
    assert (low, high) == pytest.approx(expected)


def test_a_reward_that_cannot_be_bounded_asks_for_its_range() -> None:
    with pytest.raises(ValueError, match="--reward-range"):
        step_reward_range(get_reward("r3-rag"), get_protocol("tools"))
    with pytest.raises(ValueError, match="LOW < HIGH"):
        check_range([1.0, 1.0])


def test_every_step_reward_lies_in_the_declared_range(make_env) -> None:  # type: ignore[no-untyped-def]
    env: SearchQAEnv = make_env(protocol="tools", reward="frugal", max_turns=4)
    low, high = step_reward_range(env.reward_fn, env.protocol)
    turns = ['<tool_call>{"name": "search", "arguments": {"query": "Velora Quenn"}}</tool_call>', "no call",
             '{"name": "search", "arguments": {"q": 1}}', '{"name": "answer", "arguments": {"answer": "Essaly"}}']
    for seed in range(4):
        env.reset(seed=seed, options={"index": seed})
        for turn in turns:
            _, reward, terminated, truncated, _ = env.step(turn)
            assert low <= float(reward) <= high
            if terminated or truncated:
                break
    assert '"range": [\n        -0.1,\n        1.0' in manifest((low, high), task_counts={"train": len(EXAMPLES)})


def test_serve_openenv_without_openenv_says_how_to_install(qa_file: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("openenv") is not None:
        pytest.skip("openenv is installed here")
    result = CliRunner().invoke(get_app(), ["serve-openenv", "--task", str(qa_file), "--index", str(tmp_path)])
    assert result.exit_code == 2
    assert "install searchenv[openenv] in an environment of its own" in result.output


@pytest.mark.slow(minutes=2)
def test_openenv_server_in_its_own_venv() -> None:
    if not OPENENV_PYTHON.exists():
        pytest.skip(".venv-openenv is not built here (make test builds it)")
    proc = subprocess.run([str(OPENENV_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/openenv/check_server.py", "tests/openenv/check_limits.py",
                           "tests/openenv/check_modes.py",
                           "tests/openenv/check_trl.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "52 passed" in proc.stdout
