"""SFT of SmolLM2-135M on the CPU: seconds per step of 8 demonstrations, by what the update trains.

The question: how cheap can one supervised step of the real policy model be on this machine? Each
arm runs the project's own trainer (``agents.trainers.sft.train_sft``, what ``searchenv train sft``
runs) from a fresh SmolLM2-135M-Instruct on the same oracle demonstrations (synthetic-2hop train, the
packaged searcher's settings: BM25, top 3, 3 turns, 450 characters a document), in one process, one
arm after the other:

- ``full``: every weight (the baseline);
- ``lora``: LoRA adapters (r 16) on every linear layer: no weight gradients, the whole backward pass;
- ``top-N``: ``train_layers=N``, the last N decoder layers' weights (the backward pass stops there),
  every layer run forward at every step (``reuse_frozen=false``);
- ``top-N-reused``: the same, with each demonstration's state at the first trained layer kept from the
  first time it is seen (``reuse_frozen``, the default): from the second epoch on only N layers run;
- ``lora-top-N-reused``: adapters on the last N layers only, states reused.

Few demonstrations (``--demos 16``: two steps an epoch) so that the timed steps, those after
``--skip`` (default 2: the first epoch, which also warms the caches), are all of later epochs. It
reports their median seconds, the trained tokens per second, and the loss on 8 of the demonstrations
before and after the arm's steps (what the steps fitted). The load average is recorded before and after.

    python benchmarks/cpu_sft.py --steps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This folder has a file named like the `agents` package: keep it last on the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import cpu_flags, write_results  # noqa: E402

#: Arm name -> SFTConfig fields that differ from the baseline.
ARMS: dict[str, dict[str, Any]] = {
    "full": {},
    "lora": {"lora": True},
    "top-6": {"train_layers": 6, "reuse_frozen": False},
    "top-6-reused": {"train_layers": 6},
    "top-2-reused": {"train_layers": 2},
    "lora-top-6-reused": {"lora": True, "train_layers": 6},
}
SETTINGS = {"task": "synthetic-2hop", "retriever": "bm25", "top_k": 3, "max_turns": 3, "max_doc_chars": 450}


def write_demos(folder: Path, n: int) -> Path:
    """The oracle's successful transcripts of the first ``n`` train questions, as a JSONL file."""
    from agents.trainers.sft import SFTConfig, oracle_transcripts

    cfg = SFTConfig(output_dir=str(folder / "demos-run"), **SETTINGS)
    records = oracle_transcripts(cfg, n)
    path = folder / "demos.jsonl"
    path.write_text("".join(json.dumps({"messages": r["messages"], "metrics": r["metrics"]}) + "\n"
                            for r in records), encoding="utf-8")
    return path


def learning_rate(arm: dict[str, Any], args: argparse.Namespace) -> float:
    """The arm's rate: LoRA's, the top layers', or all weights'."""
    if arm.get("lora"):
        return float(args.lr_lora)
    return float(args.lr_top if arm.get("train_layers") else args.lr)


def run_arm(name: str, demos: Path, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm: a fresh model, ``args.steps`` SFT steps, timed from the trainer's own metrics."""
    from agents.policies.hf import HFPolicy
    from agents.trainers.metrics import read_metrics
    from agents.trainers.models import pad_token_id
    from agents.trainers.samples import mean_nll
    from agents.trainers.sft import SFTConfig, train_sft

    cfg = SFTConfig(output_dir=str(folder / name), demos=str(demos), steps=args.steps, batch_size=8,
                    micro_batch_size=args.micro_batch_size, progress=False, log_every=0, save_every=0,
                    learning_rate=learning_rate(ARMS[name], args), **SETTINGS, **ARMS[name])
    policy = HFPolicy.smollm2()
    samples, _ = cfg.demonstrations(policy)
    probe = samples[: args.eval_demos]  # demonstrations it trains on: the loss shows what the steps fitted
    before = mean_nll(policy.model, probe, pad_token_id(policy))
    start = time.perf_counter()
    out = train_sft(cfg, policy=policy)
    wall = time.perf_counter() - start
    after = mean_nll(out["policy"].model, probe, pad_token_id(policy))
    recs = read_metrics(cfg.output_dir)
    seconds = [r["seconds"]["training"] for r in recs]
    tokens = [r["policy_tokens"] for r in recs]
    steady = seconds[args.skip :] or seconds
    trainable = sum(p.numel() for p in out["policy"].model.parameters() if p.requires_grad)
    return {"arm": name, "settings": ARMS[name], "learning_rate": cfg.learning_rate, "trainable": trainable,
            "seconds_per_step": statistics.median(steady), "step_seconds": seconds,
            "trained_tokens_per_s": sum(tokens[args.skip :] or tokens) / sum(steady), "wall_seconds": wall,
            "loss_before": before, "loss_after": after, "eval_demos": len(probe)}


def main() -> None:
    """Parse arguments, run every arm, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="SFT steps per arm.")
    parser.add_argument("--skip", type=int, default=2, help="Steps not timed (the first epoch).")
    parser.add_argument("--demos", type=int, default=16, help="Train questions the oracle demonstrates.")
    parser.add_argument("--eval-demos", type=int, default=8, help="Demonstrations the loss is measured on.")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-5, help="Learning rate of the weight arms.")
    parser.add_argument("--lr-top", type=float, default=3e-4, help="Learning rate of the top-layer arms.")
    parser.add_argument("--lr-lora", type=float, default=1e-3, help="Learning rate of the LoRA arms.")
    parser.add_argument("--arm", action="append", choices=sorted(ARMS), help="Only these arms (default: all).")
    args = parser.parse_args()
    import torch

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        demos = write_demos(Path(tmp), args.demos)
        for name in args.arm or list(ARMS):
            rows.append(run_arm(name, demos, Path(tmp), args))
            print(json.dumps(rows[-1]), flush=True)
    load_after = os.getloadavg()
    base = next((r for r in rows if r["arm"] == "full"), rows[0])
    lines = [f"SmolLM2-135M SFT on {torch.get_num_threads()} CPU threads ({', '.join(cpu_flags()) or 'no flags'}), "
             f"8 demonstrations a step, micro-batch {args.micro_batch_size}; load {load_before[0]:.2f} before, "
             f"{load_after[0]:.2f} after.", "",
             "| arm | trainable | s / step | vs full | trained tokens/s | loss before -> after "
             f"({args.steps} steps, {rows[0]['eval_demos']} demos) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['trainable'] / 1e6:.1f}M | {r['seconds_per_step']:.1f} | "
                     f"{base['seconds_per_step'] / r['seconds_per_step']:.2f}x | {r['trained_tokens_per_s']:.0f} | "
                     f"{r['loss_before']:.3f} -> {r['loss_after']:.3f} |")
    write_results("cpu_sft", {"arms": rows, "load_before": load_before, "load_after": load_after,
                              "cpu_flags": cpu_flags(), "threads": torch.get_num_threads(), "args": vars(args)},
                  "\n".join(lines), command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
