"""The trainers' one extension point: a callback that every trainer (SFT, GRPO, PPO, MAPPO) calls alike.

Each trainer calls, in this order::

    on_train_begin(kind, policy)          once, after the run is set up (and restored on resume)
    on_batch(step, batch)                 each step, once what it trains on carries its targets, before the update
    on_step_end(step, metrics)            each step, after its metrics are written (before any checkpoint)
    on_train_end(summary)                 once, with the summary the trainer returns

``batch`` is what the step trains on: the demonstrations' samples (SFT), the trained samples with
their ``advantage`` (GRPO) or per-token ``advantages`` and ``returns`` (PPO), the
team episodes (MAPPO, :class:`~agents.trainers.mappo.TeamEpisode`); it may be empty (every episode dropped).
Subclass :class:`TrainerCallback` and override the hooks you need; :class:`LambdaCallback`
turns plain functions into one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class TrainerCallback:
    """A trainer's callback: every hook does nothing until a subclass overrides it."""

    def on_train_begin(self, kind: str, policy: Any) -> None:
        """The run is set up: ``kind`` is the trainer's name in checkpoints, ``policy`` what it trains."""

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        """Step ``step`` is about to train on ``batch`` (see the module docstring)."""

    def on_step_end(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Step ``step`` is done; ``metrics`` is its record in ``metrics.jsonl``."""

    def on_train_end(self, summary: Mapping[str, Any]) -> None:
        """The run is over; ``summary`` is what the trainer returns."""


class LambdaCallback(TrainerCallback):
    """A callback made of plain functions, one per hook (those not given do nothing)."""

    def __init__(
        self,
        *,
        on_train_begin: Callable[[str, Any], None] | None = None,
        on_batch: Callable[[int, Sequence[Any]], None] | None = None,
        on_step_end: Callable[[int, Mapping[str, Any]], None] | None = None,
        on_train_end: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self._begin, self._batch, self._step_end, self._end = on_train_begin, on_batch, on_step_end, on_train_end

    def on_train_begin(self, kind: str, policy: Any) -> None:
        """Call ``on_train_begin`` if given."""
        if self._begin is not None:
            self._begin(kind, policy)

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        """Call ``on_batch`` if given."""
        if self._batch is not None:
            self._batch(step, batch)

    def on_step_end(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Call ``on_step_end`` if given."""
        if self._step_end is not None:
            self._step_end(step, metrics)

    def on_train_end(self, summary: Mapping[str, Any]) -> None:
        """Call ``on_train_end`` if given."""
        if self._end is not None:
            self._end(summary)


class Callbacks(TrainerCallback):
    """Several callbacks called in the order given (what a trainer holds)."""

    def __init__(self, callbacks: Sequence[TrainerCallback] = ()) -> None:
        self.callbacks = list(callbacks)
        bad = [c for c in self.callbacks if not isinstance(c, TrainerCallback)]
        if bad:
            raise TypeError(f"callbacks must be TrainerCallback instances, got {bad[0]!r}")

    def on_train_begin(self, kind: str, policy: Any) -> None:
        """Call each callback's ``on_train_begin``."""
        for c in self.callbacks:
            c.on_train_begin(kind, policy)

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        """Call each callback's ``on_batch``."""
        for c in self.callbacks:
            c.on_batch(step, batch)

    def on_step_end(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Call each callback's ``on_step_end``."""
        for c in self.callbacks:
            c.on_step_end(step, metrics)

    def on_train_end(self, summary: Mapping[str, Any]) -> None:
        """Call each callback's ``on_train_end``."""
        for c in self.callbacks:
            c.on_train_end(summary)


class _StepHook(TrainerCallback):
    """GRPO's former ``on_step(step, trained samples, metrics, policy)``, after each step."""

    def __init__(self, fn: Callable[[int, list[Any], dict[str, Any], Any], None]) -> None:
        self.fn = fn
        self.policy: Any = None
        self.batch: list[Any] = []

    def on_train_begin(self, kind: str, policy: Any) -> None:
        self.policy = policy

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        self.batch = list(batch)

    def on_step_end(self, step: int, metrics: Mapping[str, Any]) -> None:
        self.fn(step, self.batch, dict(metrics), self.policy)


class _EpisodesHook(TrainerCallback):
    """MAPPO's former ``on_episodes(step, episodes)``, on each step's non-empty batch."""

    def __init__(self, fn: Callable[[int, list[Any]], None]) -> None:
        self.fn = fn

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        if batch:
            self.fn(step, list(batch))


def trainer_callbacks(
    callbacks: Sequence[TrainerCallback],
    *,
    trainer: str,
    on_step: Callable[[int, list[Any], dict[str, Any], Any], None] | None = None,
    on_episodes: Callable[[int, list[Any]], None] | None = None,
) -> Callbacks:
    """A trainer's callbacks: ``callbacks``, then a deprecated hook it was given (warned about).

    Args:
        callbacks: The callbacks.
        trainer: The trainer's function, named in the warning.
        on_step: GRPO's former hook (deprecated: a callback's ``on_batch`` and ``on_step_end``).
        on_episodes: MAPPO's former hook (deprecated: a callback's ``on_batch``).
    """
    out = Callbacks(callbacks)
    hooks: list[tuple[str, TrainerCallback]] = []
    if on_step is not None:
        hooks.append(("on_step", _StepHook(on_step)))
    if on_episodes is not None:
        hooks.append(("on_episodes", _EpisodesHook(on_episodes)))
    for name, hook in hooks:
        warnings.warn(f"{trainer}({name}=...) is deprecated and goes in a later release; pass "
                      "callbacks=[...] (agents.trainers.callbacks.TrainerCallback) instead",
                      DeprecationWarning, stacklevel=3)
        out.callbacks.append(hook)
    return out
