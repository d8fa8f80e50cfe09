"""The multi-agent view of SearchQA-v0 episodes (MMOA-RAG roles) as a PettingZoo AEC environment."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchenv.env import SearchQAEnv
from searchenv.multi_agent import parse_answer, parse_selection, parse_sub_queries
from searchenv.retrievers.base import Hit
from tests.conftest import EXAMPLES

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo.test import api_test  # noqa: E402

from searchenv.multi_agent import MMOARAGEnv, TextObservation, env  # noqa: E402

ABLATIONS = [("rewriter", "selector", "generator"), ("selector", "generator"), ("rewriter", "generator"),
             ("generator",)]


def _api_test(e: Any) -> None:
    with warnings.catch_warnings():  # api_test warns that text is not a NumPy array, and about agent names
        warnings.simplefilter("ignore")
        api_test(e, num_cycles=10)


def test_api_test_passes_on_a_named_task() -> None:
    _api_test(MMOARAGEnv("synthetic-2hop", split="dev", top_k=3))
    _api_test(env(task="synthetic-2hop", split="dev"))  # PettingZoo's order-enforcing wrapper too


@pytest.mark.parametrize("roles", ABLATIONS)
def test_api_test_passes_for_every_ablation(corpus_file: Path, roles: tuple[str, ...]) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=roles)
    _api_test(e)
    assert e.possible_agents == list(roles)


def test_importing_searchenv_and_the_episode_needs_no_pettingzoo() -> None:
    code = ("import sys, searchenv, searchenv.multi_agent, agents.baselines.pipelines, agents.evaluation.evaluate; "
            "assert 'pettingzoo' not in sys.modules, 'pettingzoo imported'")
    src = Path(__file__).resolve().parents[1] / "src"
    env_vars = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env_vars, timeout=120)


def _play(e: MMOARAGEnv, actions: dict[str, str]) -> dict[str, tuple[float, dict[str, Any]]]:
    """Step every role with its action, then the dead steps; return each role's (return, final info)."""
    out = {}
    for agent in e.agent_iter():
        _, reward, terminated, truncated, info = e.last()
        if terminated or truncated:
            out[agent] = (float(reward), info)
            e.step(None)
        else:
            e.step(actions[agent])
    return out


def test_shared_reward_and_each_roles_penalties_are_separate_terms(corpus_file: Path) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, top_k=2)
    e.reset(options={"example_id": "q0"})
    assert e.agent_selection == "rewriter" and "Question: In which country" in e.observe("rewriter")
    assert isinstance(e.observe("rewriter"), TextObservation) and e.observation_space("rewriter").contains(
        e.observe("rewriter"))
    five = "1. Who directed The Glass Orchard?\n- Where was Velora Quenn born?\nDrathmoor country\nEssaly\nMontabri"
    e.step(five)
    assert e.rewards["rewriter"] == -0.5 and e.infos["rewriter"]["penalties"] == {"too_many_queries": -0.5}
    selector_sees = e.observe("selector")
    assert "Document0 (Title: The Glass Orchard)" in selector_sees and "Document9" not in selector_sees
    e.step("Document0, Document1,Document1, Document9")  # well formed, but a duplicate and an unknown id
    assert e.infos["selector"]["penalties"] == {"unknown_ids": -0.5, "duplicate_ids": -0.5}
    generator_sees = e.observe("generator")
    assert "Document0 (Title: The Glass Orchard)" in generator_sees and "Document2" not in generator_sees
    final = _play(e, {"generator": "<answer> Essaly </answer>"})
    returns = {role: r for role, (r, _) in final.items()}
    assert returns == {"rewriter": 0.5, "selector": 0.0, "generator": 1.0}
    for ret, info in final.values():
        assert sum(info["reward_terms"].values()) == pytest.approx(ret) and info["reward_terms"]["shared"] == 1.0
        assert info["answer"] == "Essaly" and info["em"] == 1.0 and info["f1"] == 1.0
    summary = final["generator"][1]["summary"]
    assert summary["queries"] == summary["sub_queries"][:4] and len(summary["sub_queries"]) == 5
    assert summary["queries"][:2] == ["Who directed The Glass Orchard?", "Where was Velora Quenn born?"]
    assert summary["kept_doc_ids"] == summary["candidate_doc_ids"][:2] and summary["return"] == pytest.approx(-0.5)
    assert e.agents == [] and "[generator] <answer> Essaly </answer>" in e.state()


def test_without_rewriter_the_question_is_searched_and_without_selector_everything_is_kept(corpus_file: Path) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=("generator",), top_k=3)
    e.reset(options={"example_id": "q1"})
    assert e.agents == ["generator"] and "Document0 (Title: Tobin Quenn)" in e.observe("generator")
    info = _play(e, {"generator": "Answer: Karsk"})["generator"][1]
    assert info["summary"]["queries"] == ["Where was Tobin Quenn born?"] and info["answer"] == "Karsk"
    assert info["summary"]["kept_doc_ids"] == info["summary"]["candidate_doc_ids"] and info["evidence_recall"] == 1.0


