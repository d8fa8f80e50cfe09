"""Statistics over training seeds, and the verdict rule of ``benchmarks/claims.py``.

The estimators are those of rliable (Agarwal et al., "Deep RL at the edge of the statistical
precipice", 2021): the interquartile mean (IQM) of the runs' scores, its 95% percentile interval
from a stratified bootstrap over runs (runs are resampled with replacement within each task; a
claim here measures one task, so that is a bootstrap over seeds), and the probability of
improvement P(X > Y) (ties count a half) with the same bootstrap. They are written out here
because the ``rliable`` package does not import on this project's stack: rliable 1.2 requires
``arch<8``, arch 7 fails at import under pandas 3 (``deprecate_kwarg``), and arch 8 refuses
rliable's ``random_state=None``. ``tests/test_claims.py`` checks each against hand-computed values.

The verdict rule was fixed before any claim's runs had finished (2026-11-29) and is the same for
every claim: see :func:`verdict`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: Bootstrap resamples (seeded: the same interval every time).
REPS = 5000
#: z for a two-sided 95% interval, and for 80% power: the seeds-needed estimate.
Z_95, Z_POWER = 1.959964, 0.841621


def iqm(scores: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle half (``scipy.stats.trim_mean(x, 0.25)``, as rliable)."""
    from scipy.stats import trim_mean

    return float(trim_mean(list(scores), 0.25))


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) over every pair of runs, ties counting a half (the Mann-Whitney U statistic over n*m)."""
    if not x or not y:
        raise ValueError("probability_of_improvement needs at least one run on each side")
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    return wins / (len(x) * len(y))


def _interval(values: Any) -> tuple[float, float]:
    import numpy as np

    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def iqm_interval(scores: Sequence[float], reps: int = REPS, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the IQM from a bootstrap over runs."""
    import numpy as np
    from scipy.stats import trim_mean

    s = np.asarray(scores, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = s[rng.integers(0, len(s), size=(reps, len(s)))]
    return _interval(trim_mean(draws, 0.25, axis=1))


def improvement_interval(x: Sequence[float], y: Sequence[float], reps: int = REPS,
                         seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of P(X > Y), each side's runs resampled on their own."""
    import numpy as np

    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, len(a), size=(reps, len(a)))]
    rb = b[rng.integers(0, len(b), size=(reps, len(b)))]
    gt = (ra[:, :, None] > rb[:, None, :]).mean(axis=(1, 2))
    eq = (ra[:, :, None] == rb[:, None, :]).mean(axis=(1, 2))
    return _interval(gt + 0.5 * eq)


def mean_difference_interval(x: Sequence[float], y: Sequence[float], reps: int = REPS,
                             seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of mean(X) - mean(Y), each side's runs resampled on their own."""
    import numpy as np

    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), size=(reps, len(a)))].mean(axis=1)
    db = b[rng.integers(0, len(b), size=(reps, len(b)))].mean(axis=1)
    return _interval(da - db)


def _var(v: Sequence[float]) -> float:
    """Sample variance (0 for a single run)."""
    m = sum(v) / len(v)
    return sum((t - m) ** 2 for t in v) / (len(v) - 1) if len(v) > 1 else 0.0


def seeds_needed(x: Sequence[float], y: Sequence[float]) -> int | None:
    """Seeds per arm a two-sided 5% test would need for 80% power at the observed difference and spread.

    ``n = 2 (z_0.975 + z_0.8)^2 s^2 / d^2`` with ``s^2`` the two arms' mean sample variance and ``d``
    the difference of their means. None when the means are equal (no difference to detect).
    """
    d = sum(x) / len(x) - sum(y) / len(y)
    if d == 0:
        return None
    s2 = (_var(x) + _var(y)) / 2
    return max(2, math.ceil(2 * (Z_95 + Z_POWER) ** 2 * s2 / d**2))


def verdict(direction: str, seeds_a: Sequence[float], seeds_b: Sequence[float], questions: dict[str, float],
            margin: float = 0.05) -> dict[str, Any]:
    """Held, refuted or unresolved: the claim that arm A's metric is higher, lower, or equal to arm B's.

    Args:
        direction: ``higher`` or ``lower`` (A's metric above, or below, B's), or ``equal`` (within
            ``margin`` of B's).
        seeds_a: A's final score of each seed.
        seeds_b: B's, one per seed.
        questions: The paired difference A - B over the held-out questions (each question's score
            averaged over the seeds first): ``mean``, ``ci_low``, ``ci_high``.
        margin: For ``equal``: the largest difference that still counts as equal.

    Returns:
        ``verdict`` (``held``, ``refuted``, ``unresolved``), ``reason``, and for an unresolved one
        ``seeds_needed`` (per arm, at the observed difference and spread; None when the seed means
        are equal).

    The rule: ``higher`` (``lower`` mirrors it) is held when both intervals exclude no difference in
    the claimed direction (the probability of improvement over seeds above 0.5, the paired interval
    over questions above 0), refuted when both exclude it in the opposite direction, unresolved
    otherwise. ``equal`` is held when the interval of the mean difference over seeds and the paired
    interval over questions both lie within the margin, refuted when both lie beyond it on one side.
    """
    if direction not in ("higher", "lower", "equal"):
        raise ValueError(f"direction must be higher, lower or equal, got {direction!r}")
    lo, hi = questions["ci_low"], questions["ci_high"]
    out: dict[str, Any]
    if direction == "equal":
        s_lo, s_hi = mean_difference_interval(seeds_a, seeds_b)
        if -margin <= min(lo, s_lo) and max(hi, s_hi) <= margin:
            out = {"verdict": "held", "reason": f"both intervals within +-{margin}"}
        elif (lo > margin and s_lo > margin) or (hi < -margin and s_hi < -margin):
            out = {"verdict": "refuted", "reason": f"both intervals beyond +-{margin} on one side"}
        else:
            out = {"verdict": "unresolved", "reason": f"an interval reaches past +-{margin}"}
        out["seed_interval"] = [s_lo, s_hi]
    else:
        sign = 1.0 if direction == "higher" else -1.0
        p_lo, p_hi = improvement_interval([sign * v for v in seeds_a], [sign * v for v in seeds_b])
        q_lo, q_hi = sorted((sign * lo, sign * hi))
        if p_lo > 0.5 and q_lo > 0:
            out = {"verdict": "held", "reason": "P(improvement) interval above 0.5 and paired interval past 0"}
        elif p_hi < 0.5 and q_hi < 0:
            out = {"verdict": "refuted", "reason": "both intervals on the opposite side"}
        else:
            out = {"verdict": "unresolved", "reason": "an interval includes no difference"}
        out["improvement_interval"] = [p_lo, p_hi]
    if out["verdict"] == "unresolved":
        out["seeds_needed"] = (seeds_needed(seeds_a, seeds_b) if direction != "equal"
                               else seeds_within(seeds_a, seeds_b, margin))
    return out


def seeds_within(x: Sequence[float], y: Sequence[float], margin: float) -> int | None:
    """Seeds per arm for the 95% interval of the mean difference to fit inside ``+-margin`` at the observed spread.

    ``n = 2 z_0.975^2 s^2 / (margin - |d|)^2``; None when the observed difference ``|d|`` is already
    at or past the margin (more seeds would not bring it inside).
    """
    d = abs(sum(x) / len(x) - sum(y) / len(y))
    if d >= margin:
        return None
    return max(2, math.ceil(2 * Z_95**2 * (_var(x) + _var(y)) / 2 / (margin - d) ** 2))
