"""Ray: environment workers as actors and the retriever as a Serve deployment, on a local ray.init(num_cpus=2)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from agents.integrations.ray import RayVectorEnv, ServeRetriever, retriever_app  # noqa: E402
from searchenv.retrievers.base import RetrieverError  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.tasks import write_qa_jsonl  # noqa: E402
from searchenv.vector import SearchQAVectorEnv  # noqa: E402

from .conftest import DOCS, EXAMPLES  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("ray")
    BM25Retriever.build(DOCS, folder / "idx")
    write_qa_jsonl(folder / "qa.jsonl", EXAMPLES)
    return str(folder / "idx"), str(folder / "qa.jsonl")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def _actions(obs: tuple[str, ...], step: int) -> list[str]:
    # search each episode's question, then answer; a malformed turn now and then
    out = []
    for i, o in enumerate(obs):
        question = o.rsplit("Question:", 1)[-1].strip().splitlines()[0]
        if step == 0:
            out.append(f"<search> {question} </search>")
        elif (i + step) % 5 == 0:
            out.append("no tags at all")
        else:
            out.append("<answer> Karsk </answer>")
    return out


@pytest.mark.slow
def test_ray_workers_step_like_one_local_vector_env(local_ray: None, files: tuple[str, str]) -> None:
    index, qa = files
    kwargs: dict[str, Any] = {"task": qa, "retriever": index, "max_turns": 3}
    remote = RayVectorEnv(2, 3, worker_options={"num_cpus": 0.5}, **kwargs)
    local = SearchQAVectorEnv(6, **kwargs)
    try:
        assert remote.num_envs == 6 and remote.single_action_space == local.single_action_space
        obs_r, info_r = remote.reset(seed=[1, 2, 3, 4, 5, 6])
        obs_l, info_l = local.reset(seed=[1, 2, 3, 4, 5, 6])
        assert obs_r == obs_l and list(info_r["example_id"]) == list(info_l["example_id"])
        for step in range(4):  # includes autoresets after answers
            acts = _actions(obs_l, step)
            obs_r, rew_r, term_r, trunc_r, info_r = remote.step(acts)
            obs_l, rew_l, term_l, trunc_l, info_l = local.step(acts)
            assert obs_r == obs_l
            np.testing.assert_array_equal(rew_r, rew_l)
            np.testing.assert_array_equal(term_r, term_l)
            np.testing.assert_array_equal(trunc_r, trunc_l)
            assert set(info_r) == set(info_l)
            for key in info_l:
                if key.startswith("_") or not isinstance(info_l[key], np.ndarray):
                    continue
                np.testing.assert_array_equal(info_r["_" + key], info_l["_" + key])
                mask = info_l["_" + key]
                assert [str(v) for v in info_r[key][mask]] == [str(v) for v in info_l[key][mask]], key
        assert remote.search_calls >= 2  # one search_batch per worker and searching step
        with pytest.raises(ValueError, match="needs a sequence of 6 actions"):
            remote.step(["x"])
    finally:
        remote.close()


@pytest.mark.slow
def test_serve_deployment_batches_callers_and_answers_like_the_index(local_ray: None, files: tuple[str, str]) -> None:
    index, qa = files
    handle = serve.run(retriever_app(index, num_replicas=1, max_batch_size=32, batch_wait_timeout_s=0.2,
                                     ray_actor_options={"num_cpus": 0.5}), name="retriever", route_prefix=None)
    retriever = ServeRetriever("retriever")
    local = BM25Retriever.load(index)
    queries = ["Where was Tobin Quenn born?", "capital of Essaly", "copper mines", "zzz-no-match"]
    got = retriever.search_batch(queries, 3)
    want = local.search_batch(queries, 3)
    assert [[(h.doc_id, h.text) for h in row] for row in got] == [[(h.doc_id, h.text) for h in row] for row in want]
    assert retriever.search_batch([], 3) == []
    before = handle.search_calls.remote().result()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # 8 callers at once: batched on the replica
        rows = list(pool.map(lambda q: retriever.search_batch([q], 2), queries * 2))
    assert [r[0] for r in rows] == [w[:2] for w in want] * 2
    assert handle.search_calls.remote().result() - before < 8
    # an environment (here in Ray workers) searches the deployment as its retriever
    envs = RayVectorEnv(2, 1, task=qa, retriever=retriever, max_turns=2, worker_options={"num_cpus": 0.5})
    try:
        obs, _ = envs.reset(seed=0)
        _, _, _, _, info = envs.step(_actions(obs, 0))
        assert not info["infra_error"].any() and all(len(ids) > 0 for ids in info["doc_ids"])
    finally:
        envs.close()
    serve.delete("retriever")
    with pytest.raises(RetrieverError, match="Ray Serve retriever failed"):
        ServeRetriever(handle, timeout=5).search_batch(["x"], 1)


def test_merged_infos_keep_gymnasium_layout() -> None:
    from agents.integrations.ray import _merge_infos

    parts = [{"a": np.array([1, 2]), "_a": np.array([True, False])}, {"b": np.array(["x"], dtype=object),
                                                                       "_b": np.array([True])}]
    merged = _merge_infos(parts, [2, 1])
    np.testing.assert_array_equal(merged["a"], [1, 2, 0])
    np.testing.assert_array_equal(merged["_a"], [True, False, False])
    assert list(merged["b"]) == [None, None, "x"] and list(merged["_b"]) == [False, False, True]


@pytest.mark.slow
def test_workers_that_cannot_be_scheduled_raise_instead_of_hanging(local_ray: None, files: tuple[str, str]) -> None:
    index, qa = files
    with pytest.raises(TimeoutError, match="lower worker_options"):
        RayVectorEnv(1, 1, task=qa, retriever=index, worker_options={"num_cpus": 64}, timeout=3)
