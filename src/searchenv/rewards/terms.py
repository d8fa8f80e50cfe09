"""Reward terms: pure functions of a :class:`~searchenv.rewards.context.StepContext` returning a float.

The guards every outcome goes through (:func:`answer_admissible`), the outcome metrics, the per-step
terms (format, cost, relevance, shaping) and the structure checks of published formats; :data:`TERMS`
names the terms a :class:`~searchenv.rewards.presets.WeightedReward` sums.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from searchenv.actions import Answer, Invalid, Open, Search
from searchenv.metrics import (
    exact_match,
    f1_score,
    gold_in_prediction,
    normalize_answer,
)
from searchenv.protocols.base import ALL_TAGS
from searchenv.rewards.context import StepContext
from searchenv.tasks.example import QAExample
from searchenv.utils.registry import Registry

# "A or B", "A; B", "A / B", "A | B", "A and/or B": several candidates in one answer.
_MULTI_CANDIDATE = re.compile(r"\bor\b|;|/|\|", re.IGNORECASE)


def answer_admissible(answer: str, golds: Sequence[str], max_answer_words: int = 12) -> bool:
    """Whether an answer may earn outcome credit at all.

    An answer earns nothing when it

    - has more than ``max(max_answer_words, words of the longest gold)`` normalised words
      (copying a whole passage would otherwise "contain" the gold),
    - lists several candidates: contains the word *or*, ``;``, ``/`` or ``|`` while no gold
      answer does (``A or B or C`` would otherwise hit with ``contains`` or F1),
    - normalises to the empty string (``"the"``, ``"..."``) while no gold answer does.

    Args:
        answer: The agent's answer.
        golds: Gold answers.
        max_answer_words: Length cap in normalised words.

    Returns:
        True if the answer is admissible.

    Raises:
        ValueError: If ``max_answer_words`` is not a positive integer.
    """
    if isinstance(max_answer_words, bool) or not isinstance(max_answer_words, int) or max_answer_words < 1:
        raise ValueError(f"max_answer_words must be a positive integer, got {max_answer_words!r}")
    norm = normalize_answer(answer)
    gold_norms = [normalize_answer(g) for g in golds]
    if not norm and all(gold_norms):
        return False
    longest_gold = max((len(g.split()) for g in gold_norms), default=0)
    if len(norm.split()) > max(max_answer_words, longest_gold):
        return False
    if _MULTI_CANDIDATE.search(answer) and not any(_MULTI_CANDIDATE.search(g) for g in golds):
        return False
    return True


OutcomeMetric = Callable[[str, Sequence[str]], float]

OUTCOME_METRICS: dict[str, OutcomeMetric] = {
    "em": exact_match,
    "f1": f1_score,
    "contains": gold_in_prediction,
}


def _metric(metric: str | OutcomeMetric) -> OutcomeMetric:
    if isinstance(metric, str):
        if metric not in OUTCOME_METRICS:
            raise ValueError(f"unknown outcome metric {metric!r}; known: {', '.join(sorted(OUTCOME_METRICS))}")
        return OUTCOME_METRICS[metric]
    if not callable(metric):
        raise TypeError(f"metric must be a name or a callable (prediction, golds) -> float, got {metric!r}")
    return metric


def outcome_score(
    ctx: StepContext,
    metric: str | OutcomeMetric = "em",
    max_answer_words: int = 12,
) -> float:
    """Correctness of the answer given this step, else 0.

    Args:
        ctx: The step.
        metric: ``em``, ``f1``, ``contains`` (gold in prediction) or a judge callable
            ``(prediction, golds) -> [0, 1]`` such as :class:`agents.evaluation.judges.PolicyAnswerJudge`.
        max_answer_words: See :func:`answer_admissible`.

    Returns:
        The score in [0, 1] (0 when the agent did not answer this step or the answer is
        inadmissible). Judge values outside [0, 1] are clipped.

    Raises:
        ValueError: If the metric returns a value that is not finite.
    """
    if ctx.answer is None:
        return 0.0
    golds = ctx.example.answers
    if not answer_admissible(ctx.answer, golds, max_answer_words):
        return 0.0
    value = float(_metric(metric)(ctx.answer, golds))
    if not math.isfinite(value):
        raise ValueError(f"outcome metric returned {value!r} for answer {ctx.answer!r}")
    return min(1.0, max(0.0, value))



def outcome_bounds(max_queries: int, **params: Any) -> tuple[float, float]:
    """The least and greatest value :func:`outcome_score` takes on one step: a score in [0, 1]."""
    return 0.0, 1.0


#: Any tag a built-in protocol uses (the tag and tool-call protocols alike).
_ANY_TAG = rf"</?(?:{'|'.join(ALL_TAGS)})>"
_NO_TAG = rf"(?:(?!{_ANY_TAG}).)*"
_SEARCH_R1_TURN = re.compile(rf"\s*<think>{_NO_TAG}</think>\s*<(search|answer)>{_NO_TAG}</\1>\s*", re.DOTALL)
_ARENA_ANSWER = re.compile(
    rf"\s*(?:<think>{_NO_TAG}</think>\s*)?<relevance>{_NO_TAG}</relevance>\s*<analysis>(?P<analysis>{_NO_TAG})</analysis>"
    rf"\s*<answer>{_NO_TAG}</answer>\s*",
    re.DOTALL,
)


def arena_turn_valid(ctx: StepContext) -> bool:
    """Whether an answer turn has ARENA's structure.

    Optional ``<think>..</think>``, then ``<relevance>..</relevance>``, a non-empty
    ``<analysis>..</analysis>`` and ``<answer>..</answer>``, in that order, exact lower-case
    tags, nothing outside them, and at least one cited number.

    Args:
        ctx: The step.

    Returns:
        True for a well-formed ARENA answer turn; False for any other turn.
    """
    if not isinstance(ctx.action, Answer) or not ctx.action.cited:
        return False
    m = _ARENA_ANSWER.fullmatch(ctx.text)
    return m is not None and bool(m.group("analysis").strip())


def citation_f1(ctx: StepContext) -> float:
    """F1 of the cited documents against the example's gold evidence (0 without either).

    Only documents the environment showed in this episode can be cited
    (:attr:`StepContext.cited_doc_ids`); a number never shown counts as nothing cited.
    """
    cited = set(ctx.cited_doc_ids or ())
    gold = set(ctx.example.evidence_ids)
    hit = len(cited & gold)
    if not hit:
        return 0.0
    precision, recall = hit / len(cited), hit / len(gold)
    return 2 * precision * recall / (precision + recall)


def search_r1_turn_valid(ctx: StepContext) -> bool:
    """Whether this turn has the strict Search-R1 shape.

    Search-R1's ``is_valid_sequence`` accepts ``<think>..</think>`` followed by one
    ``<search>..</search>`` or ``<answer>..</answer>``, with exact lower-case tags, no tag inside
    another, and only whitespace outside the tags. Here a turn must also parse as a search or an
    answer (not an :class:`~searchenv.protocols.Invalid` turn). Under ``tools`` a turn that
    parses as a call is well-formed (the protocol's parser already holds it to one call and
    nothing after it).

    Args:
        ctx: The step.

    Returns:
        True for a well-formed Search-R1 turn.
    """
    if isinstance(ctx.action, Invalid):
        return False
    if ctx.action.call is not None:  # a native tool call (``tools``): the call is the turn's whole shape
        return True
    return _SEARCH_R1_TURN.fullmatch(ctx.text) is not None


def format_score(ctx: StepContext, valid: float = 0.0, invalid: float = -1.0, require_think: bool = False) -> float:
    """``valid`` for a well-formed turn, ``invalid`` for a malformed one.

    Args:
        ctx: The step.
        valid: Credit for a well-formed turn.
        invalid: Value (usually a penalty) for a malformed turn.
        require_think: Also call a turn malformed unless it has the strict Search-R1 shape
            (see :func:`search_r1_turn_valid`: ``<think>`` first, nothing outside tags).

    Returns:
        ``valid`` or ``invalid``.
    """
    bad = isinstance(ctx.action, Invalid) or (require_think and not search_r1_turn_valid(ctx))
    return invalid if bad else valid


def format_bounds(max_queries: int, valid: float = 0.0, invalid: float = -1.0,
                  **params: Any) -> tuple[float, float]:
    """The least and greatest value :func:`format_score` takes on one step: ``valid`` or ``invalid``."""
    return min(float(valid), float(invalid)), max(float(valid), float(invalid))


def cost_score(
    ctx: StepContext,
    per_search: float = 1.0,
    per_query: float = 0.0,
    budget: int | None = None,
    repeat: float = 0.0,
    per_open: float = 0.0,
) -> float:
    """A non-positive search cost for this step.

    Args:
        ctx: The step.
        per_search: Cost of a search turn.
        per_query: Cost of each query in it.
        budget: If set, this many searches are free and only later ones cost.
        repeat: Extra cost per query already searched in the episode (normalised text).
        per_open: Cost of opening a document (``browse``), priced apart from searches.

    Returns:
        Minus the cost; 0 for other turns and for searches the retriever failed to answer
        (an outage is not the agent's doing).

    Raises:
        ValueError: If ``budget`` is negative.
    """
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ValueError(f"budget must be a non-negative integer or None, got {budget!r}")
    if isinstance(ctx.action, Open):
        return -per_open
    if not isinstance(ctx.action, Search) or ctx.infra_error:
        return 0.0
    if budget is not None and ctx.num_searches <= budget:
        base = 0.0
    else:
        base = per_search + per_query * len(ctx.queries)
    return -(base + repeat * ctx.repeated_queries)


def cost_bounds(max_queries: int, per_search: float = 1.0, per_query: float = 0.0, repeat: float = 0.0,
                per_open: float = 0.0, **params: Any) -> tuple[float, float]:
    """The least and greatest value :func:`cost_score` takes on one step, ``max_queries`` queries a turn at most."""
    search = float(per_search) + max_queries * (float(per_query) + float(repeat))
    values = (0.0, -search, -float(per_open), -float(per_search))
    return min(values), max(values)


def relevance_score(ctx: StepContext, verifier: str | Callable[[StepContext], float] = "gold-evidence") -> float:
    """Process reward: how relevant this step's newly retrieved documents are, in [0, 1].

    Documents already retrieved earlier in the episode earn nothing again (verifiers look only
    at ``ctx.new_hits`` / ``ctx.new_doc_ids``).

    Args:
        ctx: The step.
        verifier: A verifier name from :mod:`searchenv.rewards.verifiers` (``gold-evidence``,
            ``answer-in-doc``, ``embedding``) or a callable ``ctx -> [0, 1]`` such as
            :class:`searchenv.rewards.verifiers.JudgeVerifier`.

    Returns:
        The score (0 for non-search turns, failed searches and searches with no new document).

    Raises:
        ValueError: If the verifier returns a value that is not finite.
    """
    if not isinstance(ctx.action, Search) or ctx.infra_error or not ctx.new_doc_ids:
        return 0.0
    from searchenv.rewards.verifiers import get_verifier

    fn = get_verifier(verifier) if isinstance(verifier, str) else verifier
    value = float(fn(ctx))
    if not math.isfinite(value):
        raise ValueError(f"relevance verifier returned {value!r}")
    return min(1.0, max(0.0, value))


def relevance_bounds(max_queries: int, **params: Any) -> tuple[float, float]:
    """The least and greatest value :func:`relevance_score` takes on one step: a share in [0, 1]."""
    return 0.0, 1.0


def evidence_recall(example: QAExample, doc_ids: frozenset[str] | set[str]) -> float:
    """Share of the example's gold evidence documents among ``doc_ids`` (0 without gold evidence)."""
    gold = set(example.evidence_ids)
    return len(gold & set(doc_ids)) / len(gold) if gold else 0.0


def shaping_score(ctx: StepContext, gamma: float = 1.0) -> float:
    """Potential-based shaping ``F = gamma * phi(s') - phi(s)`` with phi = evidence recall so far.

    ``phi(s)`` is the share of gold evidence retrieved before this step and ``phi(s')`` the share
    after it; at the last step of an episode (answered or truncated) ``phi(s')`` is taken as 0,
    as for a terminal state in Ng, Harada & Russell (1999). With ``phi(s_0) = 0`` (nothing
    retrieved at reset) the discounted sum over a whole episode telescopes:
    ``sum_t gamma^(t-1) F_t = gamma^T * 0 - phi(s_0) = 0``, so shaping changes no episode's
    (discounted) return and no policy's ranking; it only moves credit earlier, to the search
    that found the evidence. Over the first ``k`` steps of an episode still running the sum is
    ``gamma^k * phi(s_k) - phi(s_0)``. Use the trainer's discount as ``gamma``.

    Args:
        ctx: The step.
        gamma: Discount factor in [0, 1].

    Returns:
        The shaping reward.

    Raises:
        ValueError: If ``gamma`` is outside [0, 1].
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    before = evidence_recall(ctx.example, ctx.seen_doc_ids)
    after = 0.0 if ctx.done else evidence_recall(ctx.example, ctx.seen_doc_ids | set(ctx.new_doc_ids))
    return gamma * after - before


def shaping_bounds(max_queries: int, gamma: float = 1.0, **params: Any) -> tuple[float, float]:
    """The least and greatest value of :func:`shaping_score`: ``gamma * phi(after) - phi(before)``, phi in [0, 1]."""
    gamma = float(gamma)
    return min(-1.0, gamma - 1.0, 0.0), max(gamma, 0.0)


#: The terms by name (``reward={"outcome": 1, "cost": 0.05}``); :func:`register_term` adds one.
TERMS: Registry[Callable[..., float]] = Registry("reward term", {
    "outcome": outcome_score,
    "format": format_score,
    "cost": cost_score,
    "relevance": relevance_score,
    "shaping": shaping_score,
}, callables=True)

#: Each term's bounds on one step, before its weight: ``bounds(max_queries, **params) -> (low, high)``
#: (the term's own keyword parameters; ``max_queries`` is the protocol's most queries a turn). A new
#: term declares its bounds beside its function; servers declare their reward range from them.
TERM_BOUNDS: Registry[Callable[..., tuple[float, float]]] = Registry("reward term's bounds", {
    "outcome": outcome_bounds,
    "format": format_bounds,
    "cost": cost_bounds,
    "relevance": relevance_bounds,
    "shaping": shaping_bounds,
}, callables=True)


def register_term(name: str, score: Callable[..., float], bounds: Callable[..., tuple[float, float]]) -> None:
    """Make a term selectable by name in weighted rewards, with its bounds on one step.

    Args:
        name: The term's name (a key of ``reward={...}``).
        score: ``score(ctx, **params) -> float``, a pure function of the step.
        bounds: ``bounds(max_queries, **params) -> (low, high)``: the least and greatest ``score``.

    Raises:
        TypeError: If ``score`` or ``bounds`` is not callable.
        ValueError: If ``name`` is not a non-empty string.
    """
    for what, fn in (("score", score), ("bounds", bounds)):
        if not callable(fn):
            raise TypeError(f"a reward term's {what} must be callable, got {fn!r:.60}")
    TERMS.register(name, score)
    TERM_BOUNDS.register(name, bounds)
