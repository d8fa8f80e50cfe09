"""MMOA-RAG's comparison, measured: does training the roles jointly beat training any single one?

Chen et al. (2025) report that MAPPO over every role of the RAG pipeline (query rewriter, document
selector, answer generator; one LLM, role prompts, a shared F1 reward) beats optimising any single
module. Here, on the held-out dev questions of a multi-hop task (default ``synthetic-2hop``), with
SmolLM2-135M-Instruct playing every role (the ``mmoa-llm`` pipeline, greedy):

- ``baselines``: the rule-based ``mmoa-heuristic`` pipeline (the strongest non-learned baseline,
  beside every learned row) and ``mmoa-oracle`` (gold decomposition and documents: the upper bound);
- ``base``: the base model in every role, untrained;
- ``sft``: the SFT warm start on ``mmoa-oracle`` demonstrations (``agents.trainers.mappo_sft``);
- ``mappo_all``: MAPPO from the warm start, every role trained (the paper's method);
- ``mappo_rewriter`` / ``mappo_selector`` / ``mappo_generator``: MAPPO from the same warm start for
  the same steps, batch and seed, one role trained and the others acting frozen (``train_roles``).

Every policy answers the same dev questions, so differences are paired: the report gives each F1
and EM difference with a 95% bootstrap interval over questions. Each phase is cached as JSON in
``--out`` and its training run checkpoints every ``--save-every`` steps (a killed phase resumes), so
a run can be continued or its tables rebuilt with ``--phases none``. The load average is recorded
before and after. Writes ``benchmarks/results/<name>.json`` and ``.md``.

The CPU run (``benchmarks/results/mmoa_rag.md``): the baselines and the warm start, then the MAPPO
arms in single-threaded processes, two at a time (on 2 cores shared with other work, one
2-thread process ran several times slower than two 1-thread ones), then the report::

    nice -n 10 python benchmarks/mmoa_rag.py --threads 2 --phases baselines,sft
    nice -n 10 python benchmarks/mmoa_rag.py --threads 1 --phases mappo_all        # and mappo_rewriter, ...
    python benchmarks/mmoa_rag.py --phases none

A smoke run (a few minutes)::

    python benchmarks/mmoa_rag.py --n-dev 4 --sft-demos 8 --sft-steps 1 --mappo-steps 1 --mappo-batch 2 \
        --mappo-samples 1 --out /tmp/mmoa-smoke --name mmoa_rag_smoke

The GPU run is ``WHAT=mmoa`` of ``benchmarks/gpu/run.sh`` (larger scale; see benchmarks/gpu/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Python puts this folder first on sys.path; keep it last so a script here can never shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import RESULTS, machine, paired_difference  # noqa: E402

ROLES = ("rewriter", "selector", "generator")
MAPPO_PHASES = ("mappo_all", *(f"mappo_{r}" for r in ROLES))
PHASES = ("baselines", "base", "sft", *MAPPO_PHASES)
DEFAULT_PHASES = ("baselines", "sft", *MAPPO_PHASES)  # ``base`` (the untrained model) on request
LABELS = {
    "baseline:mmoa-oracle": "mmoa-oracle: gold sub-questions and documents (upper bound, not a policy)",
    "baseline:mmoa-heuristic": "mmoa-heuristic: rules in every role (the non-learned pipeline)",
    "baseline:heuristic": "heuristic: the single-agent rule-based searcher, several search turns (not a pipeline)",
    "base": "base model in every role",
    "sft": "SFT warm start (oracle pipeline demonstrations)",
    "mappo_all": "SFT + MAPPO, every role trained (joint)",
    "mappo_rewriter": "SFT + MAPPO, rewriter only (others frozen)",
    "mappo_selector": "SFT + MAPPO, selector only (others frozen)",
    "mappo_generator": "SFT + MAPPO, generator only (others frozen)",
}
HEUR = "baseline:mmoa-heuristic"
COMPARISONS = (
    *((k, HEUR, f"{LABELS[k].split(' (')[0]} vs heuristic") for k in ("base", "sft", *MAPPO_PHASES)),
    ("sft", "base", "SFT vs base"),
    *((k, "sft", f"{k} vs SFT") for k in MAPPO_PHASES),
    *(("mappo_all", f"mappo_{r}", f"joint vs {r} only") for r in ROLES),
    ("mappo_all", "baseline:heuristic", "joint vs the single-agent heuristic"),
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="synthetic-2hop", help="Named task (train split for training, dev for eval).")
    ap.add_argument("--n-dev", type=int, default=40, help="Held-out dev questions per evaluation.")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=3, help="Turn budget of the single-agent heuristic row.")
    ap.add_argument("--max-doc-chars", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=32, help="Tokens each role generates at most.")
    ap.add_argument("--sft-demos", type=int, default=64, help="Oracle pipeline demonstrations (train questions).")
    ap.add_argument("--sft-steps", type=int, default=10)
    ap.add_argument("--sft-batch", type=int, default=8, help="Role samples per SFT step.")
    ap.add_argument("--sft-lr", type=float, default=1e-4)
    ap.add_argument("--mappo-steps", type=int, default=3, help="MAPPO steps of each arm (the same for every arm).")
    ap.add_argument("--mappo-batch", type=int, default=2, help="Questions per MAPPO step.")
    ap.add_argument("--mappo-samples", type=int, default=2, help="Episodes sampled per question.")
    ap.add_argument("--mappo-epochs", type=int, default=1, help="Optimisation passes over each step's episodes.")
    ap.add_argument("--mappo-minibatches", type=int, default=1, help="Optimizer steps per pass.")
    ap.add_argument("--mappo-lr", type=float, default=2e-5)
    ap.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature of MAPPO rollouts.")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                    help="Train under bfloat16 autocast.")
    ap.add_argument("--threads", type=int, default=2, help="torch threads.")
    ap.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N.")
    ap.add_argument("--phases", default=",".join(DEFAULT_PHASES), help=f"Comma list of {', '.join(PHASES)} (or none).")
    ap.add_argument("--save-every", type=int, default=1, help="Checkpoint every N steps (a killed phase resumes).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/mmoa_rag"))
    ap.add_argument("--name", default="mmoa_rag", help="Result file stem in benchmarks/results.")
    ap.add_argument("--note", default="", help="A line added to the report (how the phases were run).")
    args = ap.parse_args(argv)
    unknown = set(args.phases.split(",")) - set(PHASES) - {"none", ""}
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    return args


def load_policy(args: argparse.Namespace) -> Any:
    import torch

    from agents.devices import resolve_device
    from agents.policies.hf import HFPolicy

    torch.set_num_threads(args.threads)
    return HFPolicy.smollm2(device=resolve_device(args.device))


def load1() -> float:
    return os.getloadavg()[0]


# ---- evaluation on held-out dev questions ----------------------------------------------------


def evaluate_pipeline(pipeline: Any, args: argparse.Namespace, **kwargs: Any) -> dict[str, Any]:
    """Episodes of ``pipeline`` on the first ``n_dev`` dev questions: the row, per-question scores, examples.

    ``kwargs`` go to :func:`~agents.evaluation.evaluate.evaluate` (a single agent's ``max_turns``).
    """
    from agents.evaluation.evaluate import evaluate

    res = evaluate(pipeline, task=args.task, split="dev", n=args.n_dev, top_k=args.top_k,
                   batch_size=min(args.n_dev, 64), seed=args.seed, env_kwargs={"max_doc_chars": args.max_doc_chars},
                   **({"reward": "f1"} if not kwargs else kwargs))
    eps = res.episodes

    def mean(key: str) -> float | None:
        vals = [float(e.metrics[key]) for e in eps if key in e.metrics]
        return sum(vals) / len(vals) if vals else None

    return {
        **{k: mean(k) for k in ("em", "f1", "evidence_recall", "selected_recall", "queries", "penalized_turns",
                                "generated_tokens")},
        **{f"penalty/{r}": mean(f"penalty/{r}") for r in ROLES},
        "n": len(eps),
        "eval_seconds": res.seconds,
        "per_question": {e.example_id: {k: float(e.metrics.get(k, 0.0)) for k in ("em", "f1")} for e in eps},
        "examples": [{"question": e.question, "gold": e.gold, "answer": e.answer,
                      "outputs": [m["content"] for m in e.messages if m.get("role") == "assistant"]}
                     for e in eps[:3]],
    }


def evaluate_policy(policy: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The ``mmoa-llm`` pipeline with ``policy`` in every role, greedy."""
    from agents.baselines.pipelines import make_pipeline

    was_training = policy.model.training
    policy.model.eval()
    out = evaluate_pipeline(make_pipeline("mmoa-llm", policy=policy, max_new_tokens=args.max_new_tokens), args)
    if was_training:
        policy.model.train()
    return out


def baselines_phase(args: argparse.Namespace) -> dict[str, Any]:
    from agents.baselines.pipelines import make_pipeline

    out = {}
    for name in ("mmoa-heuristic", "mmoa-oracle"):
        out[name] = evaluate_pipeline(make_pipeline(name), args)
        log(f"baselines: {name} F1 {out[name]['f1']:.3f} EM {out[name]['em']:.3f}")
    # the single-agent rule-based searcher (several search turns, each reading the last): context, not a pipeline
    out["heuristic"] = evaluate_pipeline("heuristic", args, max_turns=args.max_turns)
    log(f"baselines: heuristic F1 {out['heuristic']['f1']:.3f} EM {out['heuristic']['em']:.3f}")
    return {"agents": out}


# ---- trained phases ----------------------------------------------------------------------------


def common(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Config fields every trained phase shares: run folder ``args.out / name``, train split, episode settings."""
    return {"output_dir": str(args.out / name), "task": args.task, "split": "train", "top_k": args.top_k,
            "max_doc_chars": args.max_doc_chars, "max_new_tokens": args.max_new_tokens, "reward": "f1",
            "micro_batch_size": 4, "save_every": args.save_every, "progress": False, "log_every": 1,
            "threads": args.threads, "device": args.device, "bf16": args.bf16, "seed": args.seed}


def train_and_evaluate(args: argparse.Namespace, train: Any, cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the packaged model with ``train(cfg, policy=...)`` (resuming an unfinished run), then evaluate it."""
    t0 = time.perf_counter()
    resume = (Path(cfg.output_dir) / "checkpoint.pt").is_file()
    if resume:
        log(f"{Path(cfg.output_dir).name}: resuming from its checkpoint")
    out = train(cfg, policy=load_policy(args), resume=resume, overwrite=not resume)
    train_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    row = evaluate_policy(out["policy"], args)
    return out, {**row, "steps": out["step"], "train_seconds": train_s,
                 "eval_wall_seconds": time.perf_counter() - t1, "run_dir": cfg.output_dir}


def sft_phase(args: argparse.Namespace) -> dict[str, Any]:
    from agents.trainers.mappo_sft import MAPPOSFTConfig
    from agents.trainers.sft import train_sft

    cfg = MAPPOSFTConfig(num_demos=args.sft_demos, steps=args.sft_steps, batch_size=args.sft_batch,
                         learning_rate=args.sft_lr, warmup_steps=2, **common(args, "sft"))
    out, row = train_and_evaluate(args, train_sft, cfg)
    return {**row, "final_loss": out["last"].get("loss")}


def mappo_phase(args: argparse.Namespace, name: str) -> dict[str, Any]:
    from agents.trainers.mappo import MAPPOConfig, train_mappo

    role = name.removeprefix("mappo_")
    sft_dir = args.out / "sft"
    if not (sft_dir / "checkpoint.pt").is_file():
        raise SystemExit(f"phase {name} starts from the SFT warm start: run phase sft first ({sft_dir})")
    cfg = MAPPOConfig(steps=args.mappo_steps, batch_size=args.mappo_batch, samples_per_question=args.mappo_samples,
                      epochs=args.mappo_epochs, minibatches=args.mappo_minibatches,
                      learning_rate=args.mappo_lr, temperature=args.temperature, init_from=str(sft_dir),
                      train_roles=None if role == "all" else [role], **common(args, name))
    out, row = train_and_evaluate(args, train_mappo, cfg)
    from agents.trainers.metrics import read_metrics

    recs = read_metrics(cfg.output_dir)
    curve = [{k: r.get(k) for k in ("step", "reward_mean", "f1", "em", "pg_loss", "vf_loss", "approx_kl",
                                     "clip_fraction", "policy_tokens")} for r in recs]
    return {**row, "train_roles": cfg.trained_roles, "init_from": cfg.init_from, "train_curve": curve,
            "train_step_seconds": [r.get("seconds", {}).get("total") for r in recs]}


def run_phase(args: argparse.Namespace, name: str, fn: Any) -> dict[str, Any]:
    path = args.out / f"{name}.json"
    if path.is_file():
        log(f"{name}: cached ({path})")
        return dict(json.loads(path.read_text()))
    log(f"{name}: start (load {load1():.2f})")
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    result = fn()
    result["phase_seconds"] = time.perf_counter() - t0
    result["load_before"], result["load_after"] = list(load_before), list(os.getloadavg())
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    os.replace(tmp, path)
    log(f"{name}: done in {result['phase_seconds']:.0f}s "
        + json.dumps({k: round(result[k], 3) for k in ("f1", "em") if k in result}))
    return result


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    load_start = os.getloadavg()
    t_start = time.perf_counter()
    for name in PHASES:
        if name not in phases:
            continue
        if name == "baselines":
            run_phase(args, name, lambda: baselines_phase(args))
        elif name == "base":
            run_phase(args, name, lambda: evaluate_policy(load_policy(args), args))
        elif name == "sft":
            run_phase(args, name, lambda: sft_phase(args))
        else:
            run_phase(args, name, lambda name=name: mappo_phase(args, name))
    write_outputs(args, argv, time.perf_counter() - t_start, load_start)


# ---- report ----------------------------------------------------------------------------------


def write_outputs(args: argparse.Namespace, argv: list[str], wall: float, load_start: tuple[float, ...]) -> None:
    from agents.devices import describe, resolve_device

    results = {n: json.loads((args.out / f"{n}.json").read_text()) for n in PHASES
               if (args.out / f"{n}.json").is_file()}
    for name, row in results.pop("baselines", {}).get("agents", {}).items():
        results[f"baseline:{name}"] = row
    lines = [
        f"Device: {describe(resolve_device(args.device))}; torch threads {args.threads}.",
        "",
        f"Task {args.task}: {args.n_dev} held-out dev questions (never trained on); SmolLM2-135M-Instruct plays "
        f"every role (`mmoa-llm`, greedy); top_k={args.top_k}, max_doc_chars={args.max_doc_chars}, "
        f"max_new_tokens={args.max_new_tokens} per role; shared reward F1. Warm start: {args.sft_demos} oracle "
        f"pipeline demonstrations, {args.sft_steps} steps x {args.sft_batch} role samples, lr {args.sft_lr}. "
        f"Each MAPPO arm: {args.mappo_steps} steps x {args.mappo_batch} questions x {args.mappo_samples} samples, "
        f"{args.mappo_epochs} epoch(s) x {args.mappo_minibatches} minibatch(es), lr {args.mappo_lr}, "
        f"temperature {args.temperature}, same seed and questions; all weights trained.",
        "",
        "| Pipeline | Train steps | F1 | EM | Evidence recall | Selected recall | Sub-queries | "
        "Penalised turns/q | Phase min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in LABELS.items():
        r = results.get(key)
        if r is None:
            continue
        steps = "-" if key.startswith("baseline:") or key == "base" else r.get("steps", 0)
        ph = r.get("phase_seconds")
        cells = [_num(r.get(k), 3) for k in ("f1", "em", "evidence_recall", "selected_recall")]
        cells += [_num(r.get(k), 2) for k in ("queries", "penalized_turns")]
        lines.append(f"| {label} | {steps} | {' | '.join(cells)} | {'-' if ph is None else f'{ph / 60:.1f}'} |")
    diffs: dict[str, Any] = {}
    rows = []
    for a, b, label in COMPARISONS:
        if a in results and b in results:
            d = {k: paired_difference(results[a], results[b], k) for k in ("f1", "em")}
            diffs[f"{a}-{b}"] = d
            f, e = d["f1"], d["em"]
            rows.append(f"| {label} | {f['mean']:+.3f} | [{f['ci_low']:+.3f}, {f['ci_high']:+.3f}] | "
                        f"{e['mean']:+.3f} | [{e['ci_low']:+.3f}, {e['ci_high']:+.3f}] | "
                        f"{e['a_better']} / {e['b_better']} | {verdict(f)} |")
    if rows:
        lines += ["", "Paired differences on the same dev questions (95% bootstrap interval over questions; "
                  "won / lost: questions where the first is right (EM) and the second wrong / the reverse; "
                  "F1 verdict: resolved only when the interval excludes 0):", "",
                  "| Comparison | F1 difference | 95% interval | EM difference | 95% interval | won / lost (EM) | "
                  "F1 verdict |",
                  "|---|---:|---|---:|---|---|---|", *rows]
    lines += claims(diffs, results)
    times = [f"{n} {v['phase_seconds'] / 60:.1f} min" for n, v in results.items() if "phase_seconds" in v]
    per_step = {n: results[n]["train_step_seconds"] for n in MAPPO_PHASES if n in results}
    load_end = os.getloadavg()
    # the settings that measured the phases: without --note, nor --phases none (tables rebuilt from the cache)
    for flag in ("--note", *(["--phases"] if args.phases == "none" else [])):
        i = argv.index(flag) if flag in argv else -1
        argv = [a for j, a in enumerate(argv) if j not in (i, i + 1) and not a.startswith(f"{flag}=")]
    cmd = "python benchmarks/mmoa_rag.py " + shlex.join(argv)
    data = {
        "benchmark": args.name, "machine": machine(), "command": cmd,
        "args": {k: str(v) for k, v in vars(args).items()},
        "device": describe(resolve_device(args.device)),
        "wall_seconds_of_this_invocation": wall,
        "load_average_start": list(load_start), "load_average_end": list(load_end),
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "per_question"} for k, v in results.items()},
        "per_question": {k: v["per_question"] for k, v in results.items() if "per_question" in v},
        "paired_differences": diffs,
        "mappo_step_seconds": per_step,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    lines += ["", f"Phase wall times: {'; '.join(times)}.", "",
              "Load average (1/5/15 min) before -> after each phase: " + "; ".join(
                  f"{n} {_fmt(v['load_before'])} -> {_fmt(v['load_after'])}"
                  for n, v in results.items() if "load_before" in v) + ".", "",
              *([args.note, ""] if args.note else []),
              f"Measured with `{cmd}` ({data['machine']['date']}).", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def verdict(d: dict[str, float]) -> str:
    """``better`` / ``worse`` when the 95% interval excludes 0, else ``unresolved``."""
    return "better" if d["ci_low"] > 0 else "worse" if d["ci_high"] < 0 else "unresolved"


def claims(diffs: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """What holds and what does not, read off the paired F1 intervals (no claim beyond them)."""
    out = ["", "What holds and what does not (F1, 95% intervals):", ""]
    singles = [f"mappo_all-mappo_{r}" for r in ROLES if f"mappo_all-mappo_{r}" in diffs]
    if singles:
        v = [verdict(diffs[k]["f1"]) for k in singles]
        claim = ("holds" if len(singles) == len(ROLES) and set(v) == {"better"}
                 else "does not hold" if "worse" in v else "unresolved")
        detail = "; ".join(f"vs {k.split('_')[-1]} only {diffs[k]['f1']['mean']:+.3f} "
                           f"[{diffs[k]['f1']['ci_low']:+.3f}, {diffs[k]['f1']['ci_high']:+.3f}]" for k in singles)
        out.append(f"- MMOA-RAG's claim, joint MAPPO beats optimising any single role: **{claim}** ({detail}).")
    for k, text in (("mappo_all-sft", "MAPPO (joint) improves on its SFT warm start"),
                    ("sft-baseline:mmoa-heuristic", "the SFT warm start beats the rule-based pipeline"),
                    ("mappo_all-baseline:mmoa-heuristic", "joint MAPPO beats the rule-based pipeline"),
                    ("mappo_all-baseline:heuristic", "joint MAPPO beats the single-agent rule-based searcher")):
        if k in diffs:
            d = diffs[k]["f1"]
            word = {"better": "holds", "worse": "does not hold (the reverse is resolved)",
                    "unresolved": "unresolved"}[verdict(d)]
            out.append(f"- {text}: **{word}** ({d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]).")
    if "baseline:mmoa-oracle" in results:
        out.append(f"- The oracle pipeline (gold sub-questions and documents) reaches F1 "
                   f"{results['baseline:mmoa-oracle']['f1']:.3f}: the room the roles have.")
    out += ["", "What this does not show: anything about larger models or longer training. At this scale "
            "(SmolLM2-135M, a warm start of a few steps, a few MAPPO optimizer steps per arm, tens of questions) "
            "a difference the interval does not resolve is not evidence against the paper's claim at its much "
            "larger scale. The GPU run (`WHAT=mmoa` in benchmarks/gpu/run.sh) is the larger test."]
    return out


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _fmt(load: tuple[float, ...] | list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


if __name__ == "__main__":
    main()
