"""Write ``locks/<name>.txt`` from what a virtual environment has installed (``make lock``).

Usage: ``python tools/write_locks.py main=.venv verl=.venv-verl ...``. Each lock file is that
environment's ``pip freeze --all`` without this package itself, one ``name==version`` a line, with
local version labels dropped (``torch==2.13.0+cpu`` is locked as ``torch==2.13.0``, which the CPU
build on disk and a CUDA build both satisfy). ``make`` passes it to every ``pip install`` of that
environment as a constraints file (``-c``). Each file is written to a temporary file and renamed,
so a failed run leaves the old lock whole; a freeze that fails is reported in one line (the
environment, the lock it would have written and pip's last words), with exit status 1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;+]+)(\+[^\s;]+)?$")
#: This project's own distributions: the package, and the environment packages of env-packages/ (installed from
#: their folders, so pip freezes them as ``name @ file://...``, which cannot be a constraint).
_SELF = {"searchenv", "searchqa", "openenv-searchqa"}
_SELF_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==|@)")


def lock_lines(freeze: str, where: str) -> list[str]:
    """The lock file's requirement lines for one ``pip freeze --all --exclude-editable`` output.

    Args:
        freeze: What pip printed.
        where: The environment, for error messages.

    Returns:
        ``name==version`` lines, sorted by normalised name.

    Raises:
        ValueError: On a line that is not ``name==version`` (a direct URL or a local path cannot be
            a constraint), naming the environment, the line number and the line.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(freeze.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        own = _SELF_LINE.match(line)
        if own and re.sub(r"[-_.]+", "-", own.group(1)).lower() in _SELF:
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"{where}: pip freeze line {number} is not name==version: {line[:200]!r}")
        pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = f"{match.group(1)}=={match.group(2)}"
    return [pins[n] for n in sorted(pins)]


def write_lock(name: str, venv: Path) -> Path:
    """Freeze ``venv`` into ``locks/<name>.txt`` (temporary file, then rename).

    Raises:
        FileNotFoundError: If ``venv`` has no Python.
        ValueError: On a freeze line that cannot be a constraint.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        raise FileNotFoundError(f"{venv}: no bin/python (build it first: make test-latest)")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    version = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    lines = lock_lines(freeze, str(venv))
    header = (f"# {name}: what `make` installs into this virtual environment (Python {version}).\n"
              "# Written by `make lock` after the whole suite passed on these versions; do not edit by hand.\n")
    LOCKS.mkdir(exist_ok=True)
    target = LOCKS / f"{name}.txt"
    fd, tmp = tempfile.mkstemp(dir=LOCKS, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(header + "\n".join(lines) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def main(argv: list[str]) -> int:
    """Write one lock per ``name=venv`` argument."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    pairs = []
    for arg in argv:
        name, sep, folder = arg.partition("=")
        if not sep or not re.fullmatch(r"[a-z0-9-]+", name) or not folder:
            print(f"expected name=venv (name of lowercase letters, digits, '-'), got {arg!r}", file=sys.stderr)
            return 2
        pairs.append((name, Path(folder)))
    for name, venv in pairs:
        try:
            path = write_lock(name, venv)
        except subprocess.CalledProcessError as exc:
            said = (exc.stderr or "").strip().splitlines()
            why = f"`{' '.join(map(str, exc.cmd[1:]))}` exited with {exc.returncode}" + (
                f": {said[-1][:300]}" if said else "")
            print(f"error: locks/{name}.txt from {venv}: {why}; the old lock is unchanged", file=sys.stderr)
            return 1
        except (OSError, ValueError) as exc:
            print(f"error: locks/{name}.txt from {venv}: {exc}; the old lock is unchanged", file=sys.stderr)
            return 1
        print(f"wrote {path.relative_to(ROOT)} from {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
