"""Advantage estimators: group-relative advantages (GRPO) and generalised advantage estimation.

Pure functions over NumPy arrays, written once and unit-tested against hand-computed numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SCALINGS = ("group", "batch", "none")


@dataclass(frozen=True)
class GroupAdvantages:
    """Result of :func:`group_advantages`.

    Attributes:
        advantages: One advantage per sample, in input order.
        group_mean: Per-sample mean reward of its group.
        group_std: Per-sample standard deviation of its group's rewards (population std).
        zero_variance_groups: Number of groups whose rewards were all equal (their advantages are 0,
            so they carry no policy-gradient signal).
        num_groups: Number of groups.
    """

    advantages: np.ndarray
    group_mean: np.ndarray
    group_std: np.ndarray
    zero_variance_groups: int
    num_groups: int


def group_advantages(
    rewards: Sequence[float] | np.ndarray,
    group_ids: Sequence[int] | np.ndarray,
    scale: str = "group",
    eps: float = 1e-6,
) -> GroupAdvantages:
    """Group-relative advantages: ``(r - mean(group)) / std``.

    Samples that answer the same question form a group (GRPO, Shao et al. 2024). The mean is
    always the group's; the divisor depends on ``scale``:

    - ``"group"``: the group's standard deviation (GRPO),
    - ``"batch"``: the standard deviation of all rewards in the batch,
    - ``"none"``: no division (Dr. GRPO, Liu et al. 2025: avoids up-weighting easy/hard groups).

    Standard deviations are population (``ddof=0``); ``eps`` is added to the divisor.

    Args:
        rewards: One scalar reward per sample.
        group_ids: The group of each sample (any integers; groups may have different sizes).
        scale: ``"group"``, ``"batch"`` or ``"none"``.
        eps: Added to the divisor.

    Returns:
        The advantages and per-group statistics.

    Raises:
        ValueError: For mismatched lengths, non-finite rewards, an unknown ``scale`` or ``eps < 0``.
    """
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(group_ids)
    if r.ndim != 1 or g.shape != r.shape:
        raise ValueError(f"rewards and group_ids must be 1-D of equal length, got {r.shape} and {g.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    if scale not in SCALINGS:
        raise ValueError(f"scale must be one of {SCALINGS}, got {scale!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    mean = np.zeros_like(r)
    std = np.zeros_like(r)
    zero_var = 0
    uniq = np.unique(g)
    for gid in uniq:
        idx = g == gid
        mean[idx] = r[idx].mean()
        std[idx] = r[idx].std()
        if np.all(r[idx] == r[idx][0]):
            zero_var += 1
    centred = r - mean
    if scale == "group":
        adv = centred / (std + eps)
    elif scale == "batch":
        adv = centred / ((r.std() if r.size else 0.0) + eps)
    else:
        adv = centred
    return GroupAdvantages(adv, mean, std, zero_var, int(uniq.size))


def gae(
    rewards: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    gamma: float = 1.0,
    lam: float = 1.0,
    last_value: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over one trajectory (Schulman et al. 2016).

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = last_value``;
    ``A_t = delta_t + gamma * lam * A_{t+1}``; returns ``R_t = A_t + V_t``.

    For a language policy, ``t`` runs over the policy's own tokens only (environment tokens are
    not actions); a reward sits on the token that earned it (the outcome on the final token, a
    turn's process reward on that turn's last token) and is 0 elsewhere.

    Args:
        rewards: Reward at each step, shape ``[T]``.
        values: Value estimate at each step, shape ``[T]``.
        gamma: Discount in [0, 1].
        lam: GAE lambda in [0, 1].
        last_value: Value after the last step (0 for a finished episode).

    Returns:
        ``(advantages, returns)``, each of shape ``[T]``.

    Raises:
        ValueError: For mismatched shapes or ``gamma``/``lam`` outside [0, 1].
    """
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if r.ndim != 1 or v.shape != r.shape:
        raise ValueError(f"rewards and values must be 1-D of equal length, got {r.shape} and {v.shape}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    adv = np.zeros_like(r)
    next_value = float(last_value)
    running = 0.0
    for t in range(r.size - 1, -1, -1):
        delta = r[t] + gamma * next_value - v[t]
        running = delta + gamma * lam * running
        adv[t] = running
        next_value = v[t]
    return adv, adv + v


def discounted_returns(rewards: Sequence[float] | np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """Reward-to-go ``G_t = sum_k gamma^k r_{t+k}`` for one trajectory.

    Args:
        rewards: Reward at each step.
        gamma: Discount in [0, 1].

    Returns:
        The returns, same shape as ``rewards``.

    Raises:
        ValueError: For ``gamma`` outside [0, 1] or non 1-D rewards.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D, got shape {r.shape}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out = np.zeros_like(r)
    running = 0.0
    for t in range(r.size - 1, -1, -1):
        running = r[t] + gamma * running
        out[t] = running
    return out


def role_advantages(
    shared: Sequence[float] | np.ndarray,
    penalties: Sequence[Sequence[float]] | np.ndarray,
    values: Sequence[Sequence[float]] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """MAPPO's per-role advantages for episodes in which each role acts once (MMOA-RAG).

    Role ``r`` of episode ``e`` earns ``R[e, r] = shared[e] + penalties[e, r]``: the team's shared
    reward plus its own penalties (gamma = 1, one decision per role, so the return is the reward).
    Its advantage is ``A[e, r] = R[e, r] - values[e, r]``, with ``values`` the centralised critic's
    estimate at that role's turn. A change of the shared reward moves every role's advantage by
    the same amount; a penalty moves only its own role's.

    Args:
        shared: The shared reward per episode, shape ``[E]``.
        penalties: Each role's penalties per episode, shape ``[E, R]``.
        values: The critic's value at each role's turn, shape ``[E, R]``.

    Returns:
        ``(advantages, returns)``, each of shape ``[E, R]``.

    Raises:
        ValueError: For mismatched shapes or non-finite numbers.
    """
    s = np.asarray(shared, dtype=np.float64)
    p = np.asarray(penalties, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if s.ndim != 1 or p.ndim != 2 or p.shape[0] != s.shape[0] or v.shape != p.shape:
        raise ValueError(f"shared must be [E], penalties and values [E, R]; got {s.shape}, {p.shape}, {v.shape}")
    for name, a in (("shared", s), ("penalties", p), ("values", v)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite, got {a.tolist()}")
    returns = s[:, None] + p
    return returns - v, returns
