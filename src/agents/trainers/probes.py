"""REX-RAG's probes, one of GRPO's strategies: more episodes for the groups that reached a dead end.

A kept group is a dead end when every usable sample (no retriever failure) answered wrong. Each
probe replays a random number of the first turns of one of its samples (never its last turn),
inserts an exploratory remark (``rex_prompts``) and lets the policy continue. Probes join their
group's advantages; they are trained without the remark, with their sampling log-probs as the old
log-probs, so the clipped ratio is the importance weight ``pi(token | no remark) / mu(token | remark)``
that corrects for it (:func:`agents.trainers.grpo.importance_weights`).

A GRPO step calls its probes' two phases: :meth:`Probes.probe` after the sampling rounds (new
episodes into the step's groups, and their metrics), :meth:`Probes.before_update` on what is
trained (the probes' old log-probs). :func:`probes_for` picks the strategy from the configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from agents.rollout.seeds import phase_seed, step_seed
from agents.trainers.episodes import run_rollouts
from agents.trainers.groups import StepGroups
from agents.trainers.metrics import Timer
from agents.trainers.samples import Sample

#: REX-RAG's exploratory remarks, written as the policy's own thinking (Search-R1 tags).
REX_PROMPTS = (
    "<think> Wait, the documents so far may not be the right ones. I should search again with a different "
    "query. </think>\n",
    "<think> Let me check this again: a more specific search could find the missing fact. </think>\n",
    "<think> I may have followed the wrong entity. I will search for the question's first step again. "
    "</think>\n",
)


class Probes(Protocol):
    """What a GRPO step asks of its probing strategy."""

    def probe(self, run: Any, groups: StepGroups, *, step: int, timer: Timer) -> dict[str, float]:
        """Add probe episodes to ``groups``; their metrics (``probe_groups``, ``probe_episodes``, ``probe_em``)."""
        ...

    def before_update(self, trained: Sequence[Sample]) -> None:
        """Attach what the update needs to the probes among the trained samples."""
        ...


class NoProbes:
    """No probing (``rex_probes = 0``)."""

    def probe(self, run: Any, groups: StepGroups, *, step: int, timer: Timer) -> dict[str, float]:
        """Nothing to add: zero metrics."""
        return {"probe_groups": 0, "probe_episodes": 0, "probe_em": 0.0}

    def before_update(self, trained: Sequence[Sample]) -> None:
        """Nothing to attach."""


class RexProbes(NoProbes):
    """REX-RAG: ``cfg.rex_probes`` probe episodes per dead-end group.

    Args:
        cfg: The GRPO configuration (``rex_probes``, ``rex_prompts``, the rollout settings, ``seed``).
        reward: The reward callable overriding ``cfg.reward``, or None.
    """

    def __init__(self, cfg: Any, reward: Any) -> None:
        self.cfg, self.reward = cfg, reward

    def probe(self, run: Any, groups: StepGroups, *, step: int, timer: Timer) -> dict[str, float]:
        """Probe the step's dead ends (choices from the run's generator, episodes seeded by the step's ``probes`` seed).

        Returns:
            How many groups were probed, with how many episodes, and the probes' mean exact match.
        """
        new = probe_dead_ends(run.policy, groups.episodes, groups.group_of, set(groups.kept), run.examples,
                              run.retriever, self.cfg, seed=phase_seed(step_seed(self.cfg.seed, step), "probes"),
                              gen=run.gen, timer=timer, reward=self.reward, question_of=groups.question_of)
        for ep, gid in new:
            groups.add(ep, gid)
        if not new:
            return super().probe(run, groups, step=step, timer=timer)
        return {"probe_groups": len({g for _, g in new}), "probe_episodes": len(new),
                "probe_em": float(np.mean([ep.em for ep, _ in new]))}

    def before_update(self, trained: Sequence[Sample]) -> None:
        """The old log-probs of a probe are its sampling log-probs (with the remark)."""
        for s in trained:
            if s.extras.get("probe"):
                s.extras["old_logprobs"] = behavior_logprobs(s)


def probes_for(cfg: Any, reward: Any) -> Probes:
    """The probing strategy ``cfg`` asks for: :class:`RexProbes` when ``rex_probes`` > 0, else :class:`NoProbes`."""
    return RexProbes(cfg, reward) if cfg.rex_probes else NoProbes()


def probe_dead_ends(
    policy: Any,
    episodes: Sequence[Any],
    group_of: Sequence[int],
    keep: set[int],
    examples: Sequence[Any],
    retriever: Any,
    cfg: Any,
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


def behavior_logprobs(sample: Sample) -> list[float]:
    """A probe's per-token sampling log-probs; refused where the policy reported none.

    Raises:
        ValueError: If a trained token's sampling log-prob is not finite (the policy reported none).
    """
    behavior = [float(x) for x in sample.extras["behavior_logprobs"]]
    if any(m and not np.isfinite(lp) for m, lp in zip(sample.mask, behavior, strict=True)):
        raise ValueError("REX-RAG probes need the policy's sampling log-probs (this policy reported none); "
                         "set rex_probes=0 or use a policy that returns log-probs")
    return behavior
