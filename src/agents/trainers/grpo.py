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

Read top to bottom: config, then :func:`train_grpo`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agents.devices import model_device
from agents.rollout.seeds import phase_seed, round_seed, step_seed
from agents.trainers.advantages import SCALINGS, group_advantages
from agents.trainers.callbacks import TrainerCallback, trainer_callbacks
from agents.trainers.config import RLConfig, _help
from agents.trainers.curriculum import DifficultyCache, route_and_roll_out, scheduled_questions
from agents.trainers.episodes import run_rollouts, step_metrics
from agents.trainers.losses import add_kl_penalty, clipped_policy_loss
from agents.trainers.metrics import Timer, read_metrics
from agents.trainers.optim import optimizer_step
from agents.trainers.rl_run import mean_stats, open_rl_run, reference_logprobs, shuffled_minibatches
from agents.trainers.samples import Sample, forward_logprobs, micro_batches, pad_extra, pad_samples

#: REX-RAG's exploratory remarks, written as the policy's own thinking (Search-R1 tags).
REX_PROMPTS = (
    "<think> Wait, the documents so far may not be the right ones. I should search again with a different "
    "query. </think>\n",
    "<think> Let me check this again: a more specific search could find the missing fact. </think>\n",
    "<think> I may have followed the wrong entity. I will search for the question's first step again. "
    "</think>\n",
)


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
    # tokens generated by the steps already done (a resumed run counts on from its metrics)
    generated_so_far = sum(int(r.get("generated_tokens", 0)) for r in read_metrics(run.run_dir)) if run.start else 0
    policy, model, ref, pad_id = run.policy, run.model, run.ref_model, run.pad_id
    difficulty = DifficultyCache.load(run.run_dir) if resume else DifficultyCache()
    if cfg.curriculum == "ur2":
        run.on_checkpoint = lambda: difficulty.save(run.run_dir)

    if cfg.max_generated_tokens is not None and generated_so_far >= cfg.max_generated_tokens:
        return run.finish()  # the token budget was spent by the steps already done
    for step, timer in run.steps():
        # ---- 1. rollouts: batch_size questions x group_size samples ----------------------------
        # (with dynamic sampling: more rounds of questions until batch_size groups with signal)
        episodes: list[Any] = []
        group_of: list[int] = []  # each episode's group id, unique across rounds
        question_of: dict[int, int] = {}  # group id -> index of its question in examples
        kept_groups: list[int] = []
        dropped = rounds = closed_book_groups = 0
        while True:
            need = cfg.batch_size - len(kept_groups) if cfg.dynamic_sampling else cfg.batch_size
            seed = round_seed(cfg.seed, step, rounds)
            if cfg.curriculum == "ur2" and cfg.hard_share is not None:
                qidx = scheduled_questions(policy, run.examples, run.retriever, cfg, difficulty, run.order, need,
                                           step=step,
                                           seed=seed, timer=timer)
            else:
                qidx = run.order.take(need)
            if cfg.curriculum == "ur2":
                new_eps, easy = route_and_roll_out(policy, [run.examples[i] for i in qidx], run.retriever, cfg,
                                                   difficulty,
                                                   step=step, group_size=cfg.group_size, seed=seed,
                                                   timer=timer, reward=reward)
                closed_book_groups += sum(easy)
            else:
                new_eps = run_rollouts(policy, [run.examples[i] for i in qidx], run.retriever, cfg,
                                       group_size=cfg.group_size,
                                       seed=seed, timer=timer, reward=reward)
            base = rounds * cfg.batch_size
            question_of.update({base + j: int(qi) for j, qi in enumerate(qidx)})
            episodes += new_eps
            group_of += [base + ep.group for ep in new_eps]
            rounds += 1
            if not cfg.dynamic_sampling:
                kept_groups = sorted({base + ep.group for ep in new_eps})
                break
            varied, flat = _groups_with_signal(new_eps, base)
            kept_groups += varied[: cfg.batch_size - len(kept_groups)]
            dropped += flat
            if len(kept_groups) >= cfg.batch_size or rounds >= cfg.max_sampling_rounds:
                break
        probe_stats = {"probe_groups": 0, "probe_episodes": 0, "probe_em": 0.0}
        if cfg.rex_probes:
            new_probes = _probe_dead_ends(policy, episodes, group_of, set(kept_groups), run.examples, run.retriever,
                                          cfg,
                                          seed=phase_seed(step_seed(cfg.seed, step), "probes"), gen=run.gen,
                                          timer=timer,
                                          reward=reward, question_of=question_of)
            for ep, gid in new_probes:
                episodes.append(ep)
                group_of.append(gid)
            if new_probes:
                probe_stats = {"probe_groups": len({g for _, g in new_probes}), "probe_episodes": len(new_probes),
                               "probe_em": float(np.mean([ep.em for ep, _ in new_probes]))}
        keep = set(kept_groups)
        samples: list[Sample] = []
        sample_groups: list[int] = []
        infra = 0
        for ep, gid in zip(episodes, group_of, strict=True):
            if ep.infra_error:
                infra += 1
                continue
            if ep.sample.num_policy_tokens == 0 or gid not in keep:
                continue
            samples.append(ep.sample)
            sample_groups.append(gid)
        metrics = step_metrics([ep for ep in episodes if not ep.sample.extras.get("probe")])

        # ---- 2. group-relative advantages --------------------------------------------------------
        rewards = [s.extras["return"] for s in samples]
        if samples:
            adv = group_advantages(rewards, sample_groups, scale=cfg.scale_rewards)
            for s, a in zip(samples, adv.advantages, strict=True):
                s.extras["advantage"] = float(a)
            zero_var, n_groups = adv.zero_variance_groups, adv.num_groups
        else:
            zero_var, n_groups = 0, 0
        # groups with no signal add no policy gradient; without a KL term they add nothing at all
        trained = [s for s in samples if cfg.kl_coef > 0 or s.extras["advantage"] != 0.0]
        for s in trained:
            if s.extras.get("probe"):  # the old log-probs of a probe are its sampling log-probs (with the remark)
                s.extras["old_logprobs"] = _behavior_logprobs(s)

        # ---- 3. optimise ---------------------------------------------------------------------------
        stats = run.optimise(timer, trained, prepare=lambda b: _prepare_targets(b, policy, ref, cfg, pad_id),
                             gradients=lambda mb: _minibatch_gradients(mb, model, cfg, pad_id))

        # ---- 4. record ------------------------------------------------------------------------------
        last = run.step_record(
            step, timer, metrics, mean_stats(stats, _UPDATE_KEYS), episodes=len(episodes), infra=infra,
            trained=trained,
            extra={"zero_variance_groups": zero_var, "groups": n_groups, "sampling_rounds": rounds,
                   "dropped_groups": dropped, "generated_tokens": _generated_tokens(episodes),
                   "rollout_tokens": sum(len(ep.sample.ids) for ep in episodes),
                   "closed_book_groups": closed_book_groups, **probe_stats},
        )
        generated_so_far += last["generated_tokens"]
        spent = cfg.max_generated_tokens is not None and generated_so_far >= cfg.max_generated_tokens
        if run.end_step(last, {"reward": f"{metrics['reward_mean']:.3f}", "em": f"{metrics['em']:.2f}"},
                        ("step", "reward_mean", "em", "searches", "kl"), stop=spent):
            break
    return run.finish()


