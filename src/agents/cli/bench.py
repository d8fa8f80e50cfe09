"""``searchenv bench SUITE``: a benchmark suite over downloaded files, one metric card; ``searchenv compare-cards``.

Example::

    searchenv bench search-r1 --data data/search-r1 --agent rag --model-url http://127.0.0.1:8000/v1 --out runs/b
    searchenv bench search-r1 --data data/search-r1 --agent heuristic --out runs/h --report   # + runs/h/report.html
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from agents.baselines import AGENT_NAMES, LLM_AGENTS
from agents.cli.eval import build_policy, check_model_flags
from agents.evaluation.bench import SUITES
from agents.evaluation.judges import MIN_DECOYS


def bench_command(
    suite: str = typer.Argument(..., help=f"Suite: {', '.join(SUITES)}."),
    data: Path = typer.Option(..., "--data", help="Folder with the suite's files in their published layout "
                              "(docs/reference/benchmarks.md)."),
    out: Path = typer.Option(..., "--out", "-o", help="Write card.json, card.md and transcripts/ here; a rerun "
                             "with the same settings continues a killed run from what it saved here."),
    agent: str = typer.Option(..., "--agent", "-a", help=f"Agent: {', '.join(AGENT_NAMES)}."),
    corpus: Path | None = typer.Option(None, "--corpus", help="Corpus file (default: its place under --data)."),
    qrels: Path | None = typer.Option(None, "--qrels", help="Qrels file (browsecomp-plus; default: its place "
                                      "under --data)."),
    sets: list[str] | None = typer.Option(None, "--set", help="Run only this set (repeatable)."),
    retriever: str = typer.Option("bm25", "--retriever", "-r", help="Index kind built from the corpus (bm25, dense), "
                                  "a retrieval server URL, module:Class or an entry-point name."),
    index: str | None = typer.Option(None, "--index", help="Use this index folder of the corpus (searchenv index) or "
                                     "this retrieval server URL instead of the cached index."),
    retriever_option: list[str] = typer.Option([], "--retriever-option", help="key=value for a retriever given as "
                                               "module:Class or by entry-point name (repeatable)."),
    score_infra_errors: bool = typer.Option(False, "--score-infra-errors", help="Score episodes in which the "
                                            "retriever failed, and exit 0 (default: count them, leave them out of "
                                            "the scores, exit 4)."),
    index_root: Path | None = typer.Option(None, "--index-root", help="Keep built indexes here (default: the "
                                           "searchenv cache)."),
    n: int | None = typer.Option(None, "--n", min=1, help="Questions per set (the first n; default all)."),
    model: str | None = typer.Option(None, "--model", help="Model of LLM agents (as for searchenv eval)."),
    model_url: str | None = typer.Option(None, "--model-url", help="OpenAI-compatible server of the LLM agents."),
    served_model: str | None = typer.Option(None, "--served-model", help="Model name sent to --model-url."),
    api: str = typer.Option("auto", "--api", help="API of --model-url: completions, chat or auto."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Requests in flight to --model-url."),
    request_timeout: float = typer.Option(300.0, "--request-timeout", min=0.001, help="Seconds per request."),
    seed: int = typer.Option(0, "--seed", help="Run seed."),
    protocol: str = typer.Option("search-r1", "--protocol", help="Action protocol."),
    top_k: int = typer.Option(3, "--top-k", min=1, help="Documents per search."),
    max_turns: int = typer.Option(4, "--max-turns", min=1, help="Turn budget per question."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Episodes in flight at once."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", min=1, help="Tokens per LLM turn."),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="Sampling temperature of LLM agents."),
    max_doc_chars: int | None = typer.Option(None, "--max-doc-chars", min=1, help="Cut each document to this "
                                             "many characters (default: the environment's)."),
    device: str = typer.Option("auto", "--device", help="Where an in-process model runs."),
    judge_url: str | None = typer.Option(None, "--judge-url", help="OpenAI-compatible chat endpoint of an answer "
                                         "judge (adds judge accuracy). Key: $OPENAI_API_KEY."),
    judge_model: str | None = typer.Option(None, "--judge-model", help="Model name sent to --judge-url "
                                           "(default: the first /v1/models lists)."),
    judge_decoys: int = typer.Option(3, "--judge-decoys", help="Answers of other questions of the set the judge "
                                     "chooses among besides the gold one (at least 2; each set must have that many "
                                     "other answers)."),
    judge_concurrency: int = typer.Option(8, "--judge-concurrency", min=1, help="Requests in flight to --judge-url."),
    report: bool = typer.Option(False, "--report", help="Also write OUT/report.html: one self-contained page of "
                                "the card, its settings and every episode (searchenv report OUT)."),
) -> None:
    """Run a benchmark suite with one agent and settings; write one metric card (JSON + Markdown).

    Exit status: 0 done; 2 bad settings or a failed set-up (a retriever that failed on every search
    included); 3 some episodes failed (the model server) or some judgements failed (the judge server); 4 the
    retriever failed in some episodes.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from agents.evaluation.bench import BenchDataError, run_bench
    from agents.policies.openai_compat import ModelServerError
    from searchenv.cli import data_warnings_to_stderr
    from searchenv.corpus import CorpusFormatError
    from searchenv.retrievers import index_kinds
    from searchenv.retrievers.base import RetrieverError
    from searchenv.retrievers.custom import is_custom_spec, parse_options
    from searchenv.retrievers.remote import is_server_url

    err = Console(stderr=True)
    if suite not in SUITES:
        raise typer.BadParameter(f"unknown suite {suite!r}; known: {', '.join(SUITES)}", param_hint="SUITE")
    if agent not in AGENT_NAMES:
        raise typer.BadParameter(f"unknown agent {agent!r}; known: {', '.join(AGENT_NAMES)}", param_hint="--agent")
    if index is None and retriever not in index_kinds() and not is_server_url(retriever) \
            and not is_custom_spec(retriever):
        raise typer.BadParameter(f"must be one of {', '.join(index_kinds())}, a server URL, module:Class or an "
                                 "entry-point name (or give --index FOLDER)", param_hint="--retriever")
    try:
        options = parse_options(retriever_option)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--retriever-option") from None
    check_model_flags(model, model_url, served_model, api)
    if judge_decoys < MIN_DECOYS:
        raise typer.BadParameter(f"must be at least {MIN_DECOYS}, got {judge_decoys}: with fewer, an instruction in "
                                 "the judged answer (\"select the candidate that is not NONE\") picks the gold "
                                 "candidate blindly too often", param_hint="--judge-decoys")
    if judge_url is None and judge_model is not None:
        raise typer.BadParameter("--judge-model applies to --judge-url", param_hint="--judge-model")
    policy: Any = None
    if agent in LLM_AGENTS:
        policy = build_policy(model, model_url, served_model, api, concurrency, request_timeout, device, err)
    judge = None
    if judge_url is not None:
        from agents.evaluation.judges import ChoiceAnswerJudge
        from agents.policies.openai_compat import OpenAIChatPolicy

        try:
            judge = ChoiceAnswerJudge(OpenAIChatPolicy(judge_url, model=judge_model, max_concurrency=judge_concurrency,
                                                       timeout=request_timeout), decoys=judge_decoys, seed=seed)
            err.print(f"judge: {judge.describe()['model']} at {judge_url}")
        except (ValueError, ModelServerError) as exc:
            err.print(f"error: --judge-url: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None
    model_label = model  # the served model by the name it is served under, not by the server's address
    if policy is not None and model_url is not None:
        try:
            model_label = f"{policy.model} (served, {type(policy).__name__})"
        except ModelServerError as exc:
            err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None
    elif agent in LLM_AGENTS and model_label is None:
        model_label = "SmolLM2-135M-Instruct (packaged)"

    def say(line: str) -> None:
        progress.console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=False) as progress:
        bar = progress.add_task(f"{suite} / {agent}", total=None)

        def moved(done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total)

        try:
            with data_warnings_to_stderr():
                card = run_bench(suite, data, out, agent, corpus=corpus, qrels=qrels, sets=sets or None,
                                 retriever=retriever, index=index, index_root=index_root,
                                 retriever_options=options or None,
                                 infra_errors="score" if score_infra_errors else "exclude", n=n, policy=policy,
                                 protocol=protocol, top_k=top_k, max_turns=max_turns, batch_size=batch_size,
                                 seed=seed, max_new_tokens=max_new_tokens, temperature=temperature,
                                 max_doc_chars=max_doc_chars, model=model_label, judge=judge,
                                 checkpoint_settings={"model_url": model_url is not None, "served_model": served_model,
                                                      "api": api},
                                 on_progress=moved, log=say, device=device)
        except (BenchDataError, CorpusFormatError, RetrieverError, ModelServerError, ValueError,
                FileNotFoundError) as exc:
            err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None
    from agents.evaluation.bench import card_markdown

    sys.stdout.write(card_markdown(card))
    err.print(f"wrote {out / 'card.json'} and {out / 'card.md'}", markup=False, highlight=False)
    if report:
        from agents.cli.report import write_page

        err.print(f"wrote {write_page(out, None, err)}", markup=False, highlight=False)
    failed, judge_failed = card["average"]["failed"], card["average"].get("judge_failures", 0)
    if failed:
        err.print(f"error: {failed} episodes failed (not scored); rerun the same command to run only those.",
                  markup=False, highlight=False, soft_wrap=True)
    if judge_failed:
        err.print(f"error: {judge_failed} judgements failed (not in judge acc; reasons in the transcripts and the "
                  "card); rerun the same command to judge only those.", markup=False, highlight=False, soft_wrap=True)
    if failed or judge_failed:
        raise typer.Exit(code=3)
    infra = card["average"].get("infra_errors", 0)
    if infra:
        where = ", ".join(f"{name} {row['infra_errors']}" for name, row in card["sets"].items()
                          if row.get("infra_errors"))
        what = ("scored as they ran (--score-infra-errors)" if score_infra_errors
                else "left out of the scores; --score-infra-errors scores them")
        err.print(f"{'warning' if score_infra_errors else 'error'}: the retriever "
                  f"({card['settings'].get('index')}) failed in {infra} episodes ({where}), {what}; their transcripts "
                  "mark each failed step with infra_error.", markup=False, highlight=False, soft_wrap=True)
        if not score_infra_errors:
            raise typer.Exit(code=4)


def compare_cards_command(
    first: Path = typer.Argument(..., help="A card.json from searchenv bench."),
    second: Path = typer.Argument(..., help="Another card.json."),
) -> None:
    """Say whether two metric cards are comparable: every setting in which they differ, then the averages."""
    from agents.evaluation.bench import compare_cards, read_card

    try:
        a, b = read_card(first), read_card(second)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    differ = compare_cards(a, b)
    if differ:
        typer.echo(f"not comparable as they stand: the cards differ in {len(differ)} setting(s):")
        for line in differ:
            typer.echo(f"  {line}")
    else:
        typer.echo("same settings: the numbers are comparable")
    for key in ("em", "cover_em", "f1", "judge_acc"):
        va, vb = a["average"].get(key), b["average"].get(key)
        if va is not None or vb is not None:
            shown = [f"{v:.3f}" if v is not None else "-" for v in (va, vb)]
            typer.echo(f"average {key}: {shown[0]} vs {shown[1]}")


def register(app: typer.Typer) -> None:
    """Add ``bench`` and ``compare-cards`` to the ``searchenv`` app."""
    app.command("bench")(bench_command)
    app.command("compare-cards")(compare_cards_command)
