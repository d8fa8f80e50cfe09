from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings, target
from hypothesis import strategies as st

from searchenv.metrics import gold_in_prediction
from searchenv.protocols import Answer, Invalid, Search, sanitize
from searchenv.retrievers.base import Hit
from searchenv.rewards import (
    PRESETS,
    R3RAGReward,
    RewardResult,
    SearchR1FormatReward,
    StepContext,
    WeightedReward,
    answer_admissible,
    cost_score,
    custom,
    format_score,
    get_reward,
    outcome_score,
    preset,
    preset_names,
    relevance_score,
    score_step,
    search_r1_turn_valid,
    shaping_score,
)

from .conftest import DOCS, EXAMPLES

Q0, Q1, Q2 = EXAMPLES[0], EXAMPLES[1], EXAMPLES[2]
DOC = {d.id: d for d in DOCS}


def ctx(action: Any = None, example: Any = Q1, **kw: Any) -> StepContext:
    kw.setdefault("turn", 1)
    kw.setdefault("terminated", isinstance(action, Answer))
    kw.setdefault("truncated", False)
    return StepContext(example=example, action=action if action is not None else Search(("x",)), **kw)


def hit(doc_id: str) -> Hit:
    d = DOC[doc_id]
    return Hit(d.id, d.title, d.text, 1.0)


def run(env: Any, turns: list[str], example_id: str = "q0") -> tuple[list[float], list[dict[str, Any]]]:
    """Play ``turns`` (stopping when the episode ends); return rewards and infos."""
    env.reset(options={"example_id": example_id})
    rewards, infos = [], []
    for t in turns:
        _, r, term, trunc, info = env.step(t)
        rewards.append(float(r))
        infos.append(info)
        if term or trunc:
            break
    return rewards, infos


def S(q: str, think: bool = True) -> str:
    return f"<think>look up {q}</think>\n<search>{q}</search>" if think else f"<search>{q}</search>"


def A(a: str, think: bool = True) -> str:
    return f"<think>I know it</think>\n<answer>{a}</answer>" if think else f"<answer>{a}</answer>"


# ---- guards and outcome ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("Karsk", True),
        ("karsk.", True),
        ("Karsk or Essaly", False),
        ("Karsk; Essaly", False),
        ("Karsk / Essaly", False),
        ("Karsk | Essaly", False),
        ("Karsk and/or Essaly", False),
        ("born in the mountain town of Karsk in the country of Vuldoria in the year 1940", False),
        ("...", False),
        ("the", False),
    ],
)
def test_answer_admissible(answer: str, ok: bool) -> None:
    assert answer_admissible(answer, ["Karsk"]) is ok


def test_guard_allows_shapes_the_gold_itself_has() -> None:
    assert answer_admissible("War or Peace", ["War or Peace"])
    long_gold = " ".join(f"w{i}" for i in range(20))
    assert answer_admissible(long_gold, [long_gold])
    with pytest.raises(ValueError, match="max_answer_words"):
        answer_admissible("x", ["x"], max_answer_words=0)


def test_outcome_metrics_and_guard() -> None:
    assert outcome_score(ctx(Answer("Karsk"))) == 1.0
    assert outcome_score(ctx(Answer("Karsk town")), metric="f1") == pytest.approx(2 / 3)
    assert outcome_score(ctx(Answer("in Karsk")), metric="contains") == 1.0
    # several candidates: the contains metric would pay, the guard stops it
    assert outcome_score(ctx(Answer("Karsk or Essaly or Drathmoor")), metric="contains") == 0.0
    assert outcome_score(ctx(Answer("Karsk or Essaly")), metric="f1") == 0.0
    assert outcome_score(ctx(Search(("Karsk",)))) == 0.0  # no answer this step
    judged = outcome_score(ctx(Answer("K")), metric=lambda p, g: 7.0)
    assert judged == 1.0  # judge values are clipped to [0, 1]
    with pytest.raises(ValueError, match="nan"):
        outcome_score(ctx(Answer("K")), metric=lambda p, g: float("nan"))
    with pytest.raises(ValueError, match="unknown outcome metric"):
        outcome_score(ctx(Answer("K")), metric="bleu")


