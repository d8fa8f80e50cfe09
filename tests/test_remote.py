from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from searchenv.retrievers.base import Hit, RetrieverError  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.retrievers.remote import RemoteRetriever, parse_query, parse_search_r1  # noqa: E402
from searchenv.serving.server import ServerLimits, create_app, uvicorn_config  # noqa: E402

from .conftest import DOCS, ScriptedHandler  # noqa: E402

QUERIES = ["Where was Tobin Quenn born?", "capital of Essaly", "copper mines", "zzz-no-match"]


class LiveServer:
    """uvicorn on 127.0.0.1 (a free port) in a thread, as ``searchenv serve`` runs it, stopped at the end."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("remote") / "idx")


@pytest.fixture(scope="module")
def live_url(bm25: BM25Retriever) -> Iterator[str]:
    with LiveServer(create_app(bm25, limits=ServerLimits(max_queries=3, max_topk=5))) as url:
        yield url


def _same(a: list[list[Hit]], b: list[list[Hit]]) -> None:
    assert [[(h.doc_id, h.title, h.text) for h in row] for row in a] == [
        [(h.doc_id, h.title, h.text) for h in row] for row in b
    ]
    for ra, rb in zip(a, b, strict=True):
        assert [h.score for h in ra] == pytest.approx([h.score for h in rb], rel=1e-6)


@pytest.mark.parametrize("dialect", ["search-r1", "query"])
def test_client_and_server_agree_with_local_search(live_url: str, bm25: BM25Retriever, dialect: str) -> None:
    # max_queries_per_request=2 < 4 queries: the search-r1 client splits the batch (server allows 3)
    with RemoteRetriever(live_url, dialect=dialect, timeout=10, max_queries_per_request=2) as remote:
        got = remote.search_batch(QUERIES, 3)
        _same(got, bm25.search_batch(QUERIES, 3))
        assert got[3] == []
        assert remote.search_batch([], 3) == []
        assert remote.health()["num_docs"] == len(DOCS)


def test_full_endpoint_url_is_accepted(live_url: str, bm25: BM25Retriever) -> None:
    with RemoteRetriever(live_url + "/retrieve") as remote:
        _same(remote.search_batch(QUERIES[:1], 2), bm25.search_batch(QUERIES[:1], 2))


def test_server_limits_reach_the_client_as_retriever_errors(live_url: str) -> None:
    with RemoteRetriever(live_url, timeout=5, retries=0) as remote:
        with pytest.raises(RetrieverError, match="HTTP 422: topk=9 exceeds the limit of 5"):
            remote.search_batch(["a"], 9)
    with RemoteRetriever(live_url, timeout=5, max_queries_per_request=10) as remote:
        with pytest.raises(RetrieverError, match="HTTP 413: 4 queries in one request exceed the limit of 3"):
            remote.search_batch(QUERIES, 1)


def test_token_on_and_off(bm25: BM25Retriever) -> None:
    with LiveServer(create_app(bm25, token="t0k")) as url:
        for dialect in ("search-r1", "query"):
            with RemoteRetriever(url, dialect=dialect, token="t0k") as good:
                assert good.search_batch(["Karsk"], 1)[0][0].doc_id == "d4"
            with RemoteRetriever(url, dialect=dialect) as anonymous:
                with pytest.raises(RetrieverError, match="HTTP 401"):
                    anonymous.search_batch(["Karsk"], 1)
            with RemoteRetriever(url, dialect=dialect, token="wrong") as wrong:
                with pytest.raises(RetrieverError, match="bearer token"):
                    wrong.search_batch(["Karsk"], 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("dialect", ["search-r1", "query"])
def test_nothing_listening_fails_cleanly_within_the_timeout(dialect: str) -> None:
    port = _free_port()
    with RemoteRetriever(f"http://127.0.0.1:{port}", dialect=dialect, timeout=2.0, retries=3,
                         backoff=0.05) as remote:
        t0 = time.monotonic()
        with pytest.raises(RetrieverError, match="cannot reach the server") as info:
            remote.search_batch(["a", "b"], 1)
        assert time.monotonic() - t0 < 2.0 + 0.5
        assert "4 attempt(s)" in str(info.value)


@pytest.fixture()
def silent_server() -> Iterator[str]:
    """Accepts connections, reads the request and never answers (until the test ends)."""
    with _raw_server(lambda conn, stop: stop.wait()) as url:
        yield url


@pytest.mark.parametrize("dialect", ["search-r1", "query"])
def test_slow_server_fails_cleanly_within_the_timeout(silent_server: str, dialect: str) -> None:
    with RemoteRetriever(silent_server, dialect=dialect, timeout=0.8, retries=5, backoff=0.05) as remote:
        t0 = time.monotonic()
        with pytest.raises(RetrieverError, match="did not answer within 0.8 s|no answer within 0.8 s"):
            remote.search_batch(["a", "b"], 1)
        assert time.monotonic() - t0 < 0.8 + 0.5


def _r1(items: list[list[dict[str, Any]]]) -> bytes:
    return json.dumps({"result": items}).encode()


def test_5xx_is_retried_then_succeeds(scripted: tuple[str, type[ScriptedHandler]]) -> None:
    url, handler = scripted
    doc = {"document": {"id": "7", "contents": '"Quoted Title"\nbody'}, "score": "0.5"}
    handler.script = [(503, b'{"error": "warming up"}'), (502, b"bad gateway"), (200, _r1([[doc]]))]
    with RemoteRetriever(url, timeout=5, retries=2, backoff=0.01) as remote:
        hits = remote.search_batch(["q"], 1)
    assert hits == [[Hit("7", '"Quoted Title"', "body", 0.5)]]  # the title as the server stored it
    assert handler.seen == [{"queries": ["q"], "topk": 1, "return_scores": True}] * 3


def test_retries_are_bounded(scripted: tuple[str, type[ScriptedHandler]]) -> None:
    url, handler = scripted
    handler.script = [(503, b'{"error": "down"}')] * 5
    with RemoteRetriever(url, timeout=5, retries=1, backoff=0.01) as remote:
        with pytest.raises(RetrieverError, match="after 2 attempt"):
            remote.search_batch(["q"], 1)
    assert len(handler.seen) == 2


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (200, b"<html>not json</html>", "malformed JSON"),
        (200, b'{"result": 5}', "list 'result'"),
        (200, b'{"result": [[], []]}', "2 result lists for 1 queries"),
        (200, _r1([[{"document": {"id": "1"}, "score": 1}]]), "no string 'contents'"),
        (200, _r1([[{"document": {"id": "1", "contents": "t\nx"}, "score": "high"}]]), "not a number"),
        (200, _r1([["just a string"]]), "expected a document object"),
        (404, b'{"detail": "Not Found"}', "HTTP 404: Not Found"),
        (400, b"plain error text", "HTTP 400: plain error text"),
    ],
)
def test_malformed_or_refused_answers_raise(
    scripted: tuple[str, type[ScriptedHandler]], status: int, body: bytes, match: str
) -> None:
    url, handler = scripted
    handler.script = [(status, body)]
    with RemoteRetriever(url, timeout=5, retries=3, backoff=0.01) as remote:
        with pytest.raises(RetrieverError, match=match):
            remote.search_batch(["q"], 1)
    assert len(handler.seen) == 1  # not retried


def test_query_dialect_request_shape_and_parsing(scripted: tuple[str, type[ScriptedHandler]]) -> None:
    url, handler = scripted
    handler.script = [(200, json.dumps({"query": "q", "results": [
        {"id": "a", "content": "Title A\nbody a", "score": 2.0},
        {"id": "b", "title": "Title B", "text": "body b", "content": "ignored", "score": 1.0},
        {"id": "c", "contents": "Title C\nbody c", "score": 0.5}]}).encode())]
    with RemoteRetriever(url, dialect="query", timeout=5) as remote:
        hits = remote.search_batch(["q"], 2)
    assert handler.seen == [{"query": "q", "top_k": 2}]
    assert hits == [[Hit("a", "Title A", "body a", 2.0), Hit("b", "Title B", "body b", 1.0)]]


def test_parsers_directly() -> None:
    bare = {"result": [[{"id": "x", "contents": "T\nbody"}]]}  # return_scores false
    assert parse_search_r1(bare, 1) == [[Hit("x", "T", "body", 0.0)]]
    with pytest.raises(RetrieverError, match="list 'results'"):
        parse_query({"result": []})
    with pytest.raises(RetrieverError, match="not a finite number"):
        parse_search_r1({"result": [[{"document": {"id": "x", "contents": "c"}, "score": "nan"}]]}, 1)


def test_bad_client_settings() -> None:
    with pytest.raises(ValueError, match="dialect"):
        RemoteRetriever("http://127.0.0.1:1", dialect="graphql")
    with pytest.raises(ValueError, match="url"):
        RemoteRetriever("127.0.0.1:8000")
    with pytest.raises(ValueError, match="timeout"):
        RemoteRetriever("http://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="retries"):
        RemoteRetriever("http://127.0.0.1:1", retries=-1)
    with RemoteRetriever("http://127.0.0.1:1") as r, pytest.raises(ValueError, match="k must"):
        r.search_batch(["a"], 0)


def test_remote_works_as_the_env_retriever_protocol(live_url: str) -> None:
    from searchenv.retrievers.base import Retriever

    remote = RemoteRetriever(live_url)
    try:
        assert isinstance(remote, Retriever)

        def many(qs: Sequence[str]) -> list[list[Hit]]:
            return remote.search_batch(qs, 2)

        results: list[list[list[Hit]]] = []
        threads = [threading.Thread(target=lambda: results.append(many(QUERIES[:2]))) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert len(results) == 6 and all(r == results[0] for r in results)
    finally:
        remote.close()


def test_endpoint_url_forms() -> None:
    # A URL with a custom path is kept as-is (servers mounted under a prefix).
    from searchenv.retrievers.remote import _endpoint

    assert _endpoint("http://h:1/api/retrieve") == "http://h:1/api/retrieve"
    assert _endpoint("http://h:1/") == "http://h:1/retrieve"


# --------------------------------------------------------------------------- hostile servers (issue 16)


@contextlib.contextmanager
def _raw_server(respond: Any) -> Iterator[str]:
    """A raw TCP server: reads one request per connection, then calls ``respond(conn)`` on a thread."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            try:
                respond(conn, stop)
            except OSError:
                pass

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=serve, args=(conn,), daemon=True)
            t.start()
            threads.append(t)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=5)
        for th in threads:
            th.join(timeout=5)
        sock.close()


