"""Does training help? Cold-start SFT, then GRPO with and without a process reward, on CPU.

SmolLM2-135M-Instruct on a synthetic task (default ``synthetic-1hop``), evaluated greedily on
``--n-dev`` held-out dev questions (the trainers only ever see the train split):

(a) the base model with the protocol's own prompt;
(b) after cold-start SFT on oracle demonstrations;
(c) SFT + GRPO with the outcome reward (EM + a small format term);
(d) SFT + GRPO with outcome + relevance process reward (the R3-RAG ablation), from the same SFT
    weights, for exactly the same number of steps as (c).

Beside them (phase ``baselines``), the agents that do not learn, on the same dev questions and
settings: ``heuristic`` (the rule-based pipeline, the strongest non-learned baseline), ``rag`` and
``direct`` with the same base model, ``oracle`` (gold decomposition: the upper bound) and ``random``.

Every policy answers the same dev questions, so differences are paired: the report gives each
difference with a 95% bootstrap interval over questions. With ``--parallel-arms`` the two GRPO arms
run at the same time in two single-threaded processes, so both see the same machine load.

Last, the throughput of the GRPO update: training tokens/s of the update as a fraction of a plain
forward+backward loop over the same batch, alternating in one process (median of repeats).

Each phase is cached as JSON in ``--out`` (a finished phase is not rerun), so a run can be continued
or its tables rebuilt with ``--phases none``. Writes ``benchmarks/results/<name>.json``, ``.md`` and
the learning-curve PNGs.

The measured multi-hop run (``synthetic-2hop``, LoRA adapters, the command in
``benchmarks/results/learning_2hop.md``)::

    python benchmarks/learning.py --task synthetic-2hop --top-k 3 --max-turns 3 --max-doc-chars 450 \
        --max-new-tokens 64 --lora --phases base,baselines,sft,grpo_outcome --name learning_2hop \
        --out runs/learning_2hop

The earlier 1-hop run (generator version 2 text; about 100 minutes on 2 CPU cores)::

    python benchmarks/learning.py --max-new-tokens 96 --parallel-arms

A smoke run (a few minutes)::

    python benchmarks/learning.py --n-dev 8 --sft-steps 2 --sft-demos 16 --grpo-steps 2 --grpo-batch 2
        --grpo-group 2 --throughput-reps 1 --out /tmp/learning-smoke --name learning_smoke
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Python puts this folder first on sys.path; keep it last so a script here can never shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import RESULTS, machine, paired_difference  # noqa: E402

PHASES = ("base", "baselines", "sft", "sft_adapters", "grpo_outcome", "grpo_adapters", "grpo_process", "throughput")
BASELINES = ("oracle", "heuristic", "rag", "direct", "random")
LABELS = {
    "baseline:oracle": "oracle: gold decomposition (upper bound, not a policy)",
    "baseline:heuristic": "heuristic: rules, no learning (strongest non-learned baseline)",
    "baseline:rag": "rag: question search, then the base model answers",
    "baseline:direct": "direct: the base model answers without search",
    "baseline:random": "random",
    "base": "(a) base model, protocol prompt",
    "sft": "(b) SFT on oracle demonstrations",
    "sft_adapters": "(b') (b) as shipped: its weight change as rank-r adapters",
    "grpo_outcome": "(c) SFT + GRPO, outcome reward",
    "grpo_adapters": "(c') (c) as shipped: SFT and GRPO adapters",
    "grpo_process": "(d) SFT + GRPO, outcome + relevance",
}
COMPARISONS = (
    ("sft", "base", "SFT vs base"),
    ("grpo_outcome", "sft", "GRPO (outcome) vs SFT"),
    ("grpo_process", "sft", "GRPO (outcome + relevance) vs SFT"),
    ("grpo_process", "grpo_outcome", "relevance term: (d) vs (c)"),
    ("sft", "baseline:heuristic", "SFT vs heuristic"),
    ("grpo_outcome", "baseline:heuristic", "GRPO (outcome) vs heuristic"),
    ("grpo_process", "baseline:heuristic", "GRPO (outcome + relevance) vs heuristic"),
    ("grpo_outcome", "baseline:rag", "GRPO (outcome) vs rag (same base model)"),
    ("sft_adapters", "sft", "SFT as shipped (adapters) vs full weights"),
    ("sft_adapters", "baseline:heuristic", "SFT as shipped vs heuristic"),
    ("grpo_adapters", "grpo_outcome", "GRPO as shipped (adapters) vs full weights"),
    ("grpo_adapters", "sft_adapters", "GRPO as shipped vs SFT as shipped"),
    ("grpo_adapters", "baseline:heuristic", "GRPO as shipped vs heuristic"),
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="synthetic-1hop", help="Named task (train split for training, dev for eval).")
    ap.add_argument("--n-dev", type=int, default=200, help="Held-out dev questions per evaluation.")
    ap.add_argument("--protocol", default="search-r1", help="Action protocol (demonstrations, training, evaluation).")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-doc-chars", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--sft-steps", type=int, default=12)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=5e-5)
    ap.add_argument("--sft-demos", type=int, default=256, help="Oracle demonstrations (train questions).")
    ap.add_argument("--grpo-steps", type=int, default=40, help="GRPO steps of each arm (the same for both).")
    ap.add_argument("--grpo-batch", type=int, default=4, help="Questions per GRPO step.")
    ap.add_argument("--grpo-group", type=int, default=8, help="Samples per question.")
    ap.add_argument("--grpo-lr", type=float, default=1e-5)
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature of GRPO rollouts.")
    ap.add_argument("--relevance-weight", type=float, default=0.2, help="Weight of the relevance term in (d).")
    ap.add_argument("--lora", action="store_true", help="Train LoRA adapters (SFT, then GRPO on the merged SFT).")
    ap.add_argument("--lora-r", type=int, default=12, help="LoRA rank of each trained phase.")
    ap.add_argument(
        "--lora-lr-scale", type=float, default=10.0, help="Learning rates are multiplied by this with --lora."
    )
    ap.add_argument(
        "--adapter-ranks",
        default="32,16",
        help="Without --lora: ranks of the adapters that the SFT and the GRPO weight changes are compressed to "
        "(phases sft_adapters, grpo_adapters; the form that --export-searcher ships).",
    )
    ap.add_argument(
        "--export-dir", type=Path, default=None, help="Where --export-searcher writes (default: the packaged searcher)."
    )
    ap.add_argument("--baselines", default=",".join(BASELINES), help="Agents of the baselines phase.")
    ap.add_argument(
        "--export-searcher",
        action="store_true",
        help="Write the SFT and GRPO (outcome) adapters as the packaged searcher (src/agents/data/searcher).",
    )
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Train under bfloat16 autocast (2x the fp32 tokens/s on AVX-512 BF16 CPUs).",
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads (arms in parallel use 1 each).")
    ap.add_argument("--device", default="auto", help="Where models train and decode: auto (CUDA when available), "
                    "cpu, cuda, cuda:N; named with the GPU in the results.")
    ap.add_argument("--parallel-arms", action="store_true", help="Run (c) and (d) at once in two processes.")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"Comma list of {', '.join(PHASES)} (or none).")
    ap.add_argument("--throughput-reps", type=int, default=3)
    ap.add_argument("--save-every", type=int, default=4, help="Checkpoint every N steps (a killed phase resumes).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/learning"))
    ap.add_argument("--name", default="learning", help="Result file stem in benchmarks/results.")
    args = ap.parse_args(argv)
    unknown = set(args.phases.split(",")) - set(PHASES) - {"none", ""}
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    try:
        args.adapter_ranks = [int(r) for r in str(args.adapter_ranks).split(",")]
    except ValueError:
        ap.error(f"--adapter-ranks: expected two comma-separated integers, got {args.adapter_ranks!r}")
    if len(args.adapter_ranks) != 2 or min(args.adapter_ranks) < 1:
        ap.error(f"--adapter-ranks: expected two positive ranks (SFT, GRPO), got {args.adapter_ranks}")
    if args.lora and ({"sft_adapters", "grpo_adapters"} & set(args.phases.split(","))):
        ap.error("phases sft_adapters / grpo_adapters compress full-weight runs; "
                 "with --lora the adapters ship as trained")
    return args


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "top_k": args.top_k,
        "max_turns": args.max_turns,
        "max_doc_chars": args.max_doc_chars,
        "max_new_tokens": args.max_new_tokens,
    }


def load_policy(threads: int, device: str = "auto") -> Any:
    import torch

    from agents.devices import resolve_device
    from agents.policies.hf import HFPolicy

    torch.set_num_threads(threads)
    return HFPolicy.smollm2(device=resolve_device(device))


# ---------------------------------------------------------------------------------------------
# Evaluation on held-out dev questions
# ---------------------------------------------------------------------------------------------


def evaluate_agent(agent: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Episodes of ``agent`` on the first ``n_dev`` dev questions: the row, per-question scores, examples."""
    from agents.evaluation.evaluate import evaluate

    res = evaluate(
        agent,
        task=args.task,
        split="dev",
        n=args.n_dev,
        top_k=args.top_k,
        max_turns=args.max_turns,
        protocol=getattr(args, "protocol", "search-r1"),
        batch_size=min(args.n_dev, 100),
        env_kwargs={"max_doc_chars": args.max_doc_chars},
    )
    row = res.row
    return {
        **{k: row[k] for k in ("em", "f1", "searches", "turns", "answered", "invalid_turns", "evidence_recall")},
        "n": args.n_dev,
        "eval_seconds": res.seconds,
        "per_question": {
            e.example_id: {k: float(e.metrics[k]) for k in ("em", "f1", "turns", "searches", "queries")}
            for e in res.episodes
        },
        "examples": [
            {
                "question": e.question,
                "gold": e.gold,
                "answer": e.answer,
                "turns": [m["content"] for m in e.messages[2:]],
            }
            for e in res.episodes[:3]
        ],
    }