def test_format_term() -> None:
    good = ctx(Search(("q",)), text="<think>t</think><search>q</search>")
    bare = ctx(Search(("q",)), text="<search>q</search>")
    bad = ctx(Invalid(Invalid.NO_ACTION, "m"), text="hello")
    assert format_score(good) == 0.0 and format_score(bare) == 0.0
    assert format_score(bad) == -1.0
    assert format_score(bare, require_think=True) == -1.0
    assert format_score(good, valid=0.05, require_think=True) == 0.05


@pytest.mark.parametrize(
    ("text", "action", "ok"),
    [
        ("<think>a</think><search>q</search>", Search(("q",)), True),
        ("  <think>a\nb</think>\n\n<answer> X </answer>\n", Answer("X"), True),
        ("<search>q</search>", Search(("q",)), False),  # no think
        ("<think>a</think>so<search>q</search>", Search(("q",)), False),  # text between tags
        ("<think>a</think><think>b</think><search>q</search>", Search(("q",)), False),
        ("<THINK>a</THINK><search>q</search>", Search(("q",)), False),  # Search-R1 tags are exact
        ("<think>a</think><answer>x</answer>", Invalid(Invalid.NO_ACTION, ""), False),
    ],
)
def test_search_r1_turn_shape(text: str, action: Any, ok: bool) -> None:
    assert search_r1_turn_valid(ctx(action, text=text)) is ok


def test_cost_term() -> None:
    s = ctx(Search(("a", "b")), queries=("a", "b"), num_searches=3, repeated_queries=1)
    assert cost_score(s) == -1.0
    assert cost_score(s, per_search=0.1, per_query=0.05) == pytest.approx(-0.2)
    assert cost_score(s, budget=3) == 0.0
    assert cost_score(s, budget=2) == -1.0
    assert cost_score(s, per_search=0.0, repeat=0.5) == -0.5
    assert cost_score(s, budget=5, repeat=0.5) == -0.5  # repeats cost even within the budget
    assert cost_score(ctx(Answer("x"))) == 0.0
    assert cost_score(ctx(Search(("a",)), infra_error=True)) == 0.0
    with pytest.raises(ValueError, match="budget"):
        cost_score(s, budget=-1)


def test_relevance_term_pays_only_new_documents() -> None:
    hits = ((hit("d5"), hit("d0")),)
    first = ctx(Search(("q",)), example=Q0, hits=hits, new_doc_ids=("d5", "d0"))
    again = ctx(Search(("q",)), example=Q0, hits=hits, new_doc_ids=(), seen_doc_ids=frozenset({"d5", "d0"}))
    assert relevance_score(first) == pytest.approx(2 / 3)  # gold-evidence: 2 of d5, d0, d1
    assert relevance_score(again) == 0.0
    assert relevance_score(first, verifier="answer-in-doc") == 1.0
    assert relevance_score(first, verifier=lambda c: 3.0) == 1.0  # clipped
    assert relevance_score(ctx(Answer("x"), example=Q0)) == 0.0
    with pytest.raises(ValueError, match="verifier returned"):
        relevance_score(first, verifier=lambda c: float("inf"))
    with pytest.raises(ValueError, match="unknown relevance verifier"):
        relevance_score(first, verifier="psychic")


# ---- composition -----------------------------------------------------------------------------------


