"""MAPPO for the multi-agent RAG episode: one model plays every role, trained toward the shared reward (MMOA-RAG).

Chen et al. (2025) train a query rewriter, a document selector and an answer generator, one LLM
with a role prompt each, jointly with MAPPO toward one shared reward (the answer's F1), each role
also paying its own small penalties (:mod:`searchenv.multi_agent.roles`). Here:

- **Rollouts** are the ``mmoa-llm`` pipeline (:func:`agents.baselines.pipelines.run_pipeline`)
  over :class:`~searchenv.multi_agent.RoleEpisode`: each role's turn keeps its prompt ids (the
  role's observation), its generated ids exactly as generated, and their log-probs.
- **One shared-parameter policy**: each role's turn is its own sample (its prompt, masked out,
  then its output, trained on), so a role's tokens are scored under that role's observation only.
- **A centralised value**: the critic reads the whole episode, every role's prompt and output in
  acting order (what all roles saw and did), through the same model and a linear value head
  (:class:`~agents.trainers.rl_run.ValueHead`); the value of role ``r``'s decision is read just
  before ``r``'s first generated token, so it sees everything up to ``r``'s turn and nothing after.
- **Advantages**: role ``r`` earns the shared reward plus its own penalties; its advantage,
  broadcast over its tokens, is that return minus the critic's value at its turn
  (:func:`~agents.trainers.advantages.role_advantages`), optionally whitened over the batch.
- **Losses**: PPO's clipped surrogate on each role's tokens (ratios, clipping and their statistics
  per role), the value loss on the role decisions, an optional KL to the reference per role.

Start from the warm start (``searchenv train mappo-sft``, :mod:`agents.trainers.mappo_sft`) with
``init_from``. Read top to bottom: config, the episode as trained, the loop, the update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import numpy as np
import torch

from agents.devices import model_device
from agents.rollout.seeds import STEP_SALTS, step_seed
from agents.trainers.advantages import role_advantages
from agents.trainers.callbacks import TrainerCallback, trainer_callbacks
from agents.trainers.config import ActorCriticConfig, _help
from agents.trainers.losses import add_kl_penalty, clipped_policy_loss, masked_mean, value_loss
from agents.trainers.mappo_sft import RoleEpisodeSettings
from agents.trainers.metrics import stats
from agents.trainers.rl_run import ValueHead, open_rl_run, reference_logprobs
from agents.trainers.samples import Sample, forward_logprobs, micro_batches, pad_extra, pad_samples


@dataclass
class MAPPOConfig(ActorCriticConfig, RoleEpisodeSettings):
    """MAPPO hyper-parameters on top of :class:`~agents.trainers.config.ActorCriticConfig` and the episode's settings.

    ``protocol`` and ``max_turns`` do not apply (each role acts once, in its own format);
    ``max_new_tokens`` caps each role's output; ``reward`` is the shared reward.
    """

    output_dir: str = field(default="runs/mappo", metadata=_help("Run folder: metrics.jsonl, checkpoint, plots."))
    reward: str | dict[str, float] = field(default="f1", metadata=_help(
        "Shared reward: f1 (the paper's) | em | contains | a SearchQA-v0 preset or {term: weight}."))
    max_new_tokens: int = field(default=64, metadata=_help("Tokens each role generates at most."))
    whiten_advantages: bool = field(default=True, metadata=_help("Normalise advantages over the step's decisions."))
    train_roles: list[str] | None = field(default=None, metadata=_help(
        "Roles whose tokens are trained (None: every role); the others act but are frozen (mask 0)."))

    def __post_init__(self) -> None:
        """Validate (see :class:`~agents.trainers.config.ActorCriticConfig`); the episode settings by building one."""
        super().__post_init__()
        self.check_episode(self.reward)
        if self.train_roles is not None:
            wanted = list(self.train_roles) if isinstance(self.train_roles, (list, tuple)) else None
            if not wanted or len(set(wanted)) != len(wanted) or not set(wanted) <= set(self.roles):
                raise ValueError(f"train_roles must be None or distinct roles among roles={self.roles}, "
                                 f"got {self.train_roles!r}")
            self.train_roles = [r for r in self.roles if r in wanted]

    @property
    def trained_roles(self) -> list[str]:
        """The roles whose tokens are trained: ``train_roles``, or every role."""
        return list(self.roles if self.train_roles is None else self.train_roles)


# ---- the episode as MAPPO trains on it ----------------------------------------------------------


@dataclass
class TeamEpisode:
    """One multi-agent episode: a sample per role turn, the critic's view, and each role's return.

    Attributes:
        roles: The roles that acted, in order.
        turns: Per role: its prompt ids (mask 0) then its generated ids (mask 1); ``extras`` holds
            ``role`` and the sampling ``logprobs``.
        critic: Every role's prompt and output in acting order (mask 0: nothing here is an action).
        positions: Index in ``critic.ids`` of each role's first generated token: the critic's value
            of that role's decision is read from the state just before it.
        shared: The shared reward.
        penalties: Each role's penalties (summed), aligned with ``roles``.
        em: Exact match of the answer.
        f1: Token F1 of the answer.
        infra_error: The retriever failed (dropped from the gradient).
    """

    roles: list[str]
    turns: list[Sample]
    critic: Sample
    positions: list[int]
    shared: float
    penalties: list[float]
    em: float
    f1: float
    infra_error: bool

    @property
    def returns(self) -> list[float]:
        """Each role's return: the shared reward plus its own penalties."""
        return [self.shared + p for p in self.penalties]


