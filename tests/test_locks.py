"""The lock files: what `make` installs, written by `make lock` (tools/write_locks.py), honoured by the venvs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()


def _write_locks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("write_locks", ROOT / "tools" / "write_locks.py")
    if spec is None or spec.loader is None:
        raise AssertionError("tools/write_locks.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_lock_lines_pin_every_package_but_this_one_without_local_labels() -> None:
    lock_lines = _write_locks().lock_lines
    freeze = ("Torch==2.13.0+cpu\nsearchenv==0.1.0\nnumpy==2.4.6\n\n# a comment\npip==26.3\n"
              "searchqa @ file:///src/env-packages/verifiers/searchqa\n")  # this project's environment package
    assert lock_lines(freeze, "v") == ["numpy==2.4.6", "pip==26.3", "Torch==2.13.0"]
    for bad, number in (("numpy==1\n-e git+https://x/y#egg=z", 2), ("foo @ file:///tmp/foo.whl", 1)):
        with pytest.raises(ValueError, match=rf"v: pip freeze line {number} is not name==version"):
            lock_lines(bad, "v")


def test_every_locked_venv_has_a_lock_file_that_pins_what_the_makefile_pins() -> None:
    names = set(re.findall(r"\$\(call lock,([a-z0-9-]+)\)", MAKEFILE))
    assert names == {"main", "verl", "skyrl", "openenv", "verifiers"}
    torch_pin = re.search(r"^TORCH_PIN \?= torch==(\S+)$", MAKEFILE, re.M)
    assert torch_pin is not None
    for name in names:
        path = ROOT / "locks" / f"{name}.txt"
        pins = _pins(path)
        assert "searchenv" not in pins and "pip" in pins, path
        for line in path.read_text().splitlines():
            assert line.startswith("#") or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s+;]+", line), (path, line)
        if name in ("main", "verl", "skyrl", "openenv"):
            assert pins["torch"] == torch_pin.group(1), path
    assert _pins(ROOT / "locks" / "verifiers.txt")["verifiers"] == "0.4.0"
    assert _pins(ROOT / "locks" / "verl.txt")["verl"] == "0.9.1"


def test_the_running_venv_holds_the_locked_versions_when_it_was_built_locked() -> None:
    venv = Path(sys.prefix)
    if not (venv / ".installed-locked").exists():
        pytest.skip("this Python's environment was not built by `make` from the lock files")
    pins = _pins(ROOT / "locks" / "main.txt")
    installed = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version.split("+")[0]
                 for d in importlib.metadata.distributions()}
    differ = {n: (v, installed.get(n)) for n, v in pins.items() if installed.get(n) != v}
    assert not differ, differ


@pytest.mark.parametrize(("freeze", "said"), [
    ("echo 'pip: the environment is broken' >&2; exit 3", "exited with 3: pip: the environment is broken"),
    ("echo 'pkg @ file:///tmp/pkg'", "pip freeze line 1 is not name==version"),
])
def test_a_failed_freeze_is_one_line_and_leaves_the_lock_alone(tmp_path: Path, freeze: str, said: str) -> None:
    import subprocess

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ]; then {freeze}; else echo 3.11; fi\n')
    python.chmod(0o755)
    lock = ROOT / "locks" / "main.txt"
    before = lock.read_bytes() if lock.exists() else None
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "write_locks.py"), f"main={venv}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: locks/main.txt from {venv}: ")
    assert said in done.stderr and done.stderr.rstrip().endswith("the old lock is unchanged")
    assert (lock.read_bytes() if lock.exists() else None) == before
