"""``searchenv mcp``: an index's ``search`` and ``open`` as Model Context Protocol tools."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from searchenv.cli.serve_cmds import _is_ip, _is_loopback, _open_retriever, _read_token


class Transport(str, Enum):
    """How an MCP client reaches the server."""

    stdio = "stdio"
    http = "http"


class LogLevel(str, Enum):
    """The MCP SDK's log levels."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


_HTTP_ONLY = ("host", "port", "token_file", "allowed_host")


def mcp(
    ctx: typer.Context,
    index: Annotated[
        list[Path],
        typer.Option("--index", help="Index folder (a sharded one too); give two or more for reciprocal-rank fusion."),
    ],
    transport: Annotated[Transport, typer.Option(help="stdio (the client starts this command) or http "
                                                      "(streamable HTTP at http://HOST:PORT/mcp).")] = Transport.stdio,
    search_option: Annotated[
        list[str] | None,
        typer.Option(help="Search option KEY=VALUE for the index (dense: nprobe, ef_search, rerank; bm25: "
                          "backend=numba); repeatable."),
    ] = None,
    weight: Annotated[list[float] | None, typer.Option(help="Fusion weight per --index, in order.")] = None,
    mmap: Annotated[bool, typer.Option(help="Memory-map the indexes instead of loading them.")] = False,
    topk: Annotated[int, typer.Option(help="k when a search call gives none.", min=1)] = 3,
    max_topk: Annotated[int, typer.Option(help="Largest k.", min=1)] = 100,
    max_query_chars: Annotated[int, typer.Option(help="Longest query or document id in characters.", min=1)] = 2048,
    host: Annotated[str, typer.Option(help="http: interface to bind; 0.0.0.0 exposes the server to the "
                                           "network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: TCP port.", min=1, max=65535)] = 8000,
    token: Annotated[
        str | None,
        typer.Option(help="http: require 'Authorization: Bearer TOKEN' (prefer the environment variable or "
                          "--token-file: `ps` shows command lines).", envvar="SEARCHENV_TOKEN"),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="http: read the bearer token from this file (whitespace removed).")
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="http: a name clients may use in the Host header besides IP addresses and localhost "
                          "(repeatable; '*' for any). Guards against DNS rebinding."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(help="http: largest request body in bytes.", min=1)] = 2 * 1024 * 1024,
    log_level: Annotated[LogLevel, typer.Option(help="Log level (the log goes to stderr).")] = LogLevel.warning,
) -> None:
    """Serve an index's search (and open) as MCP tools, over stdio or streamable HTTP.

    Stateless: each call is answered from the index alone; rewards stay in the environment.
    `search` returns the hits `searchenv search --json` prints for the same index, query and k.
    """
    try:
        from searchenv.serving.mcp_server import DocumentLookup, create_server, http_app, run_stdio
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] not in ("mcp", "fastapi", "starlette", "uvicorn"):
            raise
        typer.echo(f"error: searchenv mcp needs the MCP SDK ({exc.name} is missing): pip install 'searchenv[mcp]'",
                   err=True)
        raise typer.Exit(2) from None
    from searchenv.cli.index_cmds import parse_options
    from searchenv.retrievers import RetrieverError
    from searchenv.serving.server import DEFAULT_ALLOWED_HOSTS, ConnectionLimits, ServerLimits, uvicorn_config

    if transport is Transport.stdio:
        given = [p for p in _HTTP_ONLY if getattr(ctx.get_parameter_source(p), "name", None) == "COMMANDLINE"]
        if given:
            raise typer.BadParameter(f"applies to --transport http, not stdio: {', '.join(given)}",
                                     param_hint="--" + given[0].replace("_", "-"))
    options = parse_options(search_option or [], "--search-option")
    try:
        documents: Any = None
        retriever: Any = _open_retriever(list(index), mmap, weight, options)
        retriever.search_batch(["warm up"], 1)  # loads a dense encoder now, not on the first call
        try:
            documents = DocumentLookup(index)
        except RetrieverError as exc:  # an index kind without a document store: search only
            typer.echo(f"warning: no `open` tool: {exc}", err=True)
        limits = ServerLimits(max_topk=max_topk, max_query_chars=max_query_chars, max_body_bytes=max_body_bytes)
        server = create_server(retriever, documents=documents, default_k=topk, limits=limits,
                               log_level=cast(Any, log_level.value.upper()))
        token = _read_token(ctx, token, token_file) if transport is Transport.http else None
    except (RetrieverError, ValueError, TypeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    served = ", ".join(str(p) for p in index)
    if transport is Transport.stdio:
        typer.echo(f"serving {served} as MCP tools on stdio", err=True)
        run_stdio(server)
        return
    import uvicorn

    if not _is_loopback(host):
        typer.echo(f"warning: binding {host} makes the index reachable from other machines"
                   + ("" if token else " by anyone (no --token given)"), err=True)
    try:
        app = http_app(server, token=token, max_body_bytes=max_body_bytes,
                       allowed_hosts=[*DEFAULT_ALLOWED_HOSTS, *([] if _is_ip(host) else [host]),
                                      *(allowed_host or [])])
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"serving {served} as MCP tools on http://{host}:{port}/mcp", err=True)
    uvicorn.Server(uvicorn_config(app, host, port, connections=ConnectionLimits(),  # type: ignore[arg-type]
                                  log_level=log_level.value)).run()


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to the app."""
    app.command()(mcp)