def team_episode(record: Any, turns: dict[str, Any]) -> TeamEpisode | None:
    """Build a :class:`TeamEpisode` from a pipeline's record and its roles' ``RoleTurn``s (None if it failed).

    Args:
        record: The :class:`~agents.baselines.episode.EpisodeResult` of :func:`run_pipeline`.
        turns: Role -> the :class:`~agents.baselines.pipelines.RoleTurn` ``on_turn`` received.
    """
    if record.error is not None:
        return None
    steps = {s["role"]: s for s in record.steps if s.get("role") in turns}
    roles = [s["role"] for s in record.steps if s.get("role") in turns]
    samples: list[Sample] = []
    critic_ids: list[int] = []
    positions: list[int] = []
    penalties: list[float] = []
    for role in roles:
        t = turns[role]
        prompt, out = list(t.prompt_ids), list(t.completion_ids)
        lps = list(t.logprobs) if t.logprobs is not None else [0.0] * len(out)
        samples.append(Sample(prompt + out, [0] * len(prompt) + [1] * len(out),
                              {"role": role, "logprobs": [0.0] * len(prompt) + [float(x) for x in lps]}))
        positions.append(len(critic_ids) + len(prompt))
        critic_ids += prompt + out
        penalties.append(sum(float(v) for k, v in steps[role]["reward_terms"].items() if k.startswith("penalty/")))
    m = record.metrics
    return TeamEpisode(roles, samples, Sample(critic_ids, [0] * len(critic_ids)), positions,
                       float(m["shared_reward"]), penalties, float(m["em"]), float(m["f1"]),
                       bool(m.get("infra_errors")))


