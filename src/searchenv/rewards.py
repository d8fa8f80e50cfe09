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

Terms (:data:`TERMS`): ``outcome``, ``format``, ``cost``, ``relevance``, ``shaping``.
Presets (:data:`PRESETS`, ``reward="name"`` in ``gymnasium.make``): ``default``,
``search-r1``, ``search-r1-format``, ``research``, ``r3-rag``, ``r3-rag-normalized``,
``frugal``, ``process``, ``shaped``, ``arena``. Formulas and sources are in ``docs/rewards.md``.

Guards against reward hacking, applied by every outcome computation here:

- The answer is read only from the agent's own turn (``ctx.action`` parsed from the agent's
  text), never from retrieved documents.
- :func:`answer_admissible`: an answer longer than a cap, one that lists several candidates
  ("A or B", "A; B", "A / B") or one that normalises to nothing earns no outcome credit.
- ``relevance`` pays only for documents not retrieved earlier in the episode, and ``cost``
  can charge repeated queries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from searchenv.metrics import (
    answer_substring_in_text,
    exact_match,
    f1_score,
    gold_in_prediction,
    normalize_answer,
)
from searchenv.protocols import Action, Answer, Invalid, Open, Search
from searchenv.retrievers.base import Hit
from searchenv.tasks.base import QAExample

__all__ = [
    "OUTCOME_METRICS",
    "PRESETS",
    "ArenaReward",
    "TERMS",
    "R3RAGReward",
    "ReSearchReward",
    "Reward",
    "RewardResult",
    "SearchR1FormatReward",
    "StepContext",
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
    "relevance_score",
    "score_step",
    "search_r1_turn_valid",
    "shaping_score",
]


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


# ---------------------------------------------------------------------------------------------
# Guards and outcome
# ---------------------------------------------------------------------------------------------

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
            ``(prediction, golds) -> [0, 1]`` such as :class:`agents.judges.PolicyAnswerJudge`.
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


# ---------------------------------------------------------------------------------------------
# Per-step terms
# ---------------------------------------------------------------------------------------------

_ANY_TAG = r"</?(?:think|search|answer|information|open|relevance|analysis)>"
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


def relevance_score(ctx: StepContext, verifier: str | Callable[[StepContext], float] = "gold-evidence") -> float:
    """Process reward: how relevant this step's newly retrieved documents are, in [0, 1].

    Documents already retrieved earlier in the episode earn nothing again (verifiers look only
    at ``ctx.new_hits`` / ``ctx.new_doc_ids``).

    Args:
        ctx: The step.
        verifier: A verifier name from :mod:`searchenv.verifiers` (``gold-evidence``,
            ``answer-in-doc``, ``embedding``) or a callable ``ctx -> [0, 1]`` such as
            :class:`searchenv.verifiers.JudgeVerifier`.

    Returns:
        The score (0 for non-search turns, failed searches and searches with no new document).

    Raises:
        ValueError: If the verifier returns a value that is not finite.
    """
    if not isinstance(ctx.action, Search) or ctx.infra_error or not ctx.new_doc_ids:
        return 0.0
    from searchenv.verifiers import get_verifier

    fn = get_verifier(verifier) if isinstance(verifier, str) else verifier
    value = float(fn(ctx))
    if not math.isfinite(value):
        raise ValueError(f"relevance verifier returned {value!r}")
    return min(1.0, max(0.0, value))


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


TERMS: dict[str, Callable[..., float]] = {
    "outcome": outcome_score,
    "format": format_score,
    "cost": cost_score,
    "relevance": relevance_score,
    "shaping": shaping_score,
}


