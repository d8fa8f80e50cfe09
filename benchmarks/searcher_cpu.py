"""The packaged searcher: float32 weights against a bfloat16 generation copy, same questions (CPU or GPU).

Runs the packaged searcher (``searchenv eval --agent searcher``'s model) greedily on the first N
questions of a task split with the settings it was trained with (``make demo``'s: BM25, top 3,
3 turns, 450 characters a document, 80 new tokens), once per arm, in one process, one arm after
the other:

- ``float32``: the weights as loaded (adapters merged at load);
- ``bfloat16``: generation from a bfloat16 copy of the same weights (``GenerationSettings(dtype="bfloat16")``),
  which a CPU with AVX512-BF16 or AMX multiplies natively.

It reports seconds per question, generated tokens per second, EM per arm and the paired EM
difference with a 95% bootstrap interval over questions, and writes
``benchmarks/results/<label>.json`` and ``.md``. The load average is recorded before and after.
Everything but the dtype is left to the device (on CUDA: the static loop and a captured step in both
arms, ``agents.devices.fast_generation``), so on a GPU the bfloat16 arm is what ``searchenv eval``
runs by default and the float32 arm what ``--generation-dtype float32`` runs.

    python benchmarks/searcher_cpu.py --n 200
    python benchmarks/searcher_cpu.py --device cuda --n 200 --batch-size 200 --label searcher_gpu_dtype
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

from _common import cpu_flags, paired_difference, write_results  # noqa: E402

ARMS = {"float32": None, "bfloat16": "bfloat16"}


def run_arm(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One arm: load the searcher, run the questions, time it."""
    from agents.baselines.llm import LLMAgent
    from agents.baselines.searcher import load_searcher
    from agents.devices import GenerationSettings
    from agents.evaluation.evaluate import evaluate

    policy = load_searcher(device=args.device)
    policy.generation = GenerationSettings(dtype=ARMS[name] or "float32")
    agent = LLMAgent("searcher", policy, max_new_tokens=args.max_new_tokens, temperature=0.0)
    start = time.perf_counter()
    result = evaluate(agent, task=args.task, split=args.split, retriever="bm25", n=args.n, top_k=3,
                      max_turns=3, max_new_tokens=args.max_new_tokens, env_kwargs={"max_doc_chars": 450},
                      batch_size=args.batch_size, seed=0)
    seconds = time.perf_counter() - start
    tokens = sum(int(e.metrics.get("generated_tokens", 0) or 0) for e in result.episodes)
    per_question = {e.example_id: {"em": float(e.metrics["em"])} for e in result.episodes}
    return {"seconds": seconds, "seconds_per_question": seconds / len(result.episodes), "em": result.row["em"],
            "generated_tokens": tokens, "episodes": len(result.episodes), "per_question": per_question}


def main(argv: list[str] | None = None) -> int:
    """Run both arms and write the results."""
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32, help="episodes in flight (searchenv eval's default)")
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--label", default="searcher_cpu", help="name of the result files")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    arms = {name: run_arm(name, args) for name in ARMS}
    load_after = os.getloadavg()
    diff = paired_difference(arms["bfloat16"], arms["float32"], "em")
    from agents.devices import describe, fast_generation, resolve_device

    device = resolve_device(args.device)
    where = "the CPU" if device.type == "cpu" else describe(device)
    path = fast_generation(device)
    graph = "on" if path.fixed_shape_step else "off"
    speedup = arms["float32"]["seconds"] / arms["bfloat16"]["seconds"]
    rows = []
    for name, arm in arms.items():
        rate = arm["generated_tokens"] / arm["seconds"] if arm["seconds"] > 0 else 0.0
        rows.append(f"| {name} | {arm['em']:.3f} | {arm['seconds_per_question']:.2f} | {rate:,.0f} | "
                    f"{arm['seconds']:.0f} |")
    table = "\n".join([
        f"# The packaged searcher on {where}: float32 vs a bfloat16 generation copy ({args.task} {args.split}, "
        f"first {args.n} questions)",
        "",
        "| generation weights | EM | s / question | generated tokens / s | seconds |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"bfloat16 - float32 EM: **{diff['mean']:+.3f}**, 95% bootstrap interval [{diff['ci_low']:+.3f}, "
        f"{diff['ci_high']:+.3f}] over {diff['n']} questions (bfloat16 right where float32 was wrong on "
        f"{diff['a_better']}, the reverse on {diff['b_better']}). Speed-up {speedup:.2f}x.",
        "",
        f"Greedy, BM25, top 3, 3 turns, 450 characters a document, {args.max_new_tokens} new tokens, "
        f"{args.batch_size} episodes in flight, {path.decode} decode loop (graph {graph}), "
        f"{args.threads} torch threads; CPU flags {', '.join(cpu_flags())}; "
        f"torch {torch.__version__}. Load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.",
    ])
    data = {"settings": {**vars(args), "device": describe(device), "decode": path.decode,
                         "cuda_graph": path.fixed_shape_step, "cpu_flags": cpu_flags(), "torch": torch.__version__},
            "load_average": {"before": load_before, "after": load_after},
            "arms": arms, "bfloat16_minus_float32_em": diff, "speedup": speedup}
    command = "python benchmarks/searcher_cpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_results(args.label, data, table, command=command.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
