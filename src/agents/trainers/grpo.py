"""Group Relative Policy Optimisation for search-and-reason policies (Search-R1 / ReSearch style).

Each step: take ``batch_size`` questions, sample ``group_size`` episodes per question with the
rollout engine (the policy writes turns; the environment searches and scores them), turn each
episode's return into a group-relative advantage, and take ``epochs`` x ``minibatches``
optimizer steps on the token-level clipped surrogate over the policy's own tokens only
(retrieved documents are masked out), plus ``kl_coef`` times a ``k3`` estimate of the KL to the
frozen reference policy. Episodes hit by a retriever failure (``infra_error``) are dropped from
the gradient and counted. With ``dynamic_sampling`` (DAPO), groups whose returns are all equal
(no gradient signal) are dropped and more questions are rolled out, up to
``max_sampling_rounds`` rounds, until ``batch_size`` groups with signal are kept; ``clip_high``
above ``clip_low`` is DAPO's clip-higher. With ``rex_probes`` (REX-RAG), a group whose samples all
answered wrong (a dead end) gets that many probe episodes: each replays the first turns of one of
its failed samples, inserts an exploratory remark (``rex_prompts``), and lets the policy continue.
Probes join their group's advantages; they are trained without the remark (its tokens are neither
trained on nor kept as context), with the sampling log-probs as the old log-probs, so the clipped
ratio is the importance weight ``pi(token | no remark) / mu(token | remark)`` that corrects for it.
With ``curriculum="ur2"`` (UR2), each question's closed-book success rate is estimated, cached and
refreshed every ``difficulty_refresh`` steps; questions the policy answers closed-book often enough
are rolled out closed-book (one turn), the others with retrieval (:mod:`agents.trainers.curriculum`).

The curriculum, the group-keeping (:mod:`agents.trainers.groups`) and the probes
(:mod:`agents.trainers.probes`) are strategies whose phases the loop calls; each round's and
phase's seed comes from :mod:`agents.rollout.seeds`. Read top to bottom: config, then
:func:`train_grpo`, whose step has PPO's phases (:mod:`agents.trainers.ppo`): rollouts,
advantages, optimise, record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agents.devices import model_device
from agents.rollout.seeds import round_seed
from agents.trainers.advantages import SCALINGS, group_advantages
from agents.trainers.callbacks import TrainerCallback, trainer_callbacks
from agents.trainers.config import RLConfig, _help
from agents.trainers.curriculum import curriculum_for
from agents.trainers.episodes import step_metrics
from agents.trainers.groups import StepGroups, sampling_for
from agents.trainers.losses import add_kl_penalty, clipped_policy_loss
from agents.trainers.metrics import read_metrics
from agents.trainers.optim import optimizer_step
from agents.trainers.probes import REX_PROMPTS, probes_for
from agents.trainers.rl_run import mean_stats, open_rl_run, reference_logprobs, shuffled_minibatches
from agents.trainers.samples import Sample, forward_logprobs, micro_batches, pad_extra, pad_samples


@dataclass
class GRPOConfig(RLConfig):
    """GRPO hyper-parameters on top of :class:`RLConfig`."""

    group_size: int = field(default=4, metadata=_help("Episodes sampled per question (the group)."))
    scale_rewards: str = field(
        default="group", metadata=_help("Advantage scaling: group (GRPO) | batch | none (Dr. GRPO).")
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata=_help("DAPO dynamic sampling: drop groups whose returns are all equal (no gradient) and roll "
                       "out more questions until batch_size groups with signal are kept."),
    )
    max_sampling_rounds: int = field(
        default=4, metadata=_help("Rollout rounds per step at most with dynamic_sampling (then train on what is kept).")
    )

    max_generated_tokens: int | None = field(
        default=None,
        metadata=_help("Stop once the policy has generated this many tokens in all (extra sampling rounds and "
                       "probes included), so methods that sample more are compared at equal tokens; steps "
                       "stays the upper bound."),
    )
    curriculum: str = field(
        default="none",
        metadata=_help("ur2: route questions the policy answers closed-book (at least closed_book_threshold of "
                       "closed_book_samples) to closed-book episodes, the rest to retrieval; none: off."),
    )
    closed_book_samples: int = field(default=4, metadata=_help("UR2: closed-book samples per difficulty estimate."))
    closed_book_threshold: float = field(
        default=0.5, metadata=_help("UR2: closed-book success rate from which a question is easy.")
    )
    difficulty_refresh: int = field(default=10, metadata=_help("UR2: steps after which an estimate is redone."))
    hard_share: tuple[float, float] | None = field(
        default=None,
        metadata=_help("UR2 schedule: share of hard questions per batch, linear from the first value at the first "
                       "step to the second at the last (e.g. [0.25, 1.0], easy to hard); None: as drawn."),
    )
    curriculum_pool: int = field(
        default=2, metadata=_help("UR2 schedule: candidates drawn per batch question to choose from.")
    )
    rex_probes: int = field(
        default=0,
        metadata=_help("REX-RAG: probe episodes per dead-end group (every sample wrong); 0 turns probing off."),
    )
    rex_prompts: tuple[str, ...] = field(
        default=REX_PROMPTS,
        metadata=_help("REX-RAG: exploratory remarks inserted into a probe (one drawn per probe)."),
    )

    @property
    def episodes_per_step(self) -> int:
        """``batch_size`` questions x ``group_size`` samples."""
        return self.batch_size * self.group_size

    def __post_init__(self) -> None:
        """Validate (see :class:`RLConfig`)."""
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group-relative advantages, got {self.group_size!r}")
        super().__post_init__()
        if isinstance(self.max_sampling_rounds, bool) or not isinstance(self.max_sampling_rounds, int) \
                or self.max_sampling_rounds < 1:
            raise ValueError(f"max_sampling_rounds must be a positive integer, got {self.max_sampling_rounds!r}")
        if self.scale_rewards not in SCALINGS:
            raise ValueError(f"scale_rewards must be one of {SCALINGS}, got {self.scale_rewards!r}")
        if self.max_generated_tokens is not None and (
                isinstance(self.max_generated_tokens, bool) or not isinstance(self.max_generated_tokens, int)
                or self.max_generated_tokens < 1):
            raise ValueError("max_generated_tokens must be a positive integer or None, "
                             f"got {self.max_generated_tokens!r}")
        if self.curriculum not in ("none", "ur2"):
            raise ValueError(f"curriculum must be none or ur2, got {self.curriculum!r}")
        for name in ("closed_book_samples", "difficulty_refresh"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hard_share is not None:
            share = tuple(self.hard_share)
            if len(share) != 2 or not all(isinstance(x, int | float) and 0.0 <= x <= 1.0 for x in share):
                raise ValueError(f"hard_share must be two numbers in [0, 1], got {self.hard_share!r}")
            if self.curriculum != "ur2":
                raise ValueError("hard_share is a schedule of the ur2 curriculum; set curriculum = \"ur2\"")
            self.hard_share = (float(share[0]), float(share[1]))
        if isinstance(self.curriculum_pool, bool) or not isinstance(self.curriculum_pool, int) \
                or self.curriculum_pool < 1:
            raise ValueError(f"curriculum_pool must be a positive integer, got {self.curriculum_pool!r}")
        if not 0.0 <= float(self.closed_book_threshold) <= 1.0:
            raise ValueError(f"closed_book_threshold must be in [0, 1], got {self.closed_book_threshold!r}")
        if isinstance(self.rex_probes, bool) or not isinstance(self.rex_probes, int) or self.rex_probes < 0:
            raise ValueError(f"rex_probes must be a non-negative integer, got {self.rex_probes!r}")
        self.rex_prompts = tuple(self.rex_prompts)
        if not self.rex_prompts or not all(isinstance(p, str) and p.strip() for p in self.rex_prompts):
            raise ValueError("rex_prompts must be a non-empty list of non-empty strings")


StepCallback = Callable[[int, list[Sample], dict[str, Any], Any], None]

#: The update's statistics (the mean over its minibatches goes into the step's metrics).
_UPDATE_KEYS = ("pg_loss", "kl", "clip_fraction", "approx_kl", "entropy")


def train_grpo(
    cfg: GRPOConfig,
    *,
    policy: Any = None,
    retriever: Any = None,
    reward: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    on_step: StepCallback | None = None,
) -> dict[str, Any]:
    """Train the policy with GRPO.

    Args:
        cfg: The configuration.
        policy: A ready policy (default: load ``cfg.model``, then ``cfg.init_from``).
        retriever: Retriever (default: ``cfg.retriever`` over the task corpus).
        reward: A reward callable ``reward(StepContext) -> (float, terms)`` overriding ``cfg.reward``.
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist (same data order, optimizer, RNG).
        overwrite: Replace a run already in ``cfg.output_dir`` (its checkpoint and metrics); without it
            (or ``resume``) a folder holding a run is refused.
        stop_after: Stop (after checkpointing) once this many steps are done, as if killed there.
        callbacks: Trainer callbacks (:class:`~agents.trainers.callbacks.TrainerCallback`); a step's batch
            is its trained samples with their ``advantage``.
        on_step: Deprecated (a callback's ``on_batch`` and ``on_step_end``): called after each step with
            ``(step, trained samples, metrics, policy)``.

    Returns:
        A summary: final step, last metrics, run folder and the policy.

    Raises:
        FileExistsError, FileNotFoundError, CheckpointError: As :func:`~agents.trainers.rl_run.open_rl_run`
            (a run folder in use, no checkpoint to resume, a damaged or unfit checkpoint).
    """
    run = open_rl_run(cfg, "grpo", policy=policy, retriever=retriever, resume=resume, overwrite=overwrite,
                      stop_after=stop_after,
                      callbacks=trainer_callbacks(callbacks, trainer="train_grpo", on_step=on_step))
    policy, model, ref, pad_id = run.policy, run.model, run.ref_model, run.pad_id
    curriculum = curriculum_for(cfg, run, reward=reward, resume=resume)  # which questions, rolled out how
    sampling = sampling_for(cfg)  # which groups a step keeps (DAPO: more rounds until enough have signal)
    probes = probes_for(cfg, reward)  # more episodes for the dead-end groups (REX-RAG)
    # tokens generated by the steps already done (a resumed run counts on from its metrics)
    generated_so_far = sum(int(r.get("generated_tokens", 0)) for r in read_metrics(run.run_dir)) if run.start else 0
    if cfg.max_generated_tokens is not None and generated_so_far >= cfg.max_generated_tokens:
        return run.finish()  # the token budget was spent by the steps already done

    for step, timer in run.steps():
        # ---- 1. rollouts: batch_size questions x group_size samples, in rounds while sampling wants more
        groups = StepGroups(cfg.batch_size)
        while True:
            seed = round_seed(cfg.seed, step, groups.rounds)
            questions = curriculum.questions(sampling.need(groups), step=step, seed=seed, timer=timer)
            episodes, closed_book = curriculum.roll_out(questions, step=step, seed=seed, timer=timer)
            base = groups.add_round(questions, episodes, closed_book)
            if sampling.keep(groups, base, episodes):
                break
        probe_stats = probes.probe(run, groups, step=step, timer=timer)
        samples, sample_groups, infra = groups.trainable()
        metrics = step_metrics([ep for ep in groups.episodes if not ep.sample.extras.get("probe")])

        # ---- 2. group-relative advantages --------------------------------------------------------
        if samples:
            adv = group_advantages([s.extras["return"] for s in samples], sample_groups, scale=cfg.scale_rewards)
            for s, a in zip(samples, adv.advantages, strict=True):
                s.extras["advantage"] = float(a)
            zero_var, n_groups = adv.zero_variance_groups, adv.num_groups
        else:
            zero_var, n_groups = 0, 0
        # groups with no signal add no policy gradient; without a KL term they add nothing at all
        trained = [s for s in samples if cfg.kl_coef > 0 or s.extras["advantage"] != 0.0]
        probes.before_update(trained)

        # ---- 3. optimise ---------------------------------------------------------------------------
        stats = run.optimise(timer, trained, prepare=lambda b: _prepare_targets(b, policy, ref, cfg, pad_id),
                             gradients=lambda mb: _minibatch_gradients(mb, model, cfg, pad_id))

        # ---- 4. record ------------------------------------------------------------------------------
        last = run.step_record(
            step, timer, metrics, mean_stats(stats, _UPDATE_KEYS), episodes=len(groups.episodes), infra=infra,
            trained=trained,
            extra={"zero_variance_groups": zero_var, "groups": n_groups, "sampling_rounds": groups.rounds,
                   "dropped_groups": groups.dropped, "generated_tokens": _generated_tokens(groups.episodes),
                   "rollout_tokens": sum(len(ep.sample.ids) for ep in groups.episodes),
                   "closed_book_groups": groups.closed_book, **probe_stats},
        )
        generated_so_far += last["generated_tokens"]
        spent = cfg.max_generated_tokens is not None and generated_so_far >= cfg.max_generated_tokens
        if run.end_step(last, {"reward": f"{metrics['reward_mean']:.3f}", "em": f"{metrics['em']:.2f}"},
                        ("step", "reward_mean", "em", "searches", "kl"), stop=spent):
            break
    return run.finish()


def _generated_tokens(episodes: Sequence[Any]) -> int:
    """Tokens the policy generated this step, every sampling round and probe included (not replayed ones)."""
    total = 0
    for ep in episodes:
        rec = ep.record
        if rec is not None and rec.probe_span is not None:
            total += int(sum(rec.loss_mask[rec.probe_span[1] :]))
        else:
            total += int(ep.response_tokens)
    return total


def importance_weights(samples: Sequence[Sample], model: Any, cfg: GRPOConfig, pad_id: int) -> list[list[float]]:
    """``exp(logprob now - old logprob)`` on each sample's trained tokens, in order.

    For a probe sample (its remark removed, old log-probs = sampling log-probs with the remark)
    this is REX-RAG's importance weight ``pi(token | no remark) / mu(token | remark)`` before
    clipping; for an on-policy sample it is 1 at the first update.
    """
    out: list[list[float]] = []
    device = model_device(model)
    with torch.no_grad():
        for mb in micro_batches(samples, cfg.micro_batch_size):
            padded = pad_samples(mb, pad_id, device)
            lp = forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16).logprobs
            old = _old_for(mb, lp, lp.shape[1])
            for i in range(len(mb)):
                keep = padded.mask[i].bool()
                out.append(torch.exp(lp[i][keep] - old[i][keep]).tolist())
    return out


def _old_for(micro: Sequence[Sample], lp: torch.Tensor, length: int) -> torch.Tensor:
    """Old log-probs of a micro-batch: each sample's ``old_logprobs`` where it has them, else ``lp`` (detached).

    The stored rows are stacked on the host and copied to ``lp``'s device in one transfer.
    """
    old = lp.detach().clone()
    have = [i for i, s in enumerate(micro) if s.extras.get("old_logprobs") is not None]
    if have:
        stored = pad_extra([micro[i] for i in have], "old_logprobs", length, device=old.device)
        rows = torch.tensor(have, device=old.device)
        widths = torch.tensor([min(len(micro[i].extras["old_logprobs"]), length) for i in have], device=old.device)
        cols = torch.arange(length, device=old.device)
        keep = cols[None, :] < widths[:, None]
        old[rows] = torch.where(keep, stored, old[rows])
    return old


def grpo_update(
    samples: Sequence[Sample],
    policy: Any,
    ref_model: Any,
    params: Sequence[torch.nn.Parameter],
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LambdaLR,
    cfg: GRPOConfig,
    pad_id: int,
    gen: np.random.Generator,
) -> dict[str, float]:
    """The optimisation part of one GRPO step over samples carrying ``extras["advantage"]``, outside a run.

    What :meth:`~agents.trainers.rl_run.RLRun.optimise` does in :func:`train_grpo`: the targets
    (reference log-probs if ``kl_coef > 0``, old log-probs if more than one optimizer step per
    batch), then ``epochs`` passes of ``minibatches`` optimizer steps.

    Returns:
        Mean over optimizer steps of ``pg_loss``, ``kl``, ``clip_fraction``, ``approx_kl``, ``entropy``.
    """
    stats: list[dict[str, float]] = []
    if samples:
        _prepare_targets(samples, policy, ref_model, cfg, pad_id)
        for mb in shuffled_minibatches(samples, gen, cfg.epochs, cfg.minibatches):
            stats.append(_minibatch_gradients(mb, policy.model, cfg, pad_id))
            optimizer_step(params, opt, sched, cfg.max_grad_norm)
    return mean_stats(stats, _UPDATE_KEYS)


def _prepare_targets(samples: Sequence[Sample], policy: Any, ref_model: Any, cfg: GRPOConfig, pad_id: int) -> None:
    """Attach what the loss needs besides the advantage: reference log-probs (a KL term), old ones (several updates)."""
    _reference_logprobs(samples, policy, ref_model, cfg, pad_id)
    if cfg.epochs * cfg.minibatches > 1:
        _old_logprobs(samples, policy.model, cfg, pad_id)


@torch.no_grad()
def _reference_logprobs(
    samples: Sequence[Sample], policy: Any, ref_model: Any, cfg: GRPOConfig, pad_id: int
) -> None:
    """Attach ``ref_logprobs`` (per token) under the frozen reference (the adapter-free model for LoRA)."""
    if cfg.kl_coef <= 0:
        return
    device = model_device(policy.model)
    for mb in micro_batches(samples, cfg.micro_batch_size):
        host = reference_logprobs(policy.model, ref_model, pad_samples(mb, pad_id, device), cfg).cpu()
        for i, s in enumerate(mb):
            s.extras["ref_logprobs"] = host[i, : len(s.ids)].tolist()


@torch.no_grad()
def _old_logprobs(samples: Sequence[Sample], model: Any, cfg: GRPOConfig, pad_id: int) -> None:
    """Attach ``old_logprobs`` (per token) under the policy as it was before this step's updates."""
    device = model_device(model)
    for mb in micro_batches(samples, cfg.micro_batch_size):
        padded = pad_samples(mb, pad_id, device)
        host = forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16).logprobs.cpu()
        for i, s in enumerate(mb):
            if not s.extras.get("probe"):  # a probe keeps its sampling log-probs (see RexProbes.before_update)
                s.extras["old_logprobs"] = host[i, : len(s.ids)].tolist()


