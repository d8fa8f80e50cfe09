"""How good are the reference agents? The comparison table on a synthetic task, per retriever.

Runs every reference agent (oracle, random, direct, rag, iterative, llm with SmolLM2-135M-Instruct)
through SearchQAEnv on the first N questions of a task split, with BM25 and dense retrieval, and
writes benchmarks/results/reference_agents.json and .md. ``direct`` never searches, so it runs once
(retriever column ``-``). The oracle row is the upper bound; every row also reports its EM as a
fraction of the oracle's EM with the same retriever (the same-process baseline).

    nice -n 10 python benchmarks/reference_agents.py --n 200 --task synthetic-2hop --retrievers bm25,dense
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

# This file is named like the `agents` package: keep its folder off the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from agents.evaluation.evaluate import COLUMNS, EvalResult, evaluate  # noqa: E402

RESULTS = Path(__file__).parent / "results"
LLM = ("direct", "rag", "iterative", "llm")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the results."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--n-llm", type=int, default=None, help="questions for the LLM agents (default: --n)")
    ap.add_argument("--append", action="store_true",
                    help="keep rows of other agent/retriever pairs in reference_agents.json")
    ap.add_argument("--merge", type=Path, action="append", default=[],
                    help="also keep the rows of this reference_agents.json")
    ap.add_argument("--retrievers", default="bm25,dense", help="comma-separated")
    ap.add_argument(
        "--agents", default="oracle,heuristic,searcher,random,direct,rag,iterative,llm", help="comma-separated"
    )
    ap.add_argument("--model", default=None, help="model for the LLM agents (default: packaged SmolLM2)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=50, help="episodes in flight (one generate per round)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for reference_agents.json / reference_agents.md")
    ap.add_argument("--transcripts", type=Path, default=None, help="also write all transcripts here")
    args = ap.parse_args(argv)

    agents = [a for a in args.agents.split(",") if a]
    retrievers = [r for r in args.retrievers.split(",") if r]
    notes: list[str] = []
    usable = []
    for name in retrievers:
        try:
            from searchenv.retrievers import retriever_for_corpus
            from searchenv.tasks import load_task

            t0 = time.perf_counter()
            retriever_for_corpus(name, load_task(args.task).corpus_path)  # build/load the index once
            print(f"retriever {name}: ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            usable.append(name)
        except (ImportError, ValueError, OSError, RuntimeError) as exc:
            notes.append(f"retriever {name!r} skipped: {exc}")
            print(notes[-1], file=sys.stderr)

    policy = None
    load_s = 0.0
    if any(a in LLM for a in agents):
        from agents.trainers.models import load_policy

        t0 = time.perf_counter()
        policy = load_policy(args.model)
        load_s = time.perf_counter() - t0

    common = {
        "task": args.task,
        "split": args.split,
        "n": args.n,
        "policy": policy,
        "max_new_tokens": args.max_new_tokens,
        "max_turns": args.max_turns,
        "batch_size": args.batch_size,
        "seed": args.seed,
    }
    n_llm = args.n_llm or args.n
    try:
        import torch

        threads = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        threads = None
    command = "nice -n 10 python benchmarks/reference_agents.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {
        "command": command.strip(),
        "task": args.task,
        "split": args.split,
        "n": args.n,
        "n_llm": n_llm,
        "model": args.model or "SmolLM2-135M-Instruct (packaged GGUF, float32)",
        "model_load_seconds": load_s,
        "machine": {"cpus": os.cpu_count(), "torch_threads": threads, "platform": platform.platform()},
        "notes": notes,
    }
    kept: list[dict] = []
    json_path = args.out / "reference_agents.json"
    if args.append and json_path.is_file():
        old = json.loads(json_path.read_text())
        kept = old.get("rows", [])
        meta["earlier_commands"] = [*old.get("earlier_commands", []), old.get("command")]
        meta["notes"] = [*old.get("notes", []), *notes]
    for extra in args.merge:
        other = json.loads(extra.read_text())
        kept = [*kept, *other.get("rows", [])]
        meta["earlier_commands"] = [*meta.get("earlier_commands", []), other.get("command")]
        meta["notes"] = [*meta["notes"], *other.get("notes", [])]
    results: list[EvalResult] = []
    md = ""
    for ri, ret in enumerate(usable):
        for agent in agents:
            if agent == "direct" and ri > 0:
                continue  # never searches: one run is enough
            n = n_llm if agent in LLM else args.n
            r = evaluate(agent, retriever=ret, **{**common, "n": n})
            if agent == "direct":
                r.retriever = "-"
            results.append(r)
            print(
                f"{agent:>9} / {r.retriever:<5} n {n} EM {r.row['em']:.3f} F1 {r.row['f1']:.3f} "
                f"searches {r.row['searches']:.2f} gen tok {r.row['gen_tokens']:.1f} ({r.seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
            md = _write(args, meta, kept, results)
    if not results:
        md = _write(args, meta, kept, results)
    if args.transcripts is not None:
        from agents.evaluation.evaluate import write_results

        write_results(results, args.transcripts)
    print(md)
    return 0


def _write(args: argparse.Namespace, meta: dict, kept: list[dict], results: list[EvalResult]) -> str:
    """Write reference_agents.json and .md with the rows so far (kept rows first, replaced by new ones)."""
    by_pair: dict[tuple[str, str], dict] = {}
    for row in [*kept, *(r.summary() for r in results)]:  # later rows replace earlier ones
        by_pair.pop((row["agent"], row["retriever"]), None)
        by_pair[(row["agent"], row["retriever"])] = row
    order = {"bm25": 0, "-": 0}
    rows = sorted(by_pair.values(), key=lambda r: (order.get(r["retriever"], 1), r["retriever"]))
    oracle_em = {r["retriever"]: r["em"] for r in rows if r["agent"] == "oracle"}
    first = next(iter(oracle_em.values()), None)
    for row in rows:
        base = oracle_em.get(row["retriever"], first)
        row["em_vs_oracle"] = row["em"] / base if base else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reference_agents.json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    md = (
        f"# Reference agents on {meta['task']} {meta['split']}\n\n"
        f"Command: `{meta['command']}`"
        + "".join(f"  \nEarlier: `{c}`" for c in meta.get("earlier_commands", []) if c)
        + f"\n\nModel for direct/rag/iterative/llm: {meta['model']}, greedy, "
        f"max {args.max_new_tokens} new tokens per turn; protocol search-r1, top-3 documents, "
        f"max {args.max_turns} turns. Scripted agents on the first {meta['n']} questions, LLM agents on "
        f"the first {meta['n_llm']} (column n). Machine: {meta['machine']['cpus']} CPU cores shared with "
        f"other jobs, torch threads {meta['machine']['torch_threads']}; s/q is wall time under that load.\n\n"
        + markdown_table_rows(rows)
        + ("\nNotes:\n\n" + "\n".join(f"- {x}" for x in meta["notes"]) + "\n" if meta["notes"] else "")
    )
    (args.out / "reference_agents.md").write_text(md)
    return md


def markdown_table_rows(rows: list[dict]) -> str:
    """The comparison table from JSON rows, with EM relative to the oracle (same retriever)."""
    head = ["Agent", "Retriever", "n"] + [title for _, title, _ in COLUMNS] + ["EM/oracle"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [r["agent"], r["retriever"], str(r["n"])]
        cells += ["-" if r.get(k) is None else f.format(r[k]) for k, _, f in COLUMNS]
        cells.append("-" if r.get("em_vs_oracle") is None else f"{r['em_vs_oracle']:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
