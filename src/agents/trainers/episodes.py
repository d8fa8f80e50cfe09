"""Rollouts turned into training samples: one :class:`Episode` per rolled-out episode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.trainers.config import TrainConfig
from agents.trainers.metrics import Timer, stats
from agents.trainers.samples import Sample
from searchenv.metrics import invalid_share
from searchenv.utils.moved import renamed_names


@dataclass
class Episode:
    """One rolled-out episode in the shape trainers use.

    Attributes:
        sample: The token sequence and loss mask; ``extras`` holds ``return`` (sum of step rewards),
            ``turn_ends`` (index in ``ids`` of each turn's last generated token) and ``turn_rewards``.
        group: Index of the episode's example in the rollout (samples of one question share it).
        reward_terms: Episode totals per reward term.
        em: Exact match of the final answer.
        searches: Search turns.
        answered: Whether the agent answered.
        infra_error: The retriever failed during the episode (drop from the gradient).
        response_tokens: Tokens the policy generated.
        record: The rollout engine's :class:`~agents.rollout.TokenEpisode` it came from.
    """

    sample: Sample
    group: int
    reward_terms: dict[str, float]
    em: float
    searches: int
    answered: bool
    infra_error: bool
    response_tokens: int
    record: Any = None


def trainable_samples(episodes: Sequence[Episode]) -> tuple[list[Sample], int]:
    """The samples a step trains on (no retriever failure, some policy tokens), and how many the retriever failed in."""
    infra = sum(1 for e in episodes if e.infra_error)
    return [e.sample for e in episodes if not e.infra_error and e.sample.num_policy_tokens > 0], infra


def step_metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Per-step rollout metrics: reward mean/std (total and per term), EM, searches, lengths.

    Unlike the evaluation aggregates (:mod:`agents.evaluation.summary`), these are over training
    samples and use :func:`~agents.trainers.metrics.stats` (numpy's mean and std, as the published
    training curves were computed).

    ``invalid_share`` is parse telemetry: the share of the step's turns that were invalid, by code
    (:func:`searchenv.metrics.invalid_share`; empty when every turn parsed).
    """
    returns = [e.sample.extras["return"] for e in episodes]
    mean, std = stats(returns)
    terms: dict[str, dict[str, float]] = {}
    names = sorted({k for e in episodes for k in e.reward_terms})
    for name in names:
        m, s = stats([e.reward_terms.get(name, 0.0) for e in episodes])
        terms[name] = {"mean": m, "std": s}
    return {
        "reward_mean": mean,
        "reward_std": std,
        "reward_terms": terms,
        "em": stats([e.em for e in episodes])[0],
        "searches": stats([float(e.searches) for e in episodes])[0],
        "answered": stats([float(e.answered) for e in episodes])[0],
        "response_tokens": stats([float(e.response_tokens) for e in episodes])[0],
        "invalid_share": invalid_share(
            info.get("invalid_reason") for e in episodes if e.record is not None for info in e.record.step_infos),
    }


def run_rollouts(
    policy: Any,
    examples: Sequence[Any],
    retriever: Any,
    cfg: TrainConfig,
    *,
    group_size: int,
    seed: int,
    timer: Timer,
    reward: Any = None,
    starts: Sequence[Any] | None = None,
    protocol: Any = None,
    max_turns: int | None = None,
) -> list[Episode]:
    """Roll out ``group_size`` episodes per example with :func:`agents.rollout.rollout`.

    Episodes come back example-major (``Episode.group`` is the example's index). Generation and
    environment (retrieval included) seconds are added to ``timer`` under ``generation`` and
    ``environment``. ``starts`` (one per episode) begins episodes from :class:`~agents.rollout.ProbeStart`s;
    ``protocol`` and ``max_turns`` override the config's (closed-book episodes of a curriculum).
    """
    from agents.rollout import rollout

    batch = rollout(
        policy,
        list(examples),
        retriever,
        group_size=group_size,
        protocol=cfg.protocol if protocol is None else protocol,
        top_k=cfg.top_k,
        max_turns=cfg.max_turns if max_turns is None else max_turns,
        reward=cfg.reward if reward is None else reward,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        seed=seed,
        env_kwargs={"max_doc_chars": cfg.max_doc_chars},
        starts=starts,
    )
    st = batch.stats
    timer.seconds["generation"] = timer.seconds.get("generation", 0.0) + st.generation_seconds
    env_s = max(0.0, st.wall_seconds - st.generation_seconds)
    timer.seconds["environment"] = timer.seconds.get("environment", 0.0) + env_s
    return [episode_from_record(r) for r in batch]


def episode_from_record(rec: Any) -> Episode:
    """Convert an :class:`agents.rollout.TokenEpisode` into an :class:`Episode`.

    Each turn's reward goes on that turn's last generated token (a turn with no tokens credits
    the latest earlier policy token).

    A REX-RAG probe episode (``rec.probe_span`` set) becomes the sequence the policy should learn
    to produce on its own: the probe's tokens are removed, so they are neither trained on nor seen
    as context, and ``extras["behavior_logprobs"]`` keeps each token's sampling log-prob (under
    the context *with* the probe, which is what generated it). A trainer uses those as the old
    log-probs, so the clipped ratio ``pi(token | no probe) / mu(token | probe)`` is the importance
    weight that corrects for the probe. ``extras["probe"]`` marks such samples.
    """
    prompt = list(rec.prompt_ids)
    completion, loss_mask, logprobs = list(rec.completion_ids), [int(m) for m in rec.loss_mask], list(rec.logprobs)
    cut = (0, 0) if rec.probe_span is None else rec.probe_span
    width = cut[1] - cut[0]
    if width:
        del completion[cut[0] : cut[1]], loss_mask[cut[0] : cut[1]], logprobs[cut[0] : cut[1]]

    def shifted(pos: int) -> int:  # a completion position after removing the probe
        return pos - width if pos >= cut[1] else pos

    ids = prompt + completion
    mask = [0] * len(prompt) + loss_mask
    turn_ends: list[int] = []
    last = -1
    for start, end in rec.turn_spans:
        if end > start:
            last = len(prompt) + shifted(end) - 1
        turn_ends.append(last)
    rewards = [float(r) for r in rec.rewards]
    totals: dict[str, float] = {}
    for terms in rec.reward_terms:
        for k, v in terms.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    info = rec.info
    sample = Sample(ids, mask, {"return": sum(rewards), "turn_ends": turn_ends, "turn_rewards": rewards})
    if rec.probe_span is not None:
        sample.extras.update(probe=True, probe_at=len(prompt) + cut[0],
                             behavior_logprobs=[0.0] * len(prompt) + [float(x) for x in logprobs])
    return Episode(
        sample=sample,
        group=int(rec.group),
        reward_terms=totals,
        em=float(info.get("em") or 0.0),
        searches=int(info.get("summary", {}).get("searches", 0)),
        answered=info.get("answer") is not None,
        infra_error=bool(rec.infra_error),
        response_tokens=int(sum(rec.loss_mask)),
        record=rec,
    )


# The old name of step_metrics (it shared its name with searchenv.metrics.episode_metrics), kept for one release.
__getattr__ = renamed_names(__name__, {"episode_metrics": (__name__, "step_metrics")})
