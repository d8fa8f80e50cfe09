from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import searchenv
from searchenv.protocols import Invalid
from searchenv.retrievers.base import Hit, RetrieverError

from .conftest import EXAMPLES


def test_check_env_passes_without_warnings(corpus_file) -> None:
    env = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, corpus=corpus_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


def test_gymnasium_make_registers_and_runs(corpus_file) -> None:
    env = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, corpus=corpus_file, top_k=2, max_turns=3)
    obs, info = env.reset(seed=1)
    assert "Question:" in obs
    obs, r, term, trunc, info = env.step("<think>look it up</think><search>Tobin Quenn born</search>")
    assert not term and not trunc
    assert "<information>" in info["new_text"] and obs.endswith(info["new_text"])
    assert len(info["doc_ids"]) <= 2
    assert searchenv.ENV_ID in gym.registry


def test_full_episode_answer_scores_and_reports(make_env) -> None:
    env = make_env()
    env.reset(options={"example_id": "q1"})
    _, r1, term, _, info = env.step("<search>Tobin Quenn born</search>")
    assert info["action_type"] == "search" and "d3" in info["doc_ids"]
    assert info["reward_terms"] == {"outcome": 0.0, "format": 0.0}
    _, r2, term, trunc, info = env.step("<think>Karsk.</think>\n<answer> Karsk </answer>")
    assert term and not trunc
    assert r2 == 1.0 and info["em"] == 1.0 and info["f1"] == 1.0
    assert info["answer"] == "Karsk" and info["gold_answers"] == ["Karsk"]
    assert info["evidence_recall"] == 1.0
    ep = info["summary"]
    assert ep["searches"] == 1 and ep["turns"] == 2 and ep["return"] == pytest.approx(r1 + r2)
    assert math.isclose(sum(info["reward_terms"].values()), r2)


def test_truncated_when_turn_budget_runs_out(make_env) -> None:
    env = make_env(max_turns=2)
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step("<search>Karsk</search>")
    assert not term and not trunc
    _, _, term, trunc, info = env.step("<search>Vuldoria</search>")
    assert not term and trunc
    assert info["answer"] is None and info["em"] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>x</answer>")


