"""Protocols and refiners side by side: what the agent must do, and how much it must read, to answer.

The rule-based agents (``oracle``: gold decomposition; ``heuristic``: question search and a
rule-based reader) on the same held-out questions under each protocol (``search-r1``: whole
hits; ``browse``: snippets, then ``open``; ``arena``: answers that cite documents) and with or
without a refiner between retriever and reasoner (IM-RAG's sentence selection): EM, evidence
recall, searches and opens per question, and what the environment showed per question in
characters and in SmolLM2 tokens. For one question search it also reports retrieval's
answer-in-document rate and characters shown (``evaluate_retrieval``). Rule-based agents need no
model, so the run takes a minute or two.

Usage: python benchmarks/protocols.py [--task synthetic-2hop] [--n 200] [--top-k 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

# (protocol, refiner). The embedding scorer encodes each hit's sentences per search (slow on 2 CPU
# cores); add it with --embedding.
SETTINGS: tuple[tuple[str, str | None], ...] = (
    ("search-r1", None),
    ("search-r1", "sentences"),
    ("browse", None),
    ("browse", "sentences"),
    ("arena", None),
)


def _tokenizer() -> Any:
    from transformers import AutoTokenizer

    from agents.policies.hf import packaged_gguf_path

    path = packaged_gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=4, help="Turn budget under search-r1 and arena.")
    ap.add_argument("--browse-turns", type=int, default=8, help="Turn budget under browse (opens cost turns).")
    ap.add_argument("--embedding", action="store_true", help="also the sentences-embedding refiner")
    args = ap.parse_args()

    from agents.evaluation.evaluate import evaluate
    from searchenv.make import resolve_retriever
    from searchenv.retrieval_quality import evaluate_retrieval
    from searchenv.tasks import load_task

    tokenizer = _tokenizer()
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    task = load_task(args.task)
    examples = list(task.examples("dev"))[: args.n]
    bm25 = resolve_retriever("bm25", task.corpus_path)
    settings = [*SETTINGS, *([("search-r1", "sentences-embedding")] if args.embedding else [])]
    rows = []
    for protocol, refiner in settings:
        turns = args.browse_turns if protocol == "browse" else args.max_turns
        for agent in ("oracle", "heuristic"):
            res = evaluate(agent, task=args.task, split="dev", n=args.n, retriever=bm25, top_k=args.top_k,
                           max_turns=turns, protocol=protocol, reward="arena" if protocol == "arena" else "default",
                           env_kwargs={"refiner": refiner} if refiner else None)
            tokens = [sum(len(tokenizer.encode(m["content"], add_special_tokens=False))
                          for m in e.messages if m["role"] == "tool") for e in res.episodes]
            row: dict[str, Any] = {"agent": agent, "protocol": protocol, "refiner": refiner or "none",
                                   "max_turns": turns, **res.row, "tokens_read": sum(tokens) / len(tokens)}
            if protocol == "arena":
                row["bonus"] = sum(e.steps[-1]["reward_terms"].get("bonus", 0.0) > 0 for e in res.episodes) / len(
                    res.episodes)
            rows.append(row)
    retrieval = []
    for refiner in (None, "sentences"):
        q = evaluate_retrieval(bm25, examples, [args.top_k], refiner=refiner)
        retrieval.append({"refiner": refiner or "none", **q.to_dict()})
    load_after = os.getloadavg()[0]
    k = args.top_k
    lines = [f"Task {args.task}, first {args.n} dev questions, BM25, top_k={k}; turn budget {args.max_turns} "
             f"(browse: {args.browse_turns}, since each open costs a turn); rule-based agents (no model). "
             "Read = what the environment appended per question (documents, pages, error messages), in "
             "characters and in SmolLM2 tokens.", "",
             "| agent | protocol | refiner | EM | evidence recall | searches/q | opens/q | chars read/q "
             "| tokens read/q |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['agent']} | {r['protocol']} | {r['refiner']} | {r['em']:.3f} | "
                     f"{r['evidence_recall']:.3f} | {r['searches']:.2f} | {r['opens']:.2f} | "
                     f"{r['chars_read']:,.0f} | {r['tokens_read']:,.0f} |")
    arena = [r for r in rows if r["protocol"] == "arena"]
    if arena:
        lines += ["", "Under `arena` (reward preset `arena`), share of answers earning the bonus (well-formed, "
                  "correct, citing exactly the gold evidence): "
                  + ", ".join(f"{r['agent']} {r['bonus']:.3f}" for r in arena) + "."]
    lines += ["", f"One search with the question, top {k}:", "",
              f"| refiner | recall@{k} | answer in what is shown@{k} | characters read@{k} |", "|---|---:|---:|---:|"]
    for q in retrieval:
        lines.append(f"| {q['refiner']} | {q[f'recall@{k}']:.3f} | {q[f'answer_in_docs@{k}']:.3f} | "
                     f"{q[f'chars_read@{k}']:,.0f} |")
    lines += ["", f"1-min load average {load_before:.2f} before, {load_after:.2f} after "
                  f"({time.perf_counter() - t0:.0f} s in all).", "",
              f"Command: `python benchmarks/protocols.py {' '.join(sys.argv[1:])}`".rstrip()]
    write_results("protocols", {"task": args.task, "n": args.n, "top_k": k, "rows": rows, "retrieval": retrieval,
                                "load_before": load_before, "load_after": load_after}, "\n".join(lines))


if __name__ == "__main__":
    main()
