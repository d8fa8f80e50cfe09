"""What the RL trainers (GRPO, PPO, MAPPO) share around their steps: opening a run, its minibatches, closing a step.

:func:`open_rl_run` checks the run folder, loads the policy, the questions and the retriever, builds
the frozen reference model (a KL term on full fine-tuning), the value head (PPO, MAPPO), the
optimizer, the schedule, the random generator and the data order, and restores them all from the
run's checkpoint on ``resume``. :func:`shuffled_minibatches` (:meth:`RLRun.minibatches`) deals a
step's episodes out to its optimizer steps, and :func:`reference_logprobs` scores them under the
reference policy for the KL term. :meth:`RLRun.step_record` builds a step's metrics,
:meth:`RLRun.record` writes them, :meth:`RLRun.save_or_stop` checkpoints on the schedule and when
the run stops early, and :meth:`RLRun.finish` closes the run with the trainer's summary.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from agents.devices import model_device
from agents.trainers.checkpoints import restore_training_state, save_training_state, start_run
from agents.trainers.config import RLConfig
from agents.trainers.data import DataOrder, task_examples
from agents.trainers.metrics import MetricsLog, Timer, last_record, progress_bar, seconds_spent
from agents.trainers.models import init_policy, pad_token_id, trainable_parameters
from agents.trainers.optim import TimeBudget, make_optimizer, make_scheduler, optimizer_step
from agents.trainers.samples import Padded, Sample, forward_logprobs

T = TypeVar("T")


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


@dataclass
class RLRun:
    """An RL trainer's run: what it trains, with what, and where it writes (see :func:`open_rl_run`).

    Attributes:
        cfg: The trainer's configuration.
        kind: The trainer's name in its checkpoints (``grpo``, ``ppo``, ``mappo``).
        run_dir: The run folder.
        policy: The policy being trained; ``model`` is its model.
        examples: The training questions; ``retriever`` searches for them.
        pad_id: The tokenizer's padding id.
        ref_model: A frozen copy of the starting model for the KL term, or None.
        params: The model's trainable parameters.
        head: The value head (PPO, MAPPO), or None.
        optimizer: AdamW over ``params`` (and the head, at its own learning rate).
        scheduler: The learning-rate schedule.
        gen: The run's random generator (minibatch order).
        order: The order questions are taken in.
        start: The last step already done (0, or the checkpoint's step on resume).
        step: The step :meth:`steps` is at (``start`` before it begins).
        log: The metrics file.
        bar: The progress bar.
        last: The last step's metrics (a run resumed at its end reports its final step's).
        on_checkpoint: Called after each checkpoint is written (more state to save with it).
    """

    cfg: RLConfig
    kind: str
    run_dir: Path
    policy: Any
    model: Any
    examples: list[Any]
    retriever: Any
    pad_id: int
    ref_model: Any
    params: list[torch.nn.Parameter]
    head: ValueHead | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    gen: np.random.Generator
    order: DataOrder
    start: int
    log: MetricsLog
    bar: Any
    last: dict[str, Any] = field(default_factory=dict)
    on_checkpoint: Callable[[], None] | None = None
    budget: TimeBudget = field(default_factory=lambda: TimeBudget(None, 0))
    step: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        """Start :attr:`step` at ``start``."""
        self.step = self.start

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

    def checkpoint(self, step: int) -> None:
        """Write the run's state after ``step`` (model, optimizer, schedule, generator, data order, value head)."""
        extra = {} if self.head is None else {"value_head": self.head.state_dict()}
        save_training_state(self.run_dir, self.kind, step, model=self.model, cfg=self.cfg, optimizer=self.optimizer,
                            scheduler=self.scheduler, gen=self.gen, cursor=self.order.cursor, **extra)
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def steps(self) -> Iterator[int]:
        """The steps still to do, ``start + 1`` to ``cfg.steps``, each recorded in :attr:`step` as it begins.

        None when the run was resumed after its time budget had ended it.
        """
        if self.budget.ended(self.start, self.scheduler):
            return
        for step in range(self.start + 1, self.cfg.steps + 1):
            self.step = step
            yield step

    def begin_step(self) -> tuple[Timer, list[Any]]:
        """Begin a step that rolls out ``batch_size`` questions (PPO, MAPPO), the model in eval mode.

        Returns:
            The step's timer (started) and its questions, the next ``batch_size`` of :attr:`order`.
        """
        timer = Timer()
        questions = [self.examples[i] for i in self.order.take(self.cfg.batch_size)]
        self.model.eval()
        return timer, questions

    def step_optimizer(self) -> None:
        """One optimizer step on :attr:`all_params` (gradients clipped to ``max_grad_norm``), then the schedule's."""
        optimizer_step(self.all_params, self.optimizer, self.scheduler, self.cfg.max_grad_norm)

    def minibatches(self, items: Sequence[T]) -> Iterator[list[T]]:
        """This step's minibatches of ``items``: :func:`shuffled_minibatches` with the run's generator and config."""
        return shuffled_minibatches(items, self.gen, self.cfg.epochs, self.cfg.minibatches)

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

    def record(self, last: dict[str, Any], postfix: Mapping[str, str], printed: Sequence[str]) -> None:
        """Write a step's metrics, advance the bar (showing ``postfix``) and print ``printed`` every ``log_every``."""
        self.last = last
        self.log.write(last)
        self.bar.update(1)
        self.bar.set_postfix(**postfix)
        step = int(last["step"])
        if self.cfg.log_every and step % self.cfg.log_every == 0 and not self.cfg.progress:
            print(json.dumps({k: last[k] for k in printed}), flush=True)

    def save_or_stop(self, step: int, stop: bool) -> bool:
        """Checkpoint on the schedule (every ``save_every`` steps and at the last), and when the run stops here.

        The run stops at ``step`` when ``stop``, or when ``max_minutes`` is spent
        (:class:`~agents.trainers.optim.TimeBudget`, which also fits the schedule to the steps left).

        Returns:
            Whether the caller's loop ends here.
        """
        cfg = self.cfg
        seconds = float((self.last.get("seconds") or {}).get("total", 0.0))
        stop = self.budget.after_step(step, seconds, self.scheduler) or stop
        scheduled = bool(cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps
        if scheduled or stop:
            self.checkpoint(step)
        return stop

    def finish(self) -> dict[str, Any]:
        """Close the progress bar and summarise the run.

        Returns:
            The trainer's summary: ``step`` (the last one begun), ``last`` (its metrics), ``run_dir``,
            ``policy`` and, in a run with one, ``value_head``.
        """
        self.bar.close()
        out = {"step": self.step, "last": self.last, "run_dir": str(self.run_dir), "policy": self.policy}
        if self.head is not None:
            out["value_head"] = self.head
        return out


def open_rl_run(
    cfg: RLConfig,
    kind: str,
    *,
    policy: Any = None,
    retriever: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    value_learning_rate: float | None = None,
) -> RLRun:
    """Open an RL trainer's run: check its folder, load what it trains, and restore a checkpoint on ``resume``.

    Args:
        cfg: The trainer's configuration.
        kind: The trainer's name in its checkpoints.
        policy: A ready policy (default: load ``cfg.model``, then ``cfg.init_from``).
        retriever: Retriever (default: ``cfg.retriever`` over the task corpus).
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist.
        overwrite: Replace a run already in ``cfg.output_dir``.
        value_learning_rate: Train a value head beside the policy at this learning rate (no weight decay);
            None: no value head.

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
    gen = np.random.default_rng(cfg.seed)
    order = DataOrder(len(examples), cfg.seed)
    start = 0
    if resume:
        start, _ = restore_training_state(run_dir, kind=kind, cfg=cfg, model=model, optimizer=opt, scheduler=sched,
                                          gen=gen, order=order, extra=None if head is None else {"value_head": head})
    log = MetricsLog(run_dir, start)  # drops a line torn by a kill before the budget reads the steps' seconds
    spent = seconds_spent(run_dir, start) if cfg.max_minutes else 0.0
    return RLRun(cfg=cfg, kind=kind, run_dir=run_dir, policy=policy, model=model, examples=examples, retriever=retr,
                 pad_id=pad_id, ref_model=ref_model, params=params, head=head, optimizer=opt, scheduler=sched,
                 gen=gen, order=order, start=start, log=log,
                 bar=progress_bar(cfg.steps, start, cfg.progress, kind), last=last_record(run_dir, start),
                 budget=TimeBudget(cfg.max_minutes, cfg.steps, cfg.epochs * cfg.minibatches, spent=spent, done=start))