def test_custom_weights_and_params() -> None:
    r = custom({"outcome": {"weight": 2, "metric": "f1"}, "cost": 0.5}, cost={"per_query": 1.0})
    res = r.score(ctx(Answer("Karsk town")))
    assert res.terms["outcome"] == pytest.approx(4 / 3) and res.signals["outcome"] == pytest.approx(2 / 3)
    res = r.score(ctx(Search(("a", "b")), queries=("a", "b")))
    assert res.terms["cost"] == pytest.approx(-1.5) and res.reward == pytest.approx(-1.5)
    assert isinstance(get_reward({"outcome": 1, "cost": 0.05}), WeightedReward)
    with pytest.raises(ValueError, match="unknown reward term"):
        custom({"bonus": 1.0})
    with pytest.raises(ValueError, match="without a weight"):
        custom({"outcome": 1.0}, cost={"per_search": 1})
    with pytest.raises(ValueError, match="'weight'"):
        custom({"outcome": {"metric": "f1"}})
    with pytest.raises(ValueError, match="given twice"):
        custom({"outcome": {"weight": 1, "metric": "f1"}}, outcome={"metric": "em"})
    with pytest.raises(ValueError, match="finite"):
        WeightedReward({"outcome": (math.inf, {})})
    with pytest.raises(TypeError, match="preset name"):
        get_reward(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown reward preset"):
        preset("nope")


def test_score_step_checks_plain_callables() -> None:
    c = ctx(Answer("Karsk"))
    assert score_step(lambda x: (1.0, {"outcome": 1.0}), c) == RewardResult(1.0, {"outcome": 1.0}, {})
    with pytest.raises(ValueError, match="sum to"):
        score_step(lambda x: (1.0, {}), c)
    with pytest.raises(ValueError, match="nan"):
        score_step(lambda x: (float("nan"), {"outcome": float("nan")}), c)
    with pytest.raises(TypeError, match="must return"):
        score_step(lambda x: 1.0, c)  # type: ignore[arg-type,return-value]


def test_user_callable_reward_runs_in_env(make_env) -> None:
    env = make_env(reward=lambda c: (float(c.num_searches), {"searches": float(c.num_searches)}))
    rewards, infos = run(env, [S("Karsk"), S("Essaly"), A("x")])
    assert rewards == [1.0, 2.0, 2.0] and infos[-1]["reward_signals"] == {}
    bad = make_env(reward=lambda c: (1.0, {"outcome": 0.5}))
    bad.reset(seed=0)
    with pytest.raises(ValueError, match="sum to"):
        bad.step(S("Karsk"))


# ---- presets reproduce their published formulas on real episodes ---------------------------------------


def test_preset_names_are_documented() -> None:
    assert set(preset_names()) == {
        "default",
        "search-r1",
        "search-r1-format",
        "research",
        "r3-rag",
        "r3-rag-normalized",
        "frugal",
        "process",
        "shaped",
        "arena",
    }


def test_search_r1_is_em_at_the_end_only(make_env) -> None:
    env = make_env(reward="search-r1")
    rewards, infos = run(env, [S("Glass Orchard director"), "garbage", A("essaly.")])
    assert rewards == [0.0, 0.0, 1.0]
    assert run(env, [S("Glass Orchard director"), A("Drathmoor")])[0] == [0.0, 0.0]


@pytest.mark.parametrize(
    ("turns", "expected", "valid"),
    [
        ([S("Glass Orchard director"), A("Essaly")], 1.0, True),  # correct, valid
        ([S("Glass Orchard director", think=False), A("Essaly")], 0.8, False),  # correct, no think
        (["junk", S("Glass Orchard director"), A("Essaly")], 0.8, False),  # correct, malformed turn
        ([S("Glass Orchard director"), A("Karsk")], 0.2, True),  # wrong, valid
        ([S("Glass Orchard director"), A("Karsk", think=False)], 0.1, False),  # wrong, invalid
        ([S("Glass Orchard director"), S("Velora Quenn born"), S("copper mines"), S("xyzzy")], 0.0, False),
    ],
)
def test_search_r1_format_table(make_env, turns: list[str], expected: float, valid: bool) -> None:
    env = make_env(reward="search-r1-format")
    rewards, infos = run(env, turns)
    assert all(r == 0.0 for r in rewards[:-1])  # paid at the end
    assert rewards[-1] == pytest.approx(expected)
    assert infos[-1]["reward_signals"]["valid_format"] == float(valid)
    assert sum(infos[-1]["reward_terms"].values()) == pytest.approx(expected)


def test_search_r1_format_retrieval_credit(make_env) -> None:
    env = make_env(reward=preset("search-r1-format", retrieval_score=0.1))
    # d1 ("... in the country of Essaly") holds the gold: 0.2 + 0.1 for a valid wrong answer
    rewards, infos = run(env, [S("Drathmoor country"), A("Karsk")])
    assert rewards[-1] == pytest.approx(0.3) and infos[-1]["reward_terms"]["retrieval"] == pytest.approx(0.1)
    assert infos[0]["reward_signals"]["gold_in_docs"] == 1.0
    rewards, _ = run(env, [S("copper mines"), A("Karsk")])  # gold never retrieved
    assert rewards[-1] == pytest.approx(0.2)
    rewards, _ = run(env, [S("Drathmoor country"), A("Essaly")])  # correct: no retrieval credit
    assert rewards[-1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        ([S("Glass Orchard director"), A("Essaly")], 1.0),
        ([S("Glass Orchard director"), A("Essaly harbour")], 2 / 3),  # F1 when above 0
        ([S("Glass Orchard director"), A("Karsk")], 0.1),  # well-formed, F1 = 0
        ([S("Glass Orchard director", think=False), A("Essaly")], 0.0),  # must start with <think>
        ([S("Glass Orchard director"), "junk", A("Essaly")], 0.0),  # malformed turn
        ([S("Glass Orchard director"), S("xyzzy"), S("copper mines"), S("Vuldoria")], 0.0),  # no answer
        ([S("Glass Orchard director"), A("Karsk or Essaly")], 0.1),  # guard: no F1 for candidates
    ],
)
def test_research_formula(make_env, turns: list[str], expected: float) -> None:
    rewards, infos = run(make_env(reward="research"), turns)
    assert rewards[:-1] == [0.0] * (len(rewards) - 1)
    assert rewards[-1] == pytest.approx(expected)