def collect_episodes(policy: Any, examples: Sequence[Any], retriever: Any, cfg: MAPPOConfig, *, seed: int,
                     reward: Any = None) -> tuple[list[TeamEpisode | None], list[Any]]:
    """Play ``cfg.samples_per_question`` episodes per example with one model in every role.

    Returns:
        The episodes (None where a generation failed) and the pipeline's records, in the same order.
    """
    from agents.baselines.pipelines import make_pipeline, run_pipeline

    pipeline = make_pipeline("mmoa-llm", policy=policy, roles=cfg.roles, max_new_tokens=cfg.max_new_tokens,
                             temperature=cfg.temperature)
    batch = [ex for ex in examples for _ in range(cfg.samples_per_question)]
    turns: list[dict[str, Any]] = [{} for _ in batch]
    records = run_pipeline(pipeline, batch, retriever, top_k=cfg.top_k,
                           reward=cast(Any, cfg.reward if reward is None else reward), batch_size=len(batch),
                           seed=seed, env_kwargs=cfg.episode_kwargs(),
                           on_turn=lambda pos, role, turn: turns[pos].__setitem__(role, turn))
    return [team_episode(r, t) for r, t in zip(records, turns, strict=True)], records


# ---- the loop ------------------------------------------------------------------------------------


def train_mappo(
    cfg: MAPPOConfig,
    *,
    policy: Any = None,
    retriever: Any = None,
    reward: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    on_episodes: Callable[[int, list[TeamEpisode]], None] | None = None,
) -> dict[str, Any]:
    """Train every role of one shared model and a centralised value head with MAPPO.

    Args:
        cfg: The configuration.
        policy: A ready policy (default: load ``cfg.model``, then ``cfg.init_from``).
        retriever: Retriever (default: ``cfg.retriever`` over the task corpus).
        reward: A shared reward overriding ``cfg.reward`` (a SearchQA-v0 reward callable).
        resume: Continue from ``cfg.output_dir``'s checkpoint, which must exist.
        overwrite: Replace a run already in ``cfg.output_dir``; without it (or ``resume``) a folder
            holding a run is refused.
        stop_after: Stop (after checkpointing) once this many steps are done.
        callbacks: Trainer callbacks (:class:`~agents.trainers.callbacks.TrainerCallback`); a step's batch
            is its episodes once they carry their targets (``advantages``, ``returns``, ``old_logprobs``
            in each turn's and critic's ``extras``).
        on_episodes: Deprecated (a callback's ``on_batch``): called with ``(step, episodes)`` on each
            non-empty batch.

    Returns:
        A summary: final step, last metrics, run folder, the policy and the value head.

    Raises:
        FileExistsError, FileNotFoundError, CheckpointError: As :func:`~agents.trainers.rl_run.open_rl_run`
            (a run folder in use, no checkpoint to resume, a damaged or unfit checkpoint).
    """
    run = open_rl_run(cfg, "mappo", policy=policy, retriever=retriever, resume=resume, overwrite=overwrite,
                      value_learning_rate=cfg.value_learning_rate, stop_after=stop_after,
                      callbacks=trainer_callbacks(callbacks, trainer="train_mappo", on_episodes=on_episodes))
    policy, model, head, ref, pad_id = run.policy, run.model, run.value_head, run.ref_model, run.pad_id

    for step, timer in run.steps():
        # ---- 1. rollouts: batch_size questions x samples_per_question team episodes ----------------
        with timer("generation"):
            played, records = collect_episodes(policy, run.questions(cfg.batch_size), run.retriever, cfg,
                                               reward=reward, seed=step_seed(cfg.seed, step, STEP_SALTS["mappo"]))
        _freeze_roles(played, cfg.trained_roles)
        episodes = [e for e in played if e is not None and not e.infra_error
                    and any(t.num_policy_tokens for t in e.turns)]

        # ---- 2. advantages (each role's return minus the critic's value before the update: its first part)
        # ---- 3. optimise ---------------------------------------------------------------------------
        upd = _Update(cfg.roles)  # the minibatches' statistics, per role
        stats = run.optimise(timer, episodes, prepare=lambda b: _prepare_targets(b, policy, head, ref, cfg, pad_id),
                             gradients=partial(_minibatch_gradients, model=model, head=head, cfg=cfg, pad_id=pad_id,
                                               upd=upd))
        upd.updates = len(stats)

        # ---- 4. record ------------------------------------------------------------------------------
        last = {"step": step, **_step_metrics(cfg, played, episodes, upd), "lr": run.scheduler.get_last_lr()[0],
                "failed_episodes": sum(r.error is not None for r in records),
                "seconds": timer.totals()}
        if run.end_step(last, {"reward": f"{last['reward_mean']:.3f}", "f1": f"{last['f1']:.2f}"},
                        ("step", "reward_mean", "f1", "vf_loss")):
            break
    return run.finish()