def _drip(data: bytes, stop: threading.Event, conn: socket.socket) -> None:
    for i in range(len(data)):
        if stop.wait(0.2):
            return
        conn.sendall(data[i : i + 1])


_ANSWER = b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": 1.0}]]}'


@pytest.mark.parametrize("where", ["headers", "body"])
def test_timeout_is_a_total_deadline_against_a_dripping_server(where: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(_ANSWER)

    def respond(conn: socket.socket, stop: threading.Event) -> None:
        if where == "headers":
            _drip(head + _ANSWER, stop, conn)  # one byte every 0.2 s: no single read ever times out
        else:
            conn.sendall(head)
            _drip(_ANSWER, stop, conn)

    with _raw_server(respond) as url:
        with RemoteRetriever(url, timeout=1.0, retries=2, backoff=0.05) as remote:
            t0 = time.monotonic()
            with pytest.raises(RetrieverError, match="within 1 s"):
                remote.search_batch(["q"], 1)
            assert time.monotonic() - t0 < 1.0 + 0.5


def _gzip_response(body: bytes) -> bytes:
    import gzip

    packed = gzip.compress(body, compresslevel=9)
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % len(packed)) + packed


def test_gzip_answers_are_read(scripted: tuple[str, type[ScriptedHandler]]) -> None:
    with _raw_server(lambda conn, stop: conn.sendall(_gzip_response(_ANSWER))) as url:
        with RemoteRetriever(url, timeout=5) as remote:
            assert remote.search_batch(["q"], 1) == [[Hit("1", "T", "x", 1.0)]]


