"""The bounds of a step's reward and the ``openenv.yaml`` manifest that declares them (no OpenEnv import).

OpenEnv's validator checks every reward a server sends against the range its manifest declares
(``validation.reward.range``), so the range must hold the worst step as well as the best: cost
and format terms make rewards negative. :func:`step_reward_range` bounds a weighted sum of terms
(every preset built from :class:`~searchenv.rewards.WeightedReward`: ``default``, ``search-r1``,
``frugal``, ``process``, ``shaped``, and ``{term: weight}`` dicts) term by term; a reward it cannot
bound (the published rewards, your own callable) needs its range given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from searchenv.protocols import ActionProtocol
from searchenv.rewards import TERM_BOUNDS, Reward, WeightedReward


def _term_bounds(name: str, params: Mapping[str, Any], protocol: ActionProtocol) -> tuple[float, float]:
    """The least and greatest value term ``name`` takes on one step (before its weight): the term's own bounds."""
    bounds = TERM_BOUNDS.get(name)
    if bounds is None:
        raise ValueError(f"no bounds known for reward term {name!r}: declare them in searchenv.rewards.TERM_BOUNDS")
    return bounds(protocol.max_queries, **params)


def step_reward_range(reward: Reward, protocol: ActionProtocol) -> tuple[float, float]:
    """Bounds ``(low, high)`` that hold every step's reward under ``reward`` and ``protocol``.

    Each term's weighted bounds are added: tight for the presets (``default``: -0.1 for a
    malformed turn, 1 for a right answer), sound for any weighted sum.

    Raises:
        ValueError: If ``reward`` is not a weighted sum of terms (give its range yourself).
    """
    if not isinstance(reward, WeightedReward):
        raise ValueError(f"cannot bound the steps of reward {type(reward).__name__}: declare its range "
                         "yourself (searchenv serve-openenv --reward-range LOW HIGH, or "
                         "SEARCHQA_REWARD_RANGE=LOW,HIGH for the packaged app)")
    low = high = 0.0
    for name, (weight, params) in reward.terms.items():
        a, b = _term_bounds(name, params, protocol)
        low += min(weight * a, weight * b)
        high += max(weight * a, weight * b)
    if high <= low:  # OpenEnv needs a strictly increasing range (e.g. a reward of outcome weight 0)
        high = low + 1.0
    return low, high


def episode_reward_range(step_range: tuple[float, float], max_turns: int) -> tuple[float, float]:
    """Bounds on an episode's return, the sum of one to ``max_turns`` step rewards in ``step_range``."""
    low, high = step_range
    return min(low, max_turns * low), max(high, max_turns * high)


def check_range(values: Any) -> tuple[float, float]:
    """``values`` as a declared reward range: two finite numbers, the first below the second.

    Raises:
        ValueError: Naming what is wrong.
    """
    if not isinstance(values, list | tuple) or len(values) != 2:
        raise ValueError(f"a reward range is two numbers LOW HIGH, got {values!r}")
    low, high = (float(v) for v in values)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"a reward range needs finite LOW < HIGH, got {low} {high}")
    return low, high


def manifest(
    reward_range: tuple[float, float],
    *,
    name: str = "searchqa",
    version: str = "0.1.0",
    tools: tuple[str, ...] = ("search", "answer"),
    task_counts: Mapping[str, int] | None = None,
    port: int = 8000,
    episode_timeout_s: float = 300.0,
    app: str = "server.app:app",
    mode: str = "training",
) -> str:
    """``openenv.yaml`` for the served environment, as text (JSON, which YAML reads as it is).

    Args:
        reward_range: The declared range of a step's reward (:func:`step_reward_range`).
        name: The environment's name.
        version: Its version.
        tools: The tools it serves (``declared_tools``).
        task_counts: Questions per split (``declared_task_count``).
        port: The port it is served on.
        episode_timeout_s: The declared episode timeout (the server's idle timeout).
        app: The ASGI app's import path (OpenEnv's package layout: ``server/app.py``).
        mode: The server's mode (:data:`searchenv.client_view.MODES`): ``training`` sends every step's reward,
            ``evaluation`` only the return at the end (``reward_range`` is then the return's).

    Returns:
        The manifest's text.
    """
    from searchenv.client_view import check_mode

    low, high = check_range(reward_range)
    check_mode(mode)
    doc = {
        "spec_version": 1,
        "name": name,
        "version": version,
        "type": "space",
        "runtime": "fastapi",
        "app": app,
        "port": port,
        "mode": mode,
        "validation": {
            "reward": {"range": [low, high], "oracle_tolerance": 0.0, "floor_margin": round((high - low) / 2, 6)},
            "resources": {"cpu": 1.0, "memory_mb": 2048, "disk_mb": 1024,
                          "episode_timeout_s": float(episode_timeout_s)},
            "capabilities": {
                "verifier": {"kind": "reward_channel"},
                "task_api": True,
                "declared_tools": list(tools),
                "declared_task_count": dict(task_counts or {}),
            },
            "network": {"mode": "no-network"},
            "types": {"tags": ["qa", "search", "tool-use"]},
        },
    }
    return json.dumps(doc, indent=2) + "\n"