# ---------------------------------------------------------------------------------------------
# Weighted sums of terms
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightedReward:
    """A weighted sum of named terms, paid as they occur: ``r = sum_i w_i * term_i(ctx, **params_i)``.

    Signals are the unweighted term values.

    Args:
        terms: Term name -> (weight, keyword parameters). Names are keys of :data:`TERMS`.
    """

    terms: Mapping[str, tuple[float, Mapping[str, Any]]]

    def __post_init__(self) -> None:
        for name, spec in self.terms.items():
            if name not in TERMS:
                raise ValueError(f"unknown reward term {name!r}; known terms: {', '.join(sorted(TERMS))}")
            if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping)):
                raise ValueError(f"term {name!r}: expected (weight, params dict), got {spec!r}")
            weight = spec[0]
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise ValueError(f"term {name!r}: weight must be a finite number, got {weight!r}")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step with contributions and raw signals."""
        raw = {name: float(TERMS[name](ctx, **params)) for name, (_, params) in self.terms.items()}
        parts = {name: float(w) * raw[name] for name, (w, _) in self.terms.items()}
        return RewardResult(sum(parts.values()), parts, raw)

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms


def custom(weights: Mapping[str, float | Mapping[str, Any]], **params: Mapping[str, Any]) -> WeightedReward:
    """A weighted sum from a plain dict.

    Examples: ``custom({"outcome": 1, "cost": 0.05})``;
    ``custom({"outcome": {"weight": 1, "metric": "f1"}, "relevance": {"weight": 0.2,
    "verifier": "answer-in-doc"}})``; or ``custom({"outcome": 1}, outcome={"metric": "f1"})``.

    Args:
        weights: Term name -> weight, or term name -> ``{"weight": w, **term parameters}``.
        **params: Term name -> keyword parameters for that term.

    Returns:
        The reward.

    Raises:
        ValueError: For unknown terms, parameters without a weight, or a missing weight.
    """
    unknown = set(params) - set(weights)
    if unknown:
        raise ValueError(f"parameters given for terms without a weight: {sorted(unknown)}")
    spec: dict[str, tuple[float, Mapping[str, Any]]] = {}
    for name, w in weights.items():
        if isinstance(w, Mapping):
            if "weight" not in w:
                raise ValueError(f"term {name!r}: a dict spec needs a 'weight' key, got {dict(w)!r}")
            opts = {k: v for k, v in w.items() if k != "weight"}
            clash = set(opts) & set(params.get(name, {}))
            if clash:
                raise ValueError(f"term {name!r}: parameters {sorted(clash)} given twice")
            opts.update(params.get(name, {}))
            spec[name] = (_weight(name, w["weight"]), opts)
        else:
            spec[name] = (_weight(name, w), dict(params.get(name, {})))
    return WeightedReward(spec)


def _weight(name: str, w: object) -> float:
    if isinstance(w, bool) or not isinstance(w, int | float):
        raise ValueError(f"term {name!r}: weight must be a number, got {w!r}")
    return float(w)


# ---------------------------------------------------------------------------------------------
# Published rewards that pay at the end of the episode
# ---------------------------------------------------------------------------------------------


def _zeros(names: Sequence[str]) -> dict[str, float]:
    return {n: 0.0 for n in names}


@dataclass(frozen=True)
class SearchR1FormatReward:
    """Search-R1 v0.3 outcome reward with format credit (``qa_em_format.compute_score_em``).

    Paid at the last step of the episode (it depends on the whole trajectory's format)::

        answered, EM = 1, valid format     -> score                                   (1.0)
        answered, EM = 1, invalid format   -> score - structure_format_score          (0.8)
        answered, EM = 0, valid format     -> structure_format_score
                                              (+ retrieval_score if a retrieved doc
                                               contains a gold answer)                 (0.2)
        answered, EM = 0, invalid format   -> final_format_score                      (0.1)
        no answer                          -> 0    (a trajectory without an answer is never
                                                    valid: Search-R1's state machine must end
                                                    after </answer>)

    The trajectory has a *valid format* when every turn has the strict Search-R1 shape
    (:func:`search_r1_turn_valid`: ``<think>..</think>`` then one ``<search>`` or ``<answer>``,
    nothing else) and the episode ends with an answer. "A retrieved doc contains a gold answer"
    is Search-R1's normalised-substring test over all documents retrieved in the episode.
    Defaults are the values of Search-R1's v0.3 training scripts (``retrieval_score=0``).

    Terms: ``outcome`` (``score`` x EM), ``retrieval`` and ``format`` (the rest of the table
    value). Signals per step: ``format_ok`` and ``gold_in_docs``.

    Args:
        score_correct: Reward for a correct answer (Search-R1's ``score``).
        structure_format_score: Credit for a valid trajectory with a wrong answer, and the
            deduction for a correct answer in an invalid trajectory.
        final_format_score: Credit for a wrong answer in an invalid trajectory.
        retrieval_score: Extra credit for a valid trajectory with a wrong answer when a
            retrieved document contains a gold answer.
        metric: Correctness test (EM in Search-R1).
        max_answer_words: See :func:`answer_admissible`.
    """

    score_correct: float = 1.0
    structure_format_score: float = 0.2
    final_format_score: float = 0.1
    retrieval_score: float = 0.0
    metric: str | OutcomeMetric = "em"
    max_answer_words: int = 12

    TERM_NAMES = ("outcome", "format", "retrieval")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step (all zero until the episode ends)."""
        format_ok = float(search_r1_turn_valid(ctx))
        gold_in_docs = float(
            any(answer_substring_in_text(f"{h.title} {h.text}", ctx.example.answers) for h in ctx.step_hits)
        )
        signals = {"format_ok": format_ok, "gold_in_docs": gold_in_docs}
        terms = _zeros(self.TERM_NAMES)
        if not ctx.done:
            return RewardResult(0.0, terms, signals)
        answered = ctx.answer is not None
        valid = answered and all(v >= 1.0 for v in ctx.signals_so_far("format_ok", format_ok))
        retrieval_correct = valid and any(v >= 1.0 for v in ctx.signals_so_far("gold_in_docs", gold_in_docs))
        correct = answered and outcome_score(ctx, self.metric, self.max_answer_words) >= 1.0
        if not answered:
            total = 0.0
        elif correct:
            total = self.score_correct if valid else self.score_correct - self.structure_format_score
            terms["outcome"] = self.score_correct
        elif valid:
            terms["retrieval"] = self.retrieval_score if retrieval_correct else 0.0
            total = self.structure_format_score + terms["retrieval"]
        else:
            total = self.final_format_score
        terms["format"] = total - terms["outcome"] - terms["retrieval"]
        signals["valid_format"] = float(valid)
        return RewardResult(total, terms, signals)

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms


@dataclass(frozen=True)
class ReSearchReward:
    """ReSearch (Chen et al., 2025): F1 of the answer, a small credit for a well-formed wrong one.

    Paid at the last step::

        well-formed trajectory with an answer:  F1 if F1 > 0, else format_credit (0.1)
        otherwise (malformed or no answer):     0

    *Well-formed* maps ReSearch's template check (the response starts with ``<think>``, tags are
    paired, exactly one ``<answer>`` and it ends the response) onto turns: the first turn starts
    with ``<think>``, no turn is malformed, and the episode ends with an answer (pairing and the
    single final answer are already enforced by the turn parser).

    Terms: ``outcome`` (F1) and ``format`` (the 0.1 credit). Signal per step: ``format_ok``.

    Args:
        format_credit: Reward for a well-formed answer with F1 = 0.
        metric: Outcome metric (F1 in ReSearch).
        max_answer_words: See :func:`answer_admissible`.
    """

    format_credit: float = 0.1
    metric: str | OutcomeMetric = "f1"
    max_answer_words: int = 12

    TERM_NAMES = ("outcome", "format")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step (all zero until the episode ends)."""
        ok = not isinstance(ctx.action, Invalid)
        if ctx.turn == 1 and ctx.action.call is None and not ctx.text.lstrip().startswith("<think>"):
            ok = False  # a tool call (``tools``) reasons in free text before the call
        signals = {"format_ok": float(ok)}
        terms = _zeros(self.TERM_NAMES)
        if not ctx.done:
            return RewardResult(0.0, terms, signals)
        valid = ctx.answer is not None and all(v >= 1.0 for v in ctx.signals_so_far("format_ok", float(ok)))
        if valid:
            f1 = outcome_score(ctx, self.metric, self.max_answer_words)
            if f1 > 0.0:
                terms["outcome"] = f1
            else:
                terms["format"] = self.format_credit
        return RewardResult(sum(terms.values()), terms, signals)

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms


@dataclass(frozen=True)
class ArenaReward:
    """ARENA (Ren et al., 2025): format, accuracy, relevance of the cited evidence, and a bonus.

    Paid at the answering step (zero before; nothing when the episode ends unanswered)::

        format     = format_weight    if the answer turn has ARENA's structure (arena_turn_valid)
        outcome    = accuracy_weight  x metric(answer, gold)         (EM by default)
        relevance  = relevance_weight x citation F1 vs gold evidence (cited documents the
                                         environment never showed count as nothing)
        bonus      = bonus_weight     if format holds, the answer is correct and the citations
                                         are exactly the gold evidence (F1 = 1)

    The four parts are our reading of the paper's adaptive reward (format, accuracy, relevance,
    bonus when all hold), with weights as options; malformed earlier turns cost
    ``format_penalty`` each when they happen.

    Terms: ``format``, ``outcome``, ``relevance``, ``bonus``. Signal per step: ``citation_f1``.

    Args:
        format_weight: Credit for a well-formed structured answer.
        accuracy_weight: Weight of the answer's correctness.
        relevance_weight: Weight of the citation F1.
        bonus_weight: Bonus when format, answer and citations all hold.
        format_penalty: Reward of a malformed turn.
        metric: Correctness measure of the answer.
        max_answer_words: See :func:`answer_admissible`.
    """

    format_weight: float = 0.5
    accuracy_weight: float = 1.0
    relevance_weight: float = 0.5
    bonus_weight: float = 0.5
    format_penalty: float = -0.1
    metric: str | OutcomeMetric = "em"
    max_answer_words: int = 12

    TERM_NAMES = ("format", "outcome", "relevance", "bonus")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step (a format penalty at malformed turns; the rest at the answer)."""
        terms = _zeros(self.TERM_NAMES)
        f1 = citation_f1(ctx) if ctx.answer is not None else 0.0
        signals = {"citation_f1": f1}
        if isinstance(ctx.action, Invalid):
            terms["format"] = self.format_penalty
        if ctx.answer is not None:
            valid = arena_turn_valid(ctx)
            accuracy = outcome_score(ctx, self.metric, self.max_answer_words)
            terms["format"] = self.format_weight * float(valid)
            terms["outcome"] = self.accuracy_weight * accuracy
            terms["relevance"] = self.relevance_weight * f1
            terms["bonus"] = self.bonus_weight * float(valid and accuracy >= 1.0 and f1 >= 1.0)
        return RewardResult(sum(terms.values()), terms, signals)

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms


@dataclass(frozen=True)
class R3RAGReward:
    """R3-RAG (Li et al., 2025): relevance process reward scaled by the outcome, plus an outcome bonus.

    Each search step's relevance ``rel_t`` in [0, 1] comes from a verifier (R3-RAG asks an LLM;
    here any :mod:`searchenv.verifiers` verifier, ``answer-in-doc`` by default). With
    ``R = sum_t rel_t`` over the episode's search steps (``normalize=True``: the mean over
    search steps instead, 0 without searches)::

        correct answer:  correct_scale * R + correct_bonus     (1.6 * R + 2.0)
        wrong answer:    wrong_scale * R                        (0.8 * R)
        no answer:       none_scale * R                         (0.9 * R)
        malformed turn:  format_penalty, paid at that turn     (-0.9 each)

    The scale depends on the final outcome, so the relevance and outcome parts are paid at the
    last step (reported as terms ``relevance`` and ``outcome``; zero before); each step's raw
    relevance is reported as the signal ``relevance`` when it happens. R3-RAG ends a trajectory
    at a format failure; here a malformed turn costs a turn and is charged when it happens.

    With the published sum, a wrong answer after many relevant searches can out-earn a correct
    one (``0.8 * 3 = 2.4 > 2.0``); ``normalize=True`` (preset ``r3-rag-normalized``) bounds the
    process part so a correct answer always earns more.

    Args:
        verifier: Relevance verifier name or callable ``ctx -> [0, 1]``.
        normalize: Mean instead of sum of per-step relevance.
        correct_scale: Relevance multiplier for a correct answer.
        correct_bonus: Outcome reward for a correct answer.
        wrong_scale: Relevance multiplier for a wrong answer.
        none_scale: Relevance multiplier when the episode ends unanswered.
        format_penalty: Reward of a malformed turn.
        metric: Correctness test; an answer is correct when it scores at least ``correct_threshold``.
        correct_threshold: See ``metric``.
        max_answer_words: See :func:`answer_admissible`.
    """

    verifier: str | Callable[[StepContext], float] = "answer-in-doc"
    normalize: bool = False
    correct_scale: float = 1.6
    correct_bonus: float = 2.0
    wrong_scale: float = 0.8
    none_scale: float = 0.9
    format_penalty: float = -0.9
    metric: str | OutcomeMetric = "em"
    correct_threshold: float = 1.0
    max_answer_words: int = 12

    TERM_NAMES = ("outcome", "relevance", "format")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step: a format penalty now, relevance and outcome at the end."""
        rel = relevance_score(ctx, self.verifier)
        is_search = float(isinstance(ctx.action, Search))
        signals = {"relevance": rel, "search": is_search}
        terms = _zeros(self.TERM_NAMES)
        if isinstance(ctx.action, Invalid):
            terms["format"] = self.format_penalty
        if ctx.done:
            rels = ctx.signals_so_far("relevance", rel)
            searches = sum(ctx.signals_so_far("search", is_search))
            total_rel = sum(rels)
            if self.normalize:
                total_rel = total_rel / searches if searches else 0.0
            if ctx.answer is None:
                terms["relevance"] = self.none_scale * total_rel
            elif outcome_score(ctx, self.metric, self.max_answer_words) >= self.correct_threshold:
                terms["relevance"] = self.correct_scale * total_rel
                terms["outcome"] = self.correct_bonus
            else:
                terms["relevance"] = self.wrong_scale * total_rel
        return RewardResult(sum(terms.values()), terms, signals)

    def __call__(self, ctx: StepContext) -> tuple[float, dict[str, float]]:
        """Score one step."""
        r = self.score(ctx)
        return r.reward, r.terms


# ---------------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------------


def _default(**options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options}), "format": (0.1, {})})


def _search_r1(**options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options})})


def _frugal(search_cost: float = 0.1, **options: Any) -> Reward:
    return WeightedReward(
        {"outcome": (1.0, {"metric": "em", **options}), "cost": (float(search_cost), {"per_search": 1.0})}
    )


def _process(weight: float = 0.5, verifier: str | Callable[[StepContext], float] = "gold-evidence") -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em"}), "relevance": (float(weight), {"verifier": verifier})})


def _shaped(gamma: float = 1.0, **options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options}), "shaping": (1.0, {"gamma": gamma})})


def _r3_rag_normalized(**options: Any) -> Reward:
    return R3RAGReward(normalize=True, **options)


PRESETS: dict[str, Callable[..., Reward]] = {
    # EM at the answering step, -0.1 per malformed turn.
    "default": _default,
    # Search-R1 (Jin et al., 2025): exact match of the final answer, nothing else.
    "search-r1": _search_r1,
    # Search-R1 v0.3: EM with format credit (qa_em_format.py table).
    "search-r1-format": SearchR1FormatReward,
    # ReSearch (Chen et al., 2025): F1, 0.1 for a well-formed wrong answer, 0 if malformed.
    "research": ReSearchReward,
    # R3-RAG (Li et al., 2025): relevance scaled by outcome, published per-step sum.
    "r3-rag": R3RAGReward,
    # R3-RAG with mean relevance: a correct answer always out-earns a wrong one.
    "r3-rag-normalized": _r3_rag_normalized,
    # FrugalRAG-style (Java et al., 2025): EM minus 0.1 per search.
    "frugal": _frugal,
    # EM plus 0.5 x share of gold evidence newly retrieved (sums to at most 0.5 per episode).
    "process": _process,
    # EM plus potential-based shaping on evidence recall (sums to 0 over an episode).
    "shaped": _shaped,
    # ARENA (Ren et al., 2025): format + EM + citation F1 + a bonus when all hold (protocol="arena").
    "arena": ArenaReward,
}


def preset_names() -> list[str]:
    """Names accepted by ``reward="name"``."""
    return sorted(PRESETS)


def preset(name: str, **options: Any) -> Reward:
    """Build a preset with options, e.g. ``preset("r3-rag", verifier=JudgeVerifier(judge))``.

    Args:
        name: A preset name (see :func:`preset_names`).
        **options: Keyword arguments of that preset's reward class or factory.

    Returns:
        The reward.

    Raises:
        ValueError: For an unknown name.
        TypeError: For an option the preset does not take.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown reward preset {name!r}; known: {', '.join(preset_names())}")
    return PRESETS[name](**options)


def get_reward(spec: str | Reward | Mapping[str, float | Mapping[str, Any]]) -> Reward:
    """Resolve ``reward=`` from ``gymnasium.make``: a preset name, a weights dict, or a Reward callable.

    Raises:
        ValueError: For an unknown preset name or bad weights.
        TypeError: For anything else.
    """
    if isinstance(spec, str):
        return preset(spec)
    if isinstance(spec, Mapping):
        return custom(spec)
    if callable(spec):
        return spec
    raise TypeError(f"reward must be a preset name, a dict of term weights or a callable, got {type(spec).__name__}")