def test_answers_over_the_size_cap_are_refused() -> None:
    cap = 32 * 1024 * 1024  # the default max_response_bytes
    declared = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n{" % (cap + 1))
    # a Content-Length over the cap is refused before reading (the server never sends the body)
    with _raw_server(lambda conn, stop: (conn.sendall(declared), stop.wait(5))) as url:
        with RemoteRetriever(url, timeout=3, retries=0) as remote:
            with pytest.raises(RetrieverError, match="larger than the limit of 33554432 bytes"):
                remote.search_batch(["q"], 1)

    def chunked(conn: socket.socket, stop: threading.Event) -> None:  # no Content-Length: counted while reading
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        block = b" " * (1 << 20)
        for _ in range(40):
            if stop.is_set():
                return
            conn.sendall(b"%x\r\n%s\r\n" % (len(block), block))
        conn.sendall(b"0\r\n\r\n")

    with _raw_server(chunked) as url:
        with RemoteRetriever(url, timeout=10, retries=0) as remote:
            with pytest.raises(RetrieverError, match="larger than the limit of 33554432 bytes"):
                remote.search_batch(["q"], 1)

    # a gzip bomb: 40 MiB of spaces in about 40 KB; the limit applies to the decompressed size
    bomb = _gzip_response(b" " * (40 << 20) + _ANSWER)
    assert len(bomb) < 100_000
    with _raw_server(lambda conn, stop: conn.sendall(bomb)) as url:
        with RemoteRetriever(url, timeout=10, retries=0) as remote:
            with pytest.raises(RetrieverError, match="larger than the limit of 33554432 bytes"):
                remote.search_batch(["q"], 1)
        with RemoteRetriever(url, timeout=10, retries=0, max_response_bytes=1000) as remote:
            with pytest.raises(RetrieverError, match="larger than the limit of 1000 bytes"):
                remote.search_batch(["q"], 1)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": ' + b"[" * 100_000, "nested"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": ' + b"7" * 5000 + b"}]]}",
         "unusable JSON value"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": ' + b"7" * 400 + b"}]]}",
         "not a finite number"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": Infinity}]]}', "not a finite"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": 1e999}]]}', "not a finite"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": "-inf"}]]}', "not a finite"),
        (b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": 1}]]}\xff', "not valid UTF-8"),
    ],
)
def test_hostile_json_answers_are_retriever_errors(
    scripted: tuple[str, type[ScriptedHandler]], body: bytes, match: str
) -> None:
    url, handler = scripted
    handler.script = [(200, body)]
    with RemoteRetriever(url, timeout=5, retries=0) as remote:
        with pytest.raises(RetrieverError, match=match):
            remote.search_batch(["q"], 1)


