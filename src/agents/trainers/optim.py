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


class Schedule:
    """Multiplier of the peak learning rate at optimizer step ``i`` (linear warmup, then the schedule).

    A callable object rather than a function, so that ``LambdaLR`` saves its fields in checkpoints:
    a :class:`TimeBudget` moves :attr:`total` to the steps that fit, and a resumed run keeps it.

    Attributes:
        schedule: ``constant``, ``linear`` (to 0 at ``total``) or ``cosine`` (to 0 at ``total``).
        warmup: Warmup steps.
        total: Total optimizer steps.
    """

    def __init__(self, schedule: str, warmup: int, total: int) -> None:
        self.schedule = schedule
        self.warmup = warmup
        self.total = max(int(total), 1)

    def __call__(self, i: int) -> float:
        """The multiplier at optimizer step ``i``."""
        if self.warmup and i < self.warmup:
            return (i + 1) / self.warmup
        if self.schedule == "constant":
            return 1.0
        frac = min(1.0, (i - self.warmup) / max(1, self.total - self.warmup))
        if self.schedule == "linear":
            return max(0.0, 1.0 - frac)
        return 0.5 * (1.0 + math.cos(math.pi * frac))


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """The :class:`Schedule` of ``schedule`` with ``warmup`` steps over ``total`` optimizer steps."""
    return Schedule(schedule, warmup, total)


def make_scheduler(
    opt: torch.optim.Optimizer, cfg: TrainConfig, total_optimizer_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following :func:`lr_lambda`."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_optimizer_steps)
    )


class TimeBudget:
    """Ends a run once ``max_minutes`` of its steps are spent, and fits the schedule to the steps that fit.

    After each step it estimates, from the mean seconds of the steps so far (those of an interrupted
    run included), how many steps fit in what is left, and moves the schedule's end there (never past
    the configured ``steps``), so a cosine or linear decay reaches 0 when the time does. A run with a
    budget is not bit-reproducible (its schedule follows the machine's speed); one without is.

    Args:
        minutes: The budget (None: no budget; only ``steps`` ends the run).
        planned_steps: The configured ``steps``.
        per_step: Optimizer steps per training step (RL: epochs x minibatches).
        spent: Seconds the run's earlier steps took (a resumed run), ``done`` of them.
        done: Steps already done.
    """

    def __init__(self, minutes: float | None, planned_steps: int, per_step: int = 1, spent: float = 0.0,
                 done: int = 0) -> None:
        self.seconds = None if minutes is None else 60.0 * float(minutes)
        self.planned = planned_steps
        self.per_step = per_step
        self.spent = spent
        self.done = done

    def ended(self, step: int, scheduler: torch.optim.lr_scheduler.LambdaLR) -> bool:
        """Whether a run resumed at ``step`` had already ended: its budget had moved the schedule's end there.

        A resumed run must not take steps its first process decided against (their learning rate is 0,
        yet each would cost a step's time and add a line of metrics).
        """
        if self.seconds is None or step == 0:
            return False
        return any(isinstance(fn, Schedule) and fn.total <= step * self.per_step for fn in scheduler.lr_lambdas)

    def after_step(self, step: int, seconds: float, scheduler: torch.optim.lr_scheduler.LambdaLR) -> bool:
        """Count a finished step; refit the schedule's end. Returns True when no further step fits."""
        if self.seconds is None:
            return False
        self.spent += seconds
        self.done = step
        mean = self.spent / max(self.done, 1)
        fits = step + int(max(0.0, self.seconds - self.spent) // max(mean, 1e-9))
        end = min(self.planned, max(step, fits))
        for fn in scheduler.lr_lambdas:
            if isinstance(fn, Schedule):
                fn.total = max(end * self.per_step, 1)
        return end <= step


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