def _minibatch_gradients(mb: Sequence[Sample], model: Any, cfg: GRPOConfig, pad_id: int) -> dict[str, float]:
    """Accumulate the gradients of a minibatch's loss over its micro-batches; its statistics."""
    tok_total = sum(s.num_policy_tokens for s in mb)
    seq_total = sum(1 for s in mb if s.num_policy_tokens)
    acc = {"pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "entropy": 0.0}
    device = model_device(model)
    # micro-batches of similar lengths pad less; each is weighted by its share of the minibatch, so the sum is the same
    for micro in micro_batches(sorted(mb, key=lambda s: len(s.ids)), cfg.micro_batch_size):
        padded = pad_samples(micro, pad_id, device)
        L = padded.input_ids.shape[1]
        out = forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16)
        lp = out.logprobs
        old = _old_for(micro, lp, L)
        adv = torch.tensor([s.extras["advantage"] for s in micro], dtype=torch.float32, device=device)
        pg, st = clipped_policy_loss(lp, old, adv, padded.mask, cfg.clip_low, cfg.clip_high, cfg.aggregation)
        ref = pad_extra(micro, "ref_logprobs", L, device=device) if cfg.kl_coef > 0 else None
        loss, kl_val = add_kl_penalty(pg, lp, ref, padded.mask, cfg.kl_coef, cfg.kl_estimator, cfg.aggregation)
        micro_tok = float(padded.mask.sum())
        micro_seq = sum(1 for s in micro if s.num_policy_tokens)
        w = micro_tok / max(tok_total, 1) if cfg.aggregation == "token" else micro_seq / max(seq_total, 1)
        (loss * w).backward()
        acc["pg_loss"] += float(pg.detach()) * w
        acc["kl"] += kl_val * w
        acc["clip_fraction"] += st.clip_fraction * w
        acc["approx_kl"] += st.approx_kl * w
        # entropy estimate: mean negative log-prob of the sampled tokens (free, unbiased on-policy)
        acc["entropy"] += float(-(lp.detach() * padded.mask).sum() / max(micro_tok, 1.0)) * w
    return acc
