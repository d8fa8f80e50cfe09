"""Reward terms, composite rewards and named presets.

A reward *term* is a named pure function of a :class:`StepContext` (the example, the episode
so far, this step's turn, action and hits) returning a float. A *reward* turns a step into a
:class:`RewardResult`: the scalar reward, the contribution of each named term (the environment
reports them in ``info["reward_terms"]``; they always sum to the reward) and raw per-step
*signals* (``info["reward_signals"]``: unweighted measurements such as this step's relevance,
reported even when a preset pays them later).

Any callable ``reward(ctx) -> (float, {term: contribution})`` is a reward; the classes here
also have ``score(ctx) -> RewardResult``. :func:`score_step` runs either kind and checks the
result (finite, contributions summing to the reward).

Modules: :mod:`~searchenv.rewards.context` (the step, the result, :class:`ScoredReward`),
:mod:`~searchenv.rewards.terms`, :mod:`~searchenv.rewards.published` (rewards of published
methods), :mod:`~searchenv.rewards.presets`, :mod:`~searchenv.rewards.verifiers` (relevance).

Terms (:data:`TERMS`): ``outcome``, ``format``, ``cost``, ``relevance``, ``shaping``.
Presets (:data:`PRESETS`, ``reward="name"`` in ``gymnasium.make``): ``default``,
``search-r1``, ``search-r1-format``, ``research``, ``r3-rag``, ``r3-rag-normalized``,
``frugal``, ``process``, ``shaped``, ``arena``. Formulas and sources are in ``docs/reference/rewards.md``.

Guards against reward hacking, applied by every outcome computation here:

- The answer is read only from the agent's own turn (``ctx.action`` parsed from the agent's
  text), never from retrieved documents.
- :func:`answer_admissible`: an answer longer than a cap, one that lists several candidates
  ("A or B", "A; B", "A / B") or one that normalises to nothing earns no outcome credit.
- ``relevance`` pays only for documents not retrieved earlier in the episode, and ``cost``
  can charge repeated queries.
"""

from __future__ import annotations

from searchenv.rewards.context import Reward, RewardResult, ScoredReward, StepContext, score_step
from searchenv.rewards.presets import (
    PRESETS,
    WeightedReward,
    custom,
    get_reward,
    preset,
    preset_names,
    register_preset,
)
from searchenv.rewards.published import ArenaReward, R3RAGReward, ReSearchReward, SearchR1FormatReward
from searchenv.rewards.terms import (
    OUTCOME_METRICS,
    TERM_BOUNDS,
    TERMS,
    OutcomeMetric,
    answer_admissible,
    arena_turn_valid,
    citation_f1,
    cost_score,
    evidence_recall,
    format_score,
    outcome_score,
    register_term,
    relevance_score,
    search_r1_turn_valid,
    shaping_score,
)

__all__ = [
    "ArenaReward",
    "OUTCOME_METRICS",
    "OutcomeMetric",
    "PRESETS",
    "R3RAGReward",
    "ReSearchReward",
    "Reward",
    "RewardResult",
    "ScoredReward",
    "SearchR1FormatReward",
    "StepContext",
    "TERM_BOUNDS",
    "TERMS",
    "WeightedReward",
    "answer_admissible",
    "arena_turn_valid",
    "citation_f1",
    "cost_score",
    "custom",
    "evidence_recall",
    "format_score",
    "get_reward",
    "outcome_score",
    "preset",
    "preset_names",
    "register_preset",
    "register_term",
    "relevance_score",
    "score_step",
    "search_r1_turn_valid",
    "shaping_score",
]