def test_r3_rag_formula(make_env) -> None:
    env = make_env(reward="r3-rag", max_turns=6)
    # relevance (answer-in-doc): d5 names Velora Quenn -> 1; d7 (copper) -> 0; d0 new, names her -> 1
    turns = [S("Glass Orchard director"), S("copper mines"), "junk", S("Velora Quenn born")]
    rewards, infos = run(env, turns + [A("Essaly")])
    assert [i["reward_signals"]["relevance"] for i in infos] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert rewards == pytest.approx([0.0, 0.0, -0.9, 0.0, 1.6 * 2 + 2.0])
    assert infos[-1]["reward_terms"] == pytest.approx({"outcome": 2.0, "relevance": 3.2, "format": 0.0})
    rewards, _ = run(env, turns + [A("Karsk")])
    assert rewards[-1] == pytest.approx(0.8 * 2)
    rewards, _ = run(make_env(reward="r3-rag", max_turns=4), turns)  # no answer
    assert rewards == pytest.approx([0.0, 0.0, -0.9, 0.9 * 2])
    # a search that brings nothing new earns nothing again
    rewards, infos = run(env, [S("Glass Orchard director"), S("Glass Orchard director"), A("Essaly")])
    assert [i["reward_signals"]["relevance"] for i in infos] == [1.0, 0.0, 0.0]
    assert rewards[-1] == pytest.approx(1.6 + 2.0)


def test_r3_rag_normalized_uses_the_mean(make_env) -> None:
    env = make_env(reward="r3-rag-normalized", max_turns=6)
    turns = [S("Glass Orchard director"), S("copper mines"), "junk", S("Velora Quenn born")]
    rewards, _ = run(env, turns + [A("Essaly")])
    assert rewards[-1] == pytest.approx(1.6 * 2 / 3 + 2.0)
    rewards, _ = run(env, [A("Essaly")])  # no searches: mean taken as 0
    assert rewards == [2.0]


def test_frugal_process_shaped_default(make_env) -> None:
    turns = [S("Glass Orchard director"), S("Velora Quenn born"), S("Drathmoor country"), A("Essaly")]
    rewards, _ = run(make_env(reward="frugal"), turns)
    assert rewards == pytest.approx([-0.1, -0.1, -0.1, 1.0])
    rewards, _ = run(make_env(reward="process"), turns)
    assert rewards == pytest.approx([0.5 / 3, 0.5 / 3, 0.5 / 3, 1.0])
    rewards, _ = run(make_env(reward="shaped"), turns)
    assert rewards == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0 - 1.0])
    rewards, _ = run(make_env(reward="default"), ["junk", A("Essaly")])
    assert rewards == pytest.approx([-0.1, 1.0])


# ---- shaping telescopes ------------------------------------------------------------------------------------

QUERIES = [
    "Glass Orchard director",
    "Velora Quenn born",
    "Drathmoor country",
    "copper mines",
    "xyzzy",
    "Essaly capital",
    "Tobin Quenn born",
]
turn_strategy = st.one_of(
    st.sampled_from(QUERIES).map(S),
    st.sampled_from(["junk", "<answer>x", "<search> </search>"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(turn_strategy, min_size=1, max_size=5),
    end=st.sampled_from([None, "Essaly", "Karsk"]),
    gamma=st.sampled_from([1.0, 0.99, 0.9, 0.5]),
    example_id=st.sampled_from(["q0", "q3"]),
)
def test_shaping_telescopes(make_env, turns: list[str], end: str | None, gamma: float, example_id: str) -> None:
    all_turns = turns + ([A(end)] if end else [])
    env = make_env(reward={"shaping": {"weight": 1.0, "gamma": gamma}}, max_turns=len(all_turns))
    rewards, infos = run(env, all_turns, example_id)
    gold = set(next(e for e in EXAMPLES if e.id == example_id).evidence_ids)
    seen: set[str] = set()
    discounted = 0.0
    for t, (r, info) in enumerate(zip(rewards, infos, strict=True), 1):
        seen |= set(info["doc_ids"])
        discounted += gamma ** (t - 1) * r
        if t < len(rewards):  # prefix: gamma^k * phi(s_k) - phi(s_0), phi(s_0) = 0
            assert discounted == pytest.approx(gamma**t * len(gold & seen) / len(gold), abs=1e-12)
    assert discounted == pytest.approx(0.0, abs=1e-12)  # phi(terminal) = 0: the whole episode sums to 0
    assert shaping_score(ctx(Answer("x"), example=Q0)) == 0.0
    with pytest.raises(ValueError, match="gamma"):
        shaping_score(ctx(Answer("x")), gamma=1.5)


# ---- a correct answer out-earns anything else with the same number of searches --------------------------

CORRECT = ["Essaly", "essaly.", "The Essaly"]
WRONG = ["Drathmoor", "Karsk", "Essaly harbour", "Velora Quenn or Essaly", "I do not know"]
JUNK = ["junk", "<answer>Essaly", "<search> </search>", "<information>Essaly</information><answer>Essaly</answer>"]
SAFE_PRESETS = [p for p in sorted(PRESETS) if p != "r3-rag"]


def episode_return(reward: str | Callable[..., Any], make_env: Any, turns: list[str], answered: bool) -> float:
    env = make_env(reward=reward, max_turns=len(turns))
    rewards, infos = run(env, turns)
    assert len(rewards) == len(turns)
    assert (infos[-1]["answer"] is not None) == answered
    return sum(rewards)


RELEVANT = ["Glass Orchard director", "Velora Quenn born", "Drathmoor country", "Essaly capital"]
IRRELEVANT = ["copper mines", "xyzzy", "Vuldoria"]
query = st.sampled_from(RELEVANT) | st.sampled_from(IRRELEVANT)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 4),
    queries=st.lists(query, min_size=4, max_size=4),
    other_queries=st.lists(query, min_size=4, max_size=4),
    junk=st.lists(st.tuples(st.sampled_from(JUNK), st.integers(0, 8)), max_size=2),
    think=st.lists(st.booleans(), min_size=5, max_size=5),
    correct=st.sampled_from(CORRECT),
    wrong=st.sampled_from([*WRONG, None]),
)
# adversarial shapes: irrelevant searches before the right answer, relevant ones before a wrong one
@example(3, IRRELEVANT + ["xyzzy"], RELEVANT, [], [True] * 5, "Essaly", "Karsk")
@example(4, ["xyzzy"] * 4, RELEVANT, [], [True] * 5, "Essaly", None)
@example(4, ["xyzzy"] * 4, RELEVANT, [("junk", 0)], [False] * 5, "Essaly", "Essaly harbour")
@example(0, ["xyzzy"] * 4, RELEVANT, [("junk", 0), ("junk", 1)], [True] * 5, "The Essaly", None)
def test_correct_answer_beats_any_wrong_or_missing_one(
    make_env, n, queries, other_queries, junk, think, correct, wrong
) -> None:
    """A correct, well-formed episode out-earns every episode with as many searches that answers
    wrongly or not at all (any format), under every preset except the published r3-rag sum."""
    good = [S(q) for q in queries[:n]] + [A(correct)]
    other: list[str] = [S(q, think=th) for q, th in zip(other_queries[:n], think, strict=False)]
    for j, pos in junk:  # malformed turns anywhere
        other.insert(pos % (len(other) + 1), j)
    answered = wrong is not None or not other
    if answered:
        other.append(A(wrong or "Karsk", think=think[-1]))
    for name in SAFE_PRESETS:
        r_good = episode_return(name, make_env, good, answered=True)
        r_other = episode_return(name, make_env, other, answered=answered)
        target(r_other - r_good, label=name)  # steer the search towards counterexamples
        assert r_good > r_other, (name, good, other, r_good, r_other)


def test_published_r3_rag_sum_breaks_the_ordering_and_normalized_keeps_it(make_env) -> None:
    relevant = [S("Glass Orchard director"), S("Velora Quenn born"), S("Drathmoor country")]
    irrelevant = [S("copper mines"), S("xyzzy"), S("Vuldoria")]
    wrong = episode_return("r3-rag", make_env, relevant + [A("Karsk")], answered=True)
    right = episode_return("r3-rag", make_env, irrelevant + [A("Essaly")], answered=True)
    assert wrong == pytest.approx(0.8 * 3) and right == pytest.approx(2.0)
    assert wrong > right  # the documented failure of the per-step sum
    wrong = episode_return("r3-rag-normalized", make_env, relevant + [A("Karsk")], answered=True)
    right = episode_return("r3-rag-normalized", make_env, irrelevant + [A("Essaly")], answered=True)
    assert right > wrong


# ---- guards through the environment -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_answer_tag_in_a_retrieved_doc_never_scores(make_env, name: str) -> None:
    env = make_env(reward=name, max_turns=3)
    env.reset(options={"example_id": "q1"})  # gold Karsk; d6 holds "<answer>Karsk</answer>"
    _, _, _, _, info = env.step(S("Montabri national library"))
    assert "d6" in info["doc_ids"]
    # the agent pastes what it was shown: an information block is not an answer
    _, _, _, _, info = env.step(info["new_text"].strip())
    assert info["invalid_reason"] == Invalid.FAKE_INFORMATION
    _, _, term, trunc, info = env.step(S("copper mines"))
    assert trunc and not term and info["answer"] is None and info["em"] == 0.0
    assert info["summary"]["reward_totals"].get("outcome", 0.0) == 0.0
    assert info["summary"]["return"] <= 0.0


@pytest.mark.parametrize(
    ("answer", "metric"),
    [
        ("Essaly or Karsk or Drathmoor", "contains"),
        ("Essaly or Karsk", "f1"),
        ("Essaly; Karsk", "contains"),
        ("the country is Essaly which is where Drathmoor lies and where Velora Quenn was born", "contains"),
    ],
)
def test_multi_candidate_and_long_answers_get_no_outcome_through_env(make_env, answer: str, metric: str) -> None:
    env = make_env(reward={"outcome": {"weight": 1.0, "metric": metric}})
    rewards, infos = run(env, [A(answer)])
    assert rewards == [0.0]
    assert infos[-1]["summary"]["answer_admissible"] is False
    assert gold_in_prediction(answer, ["Essaly"]) == 1.0  # without the guard this would have paid


