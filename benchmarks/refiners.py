"""What does a refiner between retriever and reasoner (IM-RAG's sentence selection) change?

The rule-based agents (``oracle``: gold decomposition; ``heuristic``: question search and a
rule-based reader) on the same held-out questions, with whole hits and through each refiner:
EM, evidence recall, searches, and the characters the environment showed per question; plus,
for one question search, retrieval's answer-in-document rate and characters read
(``evaluate_retrieval``). Rule-based agents need no model, so the run takes a minute or two.

Usage: python benchmarks/refiners.py [--task synthetic-2hop] [--n 200] [--top-k 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

# The embedding scorer encodes each hit's sentences per search (slow on 2 CPU cores); add it with
# --embedding.
REFINERS = (None, "sentences")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--embedding", action="store_true", help="also the sentences-embedding refiner")
    args = ap.parse_args()

    from agents.evaluate import evaluate
    from searchenv.env import resolve_retriever
    from searchenv.retrievers.quality import evaluate_retrieval
    from searchenv.tasks.base import load_task

    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    task = load_task(args.task)
    examples = list(task.examples("dev"))[: args.n]
    bm25 = resolve_retriever("bm25", task.corpus_path)
    rows, retrieval = [], []
    for refiner in (*REFINERS, *(["sentences-embedding"] if args.embedding else [])):
        for agent in ("oracle", "heuristic"):
            res = evaluate(agent, task=args.task, split="dev", n=args.n, retriever=bm25, top_k=args.top_k,
                           max_turns=args.max_turns, env_kwargs={"refiner": refiner} if refiner else None)
            rows.append({"agent": agent, "refiner": refiner or "none", **res.row})
        q = evaluate_retrieval(bm25, examples, [args.top_k], refiner=refiner)
        retrieval.append({"refiner": refiner or "none", **q.to_dict()})
    load_after = os.getloadavg()[0]
    k = args.top_k
    lines = [f"Task {args.task}, first {args.n} dev questions, BM25, top_k={k}, max_turns={args.max_turns}; "
             "rule-based agents (no model).", "",
             "| agent | refiner | EM | F1 | evidence recall | searches/q | characters read/q |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['agent']} | {r['refiner']} | {r['em']:.3f} | {r['f1']:.3f} | "
                     f"{r['evidence_recall']:.3f} | {r['searches']:.2f} | {r['chars_read']:,.0f} |")
    lines += ["", f"One search with the question, top {k}:", "",
              f"| refiner | recall@{k} | answer in what is shown@{k} | characters read@{k} |", "|---|---:|---:|---:|"]
    for q in retrieval:
        lines.append(f"| {q['refiner']} | {q[f'recall@{k}']:.3f} | {q[f'answer_in_docs@{k}']:.3f} | "
                     f"{q[f'chars_read@{k}']:,.0f} |")
    lines += ["", f"1-min load average {load_before:.2f} before, {load_after:.2f} after "
                  f"({time.perf_counter() - t0:.0f} s in all).", "",
              f"Command: `python benchmarks/refiners.py {' '.join(sys.argv[1:])}`".rstrip()]
    write_results("refiners", {"task": args.task, "n": args.n, "top_k": k, "rows": rows, "retrieval": retrieval,
                               "load_before": load_before, "load_after": load_after}, "\n".join(lines))


if __name__ == "__main__":
    main()
