from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from searchenv.retrievers.base import Hit, RetrieverError  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.serving.server import ServerLimits, create_app, uvicorn_config  # noqa: E402

from .conftest import DOCS, stop_process  # noqa: E402

LIMITS = ServerLimits(max_queries=4, max_topk=5, max_query_chars=50, max_body_bytes=2000)
BASE = "http://127.0.0.1:8000"  # the Host header the server accepts by default


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("srv") / "idx")


@pytest.fixture()
def client(bm25: BM25Retriever) -> Iterator[TestClient]:
    with TestClient(create_app(bm25, limits=LIMITS), base_url=BASE) as c:
        yield c


class RecordingRetriever:
    """Slow fake retriever: hits named after the query; records each search_batch call."""

    kind = "fake"
    fingerprint = "fake-fp"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[tuple[list[str], int]] = []
        self.fail: BaseException | None = None
        self.answer: list[list[object]] | None = None

    def __len__(self) -> int:
        return 123

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append((list(queries), k))
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        if self.answer is not None:
            return self.answer  # type: ignore[return-value]
        return [[Hit(f"{q}#{i}", f"T{i}", f"body of {q}", float(k - i)) for i in range(k)] for q in queries]


# --------------------------------------------------------------------------- Search-R1 dialect


def test_search_r1_shape_with_scores(client: TestClient, bm25: BM25Retriever) -> None:
    r = client.post("/retrieve", json={"queries": ["Where was Tobin Quenn born?", "capital of Essaly"], "topk": 2,
                                       "return_scores": True})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["result"] and len(body["result"]) == 2
    first = body["result"][0][0]
    assert set(first) == {"document", "score"} and set(first["document"]) == {"id", "contents"}
    assert first["document"] == {"id": "d3", "contents": f"{DOCS[3].title}\n{DOCS[3].text}"}
    local = bm25.search_batch(["Where was Tobin Quenn born?"], 2)[0]
    assert [x["document"]["id"] for x in body["result"][0]] == [h.doc_id for h in local]
    assert first["score"] == pytest.approx(local[0].score)


def test_search_r1_without_scores_returns_bare_documents(client: TestClient) -> None:
    r = client.post("/retrieve", json={"queries": ["capital of Essaly"], "topk": 1, "return_scores": False})
    assert r.json() == {"result": [[{"id": "d2", "contents": f"{DOCS[2].title}\n{DOCS[2].text}"}]]}
    # Search-R1's defaults: return_scores false, topk from the server (3)
    r = client.post("/retrieve", json={"queries": ["Quenn"]})
    items = r.json()["result"][0]
    assert len(items) == 3 and all(set(x) == {"id", "contents"} for x in items)
    # topk 0 also means the server's default, as `if not request.topk` does in Search-R1's server
    assert len(client.post("/retrieve", json={"queries": ["Quenn"], "topk": 0}).json()["result"][0]) == 3
    assert client.post("/retrieve", json={"queries": []}).json() == {"result": []}


def test_single_query_dialect(client: TestClient) -> None:
    for key in ("top_k", "topk", "k"):
        r = client.post("/retrieve", json={"query": "capital of Essaly", key: 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["query"] == "capital of Essaly" and body["num_results"] == 2
        top = body["results"][0]
        assert set(top) == {"id", "title", "text", "content", "score"}
        assert (top["id"], top["title"], top["text"]) == ("d2", DOCS[2].title, DOCS[2].text)
        assert top["content"] == f"{DOCS[2].title}\n{DOCS[2].text}"
    assert client.post("/retrieve", json={"query": "Quenn"}).json()["num_results"] == 3


def test_health(client: TestClient, bm25: BM25Retriever) -> None:
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["kind"] == "bm25"
    assert body["num_docs"] == len(DOCS) and body["fingerprint"] == bm25.fingerprint
    assert body["limits"]["max_topk"] == 5 and body["dialects"] == ["search-r1", "query"]


# --------------------------------------------------------------------------- limits and malformed requests


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"queries": ["a"] * 5}, 413, "5 queries in one request exceed the limit of 4"),
        ({"queries": ["a"], "topk": 6}, 422, "topk=6 exceeds the limit of 5"),
        ({"queries": ["a"], "topk": -3}, 422, "topk must be a positive integer"),
        ({"queries": ["x" * 51]}, 422, "query 0 has 51 characters, more than the limit of 50"),
        ({"query": "x" * 51}, 422, "more than the limit of 50"),
        ({"query": "a", "top_k": 99}, 422, "top_k=99 exceeds the limit of 5"),
        ({"queries": "just a string"}, 422, "queries"),
        ({"queries": ["a", 3]}, 422, "queries.1"),
        ({"queries": ["a"], "topk": "3"}, 422, "topk"),
        ({"queries": ["a"], "topk": 2.5}, 422, "topk"),
        ({"queries": ["a"], "return_scores": "yes"}, 422, "return_scores"),
        ({"query": None}, 422, "query"),
        ({"question": "a"}, 422, "needs 'queries'"),
        (["a", "b"], 422, "must be a JSON object"),
        ("text", 422, "must be a JSON object"),
    ],
)
def test_limits_and_invalid_requests_are_4xx_with_a_message(
    client: TestClient, payload: object, status: int, message: str
) -> None:
    r = client.post("/retrieve", json=payload)
    assert r.status_code == status, r.text
    body = r.json()
    assert message in body["error"] and body["detail"] == body["error"]


def test_malformed_json_and_oversized_bodies(client: TestClient) -> None:
    r = client.post("/retrieve", content=b'{"queries": [', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]
    r = client.post("/retrieve", content=b"\xff\xfe", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/retrieve", content=b"", headers={"content-type": "application/json"})
    assert r.status_code == 400
    big = json.dumps({"queries": ["a"], "pad": "x" * 3000}).encode()
    r = client.post("/retrieve", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "2000 bytes" in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
        yield b'{"queries": ["a"], "pad": "'
        for _ in range(30):
            yield b"x" * 100
        yield b'"}'

    r = client.post("/retrieve", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    r = client.post("/retrieve", content=b"{}", headers={"content-length": "abc", "content-type": "application/json"})
    assert r.status_code == 400
    assert client.get("/retrieve").status_code == 405


def test_bearer_token(bm25: BM25Retriever) -> None:
    with TestClient(create_app(bm25, token="s3cret"), base_url=BASE) as c:
        body = {"queries": ["Karsk"], "topk": 1}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = c.post("/retrieve", json=body, headers=headers)
            assert r.status_code == 401 and "bearer token" in r.json()["error"]
            assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/health").status_code == 401
        ok = c.post("/retrieve", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["result"][0][0]["id"] == "d4"
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    with TestClient(create_app(bm25, token=None), base_url=BASE) as c:  # token off
        assert c.post("/retrieve", json={"queries": ["Karsk"]}).status_code == 200


def test_retriever_failures_are_503_and_bugs_are_json_500_without_internal_text(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = RecordingRetriever()
    with TestClient(create_app(fake), raise_server_exceptions=False, base_url=BASE) as c:
        # a RetrieverError, and what a damaged index raises (IndexError): 503, generic message, logged
        for fail in (RetrieverError("index /srv/secret/idx vanished"), IndexError("index 99 is out of bounds")):
            fake.fail = fail
            r = c.post("/retrieve", json={"queries": ["a"]})
            assert r.status_code == 503, r.text
            assert r.json()["error"] == "retrieval failed; the server log has the details"
            assert str(fail) in caplog.text
        fake.fail = None
        fake.answer = [[object()]]  # an answer that is not hits: the retriever failed, 503
        r = c.post("/retrieve", json={"queries": ["a"]})
        assert r.status_code == 503 and "list of Hit objects" in caplog.text
        # issue 31: 5. Scores that are not finite (a damaged index): the retriever failed, 503; before,
        # a 500 when the answer could not be written as JSON
        for score in (float("inf"), float("-inf"), float("nan")):
            fake.answer = [[Hit("d1", "t", "x", score)]]
            r = c.post("/retrieve", json={"queries": ["a"], "return_scores": True})
            assert r.status_code == 503 and "not a finite number" in caplog.text, r.text
        fake.answer = None

        def bug(*args: object) -> None:
            raise RuntimeError("a bug while answering")

        monkeypatch.setattr("searchenv.serving.server.search_r1_result", bug)
        r = c.post("/retrieve", json={"queries": ["a"], "return_scores": True})
        assert r.status_code == 500
        assert r.json() == {"error": "internal server error; the server log has the details",
                            "detail": "internal server error; the server log has the details"}
        monkeypatch.undo()
        assert c.post("/retrieve", json={"queries": ["a"]}).status_code == 200


def test_bad_server_settings() -> None:
    with pytest.raises(ValueError, match="max_topk"):
        ServerLimits(max_topk=0)
    with pytest.raises(ValueError, match="exceeds max_topk"):
        create_app(RecordingRetriever(), default_topk=10, limits=ServerLimits(max_topk=5))


# --------------------------------------------------------------------------- micro-batching


async def _concurrent(app: object, bodies: list[dict[str, object]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as ac:
        return list(await asyncio.gather(*(ac.post("/retrieve", json=b) for b in bodies)))


def test_concurrent_requests_share_one_search_call() -> None:
    fake = RecordingRetriever(delay=0.05)
    app = create_app(fake, batch_window_ms=20)
    bodies: list[dict[str, object]] = [{"queries": [f"q{i}", f"r{i}"], "topk": 2} for i in range(10)]
    bodies.append({"query": "single", "top_k": 2})
    responses = asyncio.run(_concurrent(app, bodies))
    assert all(r.status_code == 200 for r in responses)
    for i, r in enumerate(responses[:10]):
        result = r.json()["result"]
        assert [x["id"] for x in result[0]] == [f"q{i}#0", f"q{i}#1"]
        assert [x["id"] for x in result[1]] == [f"r{i}#0", f"r{i}#1"]
    assert responses[10].json()["results"][0]["id"] == "single#0"
    assert len(fake.calls) <= 2, fake.calls  # 11 requests, 21 queries
    assert sum(len(q) for q, _ in fake.calls) == 21


def test_without_a_window_requests_arriving_during_a_search_form_the_next_batch() -> None:
    fake = RecordingRetriever(delay=0.05)
    app = create_app(fake)  # default: no waiting window; an idle worker searches at once
    bodies: list[dict[str, object]] = [{"queries": [f"q{i}"], "topk": 1} for i in range(12)]
    responses = asyncio.run(_concurrent(app, bodies))
    assert [r.json()["result"][0][0]["id"] for r in responses] == [f"q{i}#0" for i in range(12)]
    assert len(fake.calls) <= 3, fake.calls  # 12 requests: the first search, then what queued meanwhile
    assert sum(len(q) for q, _ in fake.calls) == 12


def test_different_k_are_separate_calls_in_one_batch() -> None:
    fake = RecordingRetriever()
    app = create_app(fake, batch_window_ms=30)
    responses = asyncio.run(_concurrent(app, [{"queries": ["a"], "topk": 1}, {"queries": ["b"], "topk": 3},
                                              {"queries": ["c"], "topk": 1}]))
    assert [len(r.json()["result"][0]) for r in responses] == [1, 3, 1]
    assert sorted(k for _, k in fake.calls) == [1, 3]


def test_a_small_search_waits_for_at_most_one_batch_of_large_ones() -> None:
    # issue 31: 1. Before, batches were formed in arrival order, so a one-query request behind a
    # burst of maximum-size ones (clients that never read their answers) waited for all of them
    fake = RecordingRetriever(delay=0.05)
    app = create_app(fake, max_batch=4)
    bodies: list[dict[str, object]] = [{"queries": [f"big{i}-{j}" for j in range(4)], "topk": 2} for i in range(8)]
    bodies.append({"query": "small", "top_k": 2})
    responses = asyncio.run(_concurrent(app, bodies))
    assert all(r.status_code == 200 for r in responses)
    assert [x["id"] for x in responses[8].json()["results"]] == ["small#0", "small#1"]
    assert [x["id"] for x in responses[7].json()["result"][3]] == ["big7-3#0", "big7-3#1"]
    call = next(i for i, (queries, _) in enumerate(fake.calls) if "small" in queries)
    assert call <= 2, [q[0] for q, _ in fake.calls]  # the first search, one batch of large ones, then it
    searched = sorted(q for queries, _ in fake.calls for q in queries)
    assert searched == sorted([f"big{i}-{j}" for i in range(8) for j in range(4)] + ["small"])  # each once


def test_without_micro_batching_each_request_is_one_call() -> None:
    fake = RecordingRetriever(delay=0.01)
    app = create_app(fake, micro_batch=False)
    responses = asyncio.run(_concurrent(app, [{"queries": [f"q{i}"], "topk": 1} for i in range(6)]))
    assert all(r.status_code == 200 for r in responses)
    assert len(fake.calls) == 6


def test_search_does_not_block_the_event_loop() -> None:
    fake = RecordingRetriever(delay=0.6)
    app = create_app(fake)

    async def scenario() -> tuple[float, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as ac:
            slow = asyncio.create_task(ac.post("/retrieve", json={"queries": ["slow"]}))
            await asyncio.sleep(0.1)
            t0 = time.perf_counter()
            health = await ac.get("/health")
            elapsed = time.perf_counter() - t0
            assert (await slow).status_code == 200
            return elapsed, health.status_code

    elapsed, status = asyncio.run(scenario())
    assert status == 200 and elapsed < 0.3, elapsed


class PerQueryRetriever(RecordingRetriever):
    """A fake whose search takes ``per_query`` seconds per query, as an index's does."""

    def __init__(self, per_query: float) -> None:
        super().__init__()
        self.per_query = per_query

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.delay = self.per_query * len(queries)
        return super().search_batch(queries, k)


def test_large_requests_are_searched_in_parts_and_cannot_hold_up_small_ones() -> None:
    # issue 42: 12. Before, a batch took large requests whole (up to max_batch queries and more), so
    # every request of a one-query client waited for a whole batch of large ones
    fake = PerQueryRetriever(0.0005)
    app = create_app(fake, limits=ServerLimits(max_topk=100))
    large_bodies = [{"queries": [f"L{i}-{j}" for j in range(100)], "topk": 100, "return_scores": True}
                    for i in range(12)]  # 0.6 s of search in all

    async def scenario() -> tuple[list[float], list[tuple[list[str], int]], list[httpx.Response]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30) as ac:
            large = [asyncio.create_task(ac.post("/retrieve", json=body)) for body in large_bodies]
            await asyncio.sleep(0.02)  # the first large request is being searched, whole
            calls = len(fake.calls)
            latencies = []
            for n in range(10):  # one small client, one request after another
                t0 = time.perf_counter()
                r = await ac.post("/retrieve", json={"query": f"small{n}", "top_k": 3})
                latencies.append(time.perf_counter() - t0)
                assert [x["id"] for x in r.json()["results"]] == [f"small{n}#{i}" for i in range(3)]
            during = fake.calls[calls + 1 :]
            return latencies, during, list(await asyncio.gather(*large))

    latencies, during, large = asyncio.run(scenario())
    # the first waits for the large request being searched (50 ms); then each waits for at most one
    # part of a large request (here one query, 0.5 ms) and its own search, not for a batch of them
    assert max(latencies[1:]) < 0.05, latencies
    assert max(len(q) for q, k in during if k == 100) == 1, during  # 128 // (100 + 10) = 1 query per part
    for i, r in enumerate(large):  # parts put back together in order
        assert [row[0]["document"]["id"] for row in r.json()["result"]] == [f"L{i}-{j}#0" for j in range(100)]
        assert all(len(row) == 100 for row in r.json()["result"])
    searched: dict[str, int] = {}  # at most 4 large requests in progress (holding partial answers) at once
    for queries, _ in during:
        for q in queries:
            searched[q.split("-")[0]] = searched.get(q.split("-")[0], 0) + 1
        assert sum(0 < n < 100 for name, n in searched.items() if name.startswith("L")) <= 4, searched


def test_without_small_requests_large_ones_fill_whole_batches() -> None:
    fake = PerQueryRetriever(0.0001)
    app = create_app(fake, limits=ServerLimits(max_topk=100))
    bodies: list[dict[str, object]] = [{"queries": [f"L{i}-{j}" for j in range(100)], "topk": 100,
                                        "return_scores": True} for i in range(4)]
    responses = asyncio.run(_concurrent(app, bodies))
    assert all(r.status_code == 200 for r in responses)
    assert sorted(len(q) for q, _ in fake.calls)[-1] == 256  # max_batch: large requests are not cut small
    for i, r in enumerate(responses):
        assert [row[0]["document"]["id"] for row in r.json()["result"]] == [f"L{i}-{j}#0" for j in range(100)]


class _ThreadServer:
    """The app under uvicorn (:func:`uvicorn_config`) on a free loopback port, in a thread."""

    def __init__(self, app: object) -> None:
        import threading

        import uvicorn

        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> tuple[str, int]:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return "127.0.0.1", int(self.server.servers[0].sockets[0].getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _send(address: tuple[str, int], body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(address, timeout=5)
    s.sendall(f"POST /retrieve HTTP/1.1\r\nHost: {address[0]}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def test_requests_of_clients_that_disconnected_are_not_searched() -> None:
    # issue 42: 12. Before, a request went on waiting for its search after its client had gone,
    # so the server searched (and answered into the void) every request of clients that left
    fake = RecordingRetriever(delay=0.3)
    app = create_app(fake)
    with _ThreadServer(app) as address:
        first = _send(address, {"queries": ["first"], "topk": 1})
        time.sleep(0.1)  # "first" is being searched
        gone = [_send(address, {"queries": [f"gone{i}"], "topk": 1}) for i in range(3)]
        kept = _send(address, {"queries": ["kept"], "topk": 1})
        time.sleep(0.1)  # all four queued behind "first"
        for s in gone:
            s.close()
        for s in (first, kept):
            with s, s.makefile("rb") as answer:
                assert answer.readline().startswith(b"HTTP/1.1 200")
        health = httpx.get(f"http://{address[0]}:{address[1]}/health", trust_env=False).json()["micro_batch"]
    assert [q for q, _ in fake.calls] == [["first"], ["kept"]]
    assert health["dropped_requests"] == 3 and health["dropped_queries"] == 3


def test_graceful_timeout_must_be_positive() -> None:
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="graceful_timeout"):
            uvicorn_config(create_app(RecordingRetriever()), graceful_timeout=bad)  # type: ignore[arg-type]
    assert uvicorn_config(create_app(RecordingRetriever())).timeout_graceful_shutdown == 5.0


# --------------------------------------------------------------------------- the CLI, as a real process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_serve_command_binds_loopback_and_answers(bm25: BM25Retriever, tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    BM25Retriever.build(DOCS, folder)
    port = _free_port()
    env = {**os.environ, "SEARCHENV_TOKEN": "tok-of-16-characters"}  # not on the command line, where `ps` shows it
    cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "serve", "--index", str(folder),
           "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health",
                              headers={"Authorization": "Bearer tok-of-16-characters"}, timeout=1.0, trust_env=False)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode() if proc.stdout else ""
                    pytest.fail(f"server did not start: {out}")
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["num_docs"] == len(DOCS)
        r = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["Karsk"], "topk": 1},
                       headers={"Authorization": "Bearer tok-of-16-characters"}, trust_env=False)
        assert r.json()["result"][0][0]["id"] == "d4"
        assert httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["Karsk"]},
                          trust_env=False).status_code == 401
        # bound to loopback only: the server's socket is 127.0.0.1, not 0.0.0.0
        listening = Path("/proc/net/tcp").read_text() if Path("/proc/net/tcp").exists() else ""
        if listening:
            local = [line.split()[1] for line in listening.splitlines()[1:] if line.split()[3] == "0A"]
            assert f"0100007F:{port:04X}" in local and f"00000000:{port:04X}" not in local
    finally:
        stop_process(proc)


def test_serve_command_rejects_a_missing_index(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    result = CliRunner().invoke(get_app(), ["serve", "--index", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "not a searchenv index" in result.output



# --------------------------------------------------------------------------- leaks and hostile requests (issue 16)


def test_health_shows_index_paths_only_behind_a_token(bm25: BM25Retriever) -> None:
    info = {"indexes": ["/srv/secret/idx"]}
    with TestClient(create_app(bm25, info=info), base_url=BASE) as c:
        body = c.get("/health").json()
        assert body["status"] == "ok" and "/srv/secret/idx" not in json.dumps(body)
    with TestClient(create_app(bm25, info=info, token="s3cret"), base_url=BASE) as c:
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).json()["indexes"] == ["/srv/secret/idx"]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx"])
def test_bodies_that_are_not_declared_json_are_refused(client: TestClient, content_type: str | None) -> None:
    # what a cross-site page can send without a CORS preflight: text/plain, forms, or no type at all
    headers = {} if content_type is None else {"content-type": content_type}
    r = client.post("/retrieve", content=b'{"queries": ["Karsk"]}', headers=headers)
    assert r.status_code == 415, r.text
    assert "Content-Type must be application/json" in r.json()["error"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_content_types_are_accepted(client: TestClient, content_type: str) -> None:
    r = client.post("/retrieve", content=b'{"queries": ["Karsk"]}', headers={"content-type": content_type})
    assert r.status_code == 200, r.text


def test_host_header_must_name_the_server(bm25: BM25Retriever) -> None:
    body = {"queries": ["Karsk"]}
    with TestClient(create_app(bm25), base_url=BASE) as c:
        for host in ("127.0.0.1:8000", "localhost:8000", "LOCALHOST", "[::1]:8000", "10.1.2.3:8000", "127.0.0.1"):
            assert c.post("/retrieve", json=body, headers={"host": host}).status_code == 200, host
        # DNS rebinding: a name the attacker controls, now resolving to 127.0.0.1
        for host in ("attacker.example:8000", "attacker.example", "localhost.attacker.example", "x@127.0.0.1",
                     "127.0.0.1.nip.io"):
            for r in (c.post("/retrieve", json=body, headers={"host": host}), c.get("/health", headers={"host": host})):
                assert r.status_code == 400, host
                assert "Host header" in r.json()["error"] and "--allowed-host" in r.json()["error"]
    with TestClient(create_app(bm25, allowed_hosts=["retrieval.internal"]), base_url=BASE) as c:
        assert c.post("/retrieve", json=body, headers={"host": "retrieval.internal:8000"}).status_code == 200
        assert c.post("/retrieve", json=body, headers={"host": "attacker.example"}).status_code == 400
    with TestClient(create_app(bm25, allowed_hosts=["*"]), base_url=BASE) as c:
        assert c.post("/retrieve", json=body, headers={"host": "anything.example"}).status_code == 200


def test_bearer_scheme_is_case_insensitive(bm25: BM25Retriever) -> None:
    with TestClient(create_app(bm25, token="s3cret"), base_url=BASE) as c:
        for auth in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer  s3cret"):
            assert c.get("/health", headers={"Authorization": auth}).status_code == 200, auth
        for auth in ("Basic s3cret", "Bearers3cret", "Bearer s3cret2", "Bearer S3CRET"):
            assert c.get("/health", headers={"Authorization": auth}).status_code == 401, auth


@pytest.mark.parametrize("token", ["tökén", "two words", "line\nbreak"])
def test_tokens_that_cannot_travel_in_a_header_are_refused(token: str) -> None:
    with pytest.raises(ValueError, match="token must be printable ASCII"):
        create_app(RecordingRetriever(), token=token)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
        (b'{"queries": ' + b"[" * 70 + b"]" * 70 + b"}", "nested deeper than 64 levels"),
        (b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}", "unusable JSON value"),
        (b'{"queries": ["a"], "topk": 1e999}', "topk"),
        (b'{"queries": ["a"], "topk": NaN}', "topk"),
        # issue 31: 2. Before: 500 in the single-query dialect (the answer could not be encoded)
        (b'{"query": "x\\ud800"}', "query is not Unicode text"),
        (b'{"queries": ["ok", "x\\udc00"], "topk": 1}', "queries[1] is not Unicode text"),
    ],
)
def test_hostile_json_bodies_are_4xx_never_500(bm25: BM25Retriever, body: bytes, message: str) -> None:
    with TestClient(create_app(bm25), base_url=BASE, raise_server_exceptions=False) as c:
        r = c.post("/retrieve", content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
        assert message in r.json()["error"]


def test_serve_token_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    missing = str(tmp_path / "nope")
    runner = CliRunner()
    result = runner.invoke(get_app(), ["serve", "--index", missing, "--token", "abc"])
    assert "visible to other users" in result.output and "SEARCHENV_TOKEN" in result.output
    result = runner.invoke(get_app(), ["serve", "--index", missing], env={"SEARCHENV_TOKEN": "abc"})
    assert result.exit_code == 2 and "visible" not in result.output
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    accented = tmp_path / "accented-token"
    accented.write_text("tökén\n", encoding="utf-8")
    short = tmp_path / "short-token"
    short.write_text("fifteen-chars..\n")
    for args, message in (
        (["--token-file", str(empty)], f"--token-file {empty} is empty"),
        (["--token-file", str(tmp_path / "absent")], "cannot read --token-file"),
        (["--token-file", str(accented)], "token must be printable ASCII"),
        (["--token-file", str(empty), "--token", "abc"], "not both"),
        (["--token-file", str(short)], f"--token-file {short} has 15 character(s); a server needs at least 16"),
        (["--token", "fifteen-chars.."], "--token (or SEARCHENV_TOKEN) has 15 character(s)"),
    ):
        result = runner.invoke(get_app(), ["serve", "--index", missing, *args])
        assert result.exit_code == 2 and message in result.output, result.output


def test_the_batcher_returns_a_failure_where_the_environment_takes_one() -> None:
    """``search_or_error`` of the batcher: hits, or the retriever's exception as a value (an infra-error step)."""
    from searchenv.retrievers.batching import MicroBatcher

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def search_batch(self, queries: list[str], k: int) -> list[list[Hit]]:
            self.calls += 1
            if self.calls == 2:
                raise RetrieverError("index offline")
            return [[Hit(doc_id="d0", title="T", text="x", score=1.0)] for _ in queries]

    async def run() -> list[object]:
        batcher = MicroBatcher(Flaky())
        try:
            return [await batcher.search_or_error(["a"], 1), await batcher.search_or_error(["b"], 1),
                    await batcher.search_or_error(["c"], 1)]
        finally:
            await batcher.aclose()

    first, failed, third = asyncio.run(run())
    assert isinstance(first, list) and isinstance(third, list)
    assert first[0][0].doc_id == "d0" and third[0][0].doc_id == "d0"
    assert isinstance(failed, RetrieverError) and "index offline" in str(failed)
