"""Optimizer, learning-rate schedule and optimizer step of the trainers."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from agents.trainers.config import TrainConfig


def make_optimizer(params: Sequence[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over ``params``.

    Not the fused kernel: it is faster per step, but resumed runs were then not bit-identical to
    uninterrupted ones.
    """
    return torch.optim.AdamW(list(params), lr=cfg.peak_learning_rate, weight_decay=cfg.weight_decay)


def load_optimizer_state(opt: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load an optimizer state dict, copying state tensors into freshly allocated memory.

    Tensors unpickled by ``torch.load`` may sit at other alignments than freshly allocated ones,
    which can change the vectorised arithmetic of fused kernels; fresh copies keep resumed runs
    bit-identical to uninterrupted ones.
    """
    opt.load_state_dict(dict(state))
    for st in opt.state.values():
        for k, v in list(st.items()):
            if isinstance(v, torch.Tensor):
                st[k] = v.clone()


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at optimizer step ``i`` (linear warmup, then the schedule).

    Args:
        schedule: ``constant``, ``linear`` (to 0 at ``total``) or ``cosine`` (to 0 at ``total``).
        warmup: Warmup steps.
        total: Total optimizer steps.
    """
    total = max(total, 1)

    def fn(i: int) -> float:
        if warmup and i < warmup:
            return (i + 1) / warmup
        if schedule == "constant":
            return 1.0
        frac = min(1.0, (i - warmup) / max(1, total - warmup))
        if schedule == "linear":
            return max(0.0, 1.0 - frac)
        return 0.5 * (1.0 + math.cos(math.pi * frac))

    return fn


def make_scheduler(
    opt: torch.optim.Optimizer, cfg: TrainConfig, total_optimizer_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following :func:`lr_lambda`."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_optimizer_steps)
    )


def gradient_norm(params: Sequence[torch.nn.Parameter], max_norm: float | None) -> float:
    """The global L2 norm of the gradients of ``params``, clipping them to ``max_norm`` first when it is set.

    Args:
        params: The parameters.
        max_norm: Clip the gradients to this global norm; None: leave them.

    Returns:
        The norm before clipping.
    """
    if max_norm is None:
        sq = sum(float(p.grad.detach().pow(2).sum()) for p in params if p.grad is not None)
        return float(sq**0.5)
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def optimizer_step(
    params: Sequence[torch.nn.Parameter],
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LambdaLR,
    max_grad_norm: float | None,
) -> None:
    """One optimizer step on the accumulated gradients, then the schedule's; the gradients are dropped.

    Args:
        params: The parameters whose gradients are clipped.
        opt: The optimizer.
        sched: Its learning-rate schedule.
        max_grad_norm: Clip the gradients to this global norm first; None: no clipping.
    """
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