def _freeze_roles(episodes: Sequence[TeamEpisode | None], trained: Sequence[str]) -> None:
    """Mask out (0) every token of the turns of roles outside ``trained``: they act, but are not trained.

    A frozen role's decision then carries no policy loss and no value target; its penalties still
    count in the team's metrics, and the trained roles still see its output in their observations.
    """
    for e in episodes:
        if e is None:
            continue
        for role, turn in zip(e.roles, e.turns, strict=True):
            if role not in trained:
                turn.mask = [0] * len(turn.ids)


@torch.no_grad()
def _prepare_targets(episodes: Sequence[TeamEpisode], policy: Any, head: ValueHead, ref_model: Any,
                     cfg: MAPPOConfig, pad_id: int) -> None:
    """Attach old log-probs (and reference ones) to every turn, the critic's values, advantages and returns.

    Each episode's critic values at its roles' decisions, its shared reward and penalties give
    :func:`role_advantages`; a turn's advantage goes on each of its generated tokens, the return
    on its decision's position in the critic's sample.
    """
    model = policy.model
    turns = [t for e in episodes for t in e.turns if t.num_policy_tokens]
    for mb in micro_batches(turns, cfg.micro_batch_size):
        padded = pad_samples(mb, pad_id, model_device(model))
        old = forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16).logprobs.cpu()
        ref = reference_logprobs(model, ref_model, padded, cfg) if cfg.kl_coef > 0 else None
        ref_lp = None if ref is None else ref.cpu()
        for i, s in enumerate(mb):
            s.extras["old_logprobs"] = old[i, : len(s.ids)].tolist()
            if ref_lp is not None:
                s.extras["ref_logprobs"] = ref_lp[i, : len(s.ids)].tolist()
    values = [_critic_values(model, head, mb, cfg, pad_id) for mb in _chunks(episodes, cfg.micro_batch_size)]
    flat = [v for part in values for v in part]
    width = max(len(e.roles) for e in episodes)
    pen = np.zeros((len(episodes), width))
    val = np.zeros((len(episodes), width))
    for k, (e, v) in enumerate(zip(episodes, flat, strict=True)):
        pen[k, : len(e.roles)] = e.penalties
        val[k, : len(e.roles)] = v
    adv, ret = role_advantages([e.shared for e in episodes], pen, val)
    raw = adv.copy()
    if cfg.whiten_advantages:
        live = np.asarray([[j < len(e.roles) and e.turns[j].num_policy_tokens > 0 for j in range(width)]
                           for e in episodes])
        mean, std = float(adv[live].mean()), float(adv[live].std())
        adv = (adv - mean) / (std + 1e-8)
    for k, e in enumerate(episodes):
        n = len(e.critic.ids)
        vmask, rets, olds = np.zeros(n), np.zeros(n), np.zeros(n)
        for j, (turn, pos) in enumerate(zip(e.turns, e.positions, strict=True)):
            turn.extras["advantages"] = [float(adv[k, j]) * m for m in turn.mask]
            turn.extras.update(raw_advantage=float(raw[k, j]), value=float(val[k, j]), role_return=float(ret[k, j]))
            if turn.num_policy_tokens and pos < n:
                vmask[pos], rets[pos], olds[pos] = 1.0, ret[k, j], val[k, j]
        e.critic.extras.update(value_mask=vmask.tolist(), returns=rets.tolist(), old_values=olds.tolist())


