"""An MCP server over an index: ``search`` and ``open`` as Model Context Protocol tools.

``searchenv mcp --index DIR`` serves this over stdio (an agent framework spawns it) or over
streamable HTTP (``--transport http``). The server is stateless: every call is answered from the
index alone, nothing is kept between calls, and the environment's reward is not here (it stays in
:class:`~searchenv.env.SearchQAEnv`). Tools:

* ``search(query, k)``: the ``k`` best documents for ``query``, best first, as structured content
  ``{"hits": [{"id", "title", "text", "score"}, ...]}``: the same hits, field for field, as
  ``searchenv search --json QUERY --k K`` prints for that index (its one list per query).
* ``open(id)``: one document, ``{"id", "title", "text"}``, read from the index's document store
  (registered only when every index folder has one, as BM25, dense and sharded indexes do).

Arguments are checked before the index is touched: types are strict (``k`` must be a JSON integer,
not ``"3"``, ``3.0`` or ``true``), ``k`` lies in ``1..max_topk``, a query or id has at most
``max_query_chars`` characters, and unknown argument names are refused. Each failure is an MCP
tool error result (``isError``) that says what was wrong; a failed search answers with a generic
message and logs the details. Searches run one at a time on a worker thread, so the event loop
keeps answering other clients while one searches.

Over HTTP (:func:`http_app`) the same defaults hold as for ``searchenv serve``: a ``Host`` header
must be an IP address or an allowed name (against DNS rebinding), a bearer token is required when
one is set, bodies over ``max_body_bytes`` get 413, and ``POST`` bodies must be declared JSON. Other
methods get 405: a stateless server has no stream to open with ``GET`` and no session to ``DELETE``.

This module is the only one that imports the MCP SDK (``pip install 'searchenv[mcp]'``).
"""

# No ``from __future__ import annotations``: the tools' signatures hold limits chosen at run time
# (``Field(le=limits.max_topk)``), which the SDK reads from the live annotations.

import hmac
import importlib.metadata
import io
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from searchenv.corpus import Document
from searchenv.retrievers.base import Retriever, RetrieverError, check_k
from searchenv.retrievers.index.docstore import DocStore
from searchenv.retrievers.index.metadata import data_folder
from searchenv.retrievers.sharded import is_sharded, read_shards
from searchenv.serving.server import DEFAULT_ALLOWED_HOSTS, ServerLimits, _host_allowed
from searchenv.utils import jsonsafe
from searchenv.utils.httpclient import check_token
from searchenv.utils.text import writable

log = logging.getLogger(__name__)
T = TypeVar("T")

INSTRUCTIONS = (
    "Search a document collection. `search` returns the best documents for a query (id, title, text, "
    "score; higher scores are better). `open` returns one document by its id."
)


class McpHit(BaseModel):
    """One hit, as ``searchenv search --json`` prints it."""

    id: str
    title: str
    text: str
    score: float


class SearchResult(BaseModel):
    """The ``search`` tool's structured content."""

    hits: list[McpHit]


class McpDocument(BaseModel):
    """The ``open`` tool's structured content."""

    id: str
    title: str
    text: str


def _store_folders(folder: Path) -> list[Path]:
    """The generation folders holding the documents of the index in ``folder`` (one per shard)."""
    if is_sharded(folder):
        return [data_folder(folder / entry["folder"]) for entry in read_shards(folder)["shards"]]
    return [data_folder(folder)]


class DocumentLookup:
    """Documents by id from the document stores of one or more index folders.

    Documents are read from their files when asked for (``os.pread``; the page cache holds them,
    not this process). The id table is built on the first lookup, reading every document once, and
    kept; with several folders (a hybrid), the first folder that holds an id answers.

    Args:
        folders: Index folders (sharded ones too), as given to ``searchenv mcp --index``.

    Raises:
        RetrieverError: If a folder is not an index or keeps no readable document store.
    """

    def __init__(self, folders: Sequence[str | os.PathLike[str]]) -> None:
        self._stores: list[DocStore] = []
        for folder in folders:
            for data in _store_folders(Path(folder)):
                try:
                    self._stores.append(DocStore(data, mmap_mode=True))
                except (OSError, ValueError) as exc:
                    raise RetrieverError(f"index {folder} keeps no readable document store ({exc})") from None
        self._rows: dict[str, tuple[int, int]] | None = None

    def get(self, doc_id: str) -> Document | None:
        """The document with id ``doc_id``, or None if no store holds it.

        Raises:
            ValueError: If a store's file was truncated or rewritten since it was opened.
        """
        if self._rows is None:
            rows: dict[str, tuple[int, int]] = {}
            for s, store in enumerate(self._stores):
                for row, doc in enumerate(store):
                    rows.setdefault(doc.id, (s, row))
            self._rows = rows
        where = self._rows.get(doc_id)
        return None if where is None else self._stores[where[0]][where[1]]


def _tool_error(name: str, message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"Error executing tool {name}: {message}")],
                          is_error=True)


def _strict_arguments(tools: Mapping[str, frozenset[str]]) -> Callable[..., Any]:
    """Server middleware that answers a ``tools/call`` naming unknown arguments with a tool error.

    The SDK ignores argument names its tool does not declare; a misspelt ``topk`` would then
    silently search with the default ``k``.
    """

    async def middleware(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping) and not isinstance(params.get("name"), str):
            given = params.get("name")
            return _tool_error(repr(given)[:100], f"the tool name must be a string, got {type(given).__name__}")
        if ctx.method == "tools/call" and isinstance(params, Mapping) and params.get("name") in tools:
            name = str(params["name"])
            arguments = params.get("arguments")
            if arguments is not None and not isinstance(arguments, Mapping):
                return _tool_error(name, f"arguments must be an object, got {type(arguments).__name__}")
            unknown = sorted(str(a) for a in arguments or {} if a not in tools[name])
            if unknown:
                shown = ", ".join(repr(a[:100]) for a in unknown[:10]) + (
                    f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
                return _tool_error(name, f"unknown argument(s) {shown}; {name} takes {', '.join(sorted(tools[name]))}")
        return await call_next(ctx)

    return middleware


def create_server(
    retriever: Retriever,
    *,
    documents: DocumentLookup | None = None,
    limits: ServerLimits | None = None,
    default_k: int = 3,
    name: str = "searchenv",
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "WARNING",
) -> MCPServer:
    """Build the MCP server around ``retriever``.

    Args:
        retriever: Any retriever (a loaded index, a hybrid, a sharded one).
        documents: Where ``open`` reads documents; None leaves ``open`` out.
        limits: ``max_topk`` bounds ``k`` and ``max_query_chars`` a query or id
            (``max_queries`` does not apply: a call holds one query).
        default_k: ``k`` when a call gives none.
        name: The server's name, as clients show it.
        log_level: The SDK's log level (its log goes to stderr).

    Returns:
        The server: ``server.run("stdio")`` serves it over stdio, :func:`http_app` over HTTP.

    Raises:
        ValueError: If ``default_k`` is not a positive integer or exceeds ``limits.max_topk``.
    """
    lim = limits if limits is not None else ServerLimits()
    check_k(default_k)
    if default_k > lim.max_topk:
        raise ValueError(f"default k {default_k} exceeds max_topk {lim.max_topk}")
    limiter: list[anyio.CapacityLimiter] = []  # made in the event loop, on the first call

    async def one_at_a_time(fn: Callable[[], T]) -> T:
        if not limiter:
            limiter.append(anyio.CapacityLimiter(1))
        return await anyio.to_thread.run_sync(fn, limiter=limiter[0])

    tools = {"search": frozenset({"query", "k"})}
    if documents is not None:
        tools["open"] = frozenset({"id"})
    try:
        version = importlib.metadata.version("searchenv")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = ""
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=version, log_level=log_level,
                                  middleware=[_strict_arguments(tools)])
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    async def search(
        query: Annotated[str, Field(strict=True, max_length=lim.max_query_chars, description="The search query.")],
        k: Annotated[int, Field(strict=True, ge=1, le=lim.max_topk, description="How many documents to return.")]
        = default_k,
    ) -> SearchResult:
        """Search the documents; return the k best for the query, best first (id, title, text, score)."""
        try:
            hits = await one_at_a_time(lambda: retriever.search_batch([query], k)[0])
        except RetrieverError:
            log.exception("search failed")
            raise ToolError("search failed: the index could not answer; the server log has the details") from None
        return SearchResult(hits=[McpHit.model_validate(h.to_dict()) for h in hits])

    server.add_tool(search, name="search", annotations=read_only)
    if documents is not None:
        lookup = documents

        async def open_document(
            id: Annotated[str, Field(strict=True, max_length=lim.max_query_chars,
                                     description="A document id from a search hit.")],
        ) -> McpDocument:
            """Return one document in full (id, title, text) by the id a search hit gave."""
            try:
                doc = await one_at_a_time(lambda: lookup.get(id))
            except (OSError, ValueError):
                log.exception("open failed")
                raise ToolError("open failed: the document store could not answer; the server log has the "
                                "details") from None
            if doc is None:
                raise ToolError(f"no document with id {id[:100]!r} in this index")
            return McpDocument(id=doc.id, title=doc.title, text=doc.text)

        server.add_tool(open_document, name="open", annotations=read_only)
    return server


