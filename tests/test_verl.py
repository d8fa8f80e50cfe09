"""The verl agent loop, tested against the real verl package in its own virtual environment.

verl pins a transformers version of its own, so ``make test`` builds ``.venv-verl`` (the CPU torch
pinned, verl, this package) and this test runs ``tests/verl/check_agent_loop.py`` (the agent loop),
``tests/verl/check_launch.py`` (docs/engines/verl.md's commands as written, verl's
``validate_config``, and a GRPO step's rollout, reward and advantages through verl's
``AgentLoopManager`` on a local Ray) and ``tests/verl/check_main_ppo.py`` (the documented
``main_ppo`` command run for one GRPO step, policy update included, on the CPU) there; the
generation server is the only stand-in.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


@pytest.mark.slow(minutes=2)
def test_verl_agent_loop_in_its_own_venv() -> None:
    if not VERL_PYTHON.exists():
        pytest.skip(".venv-verl is not built here (make test builds it)")
    proc = subprocess.run([str(VERL_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/verl/check_agent_loop.py", "tests/verl/check_launch.py",
                           "tests/verl/check_main_ppo.py"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "20 passed" in proc.stdout
