"""The common core of episode-metric aggregation: means of per-episode numbers.

Three aggregations share it and differ on purpose:

- :func:`agents.evaluation.evaluate.summarize` (one row of the ``eval`` table) reads an empty
  column as 0.0;
- :func:`agents.evaluation.bench.set_metrics` (one set of a bench card) reads it as None (a set
  whose episodes all failed has no score, not a score of 0), and adds judge and token columns;
- :func:`agents.trainers.episodes.step_metrics` (one training step) works on training samples,
  not finished transcripts, and reports means with standard deviations through
  :func:`agents.trainers.metrics.stats` (numpy's summation: published training curves used it).

:func:`searchenv.metrics.episode_metrics` flattens ONE episode's final info for an engine's logger;
the three above aggregate many.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (``sum / len``, in input order); 0.0 for no values."""
    return float(sum(values) / len(values)) if values else 0.0


def mean_or_none(values: Sequence[float]) -> float | None:
    """The arithmetic mean as :func:`mean`; None for no values."""
    return mean(values) if values else None


def metric_means(metrics: Sequence[Mapping[str, Any]], keys: Iterable[str]) -> dict[str, float]:
    """Per key, the mean of ``float(m[key])`` over the episodes' metric dicts (0.0 for none)."""
    return {k: mean([float(m[k]) for m in metrics]) for k in keys}


def share(metrics: Sequence[Mapping[str, Any]], key: str) -> float:
    """The share of episodes whose ``key`` is truthy (e.g. ``answered``); 0.0 for none."""
    return mean([float(bool(m[key])) for m in metrics])
