"""The peers' own search clients against ``searchenv serve``'s app on 127.0.0.1.

SkyRL-gym's search tool and its ``search`` environment run from the real ``skyrl-gym`` package.
GEM's client (``gem-llm``) pulls reasoning-gym, math-verify and nltk, so its wire format is
replayed here exactly as ``gem/tools/search_tool.py`` (gem-llm 0.1.0 on PyPI, and the newer
batched form in its repository) sends and reads it: a msgpack body posted with ``requests``
without a Content-Type, a msgpack answer read under ``"result"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
msgspec = pytest.importorskip("msgspec")
requests = pytest.importorskip("requests")

from searchenv.corpus import Document  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.serving.server import create_app  # noqa: E402

from .conftest import DOCS  # noqa: E402
from .test_remote import LiveServer  # noqa: E402

QUERY = "Where was Tobin Quenn born?"


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("peers") / "idx")


@pytest.fixture(scope="module")
def url(bm25: BM25Retriever) -> Iterator[str]:
    with LiveServer(create_app(bm25, accept_untyped_msgpack=True)) as base:
        yield base


@pytest.fixture(scope="module")
def strict_url(bm25: BM25Retriever) -> Iterator[str]:
    with LiveServer(create_app(bm25)) as base:
        yield base


def _expected(bm25: BM25Retriever, k: int = 3) -> list[str]:
    return [Document(h.doc_id, h.title, h.text).contents for h in bm25.search_batch([QUERY], k)[0]]


def test_skyrl_gym_search_tool_gets_the_documents(url: str, bm25: BM25Retriever) -> None:
    from skyrl_gym.tools.search import SearchToolGroup

    tool = SearchToolGroup(search_url=f"{url}/retrieve", topk=3, timeout=10)
    text = json.loads(tool.search(QUERY))["result"]
    assert text != "No search results found." and not text.startswith("Search error")
    want = _expected(bm25)
    assert text == "".join(f"Doc {i + 1}: {c.strip()}\n" for i, c in enumerate(want))


def test_skyrl_gym_search_env_step_reads_our_server(url: str, bm25: BM25Retriever) -> None:
    import skyrl_gym
    from omegaconf import DictConfig

    config = DictConfig({"search_url": f"{url}/retrieve", "topk": 2, "timeout": 10, "log_requests": False})
    env = skyrl_gym.make("search", env_config=config,
                         extras={"reward_spec": {"ground_truth": {"target": ["Karsk"]}}, "max_turns": 3})
    env.init([{"role": "user", "content": "Where was Tobin Quenn born?"}])
    out = env.step(f"<search> {QUERY} </search>")
    [obs] = out["observations"]
    assert obs["content"].startswith("\n<information>")
    assert _expected(bm25, 2)[0].strip() in json.loads(obs["content"].strip()[len("<information>"):-len(
        "</information>")])["result"]
    done = env.step("<answer> Karsk </answer>")
    assert done["done"] and done["reward"] == 1.0


def test_gem_wire_format_single_query(url: str, bm25: BM25Retriever) -> None:
    # gem-llm 0.1.0: {"query", "topk", "return_scores"} as msgpack, no Content-Type; reads ["result"]
    payload = {"query": QUERY, "topk": 3, "return_scores": True}
    response = requests.post(f"{url}/retrieve", data=msgspec.msgpack.encode(payload), timeout=10)
    response.raise_for_status()
    assert response.headers["content-type"] == "application/msgpack"
    result = msgspec.msgpack.decode(response.content)["result"]
    assert [item["document"]["contents"] for item in result] == _expected(bm25)
    assert all(isinstance(item["score"], float) for item in result)


def test_gem_wire_format_batched(url: str, bm25: BM25Retriever) -> None:
    # GEM's repository version: {"queries": [q], ...}; reads ["result"][0]
    payload = {"queries": [QUERY], "topk": 3, "return_scores": True}
    response = requests.post(f"{url}/retrieve", data=msgspec.msgpack.encode(payload), timeout=10)
    response.raise_for_status()
    result = msgspec.msgpack.decode(response.content)["result"][0]
    assert [item["document"]["contents"] for item in result] == _expected(bm25)


def test_untyped_msgpack_needs_the_flag_and_typed_msgpack_does_not(strict_url: str, bm25: BM25Retriever) -> None:
    body = msgspec.msgpack.encode({"queries": [QUERY], "topk": 3, "return_scores": True})
    refused = requests.post(f"{strict_url}/retrieve", data=body, timeout=10)
    assert refused.status_code == 415 and "--msgpack" in refused.json()["error"]
    typed = requests.post(f"{strict_url}/retrieve", data=body, timeout=10,
                          headers={"Content-Type": "application/msgpack"})
    assert typed.status_code == 200
    assert [i["document"]["contents"] for i in msgspec.msgpack.decode(typed.content)["result"][0]] == _expected(bm25)


@pytest.mark.parametrize(
    "body",
    [b"\x91" * 100_000 + b"\xc0", b"\x93\x01", b"\xc1", msgspec.msgpack.encode([QUERY]),
     msgspec.msgpack.encode({"queries": [1, 2]}), msgspec.msgpack.encode({"query": {"a": [QUERY]}})],
)
def test_hostile_msgpack_is_a_4xx(url: str, body: bytes) -> None:
    response = requests.post(f"{url}/retrieve", data=body, timeout=10,
                             headers={"Content-Type": "application/msgpack"})
    assert 400 <= response.status_code < 500
    assert "error" in response.json()


def test_json_single_query_answer_serves_rllm_and_skyrl_readers(url: str, bm25: BM25Retriever) -> None:
    body = requests.post(f"{url}/retrieve", json={"query": QUERY, "top_k": 2}, timeout=10).json()
    want = _expected(bm25, 2)
    assert [r["content"] for r in body["results"]] == want and body["num_results"] == 2  # rLLM
    assert [i["document"]["contents"] for i in body["result"][0]] == want  # SkyRL-gym / Search-R1
