"""GRPO of SmolLM2-135M on the CPU: seconds per step of 8 questions x 8 samples, by phase and by what trains.

The question: can one RL step of the real policy model run on this machine, and where do its
seconds go? Each arm runs the project's own trainer (``agents.trainers.grpo.train_grpo``, what
``searchenv train grpo`` runs) from the packaged searcher's cold-start SFT model
(``load_searcher(upto="sft")``) on synthetic-2hop train questions with the searcher's settings (BM25,
top 3, 3 turns, 450 characters a document, 80 new tokens a turn), in one process, one arm after the other:

- ``lora``: LoRA adapters (r 16) on every linear layer;
- ``lora-top-6``: adapters on the last 6 layers only (``train_layers=6``);
- ``top-6``: the last 6 layers' weights.

It reports the median seconds per step (rollouts, environment, training) over the steps after the
first, and the reward and EM of the steps. The load average is recorded before and after.

    python benchmarks/cpu_grpo.py --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# This folder has a file named like the `agents` package: keep it last on the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import cpu_flags, write_results  # noqa: E402

ARMS: dict[str, dict[str, Any]] = {
    "lora": {"lora": True},
    "lora-top-6": {"lora": True, "train_layers": 6},
    "top-6": {"train_layers": 6, "learning_rate": 1e-5},
}
SETTINGS = {"task": "synthetic-2hop", "retriever": "bm25", "top_k": 3, "max_turns": 3, "max_doc_chars": 450,
            "max_new_tokens": 80}


def run_arm(name: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm: the SFT model, ``args.steps`` GRPO steps, timed from the trainer's own metrics."""
    from agents.baselines.searcher import load_searcher
    from agents.trainers.grpo import GRPOConfig, train_grpo
    from agents.trainers.metrics import read_metrics

    cfg = GRPOConfig(output_dir=str(folder / name), steps=args.steps, batch_size=8, group_size=8,
                     micro_batch_size=args.micro_batch_size, progress=False, log_every=0, save_every=0,
                     temperature=1.0, **SETTINGS, **ARMS[name])
    train_grpo(cfg, policy=load_searcher(upto="sft"))
    recs = read_metrics(cfg.output_dir)
    steady = recs[1:] or recs

    def median(phase: str) -> float:
        return statistics.median(float(r["seconds"].get(phase, 0.0)) for r in steady)

    return {"arm": name, "settings": ARMS[name], "seconds_per_step": median("total"),
            "seconds": {p: median(p) for p in ("generation", "environment", "training")},
            "step_seconds": [r["seconds"]["total"] for r in recs], "reward": [r["reward_mean"] for r in recs],
            "em": [r["em"] for r in recs], "generated_tokens": [r.get("generated_tokens") for r in recs],
            "train_tokens_per_s": [r.get("train_tokens_per_s") for r in recs]}


def main() -> None:
    """Parse arguments, run every arm, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per arm (the first is not timed).")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--arm", action="append", choices=sorted(ARMS), help="Only these arms (default: all).")
    args = parser.parse_args()
    import torch

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.arm or list(ARMS):
            rows.append(run_arm(name, Path(tmp), args))
            print(json.dumps(rows[-1]), flush=True)
    load_after = os.getloadavg()
    lines = [f"SmolLM2-135M GRPO from the packaged SFT model on {torch.get_num_threads()} CPU threads "
             f"({', '.join(cpu_flags()) or 'no flags'}), 8 questions x 8 samples a step, micro-batch "
             f"{args.micro_batch_size}; load {load_before[0]:.2f} before, {load_after[0]:.2f} after.", "",
             "| arm | s / step | rollouts | environment | training | EM of the steps |", "|---|---|---|---|---|---|"]
    for r in rows:
        s = r["seconds"]
        lines.append(f"| {r['arm']} | {r['seconds_per_step']:.1f} | {s['generation']:.1f} | {s['environment']:.1f} | "
                     f"{s['training']:.1f} | {', '.join(f'{e:.2f}' for e in r['em'])} |")
    write_results("cpu_grpo", {"arms": rows, "load_before": load_before, "load_after": load_after,
                               "cpu_flags": cpu_flags(), "threads": torch.get_num_threads(), "args": vars(args)},
                  "\n".join(lines), command=f"python benchmarks/cpu_grpo.py --steps {args.steps}")


if __name__ == "__main__":
    main()
