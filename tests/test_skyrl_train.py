"""SkyRL's own generator driving SearchQA-v0 episodes, in SkyRL's own virtual environment.

SkyRL's trainer package (``skyrl`` 0.4.0) needs Python 3.12 and pins its own transformers and
ray, so ``make test`` builds ``.venv-skyrl`` and this test runs ``tests/skyrl/check_generator.py``
there: docs/engines/skyrl.md's commands as written, the extended config through SkyRL's parser and
``validate_cfg``, and ``searchqa`` episodes through ``SkyRLGymGenerator`` (the inference engine the
only stand-in).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKYRL_PYTHON = ROOT / ".venv-skyrl" / "bin" / "python"


@pytest.mark.slow
def test_skyrl_generator_in_its_own_venv() -> None:
    if not SKYRL_PYTHON.exists():
        pytest.skip(".venv-skyrl is not built here (make test builds it)")
    proc = subprocess.run([str(SKYRL_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/skyrl/check_generator.py"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout
