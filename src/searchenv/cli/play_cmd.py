"""``searchenv play``: type an agent's turns by hand into an episode."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from searchenv.protocols import protocol_names


def play(
    task: Annotated[str, typer.Option(help="Task name or FlashRAG QA JSONL file.")] = "synthetic-mixed",
    split: Annotated[str, typer.Option(help="Split of a named task.")] = "dev",
    corpus: Annotated[Path | None, typer.Option(help="Corpus file (default: the task's).")] = None,
    retriever: Annotated[
        str, typer.Option(help="bm25, dense (built from the corpus), an index folder, or a server URL.")
    ] = "bm25",
    protocol: Annotated[str, typer.Option(help=f"Action protocol: {', '.join(protocol_names())}.")] = "search-r1",
    top_k: Annotated[int, typer.Option(min=1)] = 3,
    max_turns: Annotated[int, typer.Option(min=1)] = 4,
    reward: Annotated[str, typer.Option(help="Reward preset.")] = "default",
    seed: Annotated[int, typer.Option(help="Chooses the question.")] = 0,
) -> None:
    r"""Play one episode: type each turn on one line (write \n for a line break); Ctrl-D quits."""
    from searchenv.cli import check_task_file, data_warnings_to_stderr
    from searchenv.env import SearchQAEnv
    from searchenv.retrievers import RetrieverError
    from searchenv.retrievers.kinds import names_kind

    if check_task_file(task) and corpus is None and names_kind(retriever):
        raise typer.BadParameter(
            f"--retriever {retriever} with a QA file needs the documents to index: add --corpus CORPUS.jsonl "
            "(or give an index folder or a server URL as --retriever)",
            param_hint="--corpus",
        )
    try:
        with data_warnings_to_stderr():
            env = SearchQAEnv(
                task,
                corpus=corpus,
                retriever=retriever,
                protocol=protocol,
                top_k=top_k,
                max_turns=max_turns,
                reward=reward,
                split=split,
            )
    except (ValueError, FileNotFoundError, RetrieverError) as exc:  # a CorpusFormatError is a ValueError
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    obs, _ = env.reset(seed=seed)
    typer.echo(obs)
    while True:
        try:
            line = input("turn> ")
        except EOFError:
            typer.echo("")
            return
        _, r, terminated, truncated, info = env.step(line.replace("\\n", "\n"))
        typer.echo(info["new_text"].strip() or "(no observation)")
        typer.echo(f"reward {float(r):+.3f}  terms {info['reward_terms']}")
        if terminated or truncated:
            typer.echo(
                f"episode over ({'answered' if terminated else 'out of turns'}): answer={info['answer']!r} "
                f"gold={info['gold_answers']} em={info['em']} f1={info['f1']:.2f} "
                f"evidence_recall={info['evidence_recall']}"
            )
            return


def register(app: typer.Typer) -> None:
    """Add ``play`` to the app."""
    app.command()(play)
