"""What the RL trainers (GRPO, PPO, MAPPO) share around their steps: opening a run, its questions, the update.

:func:`open_rl_run` checks the run folder, loads the policy, the questions and the retriever, builds
the frozen reference model (a KL term on full fine-tuning), the value head (PPO, MAPPO), the
optimizer, the schedule, the random generator and the data order, and restores them all from the
run's checkpoint on ``resume``. Each trainer's step then reads alike::

    for step, timer in run.steps():                      # the model in eval mode
        # 1. rollouts of run.questions(n)
        # 2. advantages
        # 3. optimise: stats = run.optimise(timer, batch, prepare=..., gradients=...)
        # 4. record: if run.end_step(last, ...): break
    return run.finish()

:meth:`RLRun.optimise` attaches the targets, calls the callbacks' ``on_batch`` and deals the
batch out to the step's optimizer steps (:func:`shuffled_minibatches`); :func:`reference_logprobs`
scores a batch under the reference policy for the KL term; :meth:`RLRun.step_record` builds a
step's metrics, and :class:`~agents.trainers.run.TrainRun` writes them, checkpoints and closes the run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from agents.devices import model_device
from agents.trainers.callbacks import Callbacks
from agents.trainers.checkpoints import start_run
from agents.trainers.config import RLConfig
from agents.trainers.data import task_examples
from agents.trainers.metrics import Timer
from agents.trainers.models import init_policy, pad_token_id, refresh_generation_copy, trainable_parameters
from agents.trainers.optim import make_optimizer, make_scheduler, optimizer_step
from agents.trainers.run import TrainRun, restored_state
from agents.trainers.samples import Padded, Sample, forward_logprobs

T = TypeVar("T")
S = TypeVar("S")


class ValueHead(torch.nn.Module):
    """A linear map from the policy's last hidden state to a scalar value (zero-initialised)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Values ``[B, L]`` from hidden states ``[B, L, H]``."""
        return self.linear(hidden).squeeze(-1)


def _hidden_size(model: Any) -> int:
    cfg = model.config if hasattr(model, "config") else model.get_base_model().config
    return int(cfg.hidden_size)


def shuffled_minibatches(items: Sequence[T], gen: np.random.Generator, epochs: int,
                         minibatches: int) -> Iterator[list[T]]:
    """A step's minibatches: ``epochs`` passes over ``items``, each in a fresh order split into ``minibatches``.

    Each pass draws one permutation from ``gen`` (when the pass begins, so a resumed run draws the
    same ones) and splits it into ``minibatches`` near-equal parts; empty parts are skipped.

    Args:
        items: What is trained on (samples, episodes).
        gen: The run's random generator.
        epochs: Passes over ``items``.
        minibatches: Parts per pass (one optimizer step each).

    Yields:
        The items of each minibatch, in the permuted order.
    """
    for _epoch in range(epochs):
        perm = gen.permutation(len(items))
        for idx in np.array_split(perm, minibatches):
            if len(idx):
                yield [items[i] for i in idx]


def reference_logprobs(model: Any, ref_model: Any, padded: Padded, cfg: RLConfig) -> torch.Tensor:
    """Log-probs ``[B, L]`` of ``padded``'s tokens under the frozen reference policy of the KL term.

    Args:
        model: The model being trained.
        ref_model: The frozen copy of the starting model (:attr:`RLRun.ref_model`); None with LoRA,
            whose reference is ``model`` with its adapters switched off.
        padded: The batch.
        cfg: The trainer's configuration (``temperature``, ``bf16``).

    Returns:
        The log-probs, on the model's device.
    """
    if ref_model is not None:
        return forward_logprobs(ref_model, padded, temperature=cfg.temperature, bf16=cfg.bf16).logprobs
    with model.disable_adapter():
        return forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16).logprobs


