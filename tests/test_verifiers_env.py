"""The verifiers environment ``searchqa``: verifiers' own CLIs in .venv-verifiers.

verifiers 0.4 pins ``mcp==2.0.0`` (this environment has mcp 2.3), so ``make test`` builds
``.venv-verifiers`` and these tests run ``tests/vf_env/check_searchqa.py`` there: ``vf-validate``
on 50 tasks, and ``vf-eval searchqa`` against a scripted oracle model server and against
``transformers serve`` (the packaged SmolLM2), each trace's reward equal to in-process SearchQA-v0
on the same assistant turns.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERIFIERS_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if not VERIFIERS_PYTHON.exists():
        pytest.skip(".venv-verifiers is not built here (make test builds it)")
    return subprocess.run([str(VERIFIERS_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/vf_env/check_searchqa.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_searchqa_module_without_verifiers_names_the_extra() -> None:
    if importlib.util.find_spec("verifiers") is not None:
        pytest.skip("verifiers is installed here")
    with pytest.raises(ModuleNotFoundError, match="verifiers"):
        import searchqa  # noqa: F401


@pytest.mark.slow
def test_vf_validate_and_vf_eval_in_their_own_venv() -> None:
    proc = _check("-k", "not served")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout
