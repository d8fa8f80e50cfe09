r"""An HTTP retrieval service (FastAPI) that Search-R1-style trainers can point at unchanged.

Routes:

* ``POST /retrieve`` with ``{"queries": [...], "topk": 3, "return_scores": true}`` answers in
  Search-R1's shape ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``;
  with ``return_scores`` false (Search-R1's default) the inner items are the bare documents
  ``{"id", "contents"}``. ``contents`` is ``title\ntext``; ``topk`` missing or 0 means
  the server's ``default_topk``, as in Search-R1.
* ``POST /retrieve`` with one ``"query"`` (``top_k``, ``topk`` or ``k`` for the cut-off) answers
  what every single-query client reads: rLLM's shape
  ``{"query", "results": [{"id", "title", "text", "content", "score"}], "num_results"}`` and, in
  the same body, Search-R1's ``"result": [[{"document", "score"}]]`` for the one query, which is
  what SkyRL-gym's search tool (0.4: ``{"query", "topk", "return_scores"}``) parses.
* msgpack bodies (GEM's search tool encodes its request with msgpack) are answered in msgpack:
  ``queries`` in Search-R1's shape, one ``query`` as GEM's client reads it, ``{"result":
  [{"document", "score"}, ...]}`` (one flat list). A body declared ``application/msgpack`` (or
  ``application/x-msgpack``) is always accepted; GEM's client declares no type at all, which is
  accepted only with ``accept_untyped_msgpack`` (``searchenv serve --msgpack``), because a web
  page can send an untyped body cross-site without a CORS preflight.
* ``GET /health``: index kind, number of documents, corpus fingerprint, limits and batching counters.

Run the app with :func:`uvicorn_config` (``searchenv serve`` does): it adds connection limits
(:class:`ConnectionLimits`) that uvicorn lacks, so idle, slow or too many connections cannot
exhaust the server's file descriptors and ``/health`` keeps answering.

Concurrent requests are gathered by a :class:`MicroBatcher`: an idle search worker takes the
waiting requests at once (no waiting window by default, so one client sees no added latency), and
the requests that arrive while a search runs are gathered into the next call, one
``search_batch`` per distinct ``k``, on a worker thread so the event loop never blocks. Large
requests are searched in parts, by turns, so they cannot starve small ones (see the batcher). A
request whose client disconnects is given up at once: its queries not yet searched are dropped,
and no answer is made for it. :func:`uvicorn_config` bounds a graceful shutdown
(``graceful_timeout``): the requests still running then are cancelled.

Every limit (body size, queries per request, ``topk``, query length) and every malformed request
(bad JSON, nesting deeper than 64, integers over 4,300 digits) is answered with a 4xx status and
a JSON body ``{"error": message, "detail": message}``; a failed search (a :class:`RetrieverError`
or anything a damaged index raises) with 503, a bug with 500, both with a generic message (the
details go to the server log, not to the client). With a token, every route requires
``Authorization: Bearer <token>`` (scheme in any case) and ``/health`` also shows ``info``.

Against browsers: a ``Host`` header must be an IP address or an allowed name (``localhost`` by
default), so a DNS-rebound name reaches nothing, and ``POST`` bodies must be declared
``application/json``, which a cross-site page cannot send without a CORS preflight (that this
server never answers).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import socket
import struct
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass, replace
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from searchenv.corpus import Document
from searchenv.retrievers.base import Hit, Retriever, check_k
from searchenv.retrievers.batching import MicroBatcher
from searchenv.utils.httpclient import check_token
from searchenv.utils.jsonsafe import DEFAULT_MAX_DEPTH, JSONInputError, loads

try:  # the kernel's count of a socket's unsent bytes (Linux); elsewhere only asyncio's buffer is watched
    import fcntl
    import termios

    _SIOCOUTQ: int | None = termios.TIOCOUTQ if sys.platform.startswith("linux") else None
except ImportError:  # pragma: no cover - Windows
    _SIOCOUTQ = None

#: Host names accepted in the ``Host`` header by default (IP addresses always are).
DEFAULT_ALLOWED_HOSTS = ("localhost",)

log = logging.getLogger("searchenv.server")


@dataclass(frozen=True)
class ServerLimits:
    """Per-request limits of the retrieval server; exceeding one gives a 4xx answer.

    Attributes:
        max_queries: Most queries in one request (413 ``Payload Too Large`` beyond).
        max_topk: Largest ``topk`` (422 beyond).
        max_query_chars: Longest query in characters (422 beyond).
        max_body_bytes: Largest request body in bytes (413 beyond).
    """

    max_queries: int = 512
    max_topk: int = 100
    max_query_chars: int = 2048
    max_body_bytes: int = 2 * 1024 * 1024

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{name} must be a positive integer, got {value!r}")


class SearchR1Request(BaseModel):
    """Body of a Search-R1 ``/retrieve`` request."""

    model_config = ConfigDict(extra="ignore")
    queries: list[StrictStr]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


class SingleQueryRequest(BaseModel):
    """Body of a single-query ``/retrieve`` request (``top_k``, ``topk`` or ``k`` name the cut-off).

    ``return_scores`` shapes the Search-R1 ``result`` part of the answer (default: with scores, as
    SkyRL-gym's and GEM's clients read it).
    """

    model_config = ConfigDict(extra="ignore")
    query: StrictStr
    top_k: StrictInt | None = None
    topk: StrictInt | None = None
    k: StrictInt | None = None
    return_scores: StrictBool = True


#: Content types read as msgpack.
MSGPACK_TYPES = frozenset({"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"})


def _msgpack_loads(body: bytes) -> Any:
    """Decode a msgpack body; hostile input (too deep, truncated, trailing bytes) is a 400."""
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec comes with the serve extra
        raise _ApiError(415, "this server cannot read msgpack (install msgspec)") from None
    try:
        return msgspec.msgpack.decode(body)
    except (msgspec.DecodeError, RecursionError, ValueError) as exc:
        raise _ApiError(400, f"malformed msgpack body: {str(exc)[:200]}") from None


def _answer(payload: dict[str, Any], msgpack: bool) -> Response:
    """``payload`` as JSON, or as msgpack when the request came as msgpack.

    Both are encoded by msgspec when it is installed (the serve extra brings it): a 9 MB answer
    takes a fifth of ``json.dumps``'s time, and the encoding runs on the event loop, where every
    other connection waits for it.
    """
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec comes with the serve extra
        if msgpack:
            raise _ApiError(415, "this server cannot write msgpack (install msgspec)") from None
        return JSONResponse(payload)
    if msgpack:
        return Response(msgspec.msgpack.encode(payload), media_type="application/msgpack")
    return Response(msgspec.json.encode(payload), media_type="application/json")


class _ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class _ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the request's body has been read whole before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _contents(hit: Hit) -> str:
    return Document(hit.doc_id, hit.title, hit.text).contents


def search_r1_result(hits: Sequence[Sequence[Hit]], return_scores: bool) -> dict[str, Any]:
    """Format hits in Search-R1's ``/retrieve`` shape.

    Args:
        hits: One hit list per query.
        return_scores: Wrap each document as ``{"document", "score"}`` (else bare documents).

    Returns:
        ``{"result": [[...], ...]}``.
    """
    if return_scores:
        return {"result": [[{"document": {"id": h.doc_id, "contents": _contents(h)}, "score": h.score}
                            for h in row] for row in hits]}
    return {"result": [[{"id": h.doc_id, "contents": _contents(h)} for h in row] for row in hits]}


def _host_allowed(host: str, allowed: set[str]) -> bool:
    """Whether a ``Host`` header names this server: an IP address, or a name in ``allowed``."""
    if host.startswith("["):  # [v6 address] or [v6 address]:port
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest[:1] == ":" and rest[1:].isdigit())):
            return False
    else:
        name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
        if colon and not port.isdigit():
            return False
    if "*" in allowed or name.lower() in allowed:
        return bool(name)
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _validation_message(exc: Any) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def create_app(
    retriever: Retriever,
    *,
    token: str | None = None,
    limits: ServerLimits | None = None,
    default_topk: int = 3,
    batch_window_ms: float = 0.0,
    max_batch: int = 256,
    micro_batch: bool = True,
    workers: int = 1,
    info: dict[str, Any] | None = None,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
    accept_untyped_msgpack: bool = False,
    batch_quantum: int = 128,
) -> FastAPI:
    """Build the retrieval service around ``retriever`` (see the module docstring).

    Args:
        retriever: Any retriever (a loaded index, a hybrid, a cache...).
        token: Bearer token required on every route (printable ASCII); ``None`` or empty for none.
        limits: Request limits (default :class:`ServerLimits`).
        default_topk: ``topk`` when a request gives none (Search-R1 serves 3 by default).
        batch_window_ms: How long an idle worker waits for more requests, in milliseconds (0: none).
        max_batch: Most queries per ``search_batch`` call.
        micro_batch: Gather concurrent requests; if false, one search per request.
        workers: Search threads (more than one only for thread-safe retrievers).
        info: Extra fields for ``GET /health`` (e.g. the index folders), shown only with a token.
        allowed_hosts: Names accepted in the ``Host`` header besides IP addresses (``"*"``: any).
        accept_untyped_msgpack: Read a body without a ``Content-Type`` as msgpack (GEM's search
            client sends one); off by default, since a web page can send such a body cross-site.
        batch_quantum: Cost (``topk`` plus 10 per query) above which a request is searched in
            parts; while small requests arrive, a batch holds at most this much of large ones
            (:class:`MicroBatcher`'s ``quantum``).

    Returns:
        The FastAPI application (run it with uvicorn; :func:`uvicorn_config` sets its limits).

    Raises:
        ValueError: On a bad setting or a token that cannot travel in a header.
    """
    lim = limits if limits is not None else ServerLimits()
    check_k(default_topk)
    if default_topk > lim.max_topk:
        raise ValueError(f"default_topk {default_topk} exceeds max_topk {lim.max_topk}")
    batcher = MicroBatcher(retriever, window_s=batch_window_ms / 1000.0, max_batch=max_batch,
                           enabled=micro_batch, workers=workers, quantum=batch_quantum)
    expected_token = check_token(token).encode() if token else None
    hosts = {h.lower() for h in allowed_hosts}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await batcher.aclose()

    app = FastAPI(title="searchenv retrieval server", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.batcher = batcher
    app.state.limits = lim

    @app.exception_handler(_ApiError)
    async def _api_error(_: Request, exc: _ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message, "detail": exc.message}, status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(_ClientGone)
    async def _client_gone(_: Request, exc: _ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises the exception after this answer, so uvicorn logs the traceback
        message = "internal server error; the server log has the details"
        return JSONResponse({"error": message, "detail": message}, status_code=500)

    def authorize(request: Request) -> None:
        host = request.headers.get("host", "")
        if not _host_allowed(host, hosts):
            raise _ApiError(400, f"Host header {host[:100]!r} is not allowed: use the server's IP address, "
                                 "localhost, or a name given with --allowed-host")
        if expected_token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        # header values arrive decoded as latin-1, so this gives back the bytes that were sent
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"), expected_token):
            raise _ApiError(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                            {"WWW-Authenticate": "Bearer"})

    async def read_body(request: Request) -> tuple[Any, bool]:
        """The decoded body and whether it came as msgpack."""
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        msgpack = media_type in MSGPACK_TYPES or (media_type == "" and accept_untyped_msgpack)
        if media_type != "application/json" and not msgpack:
            hint = " (an untyped msgpack body, as GEM's client sends, needs searchenv serve --msgpack)" \
                if media_type == "" else ""
            raise _ApiError(415, f"Content-Type must be application/json or application/msgpack, got "
                                 f"{media_type[:100] or 'none'!r}{hint}")
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                declared_size = int(declared)
            except ValueError:
                raise _ApiError(400, f"invalid Content-Length header {declared!r}") from None
            if declared_size > lim.max_body_bytes:
                raise _ApiError(413, f"request body of {declared_size} bytes exceeds the limit of "
                                     f"{lim.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > lim.max_body_bytes:
                    raise _ApiError(413, f"request body exceeds the limit of {lim.max_body_bytes} bytes")
                chunks.append(chunk)
        except ClientDisconnect:  # e.g. closed by the request timeout; nobody reads the answer
            raise _ApiError(400, "client disconnected before sending the whole body") from None
        if msgpack:
            return _msgpack_loads(b"".join(chunks)), True
        try:
            return loads(b"".join(chunks), "malformed JSON body", max_depth=DEFAULT_MAX_DEPTH), False
        except JSONInputError as exc:
            raise _ApiError(400, str(exc)) from None

    def check_topk(k: int | None, name: str) -> int:
        if k is None or k == 0:  # Search-R1's server: `if not request.topk`, its default
            return default_topk
        if k < 0:
            raise _ApiError(422, f"{name} must be a positive integer, got {k}")
        if k > lim.max_topk:
            raise _ApiError(422, f"{name}={k} exceeds the limit of {lim.max_topk}")
        return k

    def check_queries(queries: list[str]) -> None:
        if len(queries) > lim.max_queries:
            raise _ApiError(413, f"{len(queries)} queries in one request exceed the limit of {lim.max_queries}")
        for i, q in enumerate(queries):
            if len(q) > lim.max_query_chars:
                raise _ApiError(422, f"query {i} has {len(q)} characters, more than the limit of "
                                     f"{lim.max_query_chars}")

    async def run_search(request: Request, queries: list[str], k: int) -> list[list[Hit]]:
        """The hits of ``queries``; given up (:class:`_ClientGone`) as soon as the client disconnects."""
        search = asyncio.ensure_future(batcher.search(queries, k))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait((search, gone), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # this request is cancelled (the graceful shutdown's timeout)
            search.cancel()
            gone.cancel()
            raise
        gone.cancel()
        if gone in done:  # nobody will read the answer: its queries not yet searched are dropped
            if search.done() and not search.cancelled():
                search.exception()  # retrieved, so that asyncio does not log it
            search.cancel()
            raise _ClientGone
        try:
            return search.result()
        except Exception:  # RetrieverError, or whatever a damaged index raises (IndexError, OSError...)
            log.exception("search of %d queries failed", len(queries))
            raise _ApiError(503, "retrieval failed; the server log has the details") from None

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Response:
        authorize(request)
        payload, msgpack = await read_body(request)
        if not isinstance(payload, dict):
            raise _ApiError(422, f"request body must be a JSON object, got {type(payload).__name__}")
        try:
            if "queries" in payload:
                r1 = SearchR1Request.model_validate(payload)
                check_queries(r1.queries)
                k = check_topk(r1.topk, "topk")
                hits = await run_search(request, r1.queries, k)
                return _answer(search_r1_result(hits, r1.return_scores), msgpack)
            if "query" in payload:
                sq = SingleQueryRequest.model_validate(payload)
                check_queries([sq.query])
                given = next((v for v in (sq.top_k, sq.topk, sq.k) if v is not None), None)
                k = check_topk(given, "top_k")
                single = (await run_search(request, [sq.query], k))[0]
                [r1_row] = search_r1_result([single], sq.return_scores)["result"]
                if msgpack:  # GEM's client: one flat list under "result"
                    return _answer({"result": r1_row}, True)
                results = [{"id": h.doc_id, "title": h.title, "text": h.text, "content": _contents(h),
                            "score": h.score} for h in single]
                return JSONResponse({"query": sq.query, "results": results, "num_results": len(results),
                                     "result": [r1_row]})
        except ValidationError as exc:
            raise _ApiError(422, _validation_message(exc)) from None
        raise _ApiError(422, "request body needs 'queries' (Search-R1 dialect: {\"queries\": [...], \"topk\": 3, "
                             "\"return_scores\": true}) or 'query' (single-query dialect: {\"query\": ..., "
                             "\"top_k\": 3})")

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        authorize(request)
        n_docs = len(retriever) if hasattr(retriever, "__len__") else None  # type: ignore[arg-type]
        return {
            "status": "ok",
            "kind": getattr(retriever, "kind", type(retriever).__name__),
            "num_docs": n_docs,
            "fingerprint": getattr(retriever, "fingerprint", None),
            "dialects": ["search-r1", "query"],
            "default_topk": default_topk,
            "limits": asdict(lim),
            "micro_batch": {"enabled": micro_batch, "window_ms": batch_window_ms, "max_batch": max_batch,
                            **batcher.stats.as_dict()},
            **(info if info and expected_token is not None else {}),  # paths only for token holders
        }

    return app


@dataclass(frozen=True)
class ConnectionLimits:
    """Connection limits of the server, kept by its HTTP protocol (see :func:`uvicorn_config`).

    Attributes:
        max_connections: Most open connections. One more closes the connection that has been
            longest without a request being answered (idle, or still sending its request), if
            that is half a second or more; otherwise the new connection gets a 503 and is
            closed. Lowered to fit the process's open-file limit (``ulimit -n``), so accepting
            never runs out of descriptors.
        request_timeout: Seconds a request may take to arrive whole, headers and body, counted
            from the connection's opening or the request's first byte; a connection that sends
            nothing, half a header or a dripping body is closed after it.
        keep_alive_timeout: Whole seconds an idle connection stays open after an answer.
        write_timeout: Seconds an answer may wait with none of it taken by the client (as
            nginx's ``send_timeout``: a time without progress, not a deadline for the whole
            answer). A connection whose unsent bytes stop shrinking for this long, because its
            client reads nothing or has stopped reading, is aborted: its buffered answer is
            dropped and the socket reset, also after the server has begun to close it.
        max_unsent_bytes: Most bytes of answers waiting in the server for their clients, all
            connections together (one connection holds at most one answer beyond the socket's
            kernel buffer). Over it, the connections whose answers have waited longest without
            progress are aborted, so clients that never read cannot grow the server's memory
            without bound before their write timeout.
    """

    max_connections: int = 512
    request_timeout: float = 10.0
    keep_alive_timeout: int = 5
    write_timeout: float = 10.0
    max_unsent_bytes: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"ConnectionLimits.{name} must be a positive number, got {value!r}")
        for name in ("max_connections", "keep_alive_timeout", "max_unsent_bytes"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"ConnectionLimits.{name} must be an integer, got {getattr(self, name)!r}")


_BUSY = b'{"error": "too many connections, retry later", "detail": "too many connections, retry later"}'
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY))


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a request timeout and a connection cap (:class:`ConnectionLimits`).

    uvicorn closes a connection only when it stays idle after an answer; one that never sends
    a byte, or sends its request slowly, stays open forever. Nor does it time writes: a client
    that never reads holds its connection (waiting to write the next pipelined answer), or, once
    closed, its descriptor and unsent answer (asyncio closes a socket only when its buffer is
    empty), forever. Here the unsent bytes are watched while there are any
    (:meth:`_watch_output`).
    """

    limits = ConnectionLimits()
    _idle_since = 0.0  # loop time of the connection's opening or its last answer
    _timer: asyncio.TimerHandle | None = None
    _output_timer: asyncio.TimerHandle | None = None
    _unsent = 0  # bytes not yet taken by the client at the last look (_unsent_now)
    _unsent_since = 0.0  # loop time they last shrank (or began to wait)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        self._watch()
        if len(self.connections) > self.limits.max_connections:
            # every open connection counts: one closed with its answer unsent keeps its descriptor
            others = [p for p in self._guarded() if p is not self]
            if len(others) >= self.limits.max_connections:
                closing = [p for p in others if p.transport.is_closing()]
                idle = [p for p in others if p._evictable(self._idle_since)]
                if closing:  # closed by the server, its answer still unread: dropped first
                    min(closing, key=lambda p: p._unsent_since)._abort()
                elif idle:
                    min(idle, key=lambda p: p._idle_since)._close()
                else:
                    transport.write(_REFUSED)
                    self._close()

    _upgraded = False  # the connection was handed to a WebSocket protocol

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """Hand the connection to the WebSocket protocol, with none of this protocol's timers left on it.

        The request timeout bounds the arrival of the handshake; the WebSocket's silences between
        messages are the application's to limit (``serve-openenv``'s ``--idle-timeout``).
        """
        self._upgraded = True
        for timer in (self._timer, self._output_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._output_timer = None
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        self._idle_since = self.loop.time()
        super().on_response_complete()  # may close the connection (Connection: close, shutdown)
        self._watch()
        self._watch_output()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_output()
        self._keep_unsent_bytes_within_the_budget()

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._watch_output()

    def shutdown(self) -> None:
        super().shutdown()
        self._watch_output()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        for timer in (self._timer, self._output_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._output_timer = None

    def _evictable(self, now: float) -> bool:
        """No request is being answered (between requests, or one not arrived whole) for a while.

        The half second spares a client's keep-alive connection between two quick requests.
        """
        waiting = self.cycle is None or self.cycle.response_complete or self.cycle.more_body
        return waiting and now - self._idle_since >= 0.5

    def _watch(self) -> None:
        """Run the request timer while a request is awaited or arriving (uvicorn times keep-alive)."""
        if self._upgraded:
            return
        waiting = (self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and self.timeout_keep_alive_task is None
                   and not self.transport.is_closing())
        if waiting and self._timer is None:
            self._timer = self.loop.call_later(self.limits.request_timeout, self._close)
        elif not waiting and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _watch_output(self) -> None:
        """Start watching the unsent bytes, if there are any and they are not watched yet.

        Called wherever bytes may be left waiting: an answer written, the transport's buffer
        over its high-water mark, a close. Every quarter of the write timeout the bytes not yet
        taken by the client (:meth:`_unsent_now`) are counted again; the watch ends when the
        transport's buffer is empty, and the connection is aborted when they have not shrunk for
        the write timeout.
        """
        if not self._upgraded and self._output_timer is None and self.transport.get_write_buffer_size() > 0:
            self._unsent = self._unsent_now()
            self._unsent_since = self.loop.time()
            self._output_timer = self.loop.call_later(self.limits.write_timeout / 4, self._check_output)

    def _unsent_now(self) -> int:
        """Bytes not yet taken by the client: the transport's buffer plus the kernel's send queue.

        The kernel's queue (``SIOCOUTQ``, Linux) shrinks with every byte the client reads; the
        transport's buffer only when the kernel wakes the writer, after up to a third of its
        4 MB buffer has drained, which a slow but steady reader can take longer than the
        write timeout to read.
        """
        queued = 0
        sock = self.transport.get_extra_info("socket")
        if _SIOCOUTQ is not None and sock is not None:
            with suppress(OSError, ValueError):
                queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0"))[0]
        return int(self.transport.get_write_buffer_size()) + queued

    def _check_output(self) -> None:
        self._output_timer = None
        if self.transport.get_write_buffer_size() == 0:
            return
        unsent = self._unsent_now()
        now = self.loop.time()
        if unsent < self._unsent:  # the client took some
            self._unsent_since = now
        elif now - self._unsent_since >= self.limits.write_timeout:
            self._abort()
            return
        self._unsent = unsent
        self._output_timer = self.loop.call_later(self.limits.write_timeout / 4, self._check_output)

    def _guarded(self) -> list[_GuardedH11Protocol]:
        """This server's open connections (uvicorn's set, shared by all of them)."""
        return [p for p in self.connections if isinstance(p, _GuardedH11Protocol)]

    def _keep_unsent_bytes_within_the_budget(self) -> None:
        """Abort the connections whose answers have waited longest while over ``max_unsent_bytes``.

        The answers waiting in this server are counted over all its connections. Called when a
        connection's buffer grows past its high-water mark (an answer larger than the client
        took at once), the only time the total grows by much.
        """
        waiting = [p for p in self._guarded() if p._output_timer is not None]
        total = sum(p.transport.get_write_buffer_size() for p in waiting)
        if total <= self.limits.max_unsent_bytes:
            return
        now = self.loop.time()
        for p in waiting:  # progress since the last look counts as progress now
            unsent = p._unsent_now()
            if unsent < p._unsent:
                p._unsent, p._unsent_since = unsent, now
        log.warning("%d bytes of answers wait for their clients, more than max_unsent_bytes=%d: dropping the "
                    "connections that waited longest", total, self.limits.max_unsent_bytes)
        for p in sorted(waiting, key=lambda p: p._unsent_since):
            if total <= self.limits.max_unsent_bytes:
                break
            total -= p.transport.get_write_buffer_size()
            p._abort()

    def _abort(self) -> None:
        """Drop the connection and its unsent bytes; a reset, so the kernel keeps none of them either."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._unset_keepalive_if_required()
        self.transport.abort()

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unset_keepalive_if_required()
        self.transport.close()
        self._watch_output()


def _fit_descriptors(max_connections: int, reserve: int = 64) -> tuple[int, int]:
    """``(max_connections, backlog)`` that fit the process's open-file limit (``RLIMIT_NOFILE``).

    asyncio accepts up to ``backlog`` connections per loop turn, and a few turns pass before the
    cap closes the excess, so ``3 * backlog`` descriptors beyond the cap are kept free (and
    ``reserve`` for the index files and the interpreter). Without a known limit: uvicorn's 2048.
    """
    try:
        import resource
    except ImportError:  # not on Unix
        return max_connections, 2048
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_connections, 2048
    room = soft - reserve
    backlog = min(2048, max(16, room // 8))
    return min(max_connections, max(1, room - 3 * backlog)), backlog


def uvicorn_config(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    connections: ConnectionLimits | None = None,
    log_level: str = "info",
    graceful_timeout: float = 5.0,
) -> uvicorn.Config:
    """A uvicorn configuration that serves ``app`` within :class:`ConnectionLimits`.

    Run it with ``uvicorn.Server(config).run()``. The cap on connections and the accept backlog
    are lowered to what the open-file limit leaves (the cap with a warning), so accepting never
    runs out of descriptors: asyncio would log an error for every refused ``accept``. On SIGTERM
    or SIGINT the server stops accepting and lets the requests in progress finish for at most
    ``graceful_timeout`` seconds, then cancels them (their queued queries are dropped) and exits.

    Args:
        app: The application from :func:`create_app`.
        host: Interface to bind.
        port: TCP port (0: any free port).
        connections: Connection limits (default :class:`ConnectionLimits`).
        log_level: uvicorn's log level.
        graceful_timeout: Most seconds a shutdown waits for the requests in progress.

    Returns:
        The configuration.

    Raises:
        ValueError: If ``graceful_timeout`` is not a positive number.
    """
    if isinstance(graceful_timeout, bool) or not isinstance(graceful_timeout, (int, float)) \
            or not 0 < graceful_timeout < float("inf"):
        raise ValueError(f"graceful_timeout must be a positive number of seconds, got {graceful_timeout!r}")
    lim = connections if connections is not None else ConnectionLimits()
    cap, backlog = _fit_descriptors(lim.max_connections)
    if cap < lim.max_connections:
        log.warning("max_connections lowered from %d to %d to fit the open-file limit (ulimit -n)",
                    lim.max_connections, cap)
        lim = replace(lim, max_connections=cap)
    protocol = type("GuardedH11Protocol", (_GuardedH11Protocol,), {"limits": lim})
    return uvicorn.Config(app, host=host, port=port, http=protocol, ws="none", lifespan="on", log_level=log_level,
                          access_log=False, timeout_keep_alive=lim.keep_alive_timeout, backlog=backlog,
                          timeout_graceful_shutdown=graceful_timeout)  # type: ignore[arg-type]  # a float works
