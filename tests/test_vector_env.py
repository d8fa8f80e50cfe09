"""SearchQAVectorEnv: batched retrieval across sub-environments, autoreset modes, Gymnasium layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from searchenv.env import SearchQAEnv
from searchenv.retrievers.base import Hit, RetrieverError
from searchenv.vector import SearchQAVectorEnv

from .conftest import EXAMPLES


class CountingRetriever:
    """A real retriever underneath; records each search_batch call's queries."""

    def __init__(self, inner: Any, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.calls: list[list[str]] = []

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append(list(queries))
        if self.fail:
            raise RetrieverError("connection refused")
        return self.inner.search_batch(queries, k)  # type: ignore[no-any-return]


def _vec(corpus_file: Any, n: int = 3, **kwargs: Any) -> tuple[SearchQAVectorEnv, CountingRetriever]:
    base = SearchQAEnv(EXAMPLES, corpus=corpus_file)
    counting = CountingRetriever(base.retriever, fail=kwargs.pop("fail", False))
    return SearchQAVectorEnv(n, task=EXAMPLES, retriever=counting, **kwargs), counting


TURNS = [
    ["<search> Tobin Quenn born </search>", "<answer> Essaly </answer>", "no tags at all"],
    ["<search> Karsk country </search>", "<search> Montabri </search>", "<answer> Karsk </answer>"],
]


def test_one_search_batch_per_step_and_same_results_as_single_envs(corpus_file: Any) -> None:
    vec, counting = _vec(corpus_file, autoreset_mode="disabled", max_turns=3)
    obs, infos = vec.reset(seed=0, options=[{"example_id": e} for e in ("q1", "q2", "q0")])
    assert isinstance(obs, tuple) and len(obs) == 3 and obs in vec.observation_space
    singles = [SearchQAEnv(EXAMPLES, corpus=corpus_file, max_turns=3) for _ in range(3)]
    for env, ex in zip(singles, ("q1", "q2", "q0"), strict=True):
        env.reset(options={"example_id": ex})
    obs, rewards, term, trunc, infos = vec.step(TURNS[0])
    assert counting.calls == [["Tobin Quenn born"]]  # only sub-env 0 searched
    expected = [env.step(a) for env, a in zip(singles, TURNS[0], strict=True)]
    assert list(obs) == [e[0] for e in expected]
    assert rewards.dtype == np.float64 and list(rewards) == pytest.approx([e[1] for e in expected])
    assert list(term) == [False, True, False] and not trunc.any()
    assert list(infos["action_type"]) == ["search", "answer", "invalid"]
    assert infos["_em"].all() and infos["em"][0] == infos["em"][2] == 0.0  # every step reports the episode so far
    vec.reset(options={"reset_mask": np.array([False, True, False]), "example_id": "q1"})
    singles[1].reset(options={"example_id": "q1"})
    obs, rewards, *_ = vec.step(TURNS[1])
    assert counting.calls[1] == ["Karsk country", "Montabri"]  # two sub-envs' queries, one call
    expected = [env.step(a) for env, a in zip(singles, TURNS[1], strict=True)]
    assert list(obs) == [e[0] for e in expected]
    assert vec.search_calls == 2


def test_next_step_autoreset(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=2, max_turns=2)
    vec.reset(seed=3)
    _, _, term, _, _ = vec.step(["<answer> Karsk </answer>", "<search> Karsk </search>"])
    assert term.tolist() == [True, False]
    obs, rewards, term, trunc, infos = vec.step(["<answer> ignored </answer>", "<answer> Karsk </answer>"])
    assert rewards[0] == 0.0 and not term[0] and not trunc[0]  # reset, action ignored
    assert obs[0].rstrip().endswith("?") and "ignored" not in obs[0]  # a fresh prompt
    assert infos["turn"][0] == 0 and term[1]


def test_same_step_autoreset_reports_final_observation(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=2, autoreset_mode="same_step")
    vec.reset(seed=1)
    obs, _, term, _, infos = vec.step(["<answer> Karsk </answer>", "<search> Karsk </search>"])
    assert term[0] and infos["_final_obs"].tolist() == [True, False]
    assert infos["final_obs"][0].endswith("<answer> Karsk </answer>")
    assert obs[0].rstrip().endswith("?")  # already the next episode's prompt
    assert infos["final_info"]["_em"][0]


def test_disabled_autoreset_requires_reset(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=2, autoreset_mode="disabled")
    vec.reset(seed=0)
    vec.step(["<answer> x </answer>", "<search> Karsk </search>"])
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(["<answer> x </answer>", "<answer> y </answer>"])


def test_retriever_failure_marks_infra_error(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=2, fail=True)
    vec.reset(seed=0)
    _, _, _, _, infos = vec.step(["<search> Karsk </search>", "<answer> x </answer>"])
    assert infos["infra_error"].tolist() == [True, False]
    assert "Search failed" in infos["new_text"][0]


class DamagedIndex:
    """A user retriever over a damaged local index: looking up a row past its end raises IndexError."""

    rows: list[Hit] = []

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return [[self.rows[i] for i in range(k)] for _ in queries]


def test_any_retriever_exception_marks_infra_error(corpus_file: Any) -> None:
    vec = SearchQAVectorEnv(2, task=EXAMPLES, corpus=corpus_file, retriever=DamagedIndex())
    obs, _ = vec.reset(seed=0)
    obs, rewards, _, _, infos = vec.step(["<search> Karsk </search>", "<answer> x </answer>"])
    assert infos["infra_error"].tolist() == [True, False]
    assert infos["infra_error_type"][0] == "IndexError" and infos["infra_error_type"][1] is None
    assert "Search failed: IndexError" in infos["new_text"][0] and rewards[0] == 0.0
    assert all(o in vec.single_observation_space for o in obs)


def test_make_vec_uses_the_vector_entry_point(corpus_file: Any) -> None:
    vec = gym.make_vec("searchenv:SearchQA-v0", num_envs=2, task=EXAMPLES, corpus=corpus_file, max_turns=2)
    assert isinstance(vec.unwrapped, SearchQAVectorEnv) and vec.num_envs == 2
    obs, _ = vec.reset(seed=0)
    assert len(obs) == 2
    vec.close()


def test_shared_retriever_and_independent_state(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=3)
    assert len({id(e.retriever) for e in vec.envs}) == 1
    vec.reset(seed=0, options={"example_id": "q1"})
    vec.step(["<search> Karsk </search>", "<answer> x </answer>", "junk"])
    assert [e.transcript.count("<search>") for e in vec.envs].count(1) >= 1
    assert vec.envs[1].transcript != vec.envs[0].transcript


def test_bad_arguments(corpus_file: Any) -> None:
    vec, _ = _vec(corpus_file, n=2)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(["a", "b"])
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="2 actions"):
        vec.step(["only one"])
    with pytest.raises(ValueError, match="autoreset_mode"):
        SearchQAVectorEnv(2, task=EXAMPLES, corpus=corpus_file, autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="num_envs"):
        SearchQAVectorEnv(0, task=EXAMPLES, corpus=corpus_file)
    with pytest.raises(ValueError, match="seed"):
        vec.reset(seed=[1, 2, 3])
