"""One mixed-task policy trained on the CPU, against the heuristic on every synthetic task.

The question: does SFT on two CPU cores make one policy that beats the rule-based heuristic on each
kind of question? It starts from the packaged searcher (SmolLM2-135M-Instruct with its adapters,
trained on 2-hop questions), fine-tunes the last ``--train-layers`` layers (their frozen states
reused: ``agents.trainers.frozen``) on the oracle's demonstrations of train questions (``--demos`` of
each kind: 1-, 2-, 3-, 4-hop and comparison, from each task's train split, so that the rare kinds are
not starved as they are in synthetic-mixed's own mix) for ``--minutes`` minutes (``max_minutes``: the
cosine schedule ends with the time), then evaluates the trained policy and the heuristic greedily on
the first ``--n`` test questions of each task (1-, 2-, 3-, 4-hop, comparison, mixed), with a paired
95% bootstrap interval per task.

The run folder (``--run``) keeps the SFT checkpoint and the finished evaluation episodes: run again
with the same arguments and an interrupted run continues from them (the time already spent counts),
a finished one goes straight to the evaluation, which continues from its saved episodes. The load
average is recorded before and after.

    python benchmarks/cpu_mixed.py --minutes 25 --n 100

``--start`` takes another model folder, ``--device cuda`` runs it on a GPU (``benchmarks/gpu/run.sh``'s
``mixed`` step), ``--name`` and ``--results`` put the results elsewhere (its smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# This folder has a file named like the `agents` package: keep it last on the import path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import cpu_flags, paired_difference, write_results  # noqa: E402

KINDS = ("synthetic-1hop", "synthetic-2hop", "synthetic-3hop", "synthetic-4hop", "synthetic-comparison")
TASKS = ("synthetic-1hop", "synthetic-2hop", "synthetic-3hop", "synthetic-4hop", "synthetic-comparison",
         "synthetic-mixed")
SETTINGS: dict[str, Any] = {"retriever": "bm25", "top_k": 3, "max_turns": 5, "max_doc_chars": 450}


def load_start(args: argparse.Namespace) -> Any:
    """The model SFT starts from: the packaged searcher, or an HF model folder (``--start``)."""
    from agents.devices import resolve_device

    if args.start == "searcher":
        from agents.baselines.searcher import load_searcher

        return load_searcher(device=resolve_device(args.device))
    from agents.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(args.start, device=resolve_device(args.device))


def train(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """SFT from the packaged searcher (resumed when the run folder holds a checkpoint)."""
    from agents.trainers.metrics import read_metrics
    from agents.trainers.sft import SFTConfig, oracle_transcripts, train_sft

    run = Path(args.run)
    demos = run.parent / f"{run.name}-demos.jsonl"
    settings = {**SETTINGS, "task": "synthetic-mixed"}
    if not demos.is_file():
        records = [r for kind in KINDS for r in
                   oracle_transcripts(SFTConfig(output_dir=str(run), **{**settings, "task": kind}), args.demos,
                                              plan=args.oracle == "oracle-plan")]
        tmp = demos.with_name(demos.name + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text("".join(json.dumps({"messages": r["messages"], "metrics": r["metrics"]}) + "\n"
                               for r in records), encoding="utf-8")
        tmp.replace(demos)
    cfg = SFTConfig(output_dir=str(run), demos=str(demos), steps=args.max_steps, batch_size=8, micro_batch_size=4,
                    train_layers=args.train_layers or None, learning_rate=args.lr, lr_schedule="cosine", warmup_steps=5,
                    max_minutes=args.minutes, save_every=10, progress=False, log_every=10, device=args.device,
                    **settings)
    resume = (run / "checkpoint.pt").is_file()
    out = train_sft(cfg, policy=load_start(args), resume=resume)
    recs = read_metrics(run)
    summary = {"steps": out["step"], "minutes": sum(r["seconds"]["total"] for r in recs) / 60,
               "loss_first": recs[0]["loss"], "loss_last": recs[-1]["loss"], "demos_kept": recs[-1]["demos_kept"],
               "config": cfg.to_dict()}
    policy = out["policy"]
    policy.model.eval()
    return policy, summary


def score(agent: Any, task: str, args: argparse.Namespace, retriever: str = "bm25") -> dict[str, Any]:
    """Greedy evaluation of one agent on the first ``args.n`` test questions of ``task``.

    ``retriever="closed-book"``: the closed-book control (every search finds nothing).
    """
    from agents.evaluation.evaluate import evaluate

    start = time.perf_counter()
    result = evaluate(agent, task=task, split="test", n=args.n, top_k=SETTINGS["top_k"], retriever=retriever,
                      max_turns=SETTINGS["max_turns"], max_new_tokens=80,
                      env_kwargs={"max_doc_chars": SETTINGS["max_doc_chars"]}, seed=0,
                      checkpoint_dir=Path(args.run) / "eval" / task,
                      checkpoint_settings={"run": str(Path(args.run).resolve()),
                                           "args": {k: getattr(args, k) for k in (
                                               "run", "minutes", "max_steps", "demos", "oracle", "train_layers", "lr",
                                               "n")},
                                           **({"start": args.start} if args.start != "searcher" else {})})
    seconds = time.perf_counter() - start
    resumed = result.config.get("resumed", 0) or 0
    fresh = len(result.episodes) - resumed
    return {"em": result.row["em"], "seconds_per_question": seconds / fresh if fresh else None,
            "per_question": {e.example_id: {"em": float(e.metrics["em"])} for e in result.episodes}}


def _seconds(value: float | None) -> str:
    """Seconds a question, or a dash when every episode came from the saved ones."""
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    """Train (or resume), evaluate on every task, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/cpu-mixed", help="SFT run folder (resumed when it holds one).")
    parser.add_argument("--minutes", type=float, default=25.0, help="SFT time budget (max_minutes).")
    parser.add_argument("--max-steps", type=int, default=1000, help="SFT steps at most (the budget ends it first).")
    parser.add_argument("--demos", type=int, default=100,
                        help="Train questions the oracle demonstrates, of each kind (1- to 4-hop, comparison).")
    parser.add_argument("--oracle", default="oracle", choices=("oracle", "oracle-plan"),
                        help="The demonstrating agent: oracle-plan writes the chain of sub-questions first.")
    parser.add_argument("--train-layers", type=int, default=6, help="Layers from the top that train; 0: all.")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--n", type=int, default=100, help="Test questions per task.")
    parser.add_argument("--start", default="searcher", help="searcher (the packaged one) or an HF model folder.")
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is one), cpu or cuda.")
    parser.add_argument("--name", default="cpu_mixed", help="Results name: <results>/<name>.json and .md.")
    parser.add_argument("--results", type=Path, default=None, help="Results folder (default benchmarks/results).")
    args = parser.parse_args()
    import torch

    from agents.baselines.llm import LLMAgent

    load_before = os.getloadavg()
    policy, summary = train(args)
    trained = LLMAgent("cpu-mixed", policy, max_new_tokens=80, temperature=0.0)
    rows = []
    for task in TASKS:
        mine, rules = score(trained, task, args), score("heuristic", task, args)
        diff = paired_difference(mine, rules, "em")
        rows.append({"task": task, "trained": mine, "heuristic": rules, "difference": diff})
        print(json.dumps({"task": task, "trained": mine["em"], "heuristic": rules["em"], **diff}), flush=True)
    closed = score(trained, "synthetic-mixed", args, retriever="closed-book")
    print(json.dumps({"closed_book_em": closed["em"]}), flush=True)
    load_after = os.getloadavg()
    start = "The packaged searcher" if args.start == "searcher" else f"`{args.start}`"
    lines = [f"{start} fine-tuned on `{args.oracle}` demonstrations of every kind of question on "
             f"{torch.get_num_threads()} CPU threads ({', '.join(cpu_flags()) or 'no flags'}), {args.demos} "
             f"demonstrations of each kind: {f'last {args.train_layers}' if args.train_layers else 'all'} "
             f"layers, {summary['steps']} steps of 8 in {summary['minutes']:.1f} min, loss "
             f"{summary['loss_first']:.3f} -> {summary['loss_last']:.3f}; greedy, BM25 top 3, 5 turns, 450 "
             f"characters a document, first {args.n} test questions of each task; load {load_before[0]:.2f} "
             f"before, {load_after[0]:.2f} after.", "",
             "| task | trained EM | heuristic EM | difference [95% interval] | s / question (trained) |",
             "|---|---:|---:|---|---:|"]
    for r in rows:
        d = r["difference"]
        lines.append(f"| {r['task']} | {r['trained']['em']:.3f} | {r['heuristic']['em']:.3f} | "
                     f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] | "
                     f"{_seconds(r['trained']['seconds_per_question'])} |")
    lines += ["", f"Closed-book control (the trained policy, its own prompt, every search finding nothing) on "
                  f"synthetic-mixed: EM {closed['em']:.3f}. A quarter of synthetic-mixed are comparisons between "
                  "two names in the question, so guessing one of them earns up to about 0.12."]
    write_results(args.name, {"training": summary, "tasks": rows, "closed_book": closed, "load_before": load_before,
                                "load_after": load_after, "cpu_flags": cpu_flags(),
                                 "args": json.loads(json.dumps(vars(args), default=str))},
                  "\n".join(lines), command=" ".join(["python", *sys.argv]),
                  **({"folder": args.results} if args.results else {}))


if __name__ == "__main__":
    main()