@pytest.mark.parametrize("token", ["tökén", "tok en", "tok\nen", "tok\x00"])
def test_tokens_that_cannot_be_sent_are_refused_clearly(token: str) -> None:
    with pytest.raises(ValueError, match=r"token must be printable ASCII .* character \d+"):
        RemoteRetriever("http://127.0.0.1:1", token=token)


@pytest.mark.parametrize("score", [b"[" * 100_000, b"7" * 5000, b"1e999"])
def test_hostile_answers_reach_the_env_as_retriever_errors(
    scripted: tuple[str, type[ScriptedHandler]], score: bytes
) -> None:
    from searchenv.env import SearchQAEnv

    from .conftest import EXAMPLES

    url, handler = scripted
    handler.script = [(200, b'{"result": [[{"document": {"id": "1", "contents": "T\\nx"}, "score": ' + score + b"}]]}")]
    with RemoteRetriever(url, timeout=5, retries=0) as remote:
        env = SearchQAEnv(EXAMPLES, retriever=remote)
        env.reset(seed=0)
        _, _, terminated, _, info = env.step("<search>Karsk</search>")
    assert not terminated and info["infra_error"] and info["infra_error_type"] == "RetrieverError"


def test_a_server_url_works_wherever_an_index_folder_does(
    live_url: str, bm25: BM25Retriever, tmp_path: pathlib.Path
) -> None:
    import gymnasium as gym
    from typer.testing import CliRunner

    from searchenv.cli import get_app
    from searchenv.tasks import write_qa_jsonl
    from tests.conftest import EXAMPLES

    env = gym.make("searchenv:SearchQA-v0", task=list(EXAMPLES), retriever=live_url, top_k=2)
    env.reset(options={"example_id": "q1"})
    _, _, _, _, info = env.step("<search> Where was Tobin Quenn born? </search>")
    assert not info["infra_error"]
    assert list(info["doc_ids"]) == [h.doc_id for h in bm25.search_batch(["Where was Tobin Quenn born?"], 2)[0]]
    # The CLI takes the URL as --retriever (no --corpus needed: the server has the documents).
    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    argv = ["eval", "-a", "oracle", "--task", str(qa), "--retriever", live_url, "--n", "2"]
    res = CliRunner().invoke(get_app(), argv)
    assert res.exit_code == 0, res.output
    assert "1.000" in res.output


