"""PPO with a value head for search-and-reason policies (Search-R1's PPO variant, R3-RAG's process rewards).

The policy's own tokens are the actions; environment text (retrieved documents) is context, not
an action, so GAE runs over the policy tokens of an episode in order, skipping environment
tokens. Each step's environment reward sits on the last token of the turn that earned it: the
outcome on the final token, a search's process reward (e.g. ``relevance``) at the end of that
search turn. A linear value head on the policy's last hidden state predicts the value before each
token; the value loss is clipped around the values at sampling time.

Read top to bottom: config, value head, then :func:`train_ppo`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agents.devices import model_device
from agents.rollout.seeds import STEP_SALTS, step_seed
from agents.trainers.advantages import gae
from agents.trainers.callbacks import TrainerCallback, trainer_callbacks
from agents.trainers.config import ActorCriticConfig, _help
from agents.trainers.episodes import run_rollouts, step_metrics, trainable_samples
from agents.trainers.losses import add_kl_penalty, clipped_policy_loss, masked_mean, masked_whiten, value_loss
from agents.trainers.rl_run import ValueHead, mean_stats, open_rl_run, reference_logprobs  # ValueHead: re-exported
from agents.trainers.samples import Sample, forward_logprobs, micro_batches, pad_extra, pad_samples


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO hyper-parameters on top of :class:`~agents.trainers.config.ActorCriticConfig`."""

    minibatches: int = field(default=2, metadata=_help("Optimizer steps per pass."))
    kl_coef: float = field(default=0.0, metadata=_help("Weight of the KL-to-reference loss term."))
    gamma: float = field(default=1.0, metadata=_help("Discount per policy token."))
    lam: float = field(default=0.95, metadata=_help("GAE lambda."))
    whiten_advantages: bool = field(default=True, metadata=_help("Normalise advantages over the batch."))

    def __post_init__(self) -> None:
        """Validate (see :class:`~agents.trainers.config.ActorCriticConfig`)."""
        super().__post_init__()
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")


#: The update's statistics (the mean over its minibatches goes into the step's metrics).
_UPDATE_KEYS = ("pg_loss", "vf_loss", "kl", "clip_fraction", "vf_clip_fraction", "approx_kl", "entropy", "value_mean")


def token_rewards(sample: Sample) -> np.ndarray:
    """Rewards over the sample's policy tokens: each step's reward on the last token of its turn.

    Uses ``sample.extras["turn_ends"]`` (index in ``ids`` of each turn's last generated token) and
    ``sample.extras["turn_rewards"]`` (the environment's reward for that turn).
    """
    positions = [i for i, m in enumerate(sample.mask) if m]
    where = {p: k for k, p in enumerate(positions)}
    r = np.zeros(len(positions))
    for end, rew in zip(sample.extras["turn_ends"], sample.extras["turn_rewards"], strict=True):
        if end in where:
            r[where[end]] += rew
        elif positions:  # a turn with no policy tokens (cannot happen for model turns): credit the last one
            r[-1] += rew
    return r