@dataclass(kw_only=True)
class RLRun(TrainRun):
    """An RL trainer's run (see :func:`open_rl_run`): a :class:`~agents.trainers.run.TrainRun` with questions.

    Attributes:
        examples: The training questions; ``retriever`` searches for them.
        pad_id: The tokenizer's padding id.
        ref_model: A frozen copy of the starting model for the KL term, or None.
        head: The value head (PPO, MAPPO), or None.
    """

    cfg: RLConfig
    examples: list[Any]
    retriever: Any
    pad_id: int
    ref_model: Any
    head: ValueHead | None

    @property
    def all_params(self) -> list[torch.nn.Parameter]:
        """The model's trainable parameters, then the value head's."""
        return [*self.params, *(self.head.parameters() if self.head is not None else ())]

    @property
    def value_head(self) -> ValueHead:
        """The value head.

        Raises:
            RuntimeError: If the run was opened without one.
        """
        if self.head is None:
            raise RuntimeError(f"the {self.kind} run was opened without a value head (no value learning rate)")
        return self.head

    def checkpoint_extra(self) -> dict[str, Any]:
        """The value head's state, in a run with one."""
        return {} if self.head is None else {"value_head": self.head.state_dict()}

    def steps(self) -> Iterator[tuple[int, Timer]]:
        """The steps still to do (:meth:`TrainRun.steps`), each begun with the model in eval mode (rollouts)."""
        for step, timer in super().steps():
            self.model.eval()
            yield step, timer

    def questions(self, n: int) -> list[Any]:
        """The next ``n`` training questions of :attr:`order`."""
        return [self.examples[i] for i in self.order.take(n)]

    def step_optimizer(self) -> None:
        """One optimizer step on :attr:`all_params` (gradients clipped to ``max_grad_norm``), then the schedule's."""
        optimizer_step(self.all_params, self.optimizer, self.scheduler, self.cfg.max_grad_norm)

    def minibatches(self, items: Sequence[T]) -> Iterator[list[T]]:
        """This step's minibatches of ``items``: :func:`shuffled_minibatches` with the run's generator and config."""
        return shuffled_minibatches(items, self.gen, self.cfg.epochs, self.cfg.minibatches)

    def optimise(self, timer: Timer, batch: Sequence[T], *, prepare: Callable[[Sequence[T]], None],
                 gradients: Callable[[list[T]], S]) -> list[S]:
        """A step's update, timed as ``training``: targets, the callbacks' ``on_batch``, then the minibatches.

        The model goes to train mode. Unless ``batch`` is empty: ``prepare(batch)`` attaches what
        the loss needs (old and reference log-probs, advantages), and each of the step's
        :meth:`minibatches` accumulates ``gradients(minibatch)`` and takes an optimizer step. The
        policy's generation copy then follows the weights.

        Returns:
            What ``gradients`` returned for each minibatch, in order (the update's statistics).
        """
        self.model.train()
        stats: list[S] = []
        with timer("training"):
            if batch:
                prepare(batch)
            self.callbacks.on_batch(self.step, batch)
            if batch:
                for mb in self.minibatches(batch):
                    stats.append(gradients(mb))
                    self.step_optimizer()
            refresh_generation_copy(self.policy)
        return stats

    def step_record(
        self,
        step: int,
        timer: Timer,
        metrics: Mapping[str, Any],
        update: Mapping[str, Any],
        *,
        episodes: int,
        infra: int,
        trained: Sequence[Sample],
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A step's metrics record for the samples' trainers (GRPO, PPO).

        Args:
            step: The step.
            timer: The step's timer (its phases and total go under ``seconds``).
            metrics: The rollouts' metrics.
            update: The update's metrics.
            episodes: Episodes rolled out.
            infra: Episodes the retriever failed in.
            trained: The samples trained on.
            extra: The trainer's own metrics, after ``trained_episodes``.

        Returns:
            ``step``, ``metrics``, ``update``, ``lr``, ``episodes``, ``infra_errors``,
            ``trained_episodes``, ``extra``, the token counts, ``train_tokens_per_s`` and ``seconds``.
        """
        train_s = timer.seconds.get("training", 0.0)
        tokens = sum(len(s.ids) for s in trained)
        return {
            "step": step,
            **metrics,
            **update,
            "lr": self.scheduler.get_last_lr()[0],
            "episodes": episodes,
            "infra_errors": infra,
            "trained_episodes": len(trained),
            **(extra or {}),
            "policy_tokens": sum(s.num_policy_tokens for s in trained),
            "sequence_tokens": tokens,
            "train_tokens_per_s": tokens * self.cfg.epochs / train_s if train_s > 0 else 0.0,
            "seconds": timer.totals(),
        }

    def summary(self) -> dict[str, Any]:
        """:meth:`TrainRun.summary`, and the value head in a run with one."""
        out = super().summary()
        if self.head is not None:
            out["value_head"] = self.head
        return out


def mean_stats(stats: Sequence[Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    """The mean of each of ``keys`` over an update's minibatch statistics (zeros when there were none)."""
    total = dict.fromkeys(keys, 0.0)
    for st in stats:
        for k in total:
            total[k] += st[k]
    return {k: v / max(len(stats), 1) for k, v in total.items()}


def open_rl_run(
    cfg: RLConfig,
    kind: str,
    *,
    policy: Any = None,
    retriever: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    value_learning_rate: float | None = None,
    callbacks: Callbacks | None = None,
    stop_after: int | None = None,
) -> RLRun:
    """Open an RL trainer's run: check its folder, load what it trains, and restore a checkpoint on ``resume``.

    Then the callbacks' ``on_train_begin``.

    Args:
        cfg: The trainer's configuration.
        kind: The trainer's name in its checkpoints.
        policy: A ready policy (default: load ``cfg.model``, then ``cfg.init_from``).
        retriever: Retriever (default: ``cfg.retriever`` over the task corpus).
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist.
        overwrite: Replace a run already in ``cfg.output_dir``.
        value_learning_rate: Train a value head beside the policy at this learning rate (no weight decay);
            None: no value head.
        callbacks: The trainer's callbacks (:func:`~agents.trainers.callbacks.trainer_callbacks`).
        stop_after: Stop (after checkpointing) once this many steps are done.

    Returns:
        The run, at step ``start``.

    Raises:
        FileExistsError: If the run folder holds a run and neither ``resume`` nor ``overwrite`` is set.
        FileNotFoundError: If ``resume`` is set and there is no checkpoint.
        CheckpointError: If a checkpoint to resume from (or ``init_from``) is damaged, unsafe or does not fit.
    """
    run_dir = start_run(cfg, resume=resume, overwrite=overwrite)
    policy = init_policy(cfg, policy, cfg.init_from)
    model = policy.model
    examples, retr = task_examples(cfg, retriever)
    pad_id = pad_token_id(policy)
    head = ValueHead(_hidden_size(model)).to(model_device(model)) if value_learning_rate is not None else None
    ref_model = None
    if cfg.kl_coef > 0 and not cfg.lora:
        ref_model = copy.deepcopy(model).eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
    params = trainable_parameters(model)
    if head is None:
        opt = make_optimizer(params, cfg)
    else:
        groups: list[dict[str, Any]] = [
            {"params": params, "lr": cfg.peak_learning_rate, "weight_decay": cfg.weight_decay},
            {"params": list(head.parameters()), "lr": value_learning_rate, "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups)
    sched = make_scheduler(opt, cfg, cfg.steps * cfg.epochs * cfg.minibatches)
    state = restored_state(cfg, kind, run_dir, model=model, optimizer=opt, scheduler=sched, items=len(examples),
                           resume=resume, per_step=cfg.epochs * cfg.minibatches,
                           extra=None if head is None else {"value_head": head})
    run = RLRun(cfg=cfg, kind=kind, run_dir=run_dir, policy=policy, model=model, examples=examples, retriever=retr,
                pad_id=pad_id, ref_model=ref_model, params=params, head=head, optimizer=opt, scheduler=sched,
                callbacks=callbacks if callbacks is not None else Callbacks(), stop_after=stop_after, **state)
    run.callbacks.on_train_begin(kind, policy)
    return run