# ---------------------------------------------------------------------------------- replicas


@pytest.fixture()
def two_scripted() -> Iterator[list[tuple[str, type[ScriptedHandler]]]]:
    """Two :class:`ScriptedHandler` servers, replicas of one index as far as the client knows."""
    import http.server

    out, stops = [], []
    for _ in range(2):
        handler = type("Handler", (ScriptedHandler,), {"script": [], "seen": []})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        out.append((f"http://127.0.0.1:{httpd.server_address[1]}", handler))
        stops.append((httpd, t))
    yield out
    for httpd, t in stops:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=5)


def _answer(doc_id: str) -> tuple[int, bytes]:
    return 200, _r1([[{"document": {"id": doc_id, "contents": "T\nbody"}, "score": 1.0}]])


def test_replicas_share_the_load_in_turn(two_scripted: list[tuple[str, type[ScriptedHandler]]]) -> None:
    (url_a, a), (url_b, b) = two_scripted
    a.script = [_answer("a")] * 3
    b.script = [_answer("b")] * 3
    with RemoteRetriever([url_a, url_b], timeout=5) as remote:
        got = [remote.search_batch(["q"], 1)[0][0].doc_id for _ in range(6)]
    assert got == ["a", "b"] * 3 and remote.failovers == 0
    assert len(a.seen) == len(b.seen) == 3


def test_a_replica_that_is_down_is_skipped_within_the_call(two_scripted: list[tuple[str, type[ScriptedHandler]]],
                                                           ) -> None:
    (url_b, b), _ = two_scripted
    down = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    b.script = [_answer("b")] * 5
    with RemoteRetriever([down, url_b], timeout=5, retries=0, replica_cooldown=60) as remote:
        got = [remote.search_batch(["q"], 1)[0][0].doc_id for _ in range(5)]
    assert got == ["b"] * 5
    assert remote.failovers == 1  # then the dead replica waits out its cooldown behind the live one


def test_a_failing_replica_fails_over_and_a_refusal_does_not(
        two_scripted: list[tuple[str, type[ScriptedHandler]]]) -> None:
    (url_a, a), (url_b, b) = two_scripted
    a.script = [(503, b'{"error": "overloaded"}'), _answer("a")]
    b.script = [_answer("b"), (422, b'{"error": "topk above --max-topk"}')]
    with RemoteRetriever([url_a, url_b], timeout=5, retries=0, backoff=5.0, replica_cooldown=0) as remote:
        t0 = time.monotonic()
        assert remote.search_batch(["q"], 1)[0][0].doc_id == "b"
        assert time.monotonic() - t0 < 2.0  # the next replica at once, not after the backoff
        with pytest.raises(RetrieverError, match="HTTP 422"):
            remote.search_batch(["q"], 1)  # b's turn: refused, and not sent to a
    assert len(a.seen) == 1 and len(b.seen) == 2


def test_all_replicas_down_names_each_of_them() -> None:
    urls = [f"http://127.0.0.1:{_free_port()}" for _ in range(2)]
    with RemoteRetriever(urls, timeout=3, retries=1, backoff=0.01) as remote:
        with pytest.raises(RetrieverError, match="all 2 replicas failed") as err:
            remote.search_batch(["q"], 1)
    assert all(u in str(err.value) for u in urls)
    with pytest.raises(ValueError, match="non-empty"):
        RemoteRetriever([])
    with pytest.raises(ValueError, match="listed twice"):
        RemoteRetriever([urls[0], urls[0] + "/retrieve"])


@pytest.mark.parametrize("bad", [None, 3, b"bytes"])
def test_a_query_that_is_not_a_string_is_refused_before_any_request(bad: object) -> None:
    with RemoteRetriever("http://127.0.0.1:9", timeout=1, retries=0) as remote:  # nothing listens there
        with pytest.raises(ValueError, match=f"queries must be strings, got {type(bad).__name__}"):
            remote.search_batch(["fine", bad], 3)  # type: ignore[list-item]
        assert remote.search_batch([], 3) == []