@pytest.mark.parametrize("protocol", ["search-r1", "multi-query"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_gold_never_in_observation_except_retrieved_text(make_env, protocol: str, example: Any) -> None:
    env = make_env(protocol=protocol, max_turns=8)
    obs, _ = env.reset(options={"example_id": example.id})
    golds = list(example.answers)
    assert not gold_in_prediction(obs.replace(example.question, " "), golds)
    queries = [q for q in QUERIES if not gold_in_prediction(q, golds)]
    turns = [
        S(queries[0]),
        "junk",
        "<answer>x",
        S("xyzzy"),
        S(queries[1]),
        S(queries[2]),
        "<search>a</search><answer>b</answer>",
        A("no idea"),
    ]
    for t in turns:
        obs, _, term, trunc, info = env.step(t)
        shown = info["new_text"]
        for doc_id in info["doc_ids"]:  # retrieved text is allowed to hold the gold
            shown = shown.replace(sanitize(DOC[doc_id].text), " ").replace(sanitize(DOC[doc_id].title), " ")
        assert not gold_in_prediction(shown, golds), (t, info["new_text"])
        if term or trunc:
            break
    assert term  # the episode ended with the agent's answer


# ---- episode summary ---------------------------------------------------------------------------------------


def test_episode_summary_needs_no_second_pass(make_env) -> None:
    env = make_env(reward={"outcome": 1.0, "cost": {"weight": 0.1, "repeat": 1.0}, "relevance": 0.5}, max_turns=6)
    turns = [S("Glass Orchard director"), S("glass orchard director"), "junk", S("Velora Quenn born"), A("The Essaly")]
    rewards, infos = run(env, turns)
    ep = infos[-1]["summary"]
    totals: dict[str, float] = {}
    for info in infos:
        for k, v in info["reward_terms"].items():
            totals[k] = totals.get(k, 0.0) + v
    assert ep["reward_totals"] == pytest.approx(totals)
    assert ep["return"] == pytest.approx(sum(rewards))
    assert ep["searches"] == 3 and ep["duplicate_queries"] == 1 and ep["invalid_turns"] == 1
    assert ep["em"] == 1.0 and ep["f1"] == 1.0 and ep["contains"] == 1.0 and ep["answer_admissible"] is True
    assert ep["evidence_recall"] == pytest.approx(2 / 3) and ep["answered"] is True
    assert totals["cost"] == pytest.approx(-0.1 * 3 - 0.1)  # three searches, one repeat
    assert infos[0]["reward_signals"]["relevance"] == pytest.approx(1 / 3)


def test_reward_is_finite_and_terms_sum_for_every_preset(make_env) -> None:
    for name in sorted(PRESETS):
        rewards, infos = run(make_env(reward=name), ["junk", S("Drathmoor country"), A("Essaly")])
        for r, info in zip(rewards, infos, strict=True):
            assert math.isfinite(r)
            assert sum(info["reward_terms"].values()) == pytest.approx(r)


_PIECES = st.sampled_from(
    [
        "<search>",
        "</search>",
        "<answer>",
        "</answer>",
        "<think>",
        "</think>",
        "<information>",
        "</information>",
        "Essaly",
        "Karsk",
        " or ",
        "Glass Orchard",
        "\n",
    ]
)
_ANY_TURN = st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=10).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(_ANY_TURN, min_size=1, max_size=4), name=st.sampled_from(sorted(PRESETS)))
def test_any_text_gives_finite_rewards_whose_terms_sum(make_env, turns: list[str], name: str) -> None:
    rewards, infos = run(make_env(reward=name, max_turns=4), turns)
    for r, info in zip(rewards, infos, strict=True):
        assert math.isfinite(r)
        assert sum(info["reward_terms"].values()) == pytest.approx(r, abs=1e-9)
        assert all(math.isfinite(v) for v in info["reward_signals"].values())


def test_search_r1_format_reward_class_matches_preset(make_env) -> None:
    a = run(make_env(reward=SearchR1FormatReward()), [S("Drathmoor country"), A("Essaly")])[0]
    b = run(make_env(reward="search-r1-format"), [S("Drathmoor country"), A("Essaly")])[0]
    assert a == b
    c = run(make_env(reward=R3RAGReward(verifier="gold-evidence")), [S("Drathmoor country"), A("Essaly")])[0]
    assert c == pytest.approx([0.0, 1.6 * 2 / 3 + 2.0])  # d1 and d0 of d5, d0, d1


# ---- the worked example in docs/reference/rewards.md is what the code does ------------------------------------------


def test_worked_example_in_docs_is_current() -> None:
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("reward_example", root / "docs" / "reference" / "reward_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    block = module.worked_example()
    doc = (root / "docs" / "reference" / "rewards.md").read_text(encoding="utf-8")
    start = doc.index("<!-- worked-example:start -->\n") + len("<!-- worked-example:start -->\n")
    assert doc[start : doc.index("<!-- worked-example:end -->")] == block


def test_every_term_declares_bounds_its_values_keep(make_env: Any) -> None:
    """Each term of TERMS has its bounds in TERM_BOUNDS, and no step of a varied episode leaves them."""
    from searchenv.rewards import TERM_BOUNDS, TERMS

    assert set(TERM_BOUNDS) == set(TERMS)
    turns = ["<search> Velora Quenn </search>", "no tags at all", "<search> Drathmoor </search>",
             "<search> Velora Quenn </search>", "<answer> Essaly </answer>"]
    for name in TERMS:
        env = make_env(reward={name: 1.0}, protocol="multi-query", max_turns=5)
        low, high = TERM_BOUNDS[name](env.protocol.max_queries)
        for index in range(len(EXAMPLES)):
            env.reset(options={"index": index})
            for turn in turns:
                *_, terminated, truncated, info = env.step(turn)
                assert low <= info["reward_terms"][name] <= high, (name, turn, info["reward_terms"])
                if terminated or truncated:
                    break
