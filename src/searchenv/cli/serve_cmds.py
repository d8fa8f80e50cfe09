"""``searchenv serve`` (HTTP retrieval server) and ``searchenv eval-retrieval`` (retrieval quality)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Any

import typer


def _open_retriever(indexes: list[Path], mmap: bool, weights: list[float] | None,
                    search_options: dict[str, Any] | None = None, shard_urls: list[str] | None = None) -> Any:
    from searchenv.retrievers import open_index

    if shard_urls:
        if indexes:
            raise typer.BadParameter("give --index folders or --shard-url servers, not both", param_hint="--shard-url")
        from searchenv.retrievers.remote import remote_from_url
        from searchenv.retrievers.sharded import ShardedRetriever

        return ShardedRetriever([remote_from_url(u) for u in shard_urls])
    if not indexes:
        raise typer.BadParameter("give an --index folder (or --shard-url servers)", param_hint="--index")
    opened = [open_index(d, mmap=mmap, **(search_options or {})) for d in indexes]
    if len(opened) == 1:
        if weights:
            raise typer.BadParameter("--weight needs two or more --index folders", param_hint="--weight")
        return opened[0]
    from searchenv.retrievers.hybrid import HybridRetriever

    return HybridRetriever(opened, weights=weights or None)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_token(ctx: typer.Context, token: str | None, token_file: Path | None) -> str | None:
    """The bearer token from --token, SEARCHENV_TOKEN or --token-file.

    Raises:
        ValueError: If both a token and a file are given, or the file is unreadable, empty or
            holds a token that cannot travel in a header, or the token is shorter than
            :data:`~searchenv.utils.httpclient.MIN_SERVER_TOKEN_CHARS`.
    """
    from searchenv.utils.httpclient import check_server_token

    if token and token_file is not None:
        raise ValueError("give --token (or SEARCHENV_TOKEN) or --token-file, not both")
    source = ctx.get_parameter_source("token")  # an enum of the click that typer bundles
    if token and getattr(source, "name", None) == "COMMANDLINE":
        typer.echo("warning: --token is visible to other users in `ps`; set SEARCHENV_TOKEN or use --token-file",
                   err=True)
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --token-file {token_file}: {exc}") from None
        if not token:
            raise ValueError(f"--token-file {token_file} is empty")
        return check_server_token(token, f"--token-file {token_file}")
    return check_server_token(token, "--token (or SEARCHENV_TOKEN)") if token else None


def serve(
    ctx: typer.Context,
    index: Annotated[
        list[Path] | None,
        typer.Option("--index", help="Index folder (a sharded one too); give two or more for reciprocal-rank fusion."),
    ] = None,
    shard_url: Annotated[
        list[str] | None,
        typer.Option(help="A server serving one shard, in corpus order (repeatable): this server merges their "
                          "rankings. Several replicas of a shard: comma-separated URLs."),
    ] = None,
    search_option: Annotated[
        list[str] | None,
        typer.Option(help="Search option KEY=VALUE for the index (dense: nprobe, ef_search, rerank; bm25: "
                          "backend=numba); repeatable."),
    ] = None,
    retriever: Annotated[
        str | None,
        typer.Option("--retriever", help="Serve your own retriever instead of an index: module:Class or an "
                                         "entry-point name of the searchenv.retrievers group."),
    ] = None,
    retriever_option: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE for --retriever's class or factory (repeatable)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; 0.0.0.0 exposes the server to the network.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    token: Annotated[
        str | None,
        typer.Option(help="Require 'Authorization: Bearer TOKEN' on every route (prefer the environment variable "
                          "or --token-file: `ps` shows command lines).",
                     envvar=["SEARCHENV_TOKEN", "SEARCHENV_SERVER_TOKEN"]),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="Read the bearer token from this file (surrounding whitespace removed).")
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="A name clients may use in the Host header besides IP addresses and localhost "
                          "(repeatable; '*' for any). Guards against DNS rebinding."),
    ] = None,
    weight: Annotated[list[float] | None, typer.Option(help="Fusion weight per --index, in order.")] = None,
    mmap: Annotated[bool, typer.Option(help="Memory-map the indexes instead of loading them.")] = False,
    topk: Annotated[int, typer.Option(help="topk when a request gives none.", min=1)] = 3,
    max_queries: Annotated[int, typer.Option(help="Most queries per request.", min=1)] = 512,
    max_topk: Annotated[int, typer.Option(help="Largest topk.", min=1)] = 100,
    max_query_chars: Annotated[int, typer.Option(help="Longest query in characters.", min=1)] = 2048,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body in bytes.", min=1)] = 2 * 1024 * 1024,
    batch_window_ms: Annotated[float, typer.Option(
        help="How long an idle search worker waits for more requests (ms); 0 searches at once, and requests "
        "arriving during a search form the next batch.", min=0, max=1000)] = 0.0,
    max_batch: Annotated[int, typer.Option(help="Most queries per search call.", min=1)] = 256,
    batch_quantum: Annotated[int, typer.Option(
        help="A request costing more (topk + 10 per query) is searched in parts, by turns with the other large "
             "ones; while small requests arrive, a search call holds at most this much of large ones.", min=1)] = 128,
    micro_batch: Annotated[bool, typer.Option(help="Gather concurrent requests into one search call.")] = True,
    cache_size: Annotated[int, typer.Option(help="Keep this many (query, k) results in memory (0: off).", min=0)] = 0,
    max_connections: Annotated[
        int, typer.Option(
            help="Most open connections (lowered to fit ulimit -n; see docs/serving/retrieval-server.md).", min=1)
    ] = 512,
    request_timeout: Annotated[
        float, typer.Option(help="Seconds for a request to arrive whole, from connect or its first byte.", min=0.01)
    ] = 10.0,
    keep_alive_timeout: Annotated[int, typer.Option(help="Seconds an idle connection stays open.", min=1)] = 5,
    write_timeout: Annotated[float, typer.Option(
        help="Seconds an answer may wait with none of it read: a client that stops reading for this long is "
             "disconnected and its answer dropped.", min=0.01)] = 10.0,
    max_unsent_bytes: Annotated[int, typer.Option(
        help="Most bytes of answers waiting for their clients, all connections together; over it the "
             "connections that have waited longest without reading are dropped.", min=1)] = 256 * 1024 * 1024,
    graceful_timeout: Annotated[float, typer.Option(
        help="Seconds a shutdown (SIGTERM, Ctrl-C) waits for the requests in progress before cancelling them.",
        min=0.01)] = 5.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    msgpack: Annotated[bool, typer.Option(
        "--msgpack", help="Also read request bodies sent without a Content-Type as msgpack (GEM's search client "
        "sends them so). Bodies declared application/msgpack are always read."
    )] = False,
) -> None:
    """Serve one or more indexes, or your own retriever, over HTTP (Search-R1 and single-query dialects)."""
    import uvicorn

    from searchenv.cli.index_cmds import parse_options
    from searchenv.retrievers import RetrieverError
    from searchenv.serving.server import (
        DEFAULT_ALLOWED_HOSTS,
        ConnectionLimits,
        ServerLimits,
        create_app,
        uvicorn_config,
    )

    served = [str(p) for p in index or []] or list(shard_url or []) or ([retriever] if retriever else [])
    options = parse_options(retriever_option or [], "--retriever-option")
    try:
        token = _read_token(ctx, token, token_file)
        if retriever is not None:
            if index or shard_url:
                raise ValueError("give --retriever, or --index folders, or --shard-url servers: one of them")
            from searchenv.retrievers.custom import load_retriever

            opened: Any = load_retriever(retriever, options)
        elif options:
            raise ValueError("--retriever-option applies to --retriever")
        else:
            opened = _open_retriever(list(index or []), mmap, weight, parse_options(search_option or [],
                                     "--search-option"), list(shard_url or []))
        opened.search_batch(["warm up"], 1)  # loads a dense encoder now, not on the first request
    except (RetrieverError, ValueError, TypeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    retriever_obj = opened
    if cache_size:
        from searchenv.retrievers.cache import CachedRetriever

        retriever_obj = CachedRetriever(retriever_obj, maxsize=cache_size)
    if not _is_loopback(host):
        typer.echo(
            f"warning: binding {host} makes the index reachable from other machines"
            + ("" if token else " by anyone (no --token given)"),
            err=True,
        )
    try:
        limits = ServerLimits(max_queries, max_topk, max_query_chars, max_body_bytes)
        app = create_app(
            retriever_obj,
            token=token or None,
            limits=limits,
            default_topk=topk,
            batch_window_ms=batch_window_ms,
            max_batch=max_batch,
            micro_batch=micro_batch,
            info={"indexes": served},
            allowed_hosts=[*DEFAULT_ALLOWED_HOSTS, *([] if _is_ip(host) else [host]), *(allowed_host or [])],
            accept_untyped_msgpack=msgpack,
            batch_quantum=batch_quantum,
        )
        connections = ConnectionLimits(max_connections, request_timeout, keep_alive_timeout, write_timeout,
                                       max_unsent_bytes)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"serving {', '.join(served)} on http://{host}:{port}/retrieve", err=True)
    config = uvicorn_config(app, host, port, connections=connections, log_level=log_level,
                            graceful_timeout=graceful_timeout)
    uvicorn.Server(config).run()


def eval_retrieval(
    ctx: typer.Context,
    index: Annotated[
        list[str],
        typer.Option(
            "--index",
            "--retriever",
            "-r",
            help="Index folder(s), server URL(s), module:Class or entry-point name(s) to compare: --index A B ... "
                 "(or repeated, as in eval).",
        ),
    ],
    qa: Annotated[Path, typer.Option(help="FlashRAG QA JSONL with metadata.evidence_ids.")],
    k: Annotated[list[int] | None, typer.Option("--k", help="Cut-offs: --k 1 5 10.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the results to this JSON file.")] = None,
    mmap: Annotated[bool, typer.Option(help="Memory-map the indexes.")] = False,
    limit: Annotated[
        int | None, typer.Option("--n", "--limit", help="Evaluate only the first N questions.", min=1)
    ] = None,
    refiner: Annotated[
        str | None,
        typer.Option(help="Also evaluate each index through this refiner (sentences, sentences-embedding): "
                          "answer-in-docs and characters read of what an agent would see."),
    ] = None,
    retriever_option: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE for a retriever given as module:Class or by entry-point name (repeatable)."),
    ] = None,
) -> None:
    """Recall@k of gold evidence and answer-in-document rate, per index.

    Several values may follow one flag (``--index A B --k 1 5 10``): extra integers are
    cut-offs, other extra words index folders.
    """
    from rich.console import Console
    from rich.table import Table

    from searchenv.cli.index_cmds import parse_options
    from searchenv.corpus import CorpusFormatError
    from searchenv.retrieval_quality import evaluate_retrieval, evidence_warning
    from searchenv.retrievers import RetrieverError, open_index
    from searchenv.retrievers.custom import is_custom_spec, load_retriever
    from searchenv.retrievers.remote import is_server_url, remote_from_url
    from searchenv.tasks.qa_files import read_qa_jsonl

    indexes = list(index)
    ks = list(k or [])
    for extra in ctx.args:
        if extra.startswith("-"):
            raise typer.BadParameter(f"unknown option {extra!r}")
        if extra.isdigit() and not Path(extra).is_dir():
            ks.append(int(extra))
        else:
            indexes.append(extra)
    ks = sorted(set(ks or [1, 5, 10]))
    if any(x < 1 for x in ks):
        raise typer.BadParameter("cut-offs must be positive", param_hint="--k")
    if not qa.is_file():
        typer.echo(f"error: --qa {qa}: file not found", err=True)
        raise typer.Exit(2)
    try:
        examples = read_qa_jsonl(qa)
    except (OSError, CorpusFormatError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if limit is not None:
        examples = examples[:limit]
    options = parse_options(retriever_option or [], "--retriever-option")
    if options and not any(is_custom_spec(x) for x in indexes):
        raise typer.BadParameter("applies to a retriever given as module:Class or by entry-point name",
                                 param_hint="--retriever-option")
    results = []
    for folder in indexes:
        try:
            retriever: Any
            if is_server_url(folder):
                retriever = remote_from_url(folder)
            elif is_custom_spec(folder):
                retriever = load_retriever(folder, options)
            else:
                retriever = open_index(folder, mmap=mmap)
            warning = evidence_warning(retriever, examples, index=str(folder), questions=str(qa))
            if warning is not None:
                typer.echo(f"warning: {warning}", err=True)
            results.append(evaluate_retrieval(retriever, examples, ks, name=str(folder)))
            if refiner:
                results.append(evaluate_retrieval(retriever, examples, ks, name=f"{folder} + {refiner}",
                                                  refiner=refiner))
        except (RetrieverError, ValueError, TypeError) as exc:
            typer.echo(f"error: {folder}: {exc}", err=True)
            raise typer.Exit(2) from None
    table = Table(title=f"retrieval quality on {qa} ({len(examples)} questions)")
    table.add_column("index", overflow="fold")
    table.add_column("metric")
    for x in ks:
        table.add_column(f"@{x}", justify="right")
    for r in results:
        for label, values in (("recall", r.recall), ("all-evidence", r.all_evidence),
                              ("answer-in-docs", r.answer_in_docs), ("chars-read", r.chars_read)):
            cells = ("n/a" if values[x] is None else f"{values[x]:.0f}" if label == "chars-read"
                     else f"{values[x]:.3f}" for x in ks)
            table.add_row(r.name if label == "recall" else "", label, *cells)
    Console().print(table)
    if results and results[0].num_with_evidence == 0:
        typer.echo("note: no question has metadata.evidence_ids, so evidence recall is n/a", err=True)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"qa": str(qa), "k": ks, "results": [r.to_dict() for r in results]}
        json_out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        typer.echo(f"wrote {json_out}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``eval-retrieval`` to the app."""
    app.command()(serve)
    app.command(
        "eval-retrieval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
    )(eval_retrieval)