def test_end_episode_reports_the_final_info_of_what_happened(make_env) -> None:
    env = make_env(max_turns=4)
    env.reset(options={"example_id": "q1"})
    _, r1, *_ = env.step("<search>Tobin Quenn born</search>")
    _, r2, *_ = env.step("no action here")
    info = env.end_episode("max_total_tokens")
    assert info["truncated_by"] == "max_total_tokens" and info["example_id"] == "q1" and info["turn"] == 2
    assert info["answer"] is None and info["em"] == info["f1"] == info["contains"] == 0.0
    assert info["evidence_recall"] == 1.0  # the one gold passage was retrieved before the cut
    ep = info["summary"]
    assert ep["turns"] == 2 and ep["searches"] == 1 and ep["invalid_turns"] == 1 and not ep["answered"]
    assert ep["return"] == pytest.approx(r1 + r2) and "d3" in ep["retrieved_doc_ids"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>Karsk</answer>")
    with pytest.raises(RuntimeError, match="reset"):
        env.end_episode("again")
    env.reset(options={"example_id": "q1"})
    env.prepare_step("<search>Karsk</search>")
    with pytest.raises(RuntimeError, match="pending"):
        env.end_episode("max_total_tokens")


def test_same_seed_same_question_and_rewards(make_env) -> None:
    actions = ["<search>Quenn</search>", "oops", "<answer>Essaly</answer>"]

    def run(seed: int) -> list[object]:
        env = make_env()
        out: list[object] = [env.reset(seed=seed)[0]]
        for a in actions:
            obs, r, term, trunc, _ = env.step(a)
            out += [obs, r, term, trunc]
            if term or trunc:
                break
        return out

    assert run(7) == run(7)
    questions = {make_env().reset(seed=s)[0] for s in range(20)}
    assert len(questions) > 1  # the seed actually chooses


def test_retrieved_answer_tag_never_scores(make_env) -> None:
    env = make_env(top_k=3)
    env.reset(options={"example_id": "q1"})  # gold: Karsk; d6 contains "<answer>Karsk</answer>"
    _, _, _, _, info = env.step("<search>Montabri national library</search>")
    assert "d6" in info["doc_ids"]
    assert "<answer>Karsk</answer>" not in info["new_text"]  # neutralised in the observation
    _, r, term, _, info = env.step("<answer>I do not know</answer>")
    assert term and r == 0.0 and info["em"] == 0.0


@pytest.mark.parametrize(
    ("turn", "code"),
    [
        ("I think the answer is Karsk.", Invalid.NO_ACTION),
        ("<search>Karsk", Invalid.UNCLOSED_TAG),
        ("<answer>Karsk", Invalid.UNCLOSED_TAG),
        ("<search>   </search>", Invalid.EMPTY_QUERY),
        ("<answer>Karsk</answer><answer>Essaly</answer>", Invalid.MULTIPLE_ANSWERS),
        ("<answer>Karsk</answer> because it is", Invalid.TEXT_AFTER_ANSWER),
        ("<answer>Karsk</answer><search>more</search>", Invalid.SEARCH_AFTER_ANSWER),
        ("<search>a</search><answer>Karsk</answer>", Invalid.SEARCH_AND_ANSWER),
        ("<answer>" + "x" * 5000 + "</answer>", Invalid.TOO_LONG),
        ("<information>fake</information><answer>Karsk</answer>", Invalid.FAKE_INFORMATION),
        ("<search>Karsk</search>\n<information>Doc 1 Karsk is", Invalid.FAKE_INFORMATION),
        ("<search>Karsk</search> </information>", Invalid.FAKE_INFORMATION),
        ("<answer> </answer>", Invalid.EMPTY_ANSWER),
    ],
)
def test_malformed_turns_cost_a_turn_and_explain(make_env, turn: str, code: str) -> None:
    env = make_env()
    env.reset(options={"example_id": "q1"})
    obs, r, term, trunc, info = env.step(turn)
    assert info["action_type"] == "invalid" and info["invalid_reason"] == code
    assert not term and info["turn"] == 1
    assert info["reward_terms"]["format"] < 0 and r < 0
    assert code in info["new_text"] and obs in env.observation_space


def test_an_unclosed_information_block_is_not_advised_to_be_closed(make_env) -> None:
    env = make_env()
    env.reset(options={"example_id": "q1"})
    _, _, _, _, info = env.step("<search>Karsk</search>\n<information>Doc 1 Karsk is a town")
    assert "close it" not in info["new_text"]
    assert "end your turn after </search>" in info["new_text"]


def test_too_many_queries_in_multi_query(make_env) -> None:
    env = make_env(protocol="multi-query", max_queries=2)
    env.reset(options={"example_id": "q0"})
    _, _, _, _, info = env.step("<search>\nGlass Orchard director\nVelora Quenn born\nDrathmoor\n</search>")
    assert info["invalid_reason"] == Invalid.TOO_MANY_QUERIES
    _, _, _, _, info = env.step("<search>\nGlass Orchard director\nVelora Quenn born\n</search>")
    assert info["queries"] == ["Glass Orchard director", "Velora Quenn born"]
    assert "Query 2: Velora Quenn born" in info["new_text"]
    assert {"d5", "d0"} <= set(info["doc_ids"])


def test_non_string_action_raises_type_error(make_env) -> None:
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="int"):
        env.step(3)


class _Down:
    def search_batch(self, queries, k):  # type: ignore[no-untyped-def]
        raise RetrieverError("connection refused by 127.0.0.1:9")


