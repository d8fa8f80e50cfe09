"""Run the learning tests under each arithmetic of this CPU and print every margin under each.

``make test-numerics`` runs it. A learning test (``pytest -m learning``) asserts what its algorithm
guarantees with a margin that must not depend on how this CPU rounds; this reruns them with the
environment of each arithmetic in ``tests/learning.py`` (``ARITHMETICS``) and fails when any test
fails under any of them.

Usage::

    python tools/test_numerics.py [--arithmetic NAME ...] [--fast] [--out FILE.md] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.learning import ARITHMETICS  # noqa: E402


def run(names: list[str], pytest_args: list[str], marker: str = "learning") -> tuple[int, list[dict[str, object]]]:
    """Run ``pytest -m MARKER`` once per arithmetic; return the worst exit code and the margins."""
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        margins = Path(tmp) / "margins.jsonl"
        for name in names:
            env = {**os.environ, **ARITHMETICS[name], "SEARCHENV_ARITHMETIC": name,
                   "SEARCHENV_MARGINS_FILE": str(margins)}
            print(f"== arithmetic {name}: {' '.join(f'{k}={v}' for k, v in ARITHMETICS[name].items()) or '(as is)'}",
                  flush=True)
            code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", marker, "-p", "no:cacheprovider",
                                    *pytest_args], cwd=ROOT, env=env)
            worst = max(worst, code)
        text = margins.read_text(encoding="utf-8") if margins.exists() else ""
        rows = [json.loads(line) for line in text.splitlines()]
    return worst, rows


def table(rows: list[dict[str, object]], names: list[str]) -> str:
    """A Markdown table: one row per learning assertion, one column per arithmetic (value > bound)."""
    keys: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, str], str] = {}
    for r in rows:
        key = (str(r["test"]), str(r["what"]))
        if key not in keys:
            keys.append(key)
        value, bound = float(r["value"]), float(r["bound"])  # type: ignore[arg-type]
        cells[(*key, str(r["arithmetic"]))] = f"{value:.3g} > {bound:.3g}" + ("" if value > bound else " FAILED")
    lines = ["| test | what | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for test, what in keys:
        lines.append(f"| `{test.split('/')[-1]}` | {what} | "
                     + " | ".join(cells.get((test, what, n), "-") for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print (and optionally write) the table; exit non-zero on any failure."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arithmetic", action="append", choices=sorted(ARITHMETICS),
                        help="Run only these (default: all).")
    parser.add_argument("--fast", action="store_true", help="Only the learning tests not marked slow.")
    parser.add_argument("--out", type=Path, help="Also write the table to this Markdown file.")
    args = parser.parse_args(argv)
    names = args.arithmetic or list(ARITHMETICS)
    code, rows = run(names, pytest_args, "learning and not slow" if args.fast else "learning")
    text = table(rows, names)
    print("\n" + text)
    if args.out:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.out)
    return code


if __name__ == "__main__":
    sys.exit(main())
