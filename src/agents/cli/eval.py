"""``searchenv eval``: compare reference agents (and retrievers) on a task split.

Example::

    searchenv eval --agent oracle --agent rag --task synthetic-2hop --retriever bm25 --n 200 --out runs/ev
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from agents.baselines.pipelines import PIPELINE_NAMES
from agents.baselines.registry import AGENT_NAMES, LLM_AGENTS

_KNOWN = (*AGENT_NAMES, *PIPELINE_NAMES)  # agents, and the multi-agent pipelines (docs/reference/multi-agent.md)
_MODEL_AGENTS = LLM_AGENTS | {"mmoa-llm"}


def check_model_flags(model: str | None, model_url: str | None, served_model: str | None, api: str) -> None:
    """Check the model flags ``eval`` and ``bench`` share: ``--model``, ``--model-url``, ``--served-model``, ``--api``.

    Raises:
        typer.BadParameter: Naming the flag and what is wrong.
    """
    if api not in ("auto", "completions", "chat"):
        raise typer.BadParameter(f"must be auto, completions or chat, got {api!r}", param_hint="--api")
    if model_url is None and (served_model is not None or api != "auto"):
        raise typer.BadParameter("--served-model and --api apply to --model-url", param_hint="--model-url")
    if model_url is not None and api == "completions" and model is None:
        raise typer.BadParameter(
            "the completions API needs the served model's tokenizer: add --model (packaged name, .gguf or "
            "model folder), or use --api chat",
            param_hint="--api",
        )


def build_policy(model: str | None, model_url: str | None, served_model: str | None, api: str, concurrency: int,
                 request_timeout: float, device: str, err: Any) -> Any:
    """The model of the LLM agents: a served one (``--model-url``) or one loaded in process.

    Raises:
        typer.Exit: With code 2 when the model cannot be reached or loaded (the reason printed).
    """
    try:
        if model_url is not None:
            from agents.policies.openai_compat import openai_policy

            policy = openai_policy(model_url, api=api, tokenizer=model, model=served_model,
                                   max_concurrency=concurrency, timeout=request_timeout)
            err.print(f"using {type(policy).__name__} at {policy.url}")
            return policy
        err.print(f"loading model {model or 'SmolLM2-135M-Instruct (packaged)'} ...")
        from agents.trainers.models import load_policy

        policy = load_policy(model, device)
        from agents.devices import describe

        err.print(f"model on {describe(policy.device)}")
        return policy
    except (ValueError, FileNotFoundError) as exc:  # a CheckpointError is a ValueError
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


def custom_retrievers(specs: list[str], options: list[str], task: str, split: str,
                      corpus: Path | None) -> list[Any]:
    """``--retriever`` values, with ``module:Class`` and entry-point names built once with ``--retriever-option``.

    A custom retriever comes back as ``(spec, instance)``; the others as given.

    Raises:
        typer.BadParameter: For options without a custom retriever, or one that cannot be built.
    """
    from searchenv.retrievers.custom import is_custom_spec, load_retriever, parse_options

    custom = [r for r in specs if is_custom_spec(r)]
    try:
        opts = parse_options(options)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--retriever-option") from None
    if opts and not custom:
        raise typer.BadParameter("applies to a retriever given as module:Class or by entry-point name",
                                 param_hint="--retriever-option")
    if not custom:
        return list(specs)
    corpus_path = corpus
    if corpus_path is None and not Path(task).is_file():
        from searchenv.tasks.registry import load_task

        try:
            corpus_path = load_task(task).corpus_path
        except (ValueError, KeyError, FileNotFoundError):
            corpus_path = None
    out: list[Any] = []
    for spec in specs:
        if not is_custom_spec(spec):
            out.append(spec)
            continue
        try:
            out.append((spec, load_retriever(spec, opts, corpus=corpus_path)))
        except (ValueError, TypeError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--retriever") from None
    return out


def eval_command(
    agent: list[str] = typer.Option(
        ..., "--agent", "-a",
        help=f"Agent or pipeline to evaluate (repeatable): {', '.join(_KNOWN)}, or your own as module:Class.",
    ),
    task: str = typer.Option("synthetic-mixed", "--task", "-t", help="Task name or QA JSONL file."),
    split: str | None = typer.Option(None, "--split", help="Split of a named task (default dev)."),
    retriever: list[str] = typer.Option(
        ["bm25"], "--retriever", "-r",
        help="Index kind (bm25, dense), index folder, server URL, module:Class, an entry-point name, or closed-book "
             "(every search finds nothing: the control for what a model answers from its weights) (repeatable)."
    ),
    n: int = typer.Option(100, "--n", min=1, help="Number of questions (the first n of the split)."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write results.json, results.md and transcripts/*.jsonl here."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model for LLM agents: packaged name, .gguf file, model folder or training run folder (default: "
        "SmolLM2-135M-Instruct). With --model-url: the served model's tokenizer.",
    ),
    model_url: str | None = typer.Option(
        None,
        "--model-url",
        help="Run the LLM agents on a model served over an OpenAI-compatible API (vLLM, SGLang, llama.cpp, "
        "TGI, transformers serve, hosted), e.g. http://127.0.0.1:8000/v1. Key: $OPENAI_API_KEY.",
    ),
    served_model: str | None = typer.Option(
        None, "--served-model", help="Model name sent to --model-url (default: the first /v1/models lists)."
    ),
    api: str = typer.Option(
        "auto",
        "--api",
        help="API of --model-url: completions (token-exact contexts; needs --model for the tokenizer), chat, "
        "or auto (completions with --model, chat without).",
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Requests in flight to --model-url."),
    request_timeout: float = typer.Option(
        300.0, "--request-timeout", min=0.001, help="Seconds per request to --model-url, retries included."
    ),
    seed: int = typer.Option(0, "--seed", help="Run seed."),
    corpus: Path | None = typer.Option(None, "--corpus", help="Corpus file (default: the task's own)."),
    protocol: str = typer.Option("search-r1", "--protocol", help="Action protocol."),
    top_k: int = typer.Option(3, "--top-k", min=1, help="Documents per query."),
    max_turns: int = typer.Option(4, "--max-turns", min=1, help="Turn budget per question."),
    reward: str = typer.Option("default", "--reward", help="Reward preset (reported in transcripts)."),
    batch_size: int | None = typer.Option(
        None, "--batch-size", min=1,
        help="Episodes in flight at once (default: as many as fit an in-process model's CUDA memory; 32 elsewhere).",
    ),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", min=1, help="Tokens per LLM turn."),
    refiner: str | None = typer.Option(
        None, "--refiner",
        help="What the agent reads of each hit: sentences or sentences-embedding (default: whole hits).",
    ),
    max_doc_chars: int | None = typer.Option(
        None, "--max-doc-chars", min=1,
        help="Cut each retrieved document's text to this many characters (default: the environment's 1,500); "
        "evaluate a trained model at the length it was trained with.",
    ),
    device: str = typer.Option(
        "auto", "--device",
        help="Where an in-process model runs: auto (CUDA when available), cpu, cuda, cuda:N, mps, xpu.",
    ),
    generation_dtype: str = typer.Option(
        "auto", "--generation-dtype",
        help="What an in-process model generates from: float32 (its weights), bfloat16 or float16 (a copy of the "
        "weights), or auto: bfloat16 on CUDA, and for the searcher also on a CPU with native bfloat16; else float32.",
    ),
    decode: str = typer.Option(
        "auto", "--decode", help="An in-process model's decode loop: auto (static on CUDA), static or dynamic.",
    ),
    cuda_graph: bool | None = typer.Option(
        None, "--cuda-graph/--no-cuda-graph",
        help="Run the static loop's decode steps with fixed shapes, captured in a CUDA graph on CUDA "
        "(default: on CUDA).",
    ),
    retriever_option: list[str] = typer.Option(
        [], "--retriever-option",
        help="key=value for a retriever given as module:Class or by entry-point name (repeatable).",
    ),
    report: bool = typer.Option(
        False, "--report", help="Also write OUT/report.html: one self-contained page of the results and every "
        "episode (searchenv report OUT).",
    ),
    score_infra_errors: bool = typer.Option(
        False, "--score-infra-errors",
        help="Score episodes in which the retriever failed, and exit 0 (default: count them, leave them "
        "out of the scores, exit 4).",
    ),
) -> None:
    """Run agents over the first N questions of a task split and print a comparison table.

    Exit status: 0 done; 2 bad settings or a failed set-up (a retriever that failed on every search
    included, a symbolic link where a file or folder under --out goes); 3 some episodes failed (the
    model server); 4 the retriever failed in some episodes.
    """
    from rich.console import Console

    from agents.evaluation.evaluate import EvalResult, compare, rich_table, run_stem, write_results
    from agents.policies.openai_compat import ModelServerError
    from searchenv.cli import check_task_file, data_warnings_to_stderr
    from searchenv.corpus import CorpusFormatError
    from searchenv.retrievers.base import RetrieverError
    from searchenv.retrievers.kinds import names_kind
    from searchenv.utils.loading import is_module_attr

    unknown = [a for a in agent if a not in _KNOWN and not is_module_attr(a)]
    if unknown:
        raise typer.BadParameter(
            f"unknown agent(s) {', '.join(unknown)}; known: {', '.join(_KNOWN)}, or your own as module:Class",
            param_hint="--agent",
        )
    err = Console(stderr=True)
    task_is_file = check_task_file(task)
    if task_is_file and split is not None:
        raise typer.BadParameter(
            "a QA file is one split; --split applies to named tasks (searchenv tasks lists them)", param_hint="--split"
        )
    named = [r for r in retriever if names_kind(r)]  # built from a corpus, unlike a folder or URL
    if task_is_file and corpus is None and named:
        raise typer.BadParameter(
            f"--retriever {'/'.join(named)} with a QA file needs the "
            "documents to index: add --corpus CORPUS.jsonl (or give an index folder as --retriever)",
            param_hint="--corpus",
        )
    from agents.devices import GenerationSettings, check_device_name

    try:
        check_device_name(device, "--device")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--device") from None
    try:  # checked before anything loads; evaluate() gives the parts that are not auto to an in-process model
        GenerationSettings.from_options(decode=decode, cuda_graph=cuda_graph, generation_dtype=generation_dtype)
    except ValueError as exc:
        flag = "--decode" if str(exc).startswith("decode") else "--generation-dtype"
        raise typer.BadParameter(str(exc), param_hint=flag) from None
    check_model_flags(model, model_url, served_model, api)
    if report and out is None:
        raise typer.BadParameter("the report page is written into the run folder: add --out DIR", param_hint="--report")
    if out is not None:  # before anything runs: nothing is written through a link under --out
        _refuse_links(out, [], err)
    policy: Any = None
    if any(a in _MODEL_AGENTS for a in agent):
        policy = build_policy(model, model_url, served_model, api, concurrency, request_timeout, device, err)

    def progress(r: EvalResult) -> None:
        served = r.config.get("model_usage")
        usage = ""
        if served:
            inexact = served.get("inexact_prompts", 0)
            usage = (f"  [{served['requests']:g} requests, {served['prompt_tokens']:g} prompt + "
                     f"{served['completion_tokens']:g} completion tokens, {served['retries']:g} retries"
                     + (f", {inexact:g} prompts the server re-tokenized differently" if inexact else "") + "]")
        scores = f"EM {r.row['em']:.3f}  F1 {r.row['f1']:.3f}" if r.row["n"] else "no episode finished"
        failed = f", {r.row['failed']} failed" if r.row.get("failed") else ""
        if r.row.get("infra_errors"):
            failed += f", {r.row['infra_errors']} with retriever failures"
        err.print(f"  {r.agent:>9} / {r.retriever:<6} {scores}  ({r.seconds:.1f} s{failed}){usage}",
                  markup=False, highlight=False, soft_wrap=True)
        shares = r.row.get("invalid_share") or {}
        if shares:  # parse telemetry: which malformed turns, as shares of all turns
            listed = ", ".join(f"{code} {share:.1%}" for code, share in shares.items())
            err.print(f"  {'':>9}   invalid turns: {listed}", markup=False, highlight=False, soft_wrap=True)

    def say(line: str) -> None:  # progress per finished batch of an LLM agent's episodes
        err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    retrievers = custom_retrievers(retriever, retriever_option, task, split or "dev", corpus)
    if out is not None:
        _refuse_links(out, [(a, r[0] if isinstance(r, tuple) else str(r)) for r in retrievers for a in agent], err)
    llm = _MODEL_AGENTS | {"searcher"}
    checkpoints = out / "checkpoints" if out is not None else None
    run_key: dict[str, Any] = {}
    if checkpoints is not None:  # the model flags; evaluate() adds the name the server serves
        from agents.evaluation.resume import model_files_fingerprint, public_url

        run_key = {"model": model, "model_files": model_files_fingerprint(model),
                   "model_url": public_url(model_url) if model_url is not None else None,
                   "served_model": served_model, "api": api}

    try:
        with data_warnings_to_stderr():
            results = compare(
                agent,
                retrievers,
                on_result=progress,
                checkpoint_dir=checkpoints,
                checkpoint_settings=run_key,
                log=say,
                log_agents=llm,
                task=task,
                split=split or "dev",
                n=n,
                corpus=corpus,
                policy=policy,
                protocol=protocol,
                top_k=top_k,
                max_turns=max_turns,
                reward=reward,
                batch_size=batch_size,
                seed=seed,
                max_new_tokens=max_new_tokens,
                env_kwargs={k: v for k, v in (("refiner", refiner), ("max_doc_chars", max_doc_chars)) if v} or None,
                device=device,
                generation_dtype=generation_dtype,
                decode=decode,
                cuda_graph=cuda_graph,
                infra_errors="score" if score_infra_errors else "exclude",
            )
    except (ValueError, FileNotFoundError, RetrieverError, ModelServerError) as exc:
        hint = ""
        if task_is_file and isinstance(exc, CorpusFormatError) and str(task) in str(exc):
            hint = (
                "\n  QA files are FlashRAG JSONL (one question object per line); turn HotpotQA, MuSiQue, "
                f"2WikiMultiHopQA or FlashRAG files into one with: searchenv convert {task} --format FORMAT "
                "--out-qa QA.jsonl --out-corpus CORPUS.jsonl"
            )
        err.print(f"error: {exc}{hint}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    Console(file=sys.stdout, width=200).print(
        rich_table(results, title=f"{task} / {results[0].split} / first "
                   f"{results[0].row['n'] + results[0].row['failed']} questions")
    )
    if out is not None:
        try:
            paths = write_results(results, out)
        except ValueError as exc:  # a link put under --out while the run ran
            err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None
        err.print(f"wrote {paths['json']} and {len(results)} transcript file(s) under {out / 'transcripts'}")
        if report:
            from agents.cli.report import write_page

            err.print(f"wrote {write_page(out, None, err)}")
        if checkpoints is not None:
            for r in results:  # complete runs need their saved episodes no more
                if not r.failures:
                    (checkpoints / f"{run_stem(r.agent, r.retriever)}.jsonl").unlink(missing_ok=True)
    failed = [(r, f) for r in results for f in r.failures]
    if failed:
        total = sum(r.row["n"] + r.row["failed"] for r in results if r.failures)
        first_run, first = failed[0]
        where = (f"The finished episodes are saved in {out}; rerun the same command to run only the failed ones"
                 if out is not None else "Rerun with --out DIR to keep finished episodes as they complete (a rerun "
                 "then runs only the rest)")
        hint = ""
        if model_url is not None:
            hint = (f", after giving the server room: a longer --request-timeout (now {request_timeout:g} s) or a "
                    f"lower --concurrency (now {concurrency})")
        err.print(f"error: {len(failed)} of {total} episodes failed ({first_run.agent} / {first_run.retriever} "
                  f"{first['example_id']}: {first['error']}). {where}{hint}.",
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=3)
    infra = [r for r in results if r.row.get("infra_errors")]
    if infra:
        listed = "; ".join(f"{r.agent} / {r.retriever}: {r.row['infra_errors']} of "
                           f"{len(r.episodes)} episodes (first {r.row['infra_error_ids'][0]})" for r in infra)
        what = ("scored as they ran (--score-infra-errors)" if score_infra_errors
                else "left out of the scores; --score-infra-errors scores them")
        err.print(f"{'warning' if score_infra_errors else 'error'}: the retriever failed in some episodes, "
                  f"{what}: {listed}. Their transcripts mark each failed step with infra_error.",
                  markup=False, highlight=False, soft_wrap=True)
        if not score_infra_errors:
            raise typer.Exit(code=4)


def _refuse_links(out: Path, runs: list[tuple[str, str]], err: Any) -> None:
    """Exit with code 2, naming it, if a file or folder ``eval`` writes under ``--out`` is a symbolic link.

    Raises:
        typer.Exit: With code 2 for a link (:func:`agents.evaluation.evaluate.out_links`).
    """
    from agents.evaluation.evaluate import out_links

    try:
        out_links(out, runs)
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


def register(app: typer.Typer) -> None:
    """Add ``eval`` to the ``searchenv`` app."""
    app.command("eval")(eval_command)


def __getattr__(name: str) -> Any:
    """``load_policy``, the one model loader, lives in :mod:`agents.trainers.models` (it imports torch).

    Kept reachable here for code that imported it from the eval command, without importing torch
    when the command is only registered.
    """
    if name == "load_policy":
        from agents.trainers.models import load_policy

        return load_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