class _AnsweringStdin:
    """The stdin lines the SDK reads, less those it cannot read, each of which gets a JSON-RPC error here.

    The SDK's stdio transport hands a line that fails its validation (``params`` that is not an object,
    a lone surrogate, not JSON) to the session as an exception, which logs it and answers nothing: the
    client waits forever for that request. Such a line is answered here, through the transport's own
    writer, with the request's id (``null`` when there is none to read): ``-32700`` for text that is
    not JSON, ``-32600`` otherwise, the message naming the problem.
    """

    def __init__(self, lines: Any) -> None:
        self._lines = lines
        self._writer: Any = None
        self._ready = anyio.Event()

    def attach(self, writer: Any) -> None:
        """Answer through ``writer`` (the transport's write stream); reading waits until this is called."""
        self._writer = writer
        self._ready.set()

    def __aiter__(self) -> Any:
        return self._read()

    async def _read(self) -> Any:
        await self._ready.wait()
        async for line in self._lines:
            problem = _unreadable(line)
            if problem is None:
                yield line
                continue
            code, message, request_id = problem
            error = types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                       error=types.ErrorData(code=code, message=message))
            await self._writer.send(SessionMessage(error))


def _unreadable(line: str) -> tuple[int, str, str | int | None] | None:
    """``(code, message, id)`` for a line the SDK cannot read as a JSON-RPC message, else None."""
    if not line.strip():
        return None
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return None
    except Exception as exc:  # noqa: BLE001 - whatever the SDK refuses, the client is told
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return types.PARSE_ERROR, "Parse error: the line is not JSON", None
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        request_id = None
    elif isinstance(request_id, str):
        request_id = writable(request_id)
    if isinstance(value, dict) and "method" in value and "id" not in value:
        return None  # a notification gets no answer, whatever its fault
    if isinstance(value, dict) and "params" in value and not isinstance(value["params"], dict):
        return types.INVALID_REQUEST, f"params must be an object, got {type(value['params']).__name__}", request_id
    try:  # names the field holding a lone surrogate, as every reader of this package does
        jsonsafe.loads(line, "the request")
    except jsonsafe.JSONInputError as exc:
        return types.INVALID_REQUEST, str(exc), request_id
    return types.INVALID_REQUEST, f"Invalid request: {reason}", request_id


def run_stdio(server: MCPServer) -> None:
    """Serve ``server`` over stdin and stdout, answering every request, readable or not (:class:`_AnsweringStdin`)."""
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        raw = anyio.wrap_file(io.TextIOWrapper(os.fdopen(os.dup(0), "rb"), encoding="utf-8", errors="replace"))
        stdin = _AnsweringStdin(raw)
        async with stdio_server(stdin=cast(Any, stdin)) as (read_stream, write_stream):
            stdin.attach(write_stream)
            low = server._lowlevel_server  # what MCPServer.run("stdio") runs, with our stdin
            await low.run(read_stream, write_stream, low.create_initialization_options())

    anyio.run(main)


class _Guard:
    """ASGI wrapper: the ``Host`` header and the bearer token, checked as ``searchenv serve`` checks them; POST only."""

    def __init__(self, app: ASGIApp, hosts: set[str], token: bytes | None) -> None:
        self.app, self.hosts, self.token = app, hosts, token

    def _refusal(self, scope: Scope) -> JSONResponse | None:
        """The answer that refuses this request, or None to pass it on."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not _host_allowed(host, self.hosts):
            return JSONResponse({"error": f"Host header {host[:100]!r} is not allowed: use the server's IP address, "
                                          "localhost, or a name given with --allowed-host"}, status_code=400)
        if self.token is not None:
            scheme, _, given = headers.get("authorization", "").strip().partition(" ")
            # header values arrive decoded as latin-1, so this gives back the bytes that were sent
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"), self.token):
                return JSONResponse({"error": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if scope.get("method") != "POST":
            # Stateless, with JSON answers: no server-to-client stream to open with GET and no session to
            # DELETE; an open GET stream would only hold a connection that nothing is ever sent on.
            return JSONResponse({"error": "this stateless MCP server answers POST only"}, status_code=405,
                                headers={"Allow": "POST"})
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope) if scope["type"] == "http" else None
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_app(
    server: MCPServer,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
    max_body_bytes: int = ServerLimits.max_body_bytes,
    path: str = "/mcp",
) -> ASGIApp:
    """The streamable HTTP app for ``server``: stateless, JSON answers, guarded like ``searchenv serve``.

    Run it with :func:`searchenv.serving.server.uvicorn_config` (connection limits; its lifespan
    starts the SDK's session manager).

    Args:
        server: From :func:`create_server`.
        token: Bearer token required on every request (printable ASCII); None or empty for none.
        allowed_hosts: Names accepted in the ``Host`` header besides IP addresses (``"*"``: any).
        max_body_bytes: Largest request body (413 beyond).
        path: Where the MCP endpoint is.

    Returns:
        The ASGI application.

    Raises:
        ValueError: If the token cannot travel in a header.
    """
    expected = check_token(token).encode() if token else None
    # The SDK's own Host and Origin allow-list is off: the guard applies searchenv serve's rules (IP
    # addresses, localhost, --allowed-host names), and the SDK still requires a JSON Content-Type on POST.
    inner = server.streamable_http_app(
        streamable_http_path=path, stateless_http=True, json_response=True, max_request_body_size=max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return _Guard(cast(ASGIApp, inner), {h.lower() for h in allowed_hosts}, expected)
