"""``searchenv tasks`` (list or build named tasks), ``convert`` (QA formats to FlashRAG), ``split`` and ``rows``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def tasks(
    build: Annotated[
        list[str] | None, typer.Option("--build", help="Build (or load from cache) this task and print its paths.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the named tasks with their sizes, or build some into the cache."""
    from searchenv.tasks.registry import load_task, task_specs

    specs = {s.name: s for s in task_specs()}
    if build:
        unknown = [n for n in build if n not in specs]
        if unknown:
            raise typer.BadParameter(f"unknown task(s) {unknown}; known: {sorted(specs)}", param_hint="--build")
        built = []
        for name in build:
            task = load_task(name)
            built.append(
                {
                    "name": name,
                    "corpus": str(task.corpus_path),
                    **{split: len(examples) for split, examples in task.splits.items()},
                }
            )
        typer.echo(json.dumps(built, indent=2) if as_json else "\n".join(f"{b['name']}: {b['corpus']}" for b in built))
        return
    rows = []
    for spec in specs.values():
        info = dict(spec.info)
        rows.append(
            {
                "name": spec.name,
                "passages": info.get("passages", ""),
                "train": info.get("train", ""),
                "dev": info.get("dev", ""),
                "test": info.get("test", ""),
                "description": spec.description,
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Named tasks (built on first use, cached under $SEARCHENV_CACHE)")
    for col in ("name", "passages", "train", "dev", "test", "description"):
        table.add_column(col, justify="right" if col in ("passages", "train", "dev", "test") else "left")
    for r in rows:
        p = r["passages"]
        table.add_row(
            r["name"], f"{p:,}" if isinstance(p, int) else str(p), str(r["train"]), str(r["dev"]), str(r["test"]),
            r["description"],
        )  # fmt: skip
    Console().print(table)


def convert(
    src: Annotated[Path, typer.Argument(help="Input QA file (JSON array or JSON lines).", exists=True, dir_okay=False)],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Input format: hotpotqa, musique, 2wiki, flashrag, or qa (question and answer only, no context: "
            "use the questions with a corpus of your choice).",
        ),
    ],
    out_qa: Annotated[Path, typer.Option("--out-qa", help="Where to write the FlashRAG QA JSONL.")],
    out_corpus: Annotated[
        Path | None, typer.Option("--out-corpus", help="Where to write the corpus pooled from the contexts.")
    ] = None,
) -> None:
    """Convert a HotpotQA, MuSiQue, 2WikiMultiHopQA, FlashRAG or question-only file to FlashRAG JSONL.

    The whole input is read and checked first: a malformed or empty input exits 1 with the
    file, line (or record) and field, and writes nothing.
    """
    from searchenv.tasks.formats import FORMATS, check_outputs, numbered_id
    from searchenv.tasks.formats import convert as run_convert

    if fmt not in FORMATS:
        raise typer.BadParameter(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}", param_hint="--format")
    try:
        check_outputs(fmt, out_qa, out_corpus, src)
    except ValueError as exc:
        hint = "--out-qa" if "--out-qa" in str(exc) else "--out-corpus"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    try:
        counts = run_convert(fmt, src, out_qa, out_corpus)
    except (ValueError, OSError) as exc:  # the input (CorpusFormatError names the place) or a failed write
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    if counts["numbered"]:
        n = counts["numbered"]
        typer.echo(
            f"note: {n} record{' has' if n == 1 else 's have'} no id; ids are given by position in the file "
            f"({numbered_id(fmt, 0)} for the first record, {numbered_id(fmt, 1)} for the second, ...), "
            "the same on every run",
            err=True,
        )
    msg = f"wrote {counts['examples']} examples to {out_qa}"
    if out_corpus is not None:
        msg += f" and {counts['documents']} passages to {out_corpus}"
    typer.echo(msg)


def split(
    src: Annotated[Path, typer.Argument(help="QA JSONL file (from searchenv convert).", exists=True, dir_okay=False)],
    out_train: Annotated[Path, typer.Option("--out-train", help="Where to write the training questions.")],
    out_dev: Annotated[Path, typer.Option("--out-dev", help="Where to write the held-out questions.")],
    dev_fraction: Annotated[
        float, typer.Option("--dev-fraction", help="Share of the questions held out (rounded to a whole number).")
    ] = 0.2,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the draw: the same seed gives the same split.")] = 0,
) -> None:
    """Split a QA file into training and held-out questions (seeded, file order kept).

    Train on one and evaluate on the other: questions seen in training say nothing about what was
    learned. Each output is written atomically; the input is never written over.
    """
    from searchenv.corpus import CorpusFormatError
    from searchenv.tasks.qa_files import read_qa_jsonl, split_examples, write_qa_jsonl

    if not 0 < dev_fraction < 1:
        raise typer.BadParameter(f"must be between 0 and 1 (exclusive), got {dev_fraction}",
                                 param_hint="--dev-fraction")
    where = {"--out-train": out_train.resolve(), "--out-dev": out_dev.resolve()}
    for flag, path in where.items():
        if path == src.resolve():
            raise typer.BadParameter(f"{path} is the input file; it is never written over", param_hint=flag)
    if where["--out-train"] == where["--out-dev"]:
        raise typer.BadParameter(f"--out-train and --out-dev are the same file {out_dev}", param_hint="--out-dev")
    try:
        examples = read_qa_jsonl(src)
        train, dev = split_examples(examples, dev_fraction, seed)
        write_qa_jsonl(out_dev, dev)
        write_qa_jsonl(out_train, train)
    except (CorpusFormatError, ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"wrote {len(train)} train questions to {out_train} and {len(dev)} held-out questions to {out_dev} "
               f"(seed {seed})")


def rows(
    task: Annotated[str, typer.Option("--task", "-t", help="Task name or QA JSONL file (from searchenv convert).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write (e.g. data/train.parquet).")],
    split: Annotated[str | None, typer.Option("--split", help="Split of a named task (default train).")] = None,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Only the first N questions.")] = None,
    agent_name: Annotated[str, typer.Option("--agent-name", help="verl agent loop of the rows.")] = "searchqa_agent",
) -> None:
    """Write a task's questions as the parquet rows verl (and Search-R1) train on.

    Each row holds the question as a chat prompt, the gold answers as
    ``reward_model.ground_truth.target``, the evidence ids and the id in ``extra_info``, and
    ``agent_name`` (see docs/engines/verl.md). The file is written whole or not at all.
    """
    from searchenv.cli import check_task_file
    from searchenv.tasks.qa_files import read_qa_jsonl
    from searchenv.tasks.registry import load_task
    from searchenv.tasks.rows import task_rows, write_parquet

    is_file = check_task_file(task, exit_code=1)  # 1: an input error, as for a bad file below
    if is_file and split is not None:
        raise typer.BadParameter("a QA file is one split; --split applies to named tasks", param_hint="--split")
    try:
        examples = read_qa_jsonl(task) if is_file else list(load_task(task).examples(split or "train"))
        if n is not None:
            examples = examples[:n]
        written = write_parquet(task_rows(examples, data_source=f"searchenv/{Path(task).stem if is_file else task}",
                                          split=split or ("file" if is_file else "train"), agent_name=agent_name), out)
    except (ValueError, OSError, ImportError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"wrote {len(examples)} rows to {written}")


def register(app: typer.Typer) -> None:
    """Add ``tasks``, ``convert``, ``split`` and ``rows`` to the ``searchenv`` command."""
    app.command("tasks")(tasks)
    app.command("convert")(convert)
    app.command("split")(split)
    app.command("rows")(rows)