def test_long_answers_overlong_outputs_and_empty_rewrites_pay_penalties(corpus_file: Path) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=("rewriter", "generator"), max_action_chars=40,
                   max_answer_words=5, penalties={"generator/long_answer": -0.25})
    e.reset(options={"example_id": "q1"})
    e.step("   \n\n")
    assert e.infos["rewriter"]["penalties"] == {"no_queries": -0.5}
    assert "Document0 (Title: Tobin Quenn)" in e.observe("generator")  # the question was searched instead
    final = _play(e, {"generator": "Karsk " * 10})
    assert final["generator"][1]["penalties"] == {"overlong": -0.5, "long_answer": -0.25}
    assert final["generator"][1]["answer"] == ("Karsk " * 10)[:40].strip()  # cut to 40 characters
    with pytest.raises(ValueError, match="unknown penalty"):
        MMOARAGEnv(EXAMPLES, corpus=corpus_file, penalties={"selector/long_answer": -1.0})
    with pytest.raises(ValueError, match="generator"):
        MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=("rewriter", "selector"))
    with pytest.raises(ValueError, match="order"):
        MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=("selector", "rewriter", "generator"))


def test_a_non_string_action_raises_and_unknown_reset_options_are_refused(corpus_file: Path) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file)
    with pytest.raises(ValueError, match="unknown reset option.*'exmaple_id'.*example_id"):
        e.reset(options={"exmaple_id": "q1"})
    e.reset(options={"example_id": "q1"})
    with pytest.raises(TypeError, match="must be a str"):
        e.step(3)  # type: ignore[arg-type]


class _Down:
    def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
        raise ConnectionError("index server down")


def test_a_retriever_failure_is_an_infrastructure_error_not_a_crash() -> None:
    e = MMOARAGEnv(EXAMPLES, retriever=_Down())
    e.reset(options={"example_id": "q0"})
    e.step("Who directed The Glass Orchard?")
    assert e.infos["selector"]["infra_error"] == "ConnectionError: index server down"
    assert "(no documents)" in e.observe("selector")
    info = _play(e, {"selector": "None", "generator": "Essaly"})["generator"][1]
    assert info["summary"]["candidate_doc_ids"] == [] and info["em"] == 1.0


def test_a_searchqa_reward_preset_as_the_shared_reward(corpus_file: Path) -> None:
    for reward, answer, shared in (("search-r1", "Essaly", 1.0), ("em", "the Essaly", 1.0),
                                   ({"outcome": {"weight": 1, "metric": "f1"}}, "Essaly or Karsk", 0.0),
                                   ("f1", "Essaly or Karsk", 0.5), ("default", "", -0.1)):
        e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, reward=reward, roles=("generator",))
        e.reset(options={"example_id": "q0"})
        info = _play(e, {"generator": answer})["generator"][1]
        assert info["shared_reward"] == pytest.approx(shared), reward
        assert sum(info["shared_terms"].values()) == pytest.approx(shared)


# ---- the readers of model output ---------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.integers(0, 20))
def test_role_readers_never_raise_and_keep_their_invariants(text: str, n: int) -> None:
    queries = parse_sub_queries(text)
    assert all(q and q == " ".join(q.split()) and len(q) <= 512 for q in queries)
    sel = parse_selection(text, n)
    assert all(0 <= i < n for i in sel.ids) and len(set(sel.ids)) == len(sel.ids)
    assert set(sel.problems) <= {"format", "unknown_ids", "duplicate_ids"}
    answer = parse_answer(text)
    assert answer is None or (answer and answer == " ".join(answer.split()))


@given(st.lists(st.integers(0, 12), max_size=6))
def test_well_formed_selections_are_read_exactly(ids: list[int]) -> None:
    sel = parse_selection(",".join(f"Document{i}" for i in ids), 8)
    assert sel.ids == tuple(dict.fromkeys(i for i in ids if i < 8))
    assert ("unknown_ids" in sel.problems) == any(i >= 8 for i in ids)
    assert ("duplicate_ids" in sel.problems) == (len(set(ids)) != len(ids)) and "format" not in sel.problems
    assert parse_selection("Documents 1 and 2", 8) == parse_selection("1 2", 8)  # ids read, format penalised
    assert parse_selection("1 2", 8).problems == ("format",)


_ANSWER_TEXT = st.text(st.sampled_from(list("abc Essaly Karsk Montabri city the. ,-'")), max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=_ANSWER_TEXT, which=st.sampled_from(["q0", "q1", "q2", "q3"]))
def test_the_answer_is_scored_exactly_as_searchqa_scores_it(corpus_file: Path, answer: str, which: str) -> None:
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file, roles=("generator",))
    e.reset(options={"example_id": which})
    mine = _play(e, {"generator": answer})["generator"][1]
    single = SearchQAEnv(EXAMPLES, corpus=corpus_file)
    single.reset(options={"example_id": which})
    theirs = single.step(f"<answer> {answer} </answer>")[4]
    for key in ("answer", "em", "f1", "contains"):
        assert mine[key] == theirs[key], key