def train_ppo(
    cfg: PPOConfig,
    *,
    policy: Any = None,
    retriever: Any = None,
    reward: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> dict[str, Any]:
    """Train the policy and a value head with PPO.

    Args:
        cfg: The configuration.
        policy: A ready policy (default: load ``cfg.model``, then ``cfg.init_from``).
        retriever: Retriever (default: ``cfg.retriever`` over the task corpus).
        reward: A reward callable overriding ``cfg.reward`` (process terms such as ``relevance`` go here
            or in ``cfg.reward``).
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist.
        overwrite: Replace a run already in ``cfg.output_dir`` (its checkpoint and metrics); without it
            (or ``resume``) a folder holding a run is refused.
        stop_after: Stop (after checkpointing) once this many steps are done.
        callbacks: Trainer callbacks (:class:`~agents.trainers.callbacks.TrainerCallback`); a step's batch
            is its samples with their ``advantages`` and ``returns``.

    Returns:
        A summary: final step, last metrics, run folder, the policy and the value head.

    Raises:
        FileExistsError, FileNotFoundError, CheckpointError: As :func:`~agents.trainers.rl_run.open_rl_run`
            (a run folder in use, no checkpoint to resume, a damaged or unfit checkpoint).
    """
    run = open_rl_run(cfg, "ppo", policy=policy, retriever=retriever, resume=resume, overwrite=overwrite,
                      value_learning_rate=cfg.value_learning_rate, stop_after=stop_after,
                      callbacks=trainer_callbacks(callbacks, trainer="train_ppo"))
    policy, model, head, ref, pad_id = run.policy, run.model, run.value_head, run.ref_model, run.pad_id

    for step, timer in run.steps():
        # ---- 1. rollouts: batch_size questions x samples_per_question episodes ------------------
        episodes = run_rollouts(policy, run.questions(cfg.batch_size), run.retriever, cfg,
                                group_size=cfg.samples_per_question, seed=step_seed(cfg.seed, step, STEP_SALTS["ppo"]),
                                timer=timer, reward=reward)
        samples, infra = trainable_samples(episodes)
        metrics = step_metrics(episodes)

        # ---- 2. advantages (GAE under the values before the update: its first part) -------------
        # ---- 3. optimise ---------------------------------------------------------------------------
        stats = run.optimise(timer, samples, prepare=lambda b: _prepare_targets(b, policy, head, ref, cfg, pad_id),
                             gradients=lambda mb: _minibatch_gradients(mb, model, head, cfg, pad_id))

        # ---- 4. record ------------------------------------------------------------------------------
        last = run.step_record(step, timer, metrics, mean_stats(stats, _UPDATE_KEYS), episodes=len(episodes),
                               infra=infra, trained=samples)
        if run.end_step(last, {"reward": f"{metrics['reward_mean']:.3f}", "em": f"{metrics['em']:.2f}"},
                        ("step", "reward_mean", "em", "vf_loss")):
            break
    return run.finish()


@torch.no_grad()
def _prepare_targets(
    samples: Sequence[Sample], policy: Any, head: ValueHead, ref_model: Any, cfg: PPOConfig, pad_id: int
) -> None:
    """Attach old log-probs, old values, reference log-probs, GAE advantages and returns (per token).

    The model's outputs come to the host once per micro-batch; GAE runs there, over each episode's
    policy tokens in order (a sequential scan that a GPU would not speed up).
    """
    model = policy.model
    device = model_device(model)
    for mb in micro_batches(samples, cfg.micro_batch_size):
        padded = pad_samples(mb, pad_id, device)
        out = forward_logprobs(model, padded, temperature=cfg.temperature, want_hidden=True, bf16=cfg.bf16)
        values = head(out.hidden) if out.hidden is not None else torch.zeros_like(out.logprobs)
        ref = reference_logprobs(model, ref_model, padded, cfg) if cfg.kl_coef > 0 else None
        old_lp, old_v = out.logprobs.cpu(), values.float().cpu()
        ref_lp = ref.cpu() if ref is not None else None
        for i, s in enumerate(mb):
            n = len(s.ids)
            s.extras["old_logprobs"] = old_lp[i, :n].tolist()
            s.extras["old_values"] = old_v[i, :n].tolist()
            if ref_lp is not None:
                s.extras["ref_logprobs"] = ref_lp[i, :n].tolist()
            positions = [j for j, m in enumerate(s.mask) if m]
            v = np.asarray([s.extras["old_values"][j] for j in positions])
            adv, ret = gae(token_rewards(s), v, gamma=cfg.gamma, lam=cfg.lam)
            a_full = np.zeros(n)
            r_full = np.zeros(n)
            a_full[positions] = adv
            r_full[positions] = ret
            s.extras["advantages"] = a_full.tolist()
            s.extras["returns"] = r_full.tolist()
    if cfg.whiten_advantages:  # on the host: a few thousand numbers
        L = max(len(s.ids) for s in samples)
        a = pad_extra(samples, "advantages", L)
        m = pad_samples(samples, pad_id).mask
        w = masked_whiten(a, m)
        for i, s in enumerate(samples):
            s.extras["advantages"] = w[i, : len(s.ids)].tolist()


def _minibatch_gradients(
    mb: Sequence[Sample], model: Any, head: ValueHead, cfg: PPOConfig, pad_id: int
) -> dict[str, float]:
    """Accumulate the gradients of a minibatch's loss (policy, value, KL) over its micro-batches; its statistics."""
    tok_total = sum(s.num_policy_tokens for s in mb)
    seq_total = len(mb)
    acc = dict.fromkeys(_UPDATE_KEYS, 0.0)
    device = model_device(model)
    for micro in micro_batches(mb, cfg.micro_batch_size):
        padded = pad_samples(micro, pad_id, device)
        L = padded.input_ids.shape[1]
        out = forward_logprobs(model, padded, temperature=cfg.temperature, want_hidden=True, bf16=cfg.bf16)
        if out.hidden is None:  # pragma: no cover - asked for above
            raise RuntimeError("forward_logprobs returned no hidden states")
        values = head(out.hidden)
        old = pad_extra(micro, "old_logprobs", L, device=device)
        adv = pad_extra(micro, "advantages", L, device=device)
        pg, st = clipped_policy_loss(out.logprobs, old, adv, padded.mask, cfg.clip_low, cfg.clip_high,
                                     cfg.aggregation)
        vf, vf_clip = value_loss(values, pad_extra(micro, "old_values", L, device=device),
                                 pad_extra(micro, "returns", L, device=device), padded.mask, cfg.value_clip)
        ref = pad_extra(micro, "ref_logprobs", L, device=device) if cfg.kl_coef > 0 else None
        loss, kl_val = add_kl_penalty(pg + cfg.vf_coef * vf, out.logprobs, ref, padded.mask, cfg.kl_coef,
                                      cfg.kl_estimator, cfg.aggregation)
        micro_tok = float(padded.mask.sum())
        w = micro_tok / max(tok_total, 1) if cfg.aggregation == "token" else len(micro) / max(seq_total, 1)
        (loss * w).backward()
        acc["pg_loss"] += float(pg.detach()) * w
        acc["vf_loss"] += float(vf.detach()) * w
        acc["kl"] += kl_val * w
        acc["clip_fraction"] += st.clip_fraction * w
        acc["vf_clip_fraction"] += vf_clip * w
        acc["approx_kl"] += st.approx_kl * w
        acc["entropy"] += float(-(out.logprobs.detach() * padded.mask).sum() / max(micro_tok, 1.0)) * w
        acc["value_mean"] += float(masked_mean(values.detach(), padded.mask)) * w
    return acc