def evaluate_policy(policy: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Greedy episodes of the policy (protocol system prompt only) on the first ``n_dev`` dev questions."""
    from agents.baselines import make_agent

    agent = make_agent("llm", policy=policy, max_new_tokens=args.max_new_tokens, temperature=0.0)
    was_training = policy.model.training
    policy.model.eval()
    out = evaluate_agent(agent, args)
    if was_training:
        policy.model.train()
    return out


def baselines_phase(args: argparse.Namespace) -> dict[str, Any]:
    """The agents that do not learn, on the same dev questions and settings as the trained policies."""
    from agents.baselines import LLM_AGENTS, make_agent

    names = [n for n in args.baselines.split(",") if n]
    policy = load_policy(args.threads, args.device) if any(n in LLM_AGENTS for n in names) else None
    out: dict[str, Any] = {}
    for name in names:
        agent = make_agent(name, policy=policy, max_new_tokens=args.max_new_tokens, temperature=0.0, seed=args.seed)
        out[name] = evaluate_agent(agent, args)
        row = out[name]
        log(f"baselines: {name} EM {row['em']:.3f} ({row['eval_seconds']:.0f} s)")
    return {"agents": out}


# ---------------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------------


def trainer_kwargs(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Config fields every trained phase shares: run folder ``args.out / name``, train split, logging, threads."""
    return {
        "output_dir": str(args.out / name),
        "task": args.task,
        "protocol": getattr(args, "protocol", "search-r1"),
        "split": "train",
        "micro_batch_size": 4,
        "save_every": args.save_every,
        "progress": False,
        "log_every": 1,
        "threads": args.threads,
        "device": args.device,
        "bf16": args.bf16,
        "seed": args.seed,
        **({"lora": True, "lora_r": args.lora_r, "lora_alpha": 2 * args.lora_r} if args.lora else {}),
        **env_kwargs(args),
    }


def lr(args: argparse.Namespace, base: float) -> float:
    """The learning rate of a phase: ``base``, times ``--lora-lr-scale`` when training LoRA adapters."""
    return base * args.lora_lr_scale if args.lora else base


def train_and_evaluate(args: argparse.Namespace, train: Any, cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the packaged model with ``train(cfg, policy=...)``, then evaluate it on the dev questions.

    Returns:
        ``(trainer output, evaluation row with steps, train_seconds and run_dir added)``.
    """
    t0 = time.perf_counter()
    # An unfinished phase continues from its last checkpoint (the trainers resume exactly).
    resume = (Path(cfg.output_dir) / "checkpoint.pt").is_file()
    if resume:
        log(f"{Path(cfg.output_dir).name}: resuming from its checkpoint")
    out = train(cfg, policy=load_policy(args.threads, args.device), resume=resume, overwrite=not resume)
    train_s = time.perf_counter() - t0
    ev = evaluate_policy(out["policy"], args)
    return out, {**ev, "steps": out["step"], "train_seconds": train_s, "run_dir": cfg.output_dir}


def sft_phase(args: argparse.Namespace) -> dict[str, Any]:
    from agents.trainers.sft import SFTConfig, train_sft

    cfg = SFTConfig(
        num_demos=args.sft_demos,
        steps=args.sft_steps,
        batch_size=args.sft_batch,
        learning_rate=lr(args, args.sft_lr),
        warmup_steps=2,
        **trainer_kwargs(args, "sft"),
    )
    out, row = train_and_evaluate(args, train_sft, cfg)
    return {**row, "final_loss": out["last"]["loss"]}


def adapters_phase(args: argparse.Namespace, runs: list[str]) -> dict[str, Any]:
    """The full-weight ``runs`` (in training order) as shipped: compressed to adapters, loaded as users load them.

    Writes the searcher folder ``args.out / f"searcher_{runs[-1]}"`` (what ``--export-searcher`` copies)
    and evaluates :func:`agents.baselines.searcher.load_searcher` of it on the same dev questions.
    """
    from agents.baselines.searcher import load_searcher, read_manifest
    from agents.devices import resolve_device
    from agents.trainers.export import export_searcher

    folder = args.out / f"searcher_{runs[-1]}"
    ranks = args.adapter_ranks[: len(runs)]
    t0 = time.perf_counter()
    export_searcher([args.out / r for r in runs], folder, ranks=ranks,
                    base_policy=load_policy(args.threads, args.device))
    compress_s = time.perf_counter() - t0
    policy = load_searcher(folder, device=resolve_device(args.device))
    row = evaluate_policy(policy, args)
    size = sum(f.stat().st_size for f in folder.iterdir())
    kept = [a.get("energy_kept") for a in read_manifest(folder)["adapters"]]
    steps = int(json.loads((args.out / f"{runs[-1]}.json").read_text()).get("steps", 0))
    return {**row, "steps": steps, "ranks": ranks, "adapter_bytes": size, "compress_seconds": compress_s,
            "energy_kept": kept, "searcher_dir": str(folder)}


def arm_config(args: argparse.Namespace, name: str) -> Any:
    from agents.trainers.grpo import GRPOConfig

    reward = {"outcome": 1.0, "format": 0.1}
    if name == "grpo_process":
        reward["relevance"] = args.relevance_weight
    sft_dir = args.out / "sft"
    return GRPOConfig(
        reward=reward,
        steps=args.grpo_steps,
        batch_size=args.grpo_batch,
        group_size=args.grpo_group,
        learning_rate=lr(args, args.grpo_lr),
        kl_coef=args.kl_coef,
        temperature=args.temperature,
        init_from=str(sft_dir) if (sft_dir / "checkpoint.pt").is_file() else None,
        **trainer_kwargs(args, name),
    )


def arm_phase(args: argparse.Namespace, name: str) -> dict[str, Any]:
    from agents.trainers.grpo import train_grpo

    cfg = arm_config(args, name)
    _, row = train_and_evaluate(args, train_grpo, cfg)
    return {**row, "reward": cfg.reward, "init_from": cfg.init_from}


def plain_fwd_bwd_seconds(policy: Any, samples: list[Any], micro: int, temperature: float, bf16: bool) -> float:
    """Seconds of a plain loop over the same samples: forward, NLL of policy tokens, backward (no optimizer)."""
    from agents.trainers.models import pad_token_id
    from agents.trainers.samples import forward_logprobs, pad_samples

    model = policy.model
    t0 = time.perf_counter()
    for i in range(0, len(samples), micro):
        padded = pad_samples(samples[i : i + micro], pad_token_id(policy))
        out = forward_logprobs(model, padded, temperature=temperature, bf16=bf16)
        loss = -(out.logprobs * padded.mask).sum() / padded.mask.sum().clamp(min=1)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def throughput_phase(args: argparse.Namespace) -> dict[str, Any]:
    """Time the GRPO update against a plain forward+backward loop over the same batch, alternating.

    One rollout batch (``grpo_batch`` questions x ``grpo_group`` samples) from the SFT policy; then,
    after one untimed warm-up of each, ``reps`` rounds of: plain loop, update without a KL term,
    update with ``kl_coef = 0.001`` (adds the reference forward pass). Alternating makes both sides
    see the same machine load.
    """
    import copy
    import dataclasses
    import statistics

    import numpy as np

    from agents.trainers.advantages import group_advantages
    from agents.trainers.data import task_examples
    from agents.trainers.episodes import run_rollouts
    from agents.trainers.grpo import grpo_update
    from agents.trainers.metrics import Timer
    from agents.trainers.models import init_policy, pad_token_id, trainable_parameters
    from agents.trainers.optim import make_optimizer, make_scheduler

    base = dataclasses.replace(
        arm_config(args, "grpo_outcome"), output_dir=str(args.out / "throughput"), learning_rate=1e-9
    )
    variants = {"update": 0.0, "update_kl": 0.001}
    cfgs = {name: dataclasses.replace(base, kl_coef=kl) for name, kl in variants.items()}
    policy = init_policy(base, load_policy(args.threads, args.device), base.init_from)
    examples, retr = task_examples(base)
    eps = run_rollouts(
        policy, examples[: base.batch_size], retr, base, group_size=base.group_size, seed=7, timer=Timer()
    )
    samples = [e.sample for e in eps if e.sample.num_policy_tokens]
    adv = group_advantages([s.extras["return"] for s in samples], [e.group for e in eps if e.sample.num_policy_tokens])
    for s, a in zip(samples, adv.advantages, strict=True):
        s.extras["advantage"] = float(a) if a != 0 else 1e-3  # keep every sequence in the timed batch
    ref = copy.deepcopy(policy.model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    params = trainable_parameters(policy.model)
    opt = make_optimizer(params, base)
    sched = make_scheduler(opt, base, 100)
    gen = np.random.default_rng(0)
    pad = pad_token_id(policy)
    tokens = sum(len(s.ids) for s in samples)

    def timed(name: str) -> float:
        t0 = time.perf_counter()
        if name == "plain":
            plain_fwd_bwd_seconds(policy, samples, base.micro_batch_size, base.temperature, base.bf16)
        else:
            c = cfgs[name]
            grpo_update(samples, policy, ref if c.kl_coef > 0 else None, params, opt, sched, c, pad, gen)
        return time.perf_counter() - t0

    names = ["plain", *variants]
    for n in names:
        timed(n)  # warm-up: allocator, optimizer state
    secs: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.throughput_reps):
        for n in names:
            secs[n].append(timed(n))
            log(f"throughput {n}: {secs[n][-1]:.1f}s")
    plain = statistics.median(secs["plain"])
    rows = []
    for n, kl in variants.items():
        upd = statistics.median(secs[n])
        rows.append(
            {
                "variant": n,
                "kl_coef": kl,
                "tokens": tokens,
                "sequences": len(samples),
                "update_s": upd,
                "plain_s": plain,
                "update_tok_s": tokens / upd,
                "plain_tok_s": tokens / plain,
                "ratio": plain / upd,
                "reps": args.throughput_reps,
                "update_all_s": secs[n],
                "plain_all_s": secs["plain"],
            }
        )
    return {"rows": rows, "bf16": base.bf16}


def run_phase(args: argparse.Namespace, name: str, fn: Any) -> dict[str, Any]:
    path = args.out / f"{name}.json"
    if path.is_file():
        log(f"{name}: cached ({path})")
        return dict(json.loads(path.read_text()))
    log(f"{name}: start")
    t0 = time.perf_counter()
    result = fn()
    result["phase_seconds"] = time.perf_counter() - t0
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    os.replace(tmp, path)
    log(
        f"{name}: done in {result['phase_seconds']:.0f}s "
        + json.dumps({k: result[k] for k in ("em", "searches") if k in result})
    )
    return result


def run_arms_in_parallel(args: argparse.Namespace, argv: list[str]) -> None:
    """Run the two GRPO arms at once, one single-threaded child process each; wait for both."""
    children = []
    for name in ("grpo_outcome", "grpo_process"):
        if (args.out / f"{name}.json").is_file():
            continue
        cmd = [sys.executable, __file__, *argv, "--phases", name, "--threads", "1"]
        logf = (args.out / f"{name}.log").open("w")
        log(f"{name}: child process, log in {args.out / f'{name}.log'}")
        children.append((name, subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), logf))
    failed = []
    for name, proc, logf in children:
        if proc.wait() != 0:
            failed.append(name)
        logf.close()
    if failed:
        raise SystemExit(f"GRPO arm(s) {failed} failed; see their logs in {args.out}")


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    phases = set(args.phases.split(","))
    t_start = time.perf_counter()
    if "base" in phases:
        run_phase(args, "base", lambda: evaluate_policy(load_policy(args.threads, args.device), args))
    if "baselines" in phases:
        run_phase(args, "baselines", lambda: baselines_phase(args))
    if "sft" in phases:
        run_phase(args, "sft", lambda: sft_phase(args))
    if "sft_adapters" in phases:
        run_phase(args, "sft_adapters", lambda: adapters_phase(args, ["sft"]))
    arms = [a for a in ("grpo_outcome", "grpo_process") if a in phases]
    if arms and args.parallel_arms and len(arms) == 2:
        parent = [a for a in argv if a != "--parallel-arms"]
        # drop the parent's --phases/--threads; the children get their own
        for flag in ("--phases", "--threads"):
            while flag in parent:
                i = parent.index(flag)
                del parent[i : i + 2]
        run_arms_in_parallel(args, parent)
    else:
        for name in arms:
            run_phase(args, name, lambda name=name: arm_phase(args, name))
    if "grpo_adapters" in phases:
        run_phase(args, "grpo_adapters", lambda: adapters_phase(args, ["sft", "grpo_outcome"]))
    if "throughput" in phases:
        run_phase(args, "throughput", lambda: throughput_phase(args))
    if arms and not args.parallel_arms and phases == {arms[0]}:
        return  # a child process of --parallel-arms: the parent writes the report
    write_outputs(args, argv, time.perf_counter() - t_start)
    if args.export_searcher:
        export(args, argv)


def export(args: argparse.Namespace, argv: list[str]) -> None:
    """Ship the SFT and GRPO (outcome) phases as the packaged searcher (or ``--export-dir``).

    With ``--lora`` the trained adapters ship as they are. Otherwise the compressed form that
    phases ``sft_adapters`` / ``grpo_adapters`` evaluated ships, byte for byte: the GRPO one (SFT
    and GRPO adapters) when it scored at least as well on the dev questions, else the SFT one.
    """
    from agents.baselines.searcher import PACKAGED, copy_searcher
    from agents.devices import describe, resolve_device
    from agents.trainers.export import export_searcher

    target = args.export_dir or PACKAGED
    scores = {
        n: json.loads((args.out / f"{n}.json").read_text())["em"]
        for n in ("sft", "sft_adapters", "grpo_outcome", "grpo_adapters")
        if (args.out / f"{n}.json").is_file()
    }
    provenance = {
        "command": "python benchmarks/learning.py " + " ".join(argv),
        "task": args.task,
        "dev_em": scores,
        "n_dev": args.n_dev,
        "settings": env_kwargs(args),
        "trained_on": describe(resolve_device(args.device)),
    }
    if args.lora:
        out = export_searcher([args.out / "sft", args.out / "grpo_outcome"], target, provenance=provenance)
    else:
        shipped = [n for n in ("grpo_adapters", "sft_adapters") if n in scores]
        if not shipped:
            raise SystemExit("--export-searcher without --lora needs phase sft_adapters (and grpo_adapters) first")
        best = max(shipped, key=lambda n: (scores[n], n == "grpo_adapters"))
        src = json.loads((args.out / f"{best}.json").read_text())["searcher_dir"]
        provenance["shipped"] = best
        out = copy_searcher(src, target, provenance=provenance)
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    log(f"searcher: wrote {out} ({size:.1f} MB)")


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def write_outputs(args: argparse.Namespace, argv: list[str], wall: float) -> None:
    from agents.trainers.plot import plot_runs

    files = {n: args.out / f"{n}.json" for n in PHASES}
    results = {n: json.loads(f.read_text()) for n, f in files.items() if f.is_file()}
    for name, row in results.pop("baselines", {}).get("agents", {}).items():
        results[f"baseline:{name}"] = row
    RESULTS.mkdir(parents=True, exist_ok=True)
    from agents.devices import describe, resolve_device

    lines = [
        f"Device: {describe(resolve_device(args.device))}.",
        "",
        f"Task {args.task}: {args.n_dev} held-out dev questions (never trained on), greedy decoding, "
        f"top_k={args.top_k}, max_turns={args.max_turns}, max_new_tokens={args.max_new_tokens}, "
        f"max_doc_chars={args.max_doc_chars}"
        + (f"; LoRA rank {args.lora_r} adapters" if args.lora else "; all weights trained")
        + (
            f"; shipped form: SFT change at rank {args.adapter_ranks[0]}, GRPO change at rank {args.adapter_ranks[1]}"
            if any(k in results for k in ("sft_adapters", "grpo_adapters"))
            else ""
        )
        + ".",
        "",
        "| Policy | Train steps | EM | F1 | Searches/q | Evidence recall | Answered | Invalid turns/q |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in LABELS.items():
        r = results.get(key)
        if r is None:
            continue
        recall = r.get("evidence_recall")
        steps = "-" if key.startswith("baseline:") else r.get("steps", 0)
        lines.append(
            f"| {label} | {steps} | {r['em']:.3f} | {r['f1']:.3f} | {r['searches']:.2f} | "
            f"{'-' if recall is None else f'{recall:.3f}'} | {r['answered']:.2f} | {r['invalid_turns']:.2f} |"
        )
    for key in ("sft_adapters", "grpo_adapters"):
        if key in results:
            r = results[key]
            kept = ", ".join(f"{k:.3f}" for k in r.get("energy_kept", []) if k is not None)
            lines.append(
                f"\n{LABELS[key].split(' ', 1)[0]}: ranks {r['ranks']}, {r['adapter_bytes'] / 1e6:.1f} MB of adapters, "
                f"share of the squared weight change kept {kept}; compressed in {r['compress_seconds']:.0f} s."
            )
    diffs = {}
    rows = []
    for a, b, label in COMPARISONS:
        if a in results and b in results:
            d = paired_difference(results[a], results[b])
            diffs[f"{a}-{b}"] = d
            rows.append(
                f"| {label} | {d['mean']:+.3f} | [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] | "
                f"{d['a_better']} / {d['b_better']} |"
            )
    if rows:
        lines += [
            "",
            "Paired differences in EM on the same dev questions (95% bootstrap interval over questions; "
            "questions where the first policy is right and the second wrong / the reverse):",
            "",
            "| Comparison | EM difference | 95% interval | won / lost |",
            "|---|---:|---|---|",
            *rows,
        ]
    tp = results.get("throughput", {}).get("rows", [])
    ratio = None
    if tp:
        lines += [
            "",
            "GRPO update vs a plain forward+backward loop over the same batch, same process, alternating runs "
            f"(median of {tp[0]['reps']}; bf16 autocast {'on' if results['throughput'].get('bf16') else 'off'}; "
            "the update includes the optimizer step, and with a KL term the reference forward):",
            "",
            "| Update | Sequences | Tokens | Update s | Plain fwd+bwd s | Update tok/s | Plain tok/s | Ratio |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in tp:
            lines.append(
                f"| GRPO, kl_coef={t['kl_coef']} | {t['sequences']} | {t['tokens']} | {t['update_s']:.1f} | "
                f"{t['plain_s']:.1f} | {t['update_tok_s']:.0f} | {t['plain_tok_s']:.0f} | {t['ratio']:.2f} |"
            )
        ratio = tp[0]["ratio"]
        lines.append(f"\nThroughput ratio without KL (update tok/s / plain tok/s): {ratio:.2f}; goal >= 0.70.")
    runs = [args.out / n for n in ("grpo_outcome", "grpo_process") if (args.out / n / "metrics.jsonl").is_file()]
    png = None
    if runs:
        names = ["outcome", "outcome + relevance"][: len(runs)]
        png = plot_runs(runs, RESULTS / f"{args.name}_curves.png", labels=names, smooth=5)
    if (args.out / "sft" / "metrics.jsonl").is_file():
        plot_runs([args.out / "sft"], RESULTS / f"{args.name}_sft_curve.png")
    phase_files = {n: json.loads(f.read_text()) for n, f in files.items() if f.is_file()}
    times = [f"{n} {v['phase_seconds'] / 60:.1f} min" for n, v in phase_files.items() if "phase_seconds" in v]
    cmd = "python benchmarks/learning.py " + " ".join(argv)
    data = {
        "benchmark": args.name,
        "machine": machine(),
        "command": cmd,
        "args": {k: str(v) for k, v in vars(args).items()},
        "wall_seconds_of_this_invocation": wall,
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "per_question"} for k, v in results.items()},
        "per_question_em": {
            k: {q: x["em"] for q, x in v["per_question"].items()} for k, v in results.items() if "per_question" in v
        },
        "paired_em_differences": diffs,
        "throughput_ratio": ratio,
        "curves_png": str(png) if png else None,
    }
    (RESULTS / f"{args.name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    lines += [
        "",
        f"Phase wall times: {'; '.join(times)}.",
        "",
        f"Measured with `{cmd}` ({data['machine']['date']}).",
        "",
    ]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
