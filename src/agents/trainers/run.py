"""What every trainer (SFT, GRPO, PPO, MAPPO) does around its steps: the run's state, its steps, their record.

A trainer opens its run (its folder, the policy, the optimizer and the schedule; on ``resume`` the
checkpoint's state: :func:`restored_state`), then loops::

    for step, timer in run.steps():
        ...                                   # the algorithm's phases
        if run.end_step(last, postfix, printed):
            break
    return run.finish()

:meth:`TrainRun.end_step` writes the step's metrics, calls the callbacks' ``on_step_end``
(:mod:`agents.trainers.callbacks`), checkpoints on the schedule and decides whether the run stops
there (``steps`` done, ``stop_after``, the time budget); :meth:`TrainRun.finish` closes the run
with the trainer's summary. The RL trainers' run (:class:`~agents.trainers.rl_run.RLRun`) adds
the questions, the rollouts' retriever and the update.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.trainers.callbacks import Callbacks
from agents.trainers.checkpoints import restore_training_state, save_training_state
from agents.trainers.config import TrainConfig
from agents.trainers.data import DataOrder
from agents.trainers.metrics import MetricsLog, Timer, last_record, progress_bar, seconds_spent
from agents.trainers.optim import TimeBudget


@dataclass(kw_only=True)
class TrainRun:
    """A trainer's run: what it trains, with what, and where it writes.

    Attributes:
        cfg: The trainer's configuration.
        kind: The trainer's name in its checkpoints (``sft``, ``grpo``, ``ppo``, ``mappo``, ...).
        run_dir: The run folder.
        policy: The policy being trained; ``model`` is its model.
        params: The model's trainable parameters.
        optimizer: The optimizer; ``scheduler`` its learning-rate schedule.
        gen: The run's random generator (minibatch order).
        order: The order the training items (questions, demonstrations) are taken in.
        start: The last step already done (0, or the checkpoint's step on resume).
        log: The metrics file.
        bar: The progress bar.
        budget: The time budget (``max_minutes``).
        last: The last step's metrics (a run resumed at its end reports its final step's).
        callbacks: What the run tells of its progress.
        stop_after: Stop (after checkpointing) once this many steps are done; None: at ``cfg.steps``.
        on_checkpoint: Called after each checkpoint is written (more state to save with it).
        step: The step :meth:`steps` is at (``start`` before it begins).
    """

    cfg: TrainConfig
    kind: str
    run_dir: Path
    policy: Any
    model: Any
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    gen: np.random.Generator
    order: DataOrder
    start: int
    log: MetricsLog
    bar: Any
    budget: TimeBudget
    last: dict[str, Any] = field(default_factory=dict)
    callbacks: Callbacks = field(default_factory=Callbacks)
    stop_after: int | None = None
    on_checkpoint: Callable[[], None] | None = None
    step: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        """Start :attr:`step` at ``start``."""
        self.step = self.start

    def checkpoint_extra(self) -> dict[str, Any]:
        """More state dicts for the checkpoint (a subclass's; none here)."""
        return {}

    def checkpoint(self, step: int) -> None:
        """Write the run's state after ``step`` (model, optimizer, schedule, generator, data order, and more)."""
        save_training_state(self.run_dir, self.kind, step, model=self.model, cfg=self.cfg, optimizer=self.optimizer,
                            scheduler=self.scheduler, gen=self.gen, cursor=self.order.cursor,
                            **self.checkpoint_extra())
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def steps(self) -> Iterator[tuple[int, Timer]]:
        """The steps still to do, ``start + 1`` to ``cfg.steps``, each with a fresh timer.

        Each is recorded in :attr:`step` as it begins. None when the run was resumed after its time
        budget had ended it.
        """
        if self.budget.ended(self.start, self.scheduler):
            return
        for step in range(self.start + 1, self.cfg.steps + 1):
            self.step = step
            yield step, Timer()

    def record(self, last: dict[str, Any], postfix: Mapping[str, str], printed: Sequence[str]) -> None:
        """Write a step's metrics, advance the bar (showing ``postfix``), print ``printed`` every ``log_every``.

        Then the callbacks' ``on_step_end``.
        """
        self.last = last
        self.log.write(last)
        self.bar.update(1)
        self.bar.set_postfix(**postfix)
        step = int(last["step"])
        if self.cfg.log_every and step % self.cfg.log_every == 0 and not self.cfg.progress:
            print(json.dumps({k: last[k] for k in printed}), flush=True)
        self.callbacks.on_step_end(step, last)

    def save_or_stop(self, step: int, stop: bool) -> bool:
        """Checkpoint on the schedule (every ``save_every`` steps and at the last), and when the run stops here.

        The run stops at ``step`` when ``stop``, at ``stop_after``, or when ``max_minutes`` is spent
        (:class:`~agents.trainers.optim.TimeBudget`, which also fits the schedule to the steps left).

        Returns:
            Whether the caller's loop ends here.
        """
        cfg = self.cfg
        seconds = float((self.last.get("seconds") or {}).get("total", 0.0))
        stop = stop or (self.stop_after is not None and step >= self.stop_after)
        stop = self.budget.after_step(step, seconds, self.scheduler) or stop
        scheduled = bool(cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps
        if scheduled or stop:
            self.checkpoint(step)
        return stop

    def end_step(self, last: dict[str, Any], postfix: Mapping[str, str], printed: Sequence[str], *,
                 stop: bool = False) -> bool:
        """End a step: :meth:`record` its metrics, then :meth:`save_or_stop` (``stop``: the trainer's own reason).

        Returns:
            Whether the caller's loop ends here.
        """
        self.record(last, postfix, printed)
        return self.save_or_stop(int(last["step"]), stop)

    def summary(self) -> dict[str, Any]:
        """The trainer's summary: ``step`` (the last one begun), ``last`` (its metrics), ``run_dir``, ``policy``."""
        return {"step": self.step, "last": self.last, "run_dir": str(self.run_dir), "policy": self.policy}

    def finish(self) -> dict[str, Any]:
        """Close the progress bar, call the callbacks' ``on_train_end`` with the summary, and return it."""
        self.bar.close()
        out = self.summary()
        self.callbacks.on_train_end(out)
        return out


def restored_state(
    cfg: TrainConfig,
    kind: str,
    run_dir: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    items: int,
    resume: bool,
    per_step: int = 1,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's generator, data order, start, metrics log, time budget, bar and last record (:class:`TrainRun` fields).

    On ``resume`` the model, optimizer, schedule, generator, order and ``extra`` (state-dict owners)
    come back from the checkpoint in ``run_dir``.

    Args:
        cfg: The trainer's configuration.
        kind: The trainer's name in its checkpoints.
        run_dir: The run folder.
        model: The model; ``optimizer`` and ``scheduler`` train it.
        optimizer: The optimizer.
        scheduler: The schedule.
        items: How many training items the data order deals out.
        resume: Restore the checkpoint.
        per_step: Optimizer steps per training step (the time budget fits the schedule with it).
        extra: More state to restore (name -> module).

    Raises:
        FileNotFoundError, CheckpointError: As :func:`~agents.trainers.checkpoints.restore_training_state`.
    """
    gen = np.random.default_rng(cfg.seed)
    order = DataOrder(items, cfg.seed)
    start = 0
    if resume:
        start, _ = restore_training_state(run_dir, kind=kind, cfg=cfg, model=model, optimizer=optimizer,
                                          scheduler=scheduler, gen=gen, order=order, extra=extra)
    log = MetricsLog(run_dir, start)  # drops a line torn by a kill before the budget reads the steps' seconds
    spent = seconds_spent(run_dir, start) if cfg.max_minutes else 0.0
    return {"gen": gen, "order": order, "start": start, "log": log,
            "bar": progress_bar(cfg.steps, start, cfg.progress, kind), "last": last_record(run_dir, start),
            "budget": TimeBudget(cfg.max_minutes, cfg.steps, per_step, spent=spent, done=start)}