def _chunks(episodes: Sequence[TeamEpisode], size: int) -> list[list[TeamEpisode]]:
    """Consecutive chunks of ``size`` episodes (one forward pass of the critic each)."""
    return [list(episodes[i : i + size]) for i in range(0, len(episodes), size)]


def _critic_values(model: Any, head: ValueHead, episodes: Sequence[TeamEpisode], cfg: MAPPOConfig,
                   pad_id: int) -> list[list[float]]:
    """The critic's value at each role's decision of each episode (to the host)."""
    out = forward_logprobs(model, pad_samples([e.critic for e in episodes], pad_id, model_device(model)),
                           want_hidden=True, bf16=cfg.bf16)
    if out.hidden is None:  # pragma: no cover - asked for above
        raise RuntimeError("forward_logprobs returned no hidden states")
    values = head(out.hidden).float().cpu()
    return [[float(values[i, p]) if p < len(e.critic.ids) else 0.0 for p in e.positions]
            for i, e in enumerate(episodes)]


# ---- the update ----------------------------------------------------------------------------------

_ROLE_KEYS = ("pg_loss", "kl", "approx_kl", "clip_fraction", "entropy")


class _Update:
    """Token-weighted sums of the update's statistics, per role and in total (averaged by :meth:`means`)."""

    def __init__(self, roles: Sequence[str]) -> None:
        self.roles = list(roles)
        self.sums = {r: dict.fromkeys(_ROLE_KEYS, 0.0) for r in self.roles}
        self.tokens = dict.fromkeys(self.roles, 0.0)
        self.vf = {"vf_loss": 0.0, "vf_clip_fraction": 0.0, "value_mean": 0.0}
        self.decisions = 0.0
        self.updates = 0

    def add_role(self, role: str, tokens: float, values: dict[str, float]) -> None:
        self.tokens[role] += tokens
        for k, v in values.items():
            self.sums[role][k] += v * tokens

    def means(self) -> dict[str, Any]:
        total = sum(self.tokens.values())
        per_role = {r: {k: self.sums[r][k] / max(self.tokens[r], 1.0) for k in _ROLE_KEYS} for r in self.roles}
        out: dict[str, Any] = {k: sum(self.sums[r][k] for r in self.roles) / max(total, 1.0) for k in _ROLE_KEYS}
        out.update({k: v / max(self.decisions, 1.0) for k, v in self.vf.items()})
        out["updates"] = self.updates
        out["per_role"] = per_role
        return out


