"""The ``arena`` (evidence-citing answers) and ``browse`` (snippets, then open) protocols."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.baselines import run_agent
from agents.baselines.scripted import HeuristicAgent, OracleAgent
from searchenv.env import SearchQAEnv
from searchenv.metrics import episode_metrics
from searchenv.protocols import Answer, Invalid, Open, Search, get_protocol
from searchenv.retrievers import retriever_for_corpus
from searchenv.retrievers.base import Hit
from searchenv.rewards import ArenaReward, custom
from searchenv.vector import SearchQAVectorEnv
from tests.conftest import EXAMPLES

ARENA, BROWSE = get_protocol("arena"), get_protocol("browse")
CODES = {v for k, v in vars(Invalid).items() if k.isupper() and isinstance(v, str)}


@pytest.fixture()
def bm25(corpus_file: Path):  # type: ignore[no-untyped-def]
    return retriever_for_corpus("bm25", corpus_file)


LONG = " ".join(f"Sentence {i} of the long page says fact{i}." for i in range(200))  # about 8,400 chars: 9 pages


class Fixed:
    """A retriever with fixed documents: query ``a`` gives d1, d2; anything else d2, d3, long."""

    docs = {
        "d1": Hit("d1", "One", "Alpha is the first letter.", 1.0),
        "d2": Hit("d2", "Two", "Beta comes second; Karsk is a town.", 0.9),
        "d3": Hit("d3", "Three", "Gamma is third.", 0.8),
        "long": Hit("long", "Long", LONG, 0.7),
    }

    def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        order = ["d1", "d2"] if queries and queries[0] == "a" else ["d2", "d3", "long"]
        return [[self.docs[d] for d in order][:k] for _ in queries]


# ---- parsing ---------------------------------------------------------------------------------


def test_browse_parses_open_with_number_and_page() -> None:
    assert BROWSE.parse("<think> x </think>\n<open> 2 </open>") == Open(2, 1)
    assert BROWSE.parse("<open>Doc 3 page 2</open>") == Open(3, 2)
    assert BROWSE.parse("<open> document #4, 3 </open>") == Open(4, 3)
    for bad in ("<open> the first one </open>", "<open> 0 </open>", "<open> 2 page 0 </open>", "<open></open>"):
        action = BROWSE.parse(bad)
        assert isinstance(action, Invalid) and action.code == Invalid.BAD_OPEN, bad
    two = BROWSE.parse("<open> 1 </open><search> q </search>")
    assert isinstance(two, Invalid) and two.code == Invalid.MULTIPLE_ACTIONS
    assert isinstance(BROWSE.parse("<open> 1 </open><answer> x </answer>"), Invalid)
    assert BROWSE.parse("<search> who </search>") == Search(("who",))
    assert "</open>" in BROWSE.stop


def test_other_protocols_treat_open_as_plain_text() -> None:
    for name in ("search-r1", "arena"):
        action = get_protocol(name).parse("<open> 2 </open>")
        assert isinstance(action, Invalid) and action.code == Invalid.NO_ACTION


def test_arena_answer_carries_its_citations() -> None:
    text = "<relevance> Doc 1, 4 and 4 </relevance>\n<analysis> both say so </analysis>\n<answer> Karsk </answer>"
    assert ARENA.parse(text) == Answer("Karsk", (1, 4))
    assert ARENA.parse("<answer> Karsk </answer>") == Answer("Karsk", None)
    assert ARENA.parse("<relevance> none </relevance><answer> Karsk </answer>") == Answer("Karsk", ())
    many = ARENA.parse("<relevance>1</relevance><relevance>2</relevance><answer> K </answer>")
    assert isinstance(many, Invalid) and many.code == Invalid.MULTIPLE_RELEVANCE
    huge = ARENA.parse(f"<relevance> {'9' * 4000} </relevance><answer> K </answer>")
    assert isinstance(huge, Answer) and all(n < 10**9 for n in huge.cited or ())
    # search-r1 reads the same turn as a plain answer: its parser does not know <relevance>
    assert get_protocol("search-r1").parse(text) == Answer("Karsk")


_TAGGY = st.lists(
    st.sampled_from(["<open>", "</open>", "<relevance>", "</relevance>", "<analysis>", "</analysis>", "<search>",
                     "</search>", "<answer>", "</answer>", "<think>", "</think>", " 3 ", " page 2", "Doc 1, 2",
                     "\n", "x", "<information>", "99999999999"]),
    max_size=12,
).map("".join)


@pytest.mark.parametrize("name", ["arena", "browse"])
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), _TAGGY))
def test_any_text_is_a_typed_action_with_a_stable_code(name: str, text: str) -> None:
    action = get_protocol(name).parse(text)
    assert isinstance(action, Search | Answer | Open | Invalid)
    if isinstance(action, Invalid):
        assert action.code in CODES and action.message
    if isinstance(action, Open):
        assert name == "browse" and action.number >= 1 and action.page >= 1
    if isinstance(action, Answer):
        assert action.text and (action.cited is None or name == "arena")


# ---- the environment ---------------------------------------------------------------------------


def _env(protocol: str, **kw: Any) -> SearchQAEnv:
    env = SearchQAEnv(EXAMPLES, retriever=Fixed(), protocol=protocol, max_turns=kw.pop("max_turns", 8), **kw)
    env.reset(options={"example_id": "q1"})
    return env


def test_documents_are_numbered_across_the_episode() -> None:
    env = _env("arena")
    *_, info = env.step("<search> a </search>")
    assert info["doc_numbers"] == [[1, 2]] and "Doc 1(Title: One)" in info["new_text"]
    *_, info = env.step("<search> b </search>")
    assert info["doc_numbers"] == [[2, 3, 4]]  # d2 keeps its number; new documents continue
    assert "Doc 2(Title: Two)" in info["new_text"] and "Doc 4(Title: Long)" in info["new_text"]
    plain = _env("search-r1")
    plain.step("<search> a </search>")
    *_, info = plain.step("<search> b </search>")
    assert "doc_numbers" not in info and "Doc 1(Title: Two)" in info["new_text"]  # search-r1 unchanged


def test_browse_shows_snippets_and_open_reads_pages() -> None:
    env = _env("browse", max_doc_chars=300)
    env.step("<search> b </search>")
    assert env.shown_hits[0][2].text.endswith("...") and len(env.shown_hits[0][2].text) <= 163
    obs, r, term, trunc, info = env.step("<open> 3 </open>")
    assert info["action_type"] == "open" and info["opened"] == {"doc_id": "long", "number": 3, "page": 1, "pages": 9}
    assert "page 1 of 9: Sentence 0 of the long page" in info["new_text"]
    assert len(env.shown_hits[0][0].text) <= 1000 and not term and obs in env.observation_space
    *_, info = env.step("<open> 3 page 9 </open>")
    assert "Sentence 199 of the long page says fact199." in info["new_text"]  # beyond max_doc_chars
    *_, info = env.step("<open> 3 page 10 </open>")
    assert info["invalid_reason"] == Invalid.PAGE_OUT_OF_RANGE and "9 pages" in info["new_text"]
    *_, info = env.step("<open> 5 </open>")
    assert info["invalid_reason"] == Invalid.UNKNOWN_DOCUMENT and "Doc 1-3" in info["new_text"]
    obs, r, term, trunc, info = env.step("<answer> Karsk </answer>")
    assert term and info["summary"]["opens"] == 2 and info["summary"]["opened_doc_ids"] == ["long", "long"]
    assert episode_metrics(info)["opens"] == 2.0
    assert obs in env.observation_space


def test_open_before_any_search_is_invalid() -> None:
    env = _env("browse")
    *_, info = env.step("<open> 1 </open>")
    assert info["invalid_reason"] == Invalid.UNKNOWN_DOCUMENT and "search first" in info["new_text"]


def test_opens_are_priced_apart_from_searches() -> None:
    env = _env("browse", reward=custom({"outcome": 1, "cost": {"weight": 1.0, "per_search": 0.1, "per_open": 0.05}}))
    _, r_search, *_ = env.step("<search> a </search>")
    _, r_open, *_ = env.step("<open> 1 </open>")
    assert r_search == pytest.approx(-0.1) and r_open == pytest.approx(-0.05)


def test_arena_reward_pays_only_for_citations_of_shown_gold_documents(corpus_file: Path) -> None:
    env = SearchQAEnv(EXAMPLES, corpus=corpus_file, protocol="arena", reward="arena", top_k=2)
    env.reset(options={"example_id": "q1"})  # gold Karsk, evidence d3
    *_, info = env.step("<search> Tobin Quenn born </search>")
    gold_number = info["doc_numbers"][0][[h.doc_id for h in env.shown_hits[0]].index("d3")]

    def final(turn: str) -> dict[str, Any]:
        env.reset(options={"example_id": "q1"})
        env.step("<search> Tobin Quenn born </search>")
        return env.step(turn)[4]

    good = final(f"<relevance> {gold_number} </relevance><analysis> it says Karsk </analysis><answer> Karsk </answer>")
    assert good["reward_terms"] == {"format": 0.5, "outcome": 1.0, "relevance": 0.5, "bonus": 0.5}
    assert good["cited_doc_ids"] == ["d3"] and good["summary"]["cited_doc_ids"] == ["d3"]
    unshown = final("<relevance> 7 </relevance><analysis> it says Karsk </analysis><answer> Karsk </answer>")
    assert unshown["cited_doc_ids"] == [] and unshown["reward_terms"]["relevance"] == 0.0
    assert unshown["reward_terms"]["format"] == 0.5 and unshown["reward_terms"]["bonus"] == 0.0
    no_analysis = final(f"<relevance> {gold_number} </relevance><analysis> </analysis><answer> Karsk </answer>")
    assert no_analysis["reward_terms"]["format"] == 0.0 and no_analysis["reward_terms"]["relevance"] == 0.5
    plain = final("<answer> Karsk </answer>")
    assert plain["reward_terms"] == {"format": 0.0, "outcome": 1.0, "relevance": 0.0, "bonus": 0.0}
    assert plain["summary"]["cited_doc_ids"] is None


def test_arena_weights_are_options() -> None:
    reward = ArenaReward(format_weight=0.0, bonus_weight=2.0)
    env = SearchQAEnv(EXAMPLES, retriever=Fixed(), protocol="arena", reward=reward)
    env.reset(options={"example_id": "q1"})
    env.step("<search> a </search>")
    *_, info = env.step("<relevance> 2 </relevance><analysis> Doc 2 </analysis><answer> Karsk </answer>")
    assert info["reward_terms"]["format"] == 0.0 and info["reward_terms"]["bonus"] == 0.0  # d2 is not q1's gold


def test_browse_through_the_vector_env(corpus_file: Path) -> None:
    vec = SearchQAVectorEnv(2, task=EXAMPLES, corpus=corpus_file, protocol="browse", autoreset_mode="disabled")
    vec.reset(options=[{"example_id": "q1"}, {"example_id": "q2"}])
    vec.step(["<search> Tobin Quenn </search>", "<search> capital of Essaly </search>"])
    obs, _, _, _, infos = vec.step(["<open> 1 </open>", "<open> 9 </open>"])
    assert list(infos["action_type"]) == ["open", "invalid"]
    assert "page 1 of 1" in obs[0] and obs in vec.observation_space


# ---- reference agents ----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["arena", "browse"])
def test_oracle_solves_every_question_in_the_new_protocols(bm25, protocol: str) -> None:  # type: ignore[no-untyped-def]
    records = run_agent(OracleAgent(), EXAMPLES, bm25, protocol=protocol, max_turns=10, batch_size=3,
                        reward="arena" if protocol == "arena" else "default")
    assert [r.metrics["em"] for r in records] == [1.0] * len(EXAMPLES)
    proto = get_protocol(protocol)
    for rec in records:
        turns = [m["content"] for m in rec.messages if m["role"] == "assistant"]
        assert all(not isinstance(proto.parse(t), Invalid) for t in turns)
        if protocol == "arena":  # cites exactly the gold evidence: every term and the bonus
            assert rec.steps[-1]["reward_terms"]["bonus"] == 0.5, rec.example_id
        else:  # opened every gold evidence document before answering
            ex = next(e for e in EXAMPLES if e.id == rec.example_id)
            opened = {s["opened"]["doc_id"] for s in rec.steps if s.get("opened")}
            assert set(ex.evidence_ids) <= opened, rec.example_id


def test_browse_oracle_does_not_answer_from_snippets_alone(bm25) -> None:  # type: ignore[no-untyped-def]
    """With no turn left to open the evidence, the oracle cannot claim the hop."""
    rec = run_agent(OracleAgent(), [EXAMPLES[1]], bm25, protocol="browse", max_turns=2)[0]
    assert [s["action_type"] for s in rec.steps] == ["search", "answer"] and rec.metrics["em"] == 0.0


def test_heuristic_opens_before_it_reads_and_cites_under_arena(bm25) -> None:  # type: ignore[no-untyped-def]
    browse = run_agent(HeuristicAgent(), EXAMPLES, bm25, protocol="browse", max_turns=8)
    for rec in browse:
        kinds = [s["action_type"] for s in rec.steps]
        assert kinds[:2] == ["search", "open"] and kinds[-1] == "answer"
    arena = run_agent(HeuristicAgent(), EXAMPLES, bm25, protocol="arena", max_turns=8, reward="arena")
    assert any(r.steps[-1].get("cited_doc_ids") for r in arena)
    assert [r.metrics["em"] for r in arena] == [
        r.metrics["em"] for r in run_agent(HeuristicAgent(), EXAMPLES, bm25, protocol="search-r1", max_turns=8)
    ]


@pytest.mark.learning
@pytest.mark.parametrize("protocol", ["arena", "browse"])
def test_oracle_demonstrations_train_under_sft(tmp_path: Path, qa_file: Path, corpus_file: Path, protocol: str) -> None:
    pytest.importorskip("torch")
    from agents.trainers.metrics import read_metrics
    from agents.trainers.sft import SFTConfig, load_demos, train_sft
    from tests.learning import demo_loss, margin
    from tests.tiny_model import one_thread, tiny_policy

    cfg = SFTConfig(output_dir=str(tmp_path / "sft"), task=str(qa_file), corpus=str(corpus_file), protocol=protocol,
                    steps=6, batch_size=2, micro_batch_size=2, learning_rate=3e-3, num_demos=4, progress=False,
                    log_every=0, save_every=0, max_turns=8, top_k=5)
    policy = tiny_policy(seed=0)
    samples, _ = load_demos(cfg, policy)
    tag = "<relevance>" if protocol == "arena" else "<open>"
    trained = [policy.decode([t for t, m in zip(s.ids, s.mask, strict=True) if m]) for s in samples]
    assert all(tag in text for text in trained)  # the new actions are in the trained (policy) tokens
    hidden = [policy.decode([t for t, m in zip(s.ids, s.mask, strict=True) if not m]) for s in samples]
    assert all("<information>" in text and "<information>" not in t for text, t in zip(hidden, trained, strict=True))
    with one_thread():
        before = demo_loss(policy, samples)
        out = train_sft(cfg, policy=policy)
        after = demo_loss(policy, samples)
    assert out["last"]["demos_kept"] >= 3 and len(read_metrics(cfg.output_dir)) == 6
    margin(f"nats a token the {protocol} demonstrations' loss fell by, after 6 SFT steps", before - after, 0.5)


def test_gym_make_names() -> None:
    for name in ("arena", "browse"):
        env = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, retriever=Fixed(), protocol=name)
        obs, _ = env.reset(options={"example_id": "q1"})
        assert ("<relevance>" in obs) == (name == "arena") and ("<open>" in obs) == (name == "browse")


_TURN = st.one_of(
    st.builds(lambda n, p: f"<open> {n} page {p} </open>", st.integers(-3, 10**12), st.integers(-3, 12)),
    st.builds(lambda n: f"<open>{n}</open>", st.text(max_size=20)),
    st.builds(lambda q: f"<search> {q} </search>", st.sampled_from(["a", "b", "Karsk", "x" * 600])),
    st.builds(lambda c, a: f"<relevance>{c}</relevance><analysis>x</analysis><answer>{a}</answer>",
              st.text(max_size=30), st.text(min_size=1, max_size=20)),
    _TAGGY,
)


@pytest.mark.parametrize("name", ["arena", "browse"])
@settings(max_examples=150, deadline=None)
@given(turns=st.lists(_TURN, min_size=1, max_size=6))
def test_any_episode_stays_in_its_spaces_and_sums_its_terms(name: str, turns: list[str]) -> None:
    env = SearchQAEnv(EXAMPLES, retriever=Fixed(), protocol=name, reward="arena" if name == "arena" else "default",
                      max_turns=4, max_doc_chars=200)
    obs, _ = env.reset(options={"example_id": "q1"})
    for turn in turns:
        obs, reward, term, trunc, info = env.step(turn)
        assert obs in env.observation_space
        assert info["action_type"] in {"search", "open", "answer", "invalid"}
        assert sum(info["reward_terms"].values()) == pytest.approx(float(reward))
        if info["action_type"] == "open":
            assert 1 <= info["opened"]["page"] <= info["opened"]["pages"]
        for doc_id in info.get("cited_doc_ids", []):
            assert doc_id in info["summary"]["retrieved_doc_ids"]  # only documents shown can be cited
        if term or trunc:
            break