def _probe_dead_ends(
    policy: Any,
    episodes: Sequence[Any],
    group_of: Sequence[int],
    keep: set[int],
    examples: Sequence[Any],
    retriever: Any,
    cfg: GRPOConfig,
    *,
    seed: int,
    gen: np.random.Generator,
    timer: Timer,
    reward: Any,
    question_of: dict[int, int],
) -> list[tuple[Any, int]]:
    """REX-RAG probes for the dead-end groups: ``(episode, group id)`` pairs.

    A kept group is a dead end when every usable sample (no retriever failure) answered wrong.
    Each probe replays a random number of the first turns of one of its samples (never its last
    turn), inserts one of ``cfg.rex_prompts`` and continues; choices come from ``gen``, so a resumed
    run draws the same probes.
    """
    from agents.rollout import ProbeStart

    by_group: dict[int, list[Any]] = {}
    for ep, gid in zip(episodes, group_of, strict=True):
        if gid in keep:
            by_group.setdefault(gid, []).append(ep)
    starts, probe_examples, gids = [], [], []
    for gid, eps in sorted(by_group.items()):
        usable = [e for e in eps if not e.infra_error and e.record is not None]
        if not usable or any(e.em > 0 for e in usable):
            continue
        for _ in range(cfg.rex_probes):
            source = usable[int(gen.integers(len(usable)))].record
            turns = int(gen.integers(max(1, len(source.turn_texts))))
            remark = cfg.rex_prompts[int(gen.integers(len(cfg.rex_prompts)))]
            starts.append(ProbeStart(source, turns, remark))
            probe_examples.append(examples[question_of[gid]])
            gids.append(gid)
    if not starts:
        return []
    probes = run_rollouts(policy, probe_examples, retriever, cfg, group_size=1, seed=seed, timer=timer,
                          reward=reward, starts=starts)
    return list(zip(probes, gids, strict=True))


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


def _behavior_logprobs(sample: Sample) -> list[float]:
    """A probe's per-token sampling log-probs; refused where the policy reported none."""
    behavior = [float(x) for x in sample.extras["behavior_logprobs"]]
    if any(m and not np.isfinite(lp) for m, lp in zip(sample.mask, behavior, strict=True)):
        raise ValueError("REX-RAG probes need the policy's sampling log-probs (this policy reported none); "
                         "set rex_probes=0 or use a policy that returns log-probs")
    return behavior


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


def _groups_with_signal(episodes: Sequence[Any], base: int) -> tuple[list[int], int]:
    """Group ids (offset by ``base``) whose trainable episodes' returns differ, and the count of those that do not.

    A group whose usable episodes (no retriever failure, some policy tokens) all have the same
    return has zero advantage everywhere: DAPO's dynamic sampling drops it.
    """
    returns: dict[int, list[float]] = {}
    for ep in episodes:
        returns.setdefault(base + ep.group, [])
        if not ep.infra_error and ep.sample.num_policy_tokens > 0:
            returns[base + ep.group].append(float(ep.sample.extras["return"]))
    varied = [g for g, r in returns.items() if len(r) >= 2 and max(r) - min(r) > 1e-9]
    return varied, len(returns) - len(varied)


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
            if not s.extras.get("probe"):  # a probe keeps its sampling log-probs (see _behavior_logprobs)
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
