"""Published rewards that pay at the end of the episode: Search-R1 v0.3 with format credit, ReSearch, ARENA, R3-RAG."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from searchenv.actions import Invalid, Search
from searchenv.metrics import (
    answer_substring_in_text,
)
from searchenv.rewards.context import RewardResult, ScoredReward, StepContext
from searchenv.rewards.terms import (
    OutcomeMetric,
    arena_turn_valid,
    citation_f1,
    outcome_score,
    relevance_score,
    search_r1_turn_valid,
)


def _zeros(names: Sequence[str]) -> dict[str, float]:
    return {n: 0.0 for n in names}


@dataclass(frozen=True)
class SearchR1FormatReward(ScoredReward):
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


@dataclass(frozen=True)
class ReSearchReward(ScoredReward):
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


@dataclass(frozen=True)
class ArenaReward(ScoredReward):
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


@dataclass(frozen=True)
class R3RAGReward(ScoredReward):
    """R3-RAG (Li et al., 2025): relevance process reward scaled by the outcome, plus an outcome bonus.

    Each search step's relevance ``rel_t`` in [0, 1] comes from a verifier (R3-RAG asks an LLM;
    here any :mod:`searchenv.rewards.verifiers` verifier, ``answer-in-doc`` by default). With
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
