"""``serve-openenv``'s settings, readiness and session limits (run in .venv-openenv by test_openenv.py).

Settings are checked when the server starts, with the variable or option named; ``/health`` answers
503 while the retriever cannot answer a search; sessions made over HTTP and abandoned cannot lock the
server: a full server ends those past the idle timeout at once, then takes the idlest abandoned one,
or says how long to wait.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from tests.conftest import DOCS, EXAMPLES

import searchenv.integrations.openenv as served
import searchenv.integrations.openenv_sessions as sessions
from searchenv.integrations.openenv import SearchQAService, app_from_environ, create_app, settings_from_environ
from searchenv.retrievers import RetrieverError
from searchenv.retrievers.base import Hit
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import write_qa_jsonl

BASE = "http://127.0.0.1:8000"
TOKEN = "a-token-of-twenty-chars"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("limits")
    BM25Retriever.build(DOCS, root / "idx")
    write_qa_jsonl(root / "qa.jsonl", EXAMPLES)
    return {"root": root, "index": root / "idx", "qa": root / "qa.jsonl"}


def _environ(world: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"SEARCHQA_TASK": str(world["qa"]), "SEARCHQA_INDEX": str(world["index"]), "SEARCHQA_SPLIT": "test",
            **extra}


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("SEARCHENV_TOKEN", "a", "SEARCHENV_TOKEN has 1 character(s); a server needs at least 16"),
    ("SEARCHQA_IDLE_TIMEOUT", "1e-9", "SEARCHQA_IDLE_TIMEOUT must lie in [1, 86400], got '1e-9'"),
    ("SEARCHQA_IDLE_TIMEOUT", "1e9", "SEARCHQA_IDLE_TIMEOUT must lie in [1, 86400]"),
    ("SEARCHQA_TOP_K", str(10**12), "SEARCHQA_TOP_K must lie in [1, 100], got '1000000000000'"),
    ("SEARCHQA_REWARD_RANGE", "1", "SEARCHQA_REWARD_RANGE must be LOW,HIGH"),
    ("SEARCHQA_REWARD_RANGE", "1,0", "SEARCHQA_REWARD_RANGE must be LOW,HIGH"),
])
def test_a_bad_variable_is_refused_at_start_naming_it(variable: str, value: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        settings_from_environ({variable: value})
    assert message in str(refused.value)
    assert variable != "SEARCHENV_TOKEN" or f"'{value}'" not in str(refused.value)  # never the token itself


def test_short_tokens_idle_timeouts_and_top_ks_are_refused_by_the_library_too(world: dict[str, Path]) -> None:
    retriever = BM25Retriever.load(world["index"])
    with pytest.raises(ValueError, match=r"top_k must be an integer in \[1, 100\], got 1000000000000"):
        SearchQAService(world["qa"], retriever=retriever, split="test", top_k=10**12)
    service = SearchQAService(world["qa"], retriever=retriever, split="test")
    with pytest.raises(ValueError, match="at least 16"):
        create_app(service, token="a")
    with pytest.raises(ValueError, match=r"idle_timeout must be a number of seconds in \[1, 86400\]"):
        create_app(service, idle_timeout=1e-9)
    create_app(service, token=TOKEN, idle_timeout=1.0)


def test_a_reward_that_needs_a_range_takes_it_from_the_environment(world: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="SEARCHQA_REWARD_RANGE=LOW,HIGH"):
        app_from_environ(_environ(world, SEARCHQA_REWARD="r3-rag"))
    app = app_from_environ(_environ(world, SEARCHQA_REWARD="r3-rag", SEARCHQA_REWARD_RANGE="-1,1.5"))
    with TestClient(app, base_url=BASE) as client:
        assert "[-1.0, 1.5]" in client.get("/metadata").json()["description"]


class _Switchable:
    """A retriever that can be taken down and brought back."""

    def __init__(self, inner: BM25Retriever) -> None:
        self.inner, self.down = inner, False

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if self.down:
            raise RetrieverError("connection refused")
        return self.inner.search_batch(queries, k)

    def __len__(self) -> int:
        return len(self.inner)


def test_health_is_unhealthy_while_the_retriever_cannot_answer(world: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served, "HEALTH_TTL_S", 0.0)
    retriever = _Switchable(BM25Retriever.load(world["index"]))
    service = SearchQAService(world["qa"], retriever=retriever, split="test")  # type: ignore[arg-type]
    with TestClient(create_app(service), base_url=BASE) as client:
        assert client.get("/health").status_code == 200
        retriever.down = True
        answer = client.get("/health")
        assert answer.status_code == 503, answer.text
        body: dict[str, Any] = answer.json()
        assert body["status"] == "unhealthy" and "connection refused" in body["error"]
        retriever.down = False
        assert client.get("/health").status_code == 200


def test_the_packaged_app_over_a_dead_retrieval_server_is_unhealthy(world: dict[str, Path]) -> None:
    app = app_from_environ(_environ(world, SEARCHQA_INDEX="http://127.0.0.1:9"))
    with TestClient(app, base_url=BASE) as client:
        answer = client.get("/health")
        assert answer.status_code == 503 and answer.json()["status"] == "unhealthy", answer.text


def _create(client: TestClient, request_id: int = 1) -> dict[str, Any]:
    return dict(client.post("/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/create", "params": {},
                                          "id": request_id}).json())


def _tools(client: TestClient, session_id: str) -> dict[str, Any]:
    return dict(client.post("/mcp", json={"jsonrpc": "2.0", "method": "tools/list",
                                          "params": {"session_id": session_id}, "id": 9}).json())


def test_abandoned_http_sessions_make_room_for_a_newcomer(world: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions made over HTTP and never closed: a full server says how long to wait, then takes the idlest."""
    monkeypatch.setattr(sessions, "ABANDONED_AFTER_S", 1.5)
    service = SearchQAService(world["qa"], retriever=BM25Retriever.load(world["index"]), split="test")
    with TestClient(create_app(service, max_sessions=3, idle_timeout=60), base_url=BASE) as client:
        made = [_create(client, i)["result"]["session_id"] for i in range(3)]
        time.sleep(0.5)
        assert "tools" in _tools(client, made[0])["result"]  # made[0] is in use: made[1] is now the idlest
        refused = _create(client)
        assert "Server at capacity: 3/3" in refused["error"]["message"], refused
        assert re.search(r"may be closed in [01] s \(retry then\)", refused["error"]["message"]), refused
        with client.websocket_connect("ws://127.0.0.1:8000/ws") as ws:  # a WebSocket is told the same
            ws.send_text(json.dumps({"type": "reset", "data": {"seed": 1}}))
            out = json.loads(ws.receive_text())
            assert out["data"]["code"] == "CAPACITY_REACHED" and "retry then" in out["data"]["message"]
        time.sleep(1.2)
        with client.websocket_connect("ws://127.0.0.1:8000/ws") as ws:  # room made: the idlest HTTP session closed
            ws.send_text(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(ws.receive_text())["type"] == "observation"
            assert "Unknown session_id" in _tools(client, made[1])["error"]["message"]
            assert "tools" in _tools(client, made[0])["result"] and "tools" in _tools(client, made[2])["result"]


def test_an_http_session_idle_past_the_timeout_is_gone_when_a_newcomer_needs_room(
        world: dict[str, Path]) -> None:
    """Not a reaper's round later: the idle timeout is the WebSocket's, and a full server ends them at once."""
    service = SearchQAService(world["qa"], retriever=BM25Retriever.load(world["index"]), split="test")
    with TestClient(create_app(service, max_sessions=2, idle_timeout=1.0), base_url=BASE) as client:
        made = [_create(client, i)["result"]["session_id"] for i in range(2)]
        time.sleep(1.2)  # past the timeout, before OpenEnv's reaper looks (every 5 s at the least)
        fresh = _create(client)
        assert "result" in fresh, fresh
        assert all("Unknown session_id" in _tools(client, sid)["error"]["message"] for sid in made)
        assert "tools" in _tools(client, fresh["result"]["session_id"])["result"]
