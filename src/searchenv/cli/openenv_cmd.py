"""``searchenv serve-openenv``: SearchQA-v0 as an OpenEnv environment server (tool calls over WebSocket and /mcp)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_INSTALL = ("error: serve-openenv needs openenv: install searchenv[openenv] in an environment of its own "
            "(openenv pins mcp and fastmcp, which conflict with the other extras), e.g. "
            "`make .venv-openenv/.installed`")


def serve_openenv(
    ctx: typer.Context,
    task: Annotated[str, typer.Option(help="Task name (all its splits are served) or a FlashRAG QA JSONL file.")],
    index: Annotated[str, typer.Option("--index", help="Index folder, retrieval server URL, or bm25/dense.")],
    corpus: Annotated[Path | None, typer.Option(help="Corpus file for --index bm25/dense (default: the task's).")]
    = None,
    split: Annotated[str, typer.Option(help="The split a QA file is served as; reset's default split.")] = "train",
    protocol: Annotated[str, typer.Option(help="tools, or tools-browse (adds the open tool).")] = "tools",
    reward: Annotated[str, typer.Option(help="Reward preset.")] = "default",
    reward_range: Annotated[
        tuple[float, float] | None,
        typer.Option(help="LOW HIGH of a step's reward, for a reward whose range is not computed "
                          "(the published ones)."),
    ] = None,
    mode: Annotated[str, typer.Option(
        help="training: every step's reward and reward terms (what a trainer needs); evaluation: no reward, term or "
             "metric before the episode ends, the return at the end (what a benchmark must use).")] = "training",
    top_k: Annotated[int, typer.Option(help="Documents per search (1 to 100).", min=1, max=100)] = 3,
    max_turns: Annotated[int, typer.Option(min=1)] = 4,
    max_doc_chars: Annotated[int, typer.Option(min=1)] = 1500,
    max_sessions: Annotated[int, typer.Option(help="Most sessions at once; more are refused.", min=1)] = 64,
    idle_timeout: Annotated[float, typer.Option(
        help="Seconds a session may go without a message before it is closed and reclaimed (1 to 86400).",
        min=1.0, max=86400.0)] = 300.0,
    host: Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes the server to the network.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    token: Annotated[
        str | None,
        typer.Option(help="Require 'Authorization: Bearer TOKEN' on every route and WebSocket.",
                     envvar=["SEARCHENV_TOKEN", "SEARCHENV_SERVER_TOKEN"]),
    ] = None,
    token_file: Annotated[Path | None, typer.Option(help="Read the bearer token from this file.")] = None,
    allowed_host: Annotated[
        list[str] | None, typer.Option(help="A name clients may use in the Host header (repeatable; '*' any).")
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(
        help="Largest request body, and largest WebSocket message, in bytes.", min=1)] = 2 * 1024 * 1024,
    max_connections: Annotated[int, typer.Option(help="Most open connections.", min=1)] = 512,
    request_timeout: Annotated[float, typer.Option(
        help="Seconds for an HTTP request or WebSocket handshake to arrive whole (not a session's silences: "
             "--idle-timeout).", min=0.01)] = 10.0,
    manifest: Annotated[Path | None, typer.Option(
        help="Write the openenv.yaml manifest (the reward range served) to this file and exit.")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve SearchQA-v0 to OpenEnv clients: one episode per session, the index opened once."""
    try:
        import openenv  # noqa: F401
    except ImportError:
        typer.echo(_INSTALL, err=True)
        raise typer.Exit(2) from None
    import uvicorn

    from searchenv.cli import data_warnings_to_stderr
    from searchenv.cli.serve_cmds import _is_ip, _is_loopback, _read_token
    from searchenv.integrations.openenv import SearchQAService, create_app, uvicorn_config
    from searchenv.integrations.openenv_manifest import manifest as manifest_text
    from searchenv.retrievers import RetrieverError
    from searchenv.serving.server import DEFAULT_ALLOWED_HOSTS, ConnectionLimits

    try:
        secret = _read_token(ctx, token, token_file)
        with data_warnings_to_stderr():
            service = SearchQAService(task, retriever=index, corpus=corpus, split=split, protocol=protocol,
                                      reward=reward, reward_range=reward_range, mode=mode, top_k=top_k,
                                      max_turns=max_turns,
                                      max_doc_chars=max_doc_chars)
        if manifest is not None:
            counts = {name: len(exs) for name, exs in service.splits.items()}
            tools = tuple(t["function"]["name"] for t in service.tools)
            from searchenv.corpus import atomic_write_lines

            atomic_write_lines(manifest, manifest_text(service.reward_range, tools=tools, task_counts=counts,
                                                       port=port, episode_timeout_s=idle_timeout,
                                                       mode=service.mode).splitlines())
            what = "a step's reward" if service.mode == "training" else "an episode's return"
            typer.echo(f"wrote {manifest} ({service.mode} mode: {what} in [{service.reward_range[0]}, "
                       f"{service.reward_range[1]}])", err=True)
            return
        app = create_app(service, max_sessions=max_sessions, idle_timeout=idle_timeout, token=secret,
                         allowed_hosts=[*DEFAULT_ALLOWED_HOSTS, *([] if _is_ip(host) else [host]),
                                        *(allowed_host or [])], max_body_bytes=max_body_bytes)
        connections = ConnectionLimits(max_connections, request_timeout)
    except (RetrieverError, ValueError, TypeError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not _is_loopback(host):
        typer.echo(f"warning: binding {host} makes the environment reachable from other machines"
                   + ("" if secret else " by anyone (no --token given)"), err=True)
    typer.echo(f"serving {task} as OpenEnv environment 'searchqa' in {service.mode} mode on http://{host}:{port} "
               "(WebSocket /ws, MCP /mcp)", err=True)
    uvicorn.Server(uvicorn_config(app, host, port, max_message_bytes=max_body_bytes, connections=connections,
                                  log_level=log_level)).run()


def register(app: typer.Typer) -> None:
    """Add ``serve-openenv`` to the app."""
    app.command("serve-openenv")(serve_openenv)
