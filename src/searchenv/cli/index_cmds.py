"""``searchenv index``, ``searchenv verify-index`` and ``searchenv search``."""

from __future__ import annotations

import json
from collections.abc import Sized
from pathlib import Path
from typing import Annotated, Any

import typer


def parse_options(pairs: list[str], flag: str = "--option") -> dict[str, Any]:
    """``KEY=VALUE`` pairs into a dict, each value read as JSON when it is JSON (``3``, ``true``)."""
    from searchenv.retrievers.custom import parse_options as parse

    try:
        return parse(pairs, flag=flag)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None


def index(
    corpus: Annotated[
        str, typer.Option(help="FlashRAG JSONL corpus ({id, contents} or {id, title, text}), or a task name "
                               "(synthetic-2hop, ...) for its corpus.")
    ],
    out: Annotated[Path, typer.Option(help="Folder to write the index into.")],
    retriever: Annotated[str, typer.Option(help="Index kind: bm25 or dense.")] = "bm25",
    option: Annotated[
        list[str] | None,
        typer.Option(help="Build option KEY=VALUE (e.g. k1=1.2, index_type=ivf-pq, keep_vectors=float16); "
                          "repeatable."),
    ] = None,
    shards: Annotated[
        int, typer.Option(help="Split the corpus into N document ranges, one index each, searched as one (dense).",
                          min=1)
    ] = 1,
) -> None:
    """Build a search index over a corpus file.

    The index is built in a fresh folder inside OUT and swapped in when complete: if the build
    fails or is killed, an index already in OUT stays as it was, and a server that opened it
    keeps answering from it.
    """
    from searchenv.corpus import CorpusFormatError
    from searchenv.make import corpus_file
    from searchenv.retrievers import RetrieverError, build_index

    try:
        path = corpus_file(corpus)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise typer.BadParameter(str(exc).strip("'\""), param_hint="--corpus") from None
    try:
        r = build_index(retriever, path, out, shards=shards, **parse_options(option or []))
    except (CorpusFormatError, ValueError, RetrieverError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    n = len(r) if isinstance(r, Sized) else "?"
    typer.echo(f"indexed {n} documents from {path} with {retriever} into {out}")


def verify_index(
    index_dir: Annotated[Path, typer.Argument(metavar="INDEX", help="An index folder from `searchenv index`.")],
) -> None:
    """Check an index: metadata and files against the checksums, sizes and counts recorded at build; one search."""
    from searchenv.retrievers import RetrieverError, open_index
    from searchenv.retrievers.index.metadata import read_meta

    try:
        retriever = open_index(index_dir, mmap=True, verify=True)
        meta = read_meta(index_dir)
        retriever.search_batch(["searchenv verify-index"], 1)  # the parameters work (stemmer, encoder)
    except RetrieverError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{index_dir}: {meta['kind']} index of {meta['num_docs']} documents; its metadata and "
               f"{len(meta['files'])} files match their checksums, and it answers a search")


def search(
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    index_dir: Annotated[Path, typer.Option("--index", help="An index folder from `searchenv index`.")],
    k: Annotated[int, typer.Option(help="Hits per query.", min=1)] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list of hits per query.")] = False,
    mmap: Annotated[bool, typer.Option(help="Memory-map the index instead of loading it.")] = False,
) -> None:
    """Search an index and print the hits."""
    from searchenv.retrievers import RetrieverError, open_index

    try:
        retriever = open_index(index_dir, mmap=mmap)
        results = retriever.search_batch(queries, k)
    except RetrieverError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps([[h.to_dict() for h in hits] for hits in results], ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for q, hits in zip(queries, results, strict=True):
        table = Table(title=f"{q}", show_lines=False)
        for col in ("rank", "id", "score", "title", "text"):
            table.add_column(col, overflow="fold")
        for i, h in enumerate(hits, 1):
            table.add_row(str(i), h.doc_id, f"{h.score:.3f}", h.title, h.text[:160])
        console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``index``, ``verify-index`` and ``search`` to the app."""
    app.command()(index)
    app.command("verify-index")(verify_index)
    app.command()(search)
