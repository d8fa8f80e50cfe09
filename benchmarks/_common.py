"""Helpers shared by the benchmark scripts: result files and machine description."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from searchenv.corpus import atomic_write_lines

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """A short description of where a benchmark ran."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def write_results(name: str, data: dict[str, Any], table: str, command: str | None = None) -> None:
    """Write ``results/<name>.json`` and ``results/<name>.md`` (a Markdown table plus the command), each atomically.

    ``command`` is the command line that measured it (default ``python benchmarks/<name>.py``).
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmd = command or f"python benchmarks/{name}.py"
    data = {"benchmark": name, "machine": machine(), "command": cmd, **data}
    atomic_write_lines(RESULTS / f"{name}.json", json.dumps(data, indent=2).splitlines())
    atomic_write_lines(RESULTS / f"{name}.md",
                       f"{table.rstrip()}\n\nMeasured with `{cmd}` ({data['machine']['date']}).".splitlines())
    print(table)