def _minibatch_gradients(mb: Sequence[TeamEpisode], model: Any, head: ValueHead, cfg: MAPPOConfig, pad_id: int,
                         upd: _Update) -> None:
    """Accumulate a minibatch's gradients: every role's clipped surrogate, then the centralised value loss."""
    device = model_device(model)
    turns = [t for e in mb for t in e.turns if t.num_policy_tokens]
    tok_total = sum(t.num_policy_tokens for t in turns)
    for micro in micro_batches(turns, cfg.micro_batch_size):
        padded = pad_samples(micro, pad_id, device)
        L = padded.input_ids.shape[1]
        out = forward_logprobs(model, padded, temperature=cfg.temperature, bf16=cfg.bf16)
        old = pad_extra(micro, "old_logprobs", L, device=device)
        adv = pad_extra(micro, "advantages", L, device=device)
        ref = pad_extra(micro, "ref_logprobs", L, device=device) if cfg.kl_coef > 0 else None
        loss = out.logprobs.new_zeros(())
        for role in dict.fromkeys(str(s.extras["role"]) for s in micro):  # PPO's clipped surrogate, role by role
            rows = torch.tensor([float(s.extras["role"] == role) for s in micro]).to(device)
            mask = padded.mask * rows[:, None]
            tokens = float(mask.sum())
            weight = (tokens / max(tok_total, 1) if cfg.aggregation == "token"
                      else float(rows.sum()) / max(len(turns), 1))
            pg, st = clipped_policy_loss(out.logprobs, old, adv, mask, cfg.clip_low, cfg.clip_high, cfg.aggregation)
            role_loss, kl_val = add_kl_penalty(pg, out.logprobs, ref, mask, cfg.kl_coef, cfg.kl_estimator,
                                               cfg.aggregation)
            loss = loss + role_loss * weight
            entropy = float(-masked_mean(out.logprobs.detach(), mask))
            upd.add_role(role, tokens, {"pg_loss": float(pg.detach()), "kl": kl_val, "approx_kl": st.approx_kl,
                                        "clip_fraction": st.clip_fraction, "entropy": entropy})
        loss.backward()
    decisions = sum(float(sum(e.critic.extras["value_mask"])) for e in mb)
    for micro_eps in _chunks(mb, cfg.micro_batch_size):
        critics = [e.critic for e in micro_eps]
        padded = pad_samples(critics, pad_id, device)
        L = padded.input_ids.shape[1]
        out = forward_logprobs(model, padded, want_hidden=True, bf16=cfg.bf16)
        if out.hidden is None:  # pragma: no cover - asked for above
            raise RuntimeError("forward_logprobs returned no hidden states")
        values = head(out.hidden)
        vmask = pad_extra(critics, "value_mask", L, device=device)
        vf, vf_clip = value_loss(values, pad_extra(critics, "old_values", L, device=device),
                                 pad_extra(critics, "returns", L, device=device), vmask, cfg.value_clip)
        n = float(vmask.sum())
        (cfg.vf_coef * vf * (n / max(decisions, 1.0))).backward()
        upd.vf["vf_loss"] += float(vf.detach()) * n
        upd.vf["vf_clip_fraction"] += vf_clip * n
        upd.vf["value_mean"] += float(masked_mean(values.detach(), vmask)) * n
        upd.decisions += n


def _step_metrics(cfg: MAPPOConfig, played: Sequence[TeamEpisode | None], trained: Sequence[TeamEpisode],
                  upd: _Update) -> dict[str, Any]:
    """The step's rollout and update metrics: team totals, and per role under ``roles``."""
    done = [e for e in played if e is not None]
    team = [e.shared + sum(e.penalties) for e in done]
    mean, std = stats(team)
    means = upd.means()
    per_role: dict[str, dict[str, float]] = {}
    for role in cfg.roles:
        mine = [(e, e.roles.index(role)) for e in done if role in e.roles]
        taught = [e.turns[e.roles.index(role)] for e in trained if role in e.roles]
        per_role[role] = {
            "reward": stats([e.returns[j] for e, j in mine])[0],
            "penalty": stats([e.penalties[j] for e, j in mine])[0],
            "penalized": stats([float(e.penalties[j] != 0) for e, j in mine])[0],
            "tokens": float(sum(e.turns[j].num_policy_tokens for e, j in mine)),
            "advantage": stats([t.extras.get("raw_advantage", 0.0) for t in taught])[0],
            "value": stats([t.extras.get("value", 0.0) for t in taught])[0],
            **means["per_role"].get(role, dict.fromkeys(_ROLE_KEYS, 0.0)),
        }
    policy_tokens = sum(t.num_policy_tokens for e in trained for t in e.turns)
    return {
        "reward_mean": mean, "reward_std": std,
        "shared_reward": stats([e.shared for e in done])[0],
        "em": stats([e.em for e in done])[0], "f1": stats([e.f1 for e in done])[0],
        **{k: means[k] for k in (*_ROLE_KEYS, "vf_loss", "vf_clip_fraction", "value_mean", "updates")},
        "episodes": len(played), "infra_errors": sum(e.infra_error for e in done),
        "trained_episodes": len(trained), "policy_tokens": policy_tokens,
        "response_tokens": stats([float(sum(t.num_policy_tokens for t in e.turns)) for e in done])[0],
        "roles": per_role,
    }
