"""Per-step metrics of a run: the append-only metrics log, timers, progress bars."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.trainers.checkpoints import METRICS_NAME
from searchenv.corpus import atomic_write_lines
from searchenv.utils.jsonsafe import iter_jsonl, loads


class MetricsLog:
    """Append-only JSONL of per-step metrics; on resume, lines past the resumed step are dropped.

    Lines up to the resumed step are complete (the checkpoint is written after them); what follows
    them, possibly a line torn by a kill, is dropped unread. The file is rewritten atomically.
    """

    def __init__(self, run_dir: str | Path, resume_step: int = 0) -> None:
        self.path = Path(run_dir) / METRICS_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept: list[str] = []
        if resume_step > 0 and self.path.is_file():
            with open(self.path, "rb") as fh:
                for lineno, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    record = loads(raw, f"{self.path}:{lineno}")
                    step = record.get("step", 0) if isinstance(record, dict) else None
                    if not isinstance(step, int):
                        raise ValueError(f"{self.path}:{lineno}: not a metrics record with an integer step")
                    if step <= resume_step:
                        kept.append(raw.decode("utf-8").rstrip("\n"))
                    if step >= resume_step:
                        break
        atomic_write_lines(self.path, kept)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record."""
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(_jsonable(record)) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl``.

    Raises:
        FileNotFoundError: If there is none.
        ValueError: Naming file and line, for a line that is not valid JSON.
    """
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_NAME} in {run_dir}")
    return [record for _where, record in iter_jsonl(path)]


def last_record(run_dir: str | Path, step: int) -> dict[str, Any]:
    """The metrics record of ``step`` in the run's ``metrics.jsonl``, or ``{}`` if there is none.

    A resumed run starts with it as its last step's metrics, so a run resumed from its final
    checkpoint (nothing left to train) reports the same summary as the run that wrote it.
    """
    if step < 1 or not (Path(run_dir) / METRICS_NAME).is_file():
        return {}
    found = [r for r in read_metrics(run_dir) if r.get("step") == step]
    return dict(found[-1]) if found else {}


def seconds_spent(run_dir: str | Path, step: int) -> float:
    """Seconds the run's steps up to ``step`` took, from ``metrics.jsonl`` (0 for a new run)."""
    if step < 1 or not (Path(run_dir) / METRICS_NAME).is_file():
        return 0.0
    kept: dict[int, float] = {}
    for r in read_metrics(run_dir):
        n = r.get("step")
        if isinstance(n, int) and 1 <= n <= step:
            kept[n] = float((r.get("seconds") or {}).get("total", 0.0))  # a step redone after a kill: its last record
    return sum(kept.values())


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class Timer:
    """Accumulates wall seconds per named phase: ``with timer("generation"): ...``.

    Attributes:
        seconds: Seconds per phase.
        started: When the timer was made (``time.perf_counter``): :meth:`totals` counts from there.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    def totals(self) -> dict[str, float]:
        """The seconds per phase, then ``total``: the seconds since the timer was made."""
        return {**self.seconds, "total": time.perf_counter() - self.started}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block under ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def progress_bar(total: int, initial: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar (a no-op object when disabled)."""
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std (0, 0 for no values)."""
    if not values:
        return 0.0, 0.0
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std())
