"""A GRPO step's groups (its episodes by question), and which of them the step keeps: one of GRPO's strategies.

:class:`StepGroups` holds what a step rolled out, round after round, each episode with a group id
unique across the step's sampling rounds. A group-keeping strategy has two phases the step calls
each round: :meth:`GroupSampling.need` (how many questions the round rolls out) and
:meth:`GroupSampling.keep` (which of the round's groups the step keeps, and whether it has enough):

- :class:`KeepAll` (plain GRPO): one round of ``batch_size`` questions, every group kept.
- :class:`DynamicSampling` (DAPO): groups whose returns are all equal (no gradient signal) are
  dropped and more questions are rolled out, up to ``max_sampling_rounds`` rounds, until
  ``batch_size`` groups with signal are kept.

:func:`sampling_for` picks the strategy from the configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agents.trainers.samples import Sample


class StepGroups:
    """The episodes a GRPO step rolled out, by group.

    Attributes:
        batch_size: Questions a round rolls out at most (group ids of round ``r`` start at ``r * batch_size``).
        episodes: Every episode, in the order rolled out (probes last).
        group_of: Each episode's group id.
        question_of: Group id -> index of its question in the run's examples.
        kept: The ids of the groups the step trains on.
        rounds: Sampling rounds so far.
        dropped: Groups dropped for want of signal.
        closed_book: Groups rolled out closed-book (a curriculum's).
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.episodes: list[Any] = []
        self.group_of: list[int] = []
        self.question_of: dict[int, int] = {}
        self.kept: list[int] = []
        self.rounds = 0
        self.dropped = 0
        self.closed_book = 0

    def add_round(self, questions: Sequence[int], episodes: Sequence[Any], closed_book: int = 0) -> int:
        """Add a round's episodes (``ep.group``: the position of its question in ``questions``).

        Returns:
            The round's first group id (its episodes' ids are that plus ``ep.group``).
        """
        base = self.rounds * self.batch_size
        self.question_of.update({base + j: int(qi) for j, qi in enumerate(questions)})
        self.episodes += episodes
        self.group_of += [base + ep.group for ep in episodes]
        self.rounds += 1
        self.closed_book += closed_book
        return base

    def add(self, episode: Any, group: int) -> None:
        """Add one more episode (a probe) to group ``group``."""
        self.episodes.append(episode)
        self.group_of.append(group)

    def trainable(self) -> tuple[list[Sample], list[int], int]:
        """The samples of the kept groups worth training on, their group ids, and the retriever's failures.

        Episodes the retriever failed in are counted (in any group) and dropped, as are those with no
        policy token.
        """
        keep = set(self.kept)
        samples: list[Sample] = []
        sample_groups: list[int] = []
        infra = 0
        for ep, gid in zip(self.episodes, self.group_of, strict=True):
            if ep.infra_error:
                infra += 1
                continue
            if ep.sample.num_policy_tokens == 0 or gid not in keep:
                continue
            samples.append(ep.sample)
            sample_groups.append(gid)
        return samples, sample_groups, infra


class GroupSampling(Protocol):
    """What a GRPO step asks of its group-keeping strategy, each sampling round."""

    def need(self, groups: StepGroups) -> int:
        """How many questions the next round rolls out."""
        ...

    def keep(self, groups: StepGroups, base: int, episodes: Sequence[Any]) -> bool:
        """Keep groups of the round just added (ids from ``base``) in ``groups.kept``; whether it has enough."""
        ...


class KeepAll:
    """Plain GRPO: one round of ``batch_size`` questions, every group kept."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def need(self, groups: StepGroups) -> int:
        """``batch_size``."""
        return self.batch_size

    def keep(self, groups: StepGroups, base: int, episodes: Sequence[Any]) -> bool:
        """Keep every group of the round; one round is enough."""
        groups.kept = sorted({base + ep.group for ep in episodes})
        return True


class DynamicSampling:
    """DAPO's dynamic sampling: drop groups without signal, roll out more until ``batch_size`` are kept."""

    def __init__(self, batch_size: int, max_rounds: int) -> None:
        self.batch_size, self.max_rounds = batch_size, max_rounds

    def need(self, groups: StepGroups) -> int:
        """The groups still missing."""
        return self.batch_size - len(groups.kept)

    def keep(self, groups: StepGroups, base: int, episodes: Sequence[Any]) -> bool:
        """Keep the round's groups with signal (up to ``batch_size`` in all), count the others as dropped."""
        varied, flat = groups_with_signal(episodes, base)
        groups.kept += varied[: self.batch_size - len(groups.kept)]
        groups.dropped += flat
        return len(groups.kept) >= self.batch_size or groups.rounds >= self.max_rounds


def sampling_for(cfg: Any) -> GroupSampling:
    """The group-keeping strategy ``cfg`` asks for: :class:`DynamicSampling` or :class:`KeepAll`."""
    if cfg.dynamic_sampling:
        return DynamicSampling(cfg.batch_size, cfg.max_sampling_rounds)
    return KeepAll(cfg.batch_size)


def groups_with_signal(episodes: Sequence[Any], base: int) -> tuple[list[int], int]:
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