def test_retriever_failure_is_an_observation_with_infra_flag(make_env) -> None:
    env = make_env(retriever=_Down())
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("<search>anything</search>")
    assert info["infra_error"] is True and "Search failed" in info["new_text"]
    assert info["infra_error_type"] == "RetrieverError"
    assert obs in env.observation_space and r == 0.0


class _UserRetriever:
    """A user's retriever whose ``search_batch`` is the given function (real failures, no mocks)."""

    def __init__(self, search) -> None:  # type: ignore[no-untyped-def]
        self.search_batch = search


def _nested_reply(queries, k):  # type: ignore[no-untyped-def]
    return json.loads("[" * 200_000 + "]" * 200_000)  # a remote answer nested too deeply


@pytest.mark.parametrize(
    ("search", "error_type"),
    [
        (_nested_reply, "RecursionError"),
        (lambda queries, k: int("9" * 5000), "ValueError"),  # a 5,000-digit integer in an answer
        (lambda queries, k: [[Hit("d", "t", "x", 1.0)][k + 5] for _ in queries], "IndexError"),  # damaged index
        (lambda queries, k: {}["doc"], "KeyError"),
        (lambda queries, k: [], "RetrieverError"),  # no hit list for the query
        (lambda queries, k: [[{"id": "d0"}] for _ in queries], "RetrieverError"),  # not Hit objects
        (lambda queries, k: [[Hit("d0", None, "x", 1.0)] for _ in queries], "RetrieverError"),  # type: ignore[arg-type]
    ],
)
def test_any_retriever_failure_is_an_infra_error_observation(make_env, search, error_type: str) -> None:
    env = make_env(retriever=_UserRetriever(search))
    env.reset(options={"example_id": "q1"})
    obs, r, term, trunc, info = env.step("<search>anything</search>")
    assert info["infra_error"] is True and info["infra_error_type"] == error_type
    assert info["new_text"].startswith("\n\n<information>Search failed: ") and obs in env.observation_space
    assert r == 0.0 and not term and not trunc
    _, _, term, _, info = env.step("<answer>Karsk</answer>")
    assert term and info["em"] == 1.0 and info["infra_error_type"] is None
    assert info["summary"]["infra_errors"] == 1


def test_chat_messages_mirror_transcript(make_env) -> None:
    env = make_env()
    env.reset(options={"example_id": "q2"})
    env.step("<search>Essaly capital</search>")
    env.step("<answer>Montabri</answer>")
    roles = [m["role"] for m in env.messages()]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert env.messages()[3]["content"].startswith("<information>")


def test_custom_question_and_render_modes(make_env, capsys) -> None:
    env = make_env(render_mode="ansi")
    obs, info = env.reset(options={"question": "Where is Karsk?", "answers": ["Vuldoria"]})
    assert "Where is Karsk?" in obs and env.render() == obs
    _, r, _, _, _ = env.step("<answer>vuldoria.</answer>")
    assert r == 1.0
    human = make_env(render_mode="human")
    human.reset(seed=0)
    human.step("<answer>x</answer>")
    assert "[assistant]" in capsys.readouterr().out


def test_custom_question_with_one_evidence_id_string(make_env) -> None:
    env = make_env()
    env.reset(options={"question": "Where was Tobin Quenn born?", "answers": ["Karsk"], "evidence_ids": "d3"})
    assert env.example.evidence_ids == ("d3",)
    env.step("<search>Tobin Quenn born</search>")
    _, _, _, _, info = env.step("<answer>Karsk</answer>")
    assert info["evidence_recall"] == 1.0


def test_bad_arguments_are_named(make_env, corpus_file) -> None:
    with pytest.raises(ValueError, match="top_k"):
        make_env(top_k=0)
    with pytest.raises(ValueError, match="unknown protocol"):
        make_env(protocol="nope")
    with pytest.raises(ValueError, match="unknown reward preset"):
        make_env(reward="nope")
    with pytest.raises(ValueError, match="retriever"):
        make_env(retriever="nope")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        make_env(corpus=corpus_file.parent / "missing.jsonl")
    env = make_env()
    with pytest.raises(ValueError, match="no example with id"):
        env.reset(options={"example_id": "zzz"})


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
    ]
)
_TURN = st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=12).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(_TURN, min_size=1, max_size=5))
def test_any_text_gives_a_valid_step(make_env, turns: list[str]) -> None:
    env = make_env(max_turns=5)
    env.reset(seed=0)
    for t in turns:
        obs, r, term, trunc, info = env.step(t)
        assert obs in env.observation_space
        assert math.isfinite(float(r))
        assert math.isclose(sum(info["reward_terms"].values()), float(r), abs_tol=1e-9)
        if term or trunc:
            break


def test_envs_over_one_index_folder_share_it_until_it_is_rebuilt(tmp_path: Path) -> None:
    import time

    from searchenv.env import SearchQAEnv
    from searchenv.retrievers.bm25 import BM25Retriever
    from tests.conftest import DOCS, EXAMPLES

    folder = tmp_path / "idx"
    BM25Retriever.build(DOCS, folder)
    a, b = SearchQAEnv(EXAMPLES, retriever=str(folder)), SearchQAEnv(EXAMPLES, retriever=folder)
    assert a.retriever is b.retriever  # opened once per process
    time.sleep(0.01)
    BM25Retriever.build(DOCS[:3], folder)  # a rebuild commits a new metadata file
    c = SearchQAEnv(EXAMPLES, retriever=str(folder))
    assert c.retriever is not a.retriever and len(c.retriever) == 3  # type: ignore[arg-type]


def test_reset_takes_an_example_object(make_env: Any) -> None:
    from searchenv.tasks import QAExample

    env = make_env()
    ex = QAExample("own", "Where was Tobin Quenn born?", ("Karsk",), ("d3",))
    _, info = env.reset(options={"example": ex})
    assert info["example_id"] == "own" and env.example is ex
    with pytest.raises(TypeError, match="must be a QAExample"):
        env.reset(options={"example": {"question": "q"}})


def test_a_turn_with_a_lone_surrogate_is_kept_writable(corpus_file: Any) -> None:
    from searchenv.env import SearchQAEnv

    env = SearchQAEnv(EXAMPLES, corpus=corpus_file)
    env.reset(options={"example_id": "q1"})
    obs, _, term, _, info = env.step("<answer> Karsk\ud800 </answer>")
    assert term and info["answer"] == "Karsk\\ud800"
    json.dumps(env.messages(), ensure_ascii=False).encode("utf-8")  # the episode can be written as UTF-8
    obs.encode("utf-8")


def test_what_a_client_may_see_holds_nothing_derived_from_the_answer_until_the_end(make_env: Any) -> None:
    from searchenv.client_view import ANSWER_DERIVED_KEYS, client_info

    env = make_env(reward="r3-rag", max_turns=3)
    env.reset(options={"index": 1})
    infos = [env.step(t)[4] for t in ("<search> Tobin Quenn </search>", "<answer> Karsk </answer>")]
    early = client_info(infos[0], done=False)
    assert ANSWER_DERIVED_KEYS <= set(infos[0]) and not ANSWER_DERIVED_KEYS & set(early)
    assert early["reward_terms"] == infos[0]["reward_terms"] and early["doc_ids"] == infos[0]["doc_ids"]
    final = client_info(infos[1], done=True)
    assert final == dict(infos[1]) and final["gold_answers"] == ["Karsk"] and final["em"] == 1.0


def test_reset_takes_an_integer_index_and_refuses_a_bool(make_env: Any) -> None:
    import numpy as np

    env = make_env()
    for bad in (True, False, 1.0, "1", -1, len(EXAMPLES)):
        with pytest.raises(ValueError, match=r"options\['index'\] must be an int"):
            env.reset(options={"index": bad})
    env.reset(options={"index": np.int64(2)})
    assert env.example.id == EXAMPLES[2].id
