"""The verifiers environment ``searchqa``: verifiers' own CLIs in .venv-verifiers.

verifiers 0.4 pins ``mcp==2.0.0`` (this environment has mcp 2.3), so ``make test`` builds
``.venv-verifiers`` (with ``verifiers[openenv]``, verifiers' own extra for its bundled ``openenv``
taskset) and these tests run the checks of ``tests/vf_env/`` there:

- ``vf-validate searchqa`` on 50 tasks, and ``vf-eval searchqa`` against a scripted oracle model server;
- ``vf-eval`` of verifiers' bundled ``openenv`` taskset against ``searchenv serve-openenv`` (run from
  ``.venv-openenv``), with the TOML of docs/serving/verifiers.md;
- ``vf-eval searchqa`` against ``transformers serve`` of the packaged SmolLM2 (started here, once per session).

In each, every trace's reward equals in-process SearchQA-v0 on the same turns.
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
    return subprocess.run([str(VERIFIERS_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_searchqa_module_without_verifiers_names_the_extra() -> None:
    if importlib.util.find_spec("verifiers") is not None:
        pytest.skip("verifiers is installed here")
    with pytest.raises(ModuleNotFoundError, match="verifiers"), \
            pytest.warns(DeprecationWarning, match="pip install env-packages/verifiers/searchqa"):
        import searchqa  # noqa: F401  (the deprecated module inside searchenv: it warns, then needs verifiers)


def test_the_environment_package_is_laid_out_as_prime_env_init_lays_one_out() -> None:
    import ast

    import tomllib

    package = ROOT / "env-packages" / "verifiers" / "searchqa"
    project = tomllib.loads((package / "pyproject.toml").read_text())
    assert project["project"]["name"] == "searchqa" and (package / "README.md").is_file()
    assert "searchenv[verifiers]" in project["project"]["dependencies"]
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["searchqa"]
    tree = ast.parse((package / "searchqa" / "__init__.py").read_text())
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    exported = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "__all__" for t in n.targets))
    assert "load_environment" in names and "load_environment" in exported and "SearchQATaskset" in exported
    assert "searchqa" in (ROOT / "Makefile").read_text().split("VERIFIERS_PACKAGE :=")[1].splitlines()[0]


@pytest.mark.slow(minutes=3)
def test_verifiers_clis_and_the_bundled_openenv_taskset_in_their_own_venv(request: pytest.FixtureRequest) -> None:
    """Every check of tests/vf_env in one run of .venv-verifiers' pytest (one start-up, not two)."""
    env: dict[str, str] = {}
    try:
        url, folder = request.getfixturevalue("served_smollm2")
        env = {"SEARCHQA_MODEL_URL": url + "/v1", "SEARCHQA_MODEL": folder}
    except pytest.skip.Exception:  # no packaged model here: the served check skips, the others run
        pass
    proc = _check("tests/vf_env/check_searchqa.py", "tests/vf_env/check_openenv_taskset.py", env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    expected = "11 passed" if env else "10 passed, 1 skipped"
    assert expected in proc.stdout and (env == {} or "skipped" not in proc.stdout), proc.stdout[-2000:]
