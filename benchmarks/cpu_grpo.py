"""GRPO of SmolLM2-135M on the CPU: seconds of one step, by phase, beside the floor this CPU's arithmetic sets.

The question: how long does one RL step of the real policy take on this machine, where do its
seconds go, and how close is that to what the arithmetic allows? It runs the project's own trainer
(``agents.trainers.grpo.train_grpo``, what ``searchenv train grpo`` runs) from the packaged
searcher's cold-start SFT model (``load_searcher(upto="sft")``) on synthetic-2hop train questions
with ``benchmarks/claims.py``'s settings (BM25 top 3, 5 turns, 450 characters a document, 80 new
tokens a turn, the last 6 layers trained, no KL term, one optimizer step a batch), ``--batch``
questions x ``--group`` samples a step.

The floor: a transformer's forward pass costs about 2 multiply-adds per weight per token (the
output head only where logits are needed: each generated token and each trained token), and a
training pass 3 times that on the trained layers. With the step's own token counts (its
transcripts' tokens, its generated and trained tokens) and the float32 matrix-multiply rate
measured in the same process on the model's own shapes, that gives the seconds below which no
implementation on this CPU goes: rollouts at least one forward pass over every token, training a
forward pass over the frozen layers and a training pass over the top ones.

    python benchmarks/cpu_grpo.py --steps 2 --batch 8 --group 8
"""

from __future__ import annotations

import argparse
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

SETTINGS = {"task": "synthetic-2hop", "retriever": "bm25", "top_k": 3, "max_turns": 5, "max_doc_chars": 450,
            "max_new_tokens": 80}


def matmul_gflops(hidden: int, inner: int, rows: int = 2048, repeats: int = 5) -> float:
    """float32 multiply-add rate (GFLOP/s) of a ``rows x hidden`` by ``hidden x inner`` matmul, best of ``repeats``."""
    import torch

    a, b = torch.randn(rows, hidden), torch.randn(hidden, inner)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 4)
    return 2 * rows * hidden * inner / best / 1e9


def weights(model: Any, train_layers: int) -> dict[str, int]:
    """Weights of the decoder layers below the trained ones, of the trained ones, and of the output head."""
    layers = model.model.layers
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    return {"frozen": sum(per_layer[:-train_layers]), "trained": sum(per_layer[-train_layers:]),
            "head": model.lm_head.weight.numel()}


def floor_seconds(rec: dict[str, Any], w: dict[str, int], gflops: float) -> dict[str, float]:
    """The arithmetic's lower bound on a step's rollouts and training, from its own token counts."""
    rolled, tokens = float(rec["rollout_tokens"]), float(rec["sequence_tokens"])  # every episode's; the trained ones'
    generated, trained = float(rec["generated_tokens"]), float(rec["policy_tokens"])
    body = w["frozen"] + w["trained"]
    rollout = 2 * body * rolled + 2 * w["head"] * generated
    training = 2 * w["frozen"] * tokens + 6 * w["trained"] * tokens + 6 * w["head"] * trained
    return {"generation": rollout / gflops / 1e9, "training": training / gflops / 1e9}


def main() -> None:
    """Parse arguments, run the steps, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps (the median is over all of them).")
    parser.add_argument("--batch", type=int, default=8, help="Questions a step.")
    parser.add_argument("--group", type=int, default=8, help="Samples a question.")
    parser.add_argument("--train-layers", type=int, default=6)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--name", default="cpu_grpo")
    args = parser.parse_args()
    import torch

    from agents.baselines.searcher import load_searcher
    from agents.trainers.grpo import GRPOConfig, train_grpo
    from agents.trainers.metrics import read_metrics

    load_before = os.getloadavg()
    policy = load_searcher(upto="sft")
    w = weights(policy.model, args.train_layers)
    config = policy.model.config
    gflops = matmul_gflops(config.hidden_size, config.intermediate_size)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GRPOConfig(output_dir=str(Path(tmp) / "grpo"), steps=args.steps, batch_size=args.batch,
                         group_size=args.group, micro_batch_size=args.micro_batch_size, progress=False, log_every=0,
                         save_every=0, temperature=1.0, kl_coef=0.0, train_layers=args.train_layers,
                         learning_rate=2e-5, **SETTINGS)
        train_grpo(cfg, policy=policy)
        recs = read_metrics(cfg.output_dir)
    load_after = os.getloadavg()

    def median(values: list[float]) -> float:
        return float(statistics.median(values))

    phases = ("generation", "environment", "training", "total")
    seconds = {p: median([float(r["seconds"].get(p, 0.0)) for r in recs]) for p in phases}
    floors = [floor_seconds(r, w, gflops) for r in recs]
    floor = {p: median([f[p] for f in floors]) for p in ("generation", "training")}
    keys = ("rollout_tokens", "sequence_tokens", "generated_tokens", "policy_tokens")
    tokens = {k: median([float(r[k]) for r in recs]) for k in keys}
    lines = [f"SmolLM2-135M GRPO from the packaged SFT model, last {args.train_layers} layers trained, on "
             f"{torch.get_num_threads()} CPU threads ({', '.join(cpu_flags()) or 'no listed flags'}), "
             f"{args.batch} questions x {args.group} samples a step, median of {len(recs)} steps; float32 matmul "
             f"{gflops:.0f} GFLOP/s on the model's shapes; load {load_before[0]:.2f} before, {load_after[0]:.2f} "
             "after.", "",
             "| phase | seconds a step | arithmetic floor | measured / floor |", "|---|---:|---:|---:|"]
    for p in ("generation", "training"):
        lines.append(f"| {'rollouts' if p == 'generation' else p} | {seconds[p]:.1f} | {floor[p]:.1f} | "
                     f"{seconds[p] / floor[p]:.1f} |")
    lines.append(f"| environment | {seconds['environment']:.1f} | | |")
    lines.append(f"| step | {seconds['total']:.1f} | {floor['generation'] + floor['training']:.1f} | "
                 f"{seconds['total'] / (floor['generation'] + floor['training']):.1f} |")
    lines += ["", f"Tokens a step: {tokens['rollout_tokens']:,.0f} in the transcripts, "
                  f"{tokens['generated_tokens']:,.0f} generated, {tokens['sequence_tokens']:,.0f} in the trained "
                  f"transcripts (a group whose samples all scored alike trains nothing), "
                  f"{tokens['policy_tokens']:,.0f} of them the policy's; EM of the steps "
                  + ", ".join(f"{r['em']:.2f}" for r in recs) + "."]
    write_results(args.name, {"steps": recs, "seconds": seconds, "floor": floor, "tokens": tokens, "weights": w,
                              "matmul_gflops": gflops, "load_before": load_before, "load_after": load_after,
                              "cpu_flags": cpu_flags(), "threads": torch.get_num_threads(), "args": vars(args)},
                  "\n".join(lines), command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
