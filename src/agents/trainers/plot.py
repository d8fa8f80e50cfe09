"""Learning curves of a training run: ``searchenv plot RUN_DIR`` -> ``RUN_DIR/learning_curves.png``."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchenv.utils.files import publishable

#: (metric key, panel title) drawn when present, in order.
PANELS: tuple[tuple[str, str], ...] = (
    ("reward_mean", "reward (mean)"),
    ("em", "exact match"),
    ("searches", "searches / episode"),
    ("response_tokens", "policy tokens / episode"),
    ("loss", "SFT loss"),
    ("pg_loss", "policy loss"),
    ("kl", "KL to reference"),
    ("clip_fraction", "clip fraction"),
    ("entropy", "entropy (est.)"),
    ("vf_loss", "value loss"),
    ("zero_variance_groups", "zero-variance groups"),
)


def _get(rec: dict[str, Any], key: str) -> float | None:
    v = rec.get(key)
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _smooth(ys: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= window:
            acc -= ys[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _band(ax: Any, seeds: Sequence[Sequence[dict[str, Any]]], key: str, smooth: int, color: str, label: str) -> None:
    """The seeds' mean of ``key`` at each step, inside a band from their lowest to their highest value."""
    by_step: dict[int, list[float]] = {}
    for recs in seeds:
        pts = [(r["step"], v) for r in recs if (v := _get(r, key)) is not None]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        for x, y in zip(xs, _smooth(ys, smooth), strict=True):
            by_step.setdefault(int(x), []).append(y)
    if not by_step:
        return
    steps = sorted(by_step)
    ax.fill_between(steps, [min(by_step[x]) for x in steps], [max(by_step[x]) for x in steps], color=color,
                    alpha=0.2, linewidth=0)
    ax.plot(steps, [sum(by_step[x]) / len(by_step[x]) for x in steps], color=color, label=label)


def plot_runs(
    run_dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    labels: Sequence[str] | None = None,
    smooth: int = 1,
) -> Path:
    """Draw every available metric of one or more runs' ``metrics.jsonl`` into one PNG.

    Args:
        run_dirs: Run folders (each with ``metrics.jsonl``).
        out: PNG path (default: ``<first run>/learning_curves.png``).
        labels: Legend labels (default: folder names). Runs given the same label are seeds of one
            arm: drawn as one line (their mean at each step) inside a band from their lowest to
            their highest value.
        smooth: Moving-average window over steps (faint raw line drawn underneath when > 1; for a
            band, each seed is smoothed before the mean and the band are taken).

    Returns:
        The written PNG path.

    Raises:
        ValueError: If no run has any plottable metric, or ``smooth < 1``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agents.trainers.metrics import read_metrics

    if smooth < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    runs = [read_metrics(d) for d in run_dirs]
    names = list(labels) if labels is not None else [Path(d).name for d in run_dirs]
    if len(names) != len(runs):
        raise ValueError(f"{len(names)} labels for {len(runs)} runs")
    groups: dict[str, list[list[dict[str, Any]]]] = {}
    for recs, name in zip(runs, names, strict=True):
        groups.setdefault(name, []).append(recs)
    panels = [(k, t) for k, t in PANELS if any(_get(r, k) is not None for recs in runs for r in recs)]
    if not panels:
        raise ValueError(f"no plottable metrics in {[str(d) for d in run_dirs]}")
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    # one colour per arm in every panel: an arm that lacks a panel's metric (PPO's value loss, GRPO's
    # zero-variance groups) must not shift the others onto the next colour of that panel
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = [cycle[i % len(cycle)] for i in range(len(groups))]
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for (name, seeds), color in zip(groups.items(), colors, strict=True):
            if len(seeds) > 1:
                _band(ax, seeds, key, smooth, color, f"{name} ({len(seeds)} seeds)")
                continue
            pts = [(r["step"], v) for r in seeds[0] if (v := _get(r, key)) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            if smooth > 1:
                ax.plot(xs, ys, alpha=0.25, color=color)
                ax.plot(xs, _smooth(ys, smooth), color=color, label=name)
            else:
                ax.plot(xs, ys, color=color, label=name)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if len(groups) > 1 or len(runs) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    target = Path(out) if out is not None else Path(run_dirs[0]) / "learning_curves.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file, then a rename: a killed plot leaves the old figure or the new one, never half
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        publishable(tmp)
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
