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


def cpu_flags() -> list[str]:
    """The CPU's arithmetic-relevant feature flags (from /proc/cpuinfo where there is one)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in set(flags) if f in {"avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2"})


def write_results(name: str, data: dict[str, Any], table: str, command: str | None = None,
                  folder: Path = RESULTS) -> None:
    """Write ``<folder>/<name>.json`` and ``<folder>/<name>.md`` (a Markdown table plus the command), each atomically.

    ``command`` is the command line that measured it (default ``python benchmarks/<name>.py``);
    ``folder`` defaults to ``benchmarks/results``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    cmd = command or f"python benchmarks/{name}.py"
    data = {"benchmark": name, "machine": machine(), "command": cmd, **data}
    atomic_write_lines(folder / f"{name}.json", json.dumps(data, indent=2).splitlines())
    atomic_write_lines(folder / f"{name}.md",
                       f"{table.rstrip()}\n\nMeasured with `{cmd}` ({data['machine']['date']}).".splitlines())
    print(table)


def paired_difference(a: dict[str, Any], b: dict[str, Any], key: str = "em", reps: int = 10_000) -> dict[str, float]:
    """Mean of ``a - b`` over the questions both answered, with a 95% percentile-bootstrap interval.

    Args:
        a: A run with ``per_question``: question id -> its metrics.
        b: Another, on the same questions.
        key: The metric compared.
        reps: Bootstrap resamples (seeded: the interval is the same every time).
    """
    import numpy as np

    ids = sorted(set(a["per_question"]) & set(b["per_question"]))
    d = np.array([a["per_question"][i][key] - b["per_question"][i][key] for i in ids], dtype=np.float64)
    if not len(d):
        return {"n": 0, "mean": 0.0, "ci_low": 0.0, "ci_high": 0.0, "a_better": 0, "b_better": 0}
    rng = np.random.default_rng(12345)
    boots = d[rng.integers(0, len(d), size=(reps, len(d)))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"n": len(ids), "mean": float(d.mean()), "ci_low": float(lo), "ci_high": float(hi),
            "a_better": int((d > 0).sum()), "b_better": int((d < 0).sum())}
