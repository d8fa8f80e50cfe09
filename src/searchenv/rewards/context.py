"""What a reward sees and says: :class:`StepContext`, :class:`RewardResult`, and the checks of :func:`score_step`.

:class:`ScoredReward` is the base of the reward classes: they write ``score(ctx) -> RewardResult``
and inherit ``__call__``, which answers ``(reward, {term: contribution})``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from searchenv.actions import Action, Answer
from searchenv.retrievers.base import Hit
from searchenv.tasks.example import QAExample


@dataclass(frozen=True)
class StepContext:
    """Everything a reward term may look at for one step.

    Attributes:
        example: The question with gold answers and evidence.
        action: The parsed action of this turn.
        turn: 1-based number of this turn.
        terminated: The agent answered this turn.
        truncated: The turn budget ran out this turn without an answer.
        text: The agent's turn exactly as given (for format checks).
        queries: Queries searched this turn (empty unless a search).
        hits: Hits per query of this turn.
        new_doc_ids: Documents retrieved this turn that were not retrieved earlier in the episode.
        seen_doc_ids: Documents retrieved before this turn.
        num_searches: Search turns so far, this one included.
        num_queries: Queries so far, this turn's included.
        repeated_queries: This turn's queries that were already searched in the episode (normalised).
        invalid_turns: Malformed turns so far, this one included.
        infra_error: The retriever failed this turn.
        num_opens: Documents opened so far (``browse``), this turn's included.
        opened_doc_id: The document this turn opened, if it was an open.
        cited_doc_ids: The documents this answer cites (``arena``), numbers the episode never showed
            dropped; None when the turn is not an answer with a citation block.
        history: Term contributions of earlier steps, oldest first.
        signal_history: Raw signals this reward reported at earlier steps, oldest first.
        extras: Anything else a custom environment wants to pass to its reward.
    """

    example: QAExample
    action: Action
    turn: int
    terminated: bool
    truncated: bool
    text: str = ""
    queries: tuple[str, ...] = ()
    hits: tuple[tuple[Hit, ...], ...] = ()
    new_doc_ids: tuple[str, ...] = ()
    seen_doc_ids: frozenset[str] = frozenset()
    num_searches: int = 0
    num_queries: int = 0
    repeated_queries: int = 0
    invalid_turns: int = 0
    infra_error: bool = False
    num_opens: int = 0
    opened_doc_id: str | None = None
    cited_doc_ids: tuple[str, ...] | None = None
    history: tuple[Mapping[str, float], ...] = ()
    signal_history: tuple[Mapping[str, float], ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """The episode ends this step."""
        return self.terminated or self.truncated

    @property
    def answer(self) -> str | None:
        """This turn's answer text, if the agent answered (read from its own turn only)."""
        return self.action.text if isinstance(self.action, Answer) else None

    @property
    def new_hits(self) -> list[Hit]:
        """This turn's hits that were not retrieved earlier in the episode (first occurrence only)."""
        new = set(self.new_doc_ids)
        out: list[Hit] = []
        for per_query in self.hits:
            for h in per_query:
                if h.doc_id in new:
                    out.append(h)
                    new.discard(h.doc_id)
        return out

    @property
    def step_hits(self) -> list[Hit]:
        """All of this turn's hits, each document once (first occurrence)."""
        seen: set[str] = set()
        out: list[Hit] = []
        for per_query in self.hits:
            for h in per_query:
                if h.doc_id not in seen:
                    seen.add(h.doc_id)
                    out.append(h)
        return out

    def signals_so_far(self, name: str, current: float) -> list[float]:
        """Values of signal ``name`` at earlier steps (missing ones as 0.0), then ``current``."""
        return [float(s.get(name, 0.0)) for s in self.signal_history] + [float(current)]


@dataclass(frozen=True)
class RewardResult:
    """What a reward says about one step.

    Attributes:
        reward: The step's scalar reward.
        terms: Contribution of each named term; they sum to ``reward``.
        signals: Raw (unweighted) per-step measurements, for logging and for rewards that
            pay at the end of the episode; they need not sum to anything.
    """

    reward: float
    terms: dict[str, float]
    signals: dict[str, float] = field(default_factory=dict)


class Reward(Protocol):
    """A reward: ``reward(ctx) -> (scalar, {term name: contribution})``."""

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        ...


_SUM_TOLERANCE = 1e-6


def score_step(reward_fn: Reward, ctx: StepContext) -> RewardResult:
    """Run a reward on a step and check what it returned.

    Uses ``reward_fn.score(ctx)`` when the reward has it (the classes in this module), else
    ``reward_fn(ctx)`` and no signals.

    Args:
        reward_fn: The reward.
        ctx: The step.

    Returns:
        The checked result.

    Raises:
        ValueError: If the reward, a contribution or a signal is not finite, or if the
            contributions do not sum to the reward.
        TypeError: If the reward returned something other than ``(float, dict)``.
    """
    score = getattr(reward_fn, "score", None)
    if callable(score):
        result = score(ctx)
        if not isinstance(result, RewardResult):
            raise TypeError(f"reward.score() must return a RewardResult, got {type(result).__name__}")
    else:
        out = reward_fn(ctx)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)):
            raise TypeError(f"a reward must return (float, {{term: contribution}}), got {out!r}")
        result = RewardResult(float(out[0]), {str(k): float(v) for k, v in out[1].items()})
    reward = float(result.reward)
    if not math.isfinite(reward):
        raise ValueError(f"reward returned {reward!r}")
    for kind, values in (("term", result.terms), ("signal", result.signals)):
        for name, value in values.items():
            if not math.isfinite(float(value)):
                raise ValueError(f"reward {kind} {name!r} is {value!r}")
    total = sum(result.terms.values())
    if abs(total - reward) > _SUM_TOLERANCE * max(1.0, abs(reward)):
        raise ValueError(
            f"reward returned {reward!r} but its term contributions sum to {total!r}; "
            f"report every contribution, e.g. {{'outcome': {reward!r}}}"
        )
    return RewardResult(reward, dict(result.terms), dict(result.signals))


class ScoredReward:
    """Base of the reward classes: a subclass writes :meth:`score`, and calling it gives ``(reward, terms)``.

    :func:`score_step` prefers :meth:`score` (it also carries the signals); the call form is what
    the :class:`Reward` protocol asks of any reward.
    """

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step with contributions and raw signals."""
        raise NotImplementedError

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms
