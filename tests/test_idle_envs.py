"""IdleEnvs: idle environments reused across trajectories, never held by two at once, across threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from searchenv.idle_envs import IdleEnvs
from searchenv.retrievers.bm25 import BM25Retriever

from .conftest import DOCS, EXAMPLES


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("idle_envs") / "idx"
    BM25Retriever.build(DOCS, folder)
    return folder


def test_released_environment_is_reused_per_settings(index: Path) -> None:
    pool = IdleEnvs()
    settings = {"retriever": str(index), "top_k": 2}
    key, env = pool.acquire(settings, EXAMPLES[0])
    pool.release(key, env)
    assert pool.acquire(settings, EXAMPLES[1]) == (key, env)
    other_key, other = pool.acquire({**settings, "top_k": 3}, EXAMPLES[0])
    assert other is not env and other_key != key and other.top_k == 3


def test_max_free_bounds_what_is_kept(index: Path) -> None:
    pool = IdleEnvs(max_free=1)
    settings = {"retriever": str(index)}
    (k, a), (_, b) = pool.acquire(settings, EXAMPLES[0]), pool.acquire(settings, EXAMPLES[0])
    pool.release(k, a)
    pool.release(k, b)
    assert pool[k] == [a]


def test_threads_never_share_an_environment(index: Path) -> None:
    pool = IdleEnvs()
    settings = {"retriever": str(index)}
    holders: dict[int, int] = {}
    lock = threading.Lock()
    errors: list[str] = []

    def worker(n: int) -> None:
        for i in range(300):
            key, env = pool.acquire(settings, EXAMPLES[i % len(EXAMPLES)])
            with lock:
                if id(env) in holders:
                    errors.append(f"env held by thread {holders[id(env)]} handed to thread {n}")
                holders[id(env)] = n
            env.reset(options={"example": EXAMPLES[i % len(EXAMPLES)]})
            with lock:
                del holders[id(env)]
            pool.release(key, env)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    [free] = pool.values()
    assert 1 <= len(free) <= 8 and len({id(e) for e in free}) == len(free)
