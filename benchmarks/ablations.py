"""The papers' claims, measured here: process reward, frugal search, RL without demonstrations, PPO vs GRPO.

Every arm trains SmolLM2-135M-Instruct (LoRA) on ``synthetic-2hop`` for the same number of steps
from the same start and is evaluated greedily on the same held-out dev questions as
``benchmarks/learning.py``'s multi-hop run, whose folder (``--out runs/learning_2hop``) this
shares: its SFT checkpoint is the common start and its ``grpo_outcome`` phase is the arm
``outcome_s0`` (same config, seed 0), so nothing is trained twice.

| comparison | paper | arms (first vs second) |
|---|---|---|
| ``process`` | R3-RAG | GRPO, outcome + relevance-verified process term vs outcome-only; seeds 0 and 1 each |
| ``frugal`` | FrugalRAG | GRPO, outcome + 0.1 per search vs outcome-only |
| ``from_base`` | ReSearch | GRPO from the base model (outcome + format) vs SFT then GRPO |
| ``ppo`` | Search-R1 | PPO (value head, 16 x 1 per step) vs GRPO (4 x 4, ``outcome_sft2_s0``): equal episodes |
| ``rex`` | REX-RAG | GRPO + 2 probes per dead-end group vs GRPO |
| ``dapo`` | DAPO | GRPO + dynamic sampling (up to 4 rounds) vs GRPO |
| ``multi_query`` | RAG-R1 | SFT then GRPO under ``multi-query`` vs under ``search-r1``, on ``synthetic-mixed`` |

``multi_query`` needs a task where queries can run in parallel (synthetic-2hop's bridges cannot:
each hop names the previous hop's answer), so its two arms are ``benchmarks/learning.py`` runs of
their own on synthetic-mixed (a quarter comparison questions, whose two lookups the multi-query
oracle demonstrates in one turn), each with its own SFT on its protocol's oracle demonstrations and
the same settings as the shared 2-hop run otherwise (``MULTI_QUERY_RUNS`` below holds the
commands). The table adds turns per question, which is what the claim is about.

Beside EM, each arm reports the share of zero-variance groups it trained on, the policy's
entropy over its last five steps and the tokens it generated (probes and extra sampling rounds
cost tokens: the ``rex`` and ``dapo`` arms stop when they have generated as many tokens as
``outcome_s0`` did in its 20 steps, so they are compared at equal generated tokens, in fewer steps).

Each arm is a phase cached as ``<out>/ablation_<arm>.json`` (per-question EM and F1 inside); an arm
that was stopped resumes from its checkpoint (the trainers resume exactly); ``--arms`` picks what
to run now and ``--report`` only rewrites the results from what is finished. Each comparison
writes ``benchmarks/results/ablation_<comparison>.json`` and ``.md``: EM, F1, searches per
question and seconds per question of each arm, the paired difference in EM over the dev questions
with a 95% bootstrap interval (with two seeds per side, each question's EM is averaged over the
seeds first), the per-seed EMs, and the learning curves (PNG). Comparisons with arms still
missing say which.

Usage: python benchmarks/ablations.py --arms process_s0,outcome_s1 [--out runs/learning_2hop]
       python benchmarks/ablations.py --report
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

import learning  # noqa: E402
from _common import RESULTS, machine  # noqa: E402
from searchenv.corpus import atomic_write_lines  # noqa: E402

OUTCOME = {"outcome": 1.0, "format": 0.1}


@dataclass(frozen=True)
class Arm:
    """One training run: trainer, reward, seed and start."""

    trainer: str = "grpo"
    reward: dict[str, float] = field(default_factory=lambda: dict(OUTCOME))
    seed: int = 0
    from_sft: bool = True
    reuse: str | None = None  # a learning.py phase with exactly this config
    options: dict[str, Any] = field(default_factory=dict)  # more trainer config fields
    equal_tokens_as: str | None = None  # stop at the tokens this arm generated (max_generated_tokens)
    out: str | None = None  # the run folder of a reused phase, when not --out (a learning.py run of its own)


ARMS: dict[str, Arm] = {
    "outcome_s0": Arm(reuse="grpo_outcome"),
    "outcome_s1": Arm(seed=1),
    "process_s0": Arm(reward={**OUTCOME, "relevance": 0.2}),
    "process_s1": Arm(reward={**OUTCOME, "relevance": 0.2}, seed=1),
    "frugal_s0": Arm(reward={**OUTCOME, "cost": 0.1}),
    "from_base_s0": Arm(from_sft=False),
    "ppo_s0": Arm(trainer="ppo"),
    # outcome_s0's config again, from the re-run SFT checkpoint that ppo_s0 started from (the first
    # one was not kept and the re-run did not reproduce it exactly: benchmarks/results/learning_2hop_sft.md)
    "outcome_sft2_s0": Arm(),
    "rex_s0": Arm(options={"rex_probes": 2}, equal_tokens_as="outcome_s0"),
    "dapo_s0": Arm(options={"dynamic_sampling": True, "max_sampling_rounds": 4}, equal_tokens_as="outcome_s0"),
    "multi_query_s0": Arm(reuse="grpo_outcome", out="runs/learning_mixed_mq"),
    "search_r1_mixed_s0": Arm(reuse="grpo_outcome", out="runs/learning_mixed_sr1"),
}

_MIXED = ("python benchmarks/learning.py --task synthetic-mixed --top-k 3 --max-turns 3 --max-doc-chars 450 "
          "--max-new-tokens 80 --lora --sft-steps 32 --grpo-steps 20 --grpo-batch 4 --grpo-group 4 "
          "--phases sft,grpo_outcome")
#: The learning.py runs whose ``grpo_outcome`` phases are the ``multi_query`` comparison's arms.
MULTI_QUERY_RUNS = {
    "multi_query_s0": f"{_MIXED} --protocol multi-query --name learning_mixed_mq --out runs/learning_mixed_mq",
    "search_r1_mixed_s0": f"{_MIXED} --protocol search-r1 --name learning_mixed_sr1 --out runs/learning_mixed_sr1",
}

# name -> (paper, claim, first arms, second arms)
COMPARISONS: dict[str, tuple[str, str, list[str], list[str]]] = {
    "process": ("R3-RAG", "a relevance-verified process reward beats outcome-only reward on multi-hop questions",
                ["process_s0", "process_s1"], ["outcome_s0", "outcome_s1"]),
    "frugal": ("FrugalRAG", "a search-cost term roughly halves searches at little accuracy cost",
               ["frugal_s0"], ["outcome_s0"]),
    "from_base": ("ReSearch", "RL from outcome reward alone, without demonstrations, learns to search",
                  ["from_base_s0"], ["outcome_s0"]),
    "ppo": ("Search-R1", "PPO with a value head vs GRPO at equal samples", ["ppo_s0"], ["outcome_sft2_s0"]),
    "rex": ("REX-RAG", "probes that leave dead ends, with importance correction, help GRPO",
            ["rex_s0"], ["outcome_s0"]),
    "dapo": ("DAPO", "dynamic sampling (only groups with signal) helps GRPO", ["dapo_s0"], ["outcome_s0"]),
    "multi_query": ("RAG-R1", "several queries per turn need fewer turns at equal or better accuracy",
                    ["multi_query_s0"], ["search_r1_mixed_s0"]),
}


#: Where a comparison's arms do not start from the shared SFT checkpoint, said after its header.
START_NOTES = {
    "ppo": (" Both arms start from the re-run SFT checkpoint (`benchmarks/results/learning_2hop_sft.md`; the first "
            "one, which the other comparisons started from, was not kept), so the GRPO arm is `outcome_s0`'s config "
            "trained again from it."),
}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="", help=f"Comma list of {', '.join(ARMS)} to run now.")
    ap.add_argument("--report", action="store_true", help="Only write the results of finished arms.")
    ap.add_argument("--out", type=Path, default=Path("runs/learning_2hop"))
    # the settings of the shared multi-hop run (benchmarks/results/learning_2hop.md)
    ap.add_argument("--task", default="synthetic-2hop")
    ap.add_argument("--n-dev", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-doc-chars", type=int, default=450)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--steps", type=int, default=20, help="Training steps of every arm.")
    ap.add_argument("--grpo-batch", type=int, default=4)
    ap.add_argument("--grpo-group", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-5, help="Learning rate (x10 for LoRA, as learning.py).")
    ap.add_argument("--lora-r", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=2)
    args = ap.parse_args()
    unknown = {a for a in args.arms.split(",") if a} - set(ARMS)
    if unknown:
        ap.error(f"unknown arms {sorted(unknown)}; known: {', '.join(ARMS)}")
    return args


def learning_args(args: argparse.Namespace, seed: int) -> argparse.Namespace:
    """The namespace learning.py's helpers read (its run folder, evaluation and trainer settings)."""
    ns = copy.copy(args)
    ns.seed, ns.lora, ns.lora_lr_scale, ns.bf16 = seed, True, 10.0, True
    ns.device = getattr(args, "device", "auto")
    return ns


def arm_config(args: argparse.Namespace, name: str) -> tuple[Any, Any]:
    """``(config, train function)`` of an arm."""
    arm = ARMS[name]
    ns = learning_args(args, arm.seed)
    sft = args.out / "sft"
    init = str(sft) if arm.from_sft else None
    if arm.from_sft and not (sft / "checkpoint.pt").is_file():
        raise SystemExit(f"{sft} has no SFT checkpoint: run benchmarks/learning.py (see the docstring) first")
    common = {"reward": dict(arm.reward), "steps": args.steps, "learning_rate": learning.lr(ns, args.lr),
              "kl_coef": 0.0, "temperature": 1.0, "init_from": init, **learning.trainer_kwargs(ns, f"ablation_{name}")}
    if arm.trainer == "ppo":
        from agents.trainers.ppo import PPOConfig, train_ppo

        episodes = args.grpo_batch * args.grpo_group
        return PPOConfig(batch_size=episodes, samples_per_question=1, **common), train_ppo
    from agents.trainers.grpo import GRPOConfig, train_grpo

    options = dict(arm.options)
    if arm.equal_tokens_as:
        budget = curve_stats(args, arm.equal_tokens_as)["generated_tokens"]
        if not budget:
            raise SystemExit(f"{name} is compared at the tokens of {arm.equal_tokens_as}: run that arm first")
        options["max_generated_tokens"] = int(budget)
    return GRPOConfig(batch_size=args.grpo_batch, group_size=args.grpo_group, **common, **options), train_grpo


def arm_phase(args: argparse.Namespace, name: str) -> dict[str, Any]:
    cfg, train = arm_config(args, name)
    _, row = learning.train_and_evaluate(learning_args(args, ARMS[name].seed), train, cfg)
    return {**row, "reward": cfg.reward, "init_from": cfg.init_from, "trainer": ARMS[name].trainer,
            "seed": ARMS[name].seed}


def _arm_out(args: argparse.Namespace, name: str) -> Path:
    return Path(ARMS[name].out) if ARMS[name].out else args.out


def committed_arm(name: str) -> dict[str, Any] | None:
    """The arm as a committed ``benchmarks/results/ablation_*.json`` records it, or None.

    Run folders (``runs/``) do not outlive the machine that trained them; the committed results
    hold each finished arm's per-question outcomes and curve statistics (and, for arms reported
    since curves were stored, the training curve), so a later session can add the missing arms
    of a comparison without training the finished ones again.
    """
    for file, arms in _committed_results():
        row = arms.get(name)
        if isinstance(row, dict) and row.get("per_question"):
            return {**row, "recorded_in": file}
    return None


@functools.cache
def _committed_results() -> tuple[tuple[str, dict[str, Any]], ...]:
    """``(file name, arms)`` of every committed ablation result, read once per process.

    Read before this process writes any report, so every lookup sees the results as committed.
    """
    out = []
    for path in sorted(RESULTS.glob("ablation_*.json")):
        try:
            arms = json.loads(path.read_text(encoding="utf-8")).get("arms") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(arms, dict):
            out.append((path.name, arms))
    return tuple(out)


def load_arm(args: argparse.Namespace, name: str) -> dict[str, Any] | None:
    """A finished arm: from its run folder, else from the committed results; None if not run yet."""
    arm = ARMS[name]
    path = _arm_out(args, name) / f"{arm.reuse or 'ablation_' + name}.json"
    return dict(json.loads(path.read_text())) if path.is_file() else committed_arm(name)


def curve_records(args: argparse.Namespace, name: str) -> list[dict[str, Any]]:
    """The arm's training records: its ``metrics.jsonl``, else the curve the committed results kept."""
    path = arm_run_dir(args, name) / "metrics.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stored = committed_arm(name)
    return list(stored.get("curve") or []) if stored else []


def arm_run_dir(args: argparse.Namespace, name: str) -> Path:
    return _arm_out(args, name) / (ARMS[name].reuse or f"ablation_{name}")


def curve_stats(args: argparse.Namespace, name: str) -> dict[str, float | None]:
    """From the arm's metrics.jsonl: zero-variance share, entropy of the last 5 steps, generated tokens."""
    recs = curve_records(args, name)
    if not recs:
        stored = committed_arm(name) or {}
        empty: dict[str, float | None] = {"zero_variance_share": None, "entropy_last5": None, "generated_tokens": None,
                                          "train_seconds": None, "steps": 0, "probe_groups": 0, "probe_episodes": 0,
                                          "probe_em": None, "dropped_groups": 0, "extra_rounds": 0}
        return {k: stored.get(k, v) for k, v in empty.items()}
    groups = sum(r.get("groups", 0) for r in recs)
    last = [r["entropy"] for r in recs[-5:] if "entropy" in r]
    generated = sum(r.get("generated_tokens", r.get("episodes", 0) * r.get("response_tokens", 0)) for r in recs)
    # the trainer's own step times: a phase resumed from a checkpoint timed only its last part
    seconds = sum(float((r.get("seconds") or {}).get("total", 0.0)) for r in recs)
    probes = sum(int(r.get("probe_episodes", 0)) for r in recs)
    probe_hits = sum(float(r.get("probe_em", 0.0)) * int(r.get("probe_episodes", 0)) for r in recs)
    return {"zero_variance_share": sum(r.get("zero_variance_groups", 0) for r in recs) / groups if groups else None,
            "entropy_last5": sum(last) / len(last) if last else None, "generated_tokens": float(generated),
            "train_seconds": seconds or None, "steps": len(recs),
            "probe_groups": sum(int(r.get("probe_groups", 0)) for r in recs), "probe_episodes": probes,
            "probe_em": probe_hits / probes if probes else None,
            "dropped_groups": sum(int(r.get("dropped_groups", 0)) for r in recs),
            "extra_rounds": sum(max(0, int(r.get("sampling_rounds", 1)) - 1) for r in recs)}


def averaged(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-question EM and F1 averaged over seeds (the questions every row answered)."""
    ids = set.intersection(*(set(r["per_question"]) for r in rows))
    return {"per_question": {q: {k: sum(r["per_question"][q][k] for r in rows) / len(rows) for k in ("em", "f1")}
                             for q in sorted(ids)}}


def over_seeds(first: list[dict[str, Any]], second: list[dict[str, Any]], reps: int = 10_000) -> dict[str, Any]:
    """How the EM difference holds up across training seeds (two or more runs per side).

    Returns the per-seed paired differences (first[i] - second[i]), a two-level bootstrap interval
    (each resample draws seeds with replacement on each side, then questions with replacement), and
    an exact permutation test over the runs' EMs: every way of splitting the runs into groups of
    the two sides' sizes, two-sided p = the share of splits whose difference in mean EM is at least
    as large as the observed one. The smallest p it can give is ``2 / C(n, k)`` for a symmetric split.
    """
    import itertools

    import numpy as np

    ids = sorted(set.intersection(*(set(r["per_question"]) for r in first + second)))
    a = np.array([[r["per_question"][q]["em"] for q in ids] for r in first], dtype=np.float64)
    b = np.array([[r["per_question"][q]["em"] for q in ids] for r in second], dtype=np.float64)
    rng = np.random.default_rng(12345)
    boots = np.empty(reps)
    for i in range(reps):
        qs = rng.integers(0, len(ids), size=len(ids))
        sa = rng.integers(0, len(first), size=len(first))
        sb = rng.integers(0, len(second), size=len(second))
        boots[i] = a[sa][:, qs].mean() - b[sb][:, qs].mean()
    lo, hi = np.percentile(boots, [2.5, 97.5])
    ems = [float(x) for x in np.concatenate([a.mean(axis=1), b.mean(axis=1)])]
    observed = float(np.mean(ems[: len(first)]) - np.mean(ems[len(first):]))
    splits = list(itertools.combinations(range(len(ems)), len(first)))
    total = sum(ems)

    def split_difference(chosen: tuple[int, ...]) -> float:
        inside = sum(ems[i] for i in chosen)
        return inside / len(chosen) - (total - inside) / (len(ems) - len(chosen))

    extreme = sum(1 for chosen in splits if abs(split_difference(chosen)) >= abs(observed) - 1e-12)
    return {"per_seed": [learning.paired_difference(x, y) for x, y in zip(first, second, strict=False)],
            "two_level_ci": [float(lo), float(hi)], "run_ems": ems, "observed": observed,
            "permutation_p": extreme / len(splits), "splits": len(splits), "min_p": 2 / len(splits)}


#: RAG-R1 claims fewer turns "at equal or better accuracy". Accuracy counts as kept when the paired
#: EM interval stays above minus this margin (fixed on 2026-11-25, before either run had finished).
MQ_EM_MARGIN = 0.05


def multi_query_verdict(mq: dict[str, Any], sr1: dict[str, Any], em: dict[str, float],
                        data: dict[str, Any]) -> list[str]:
    """Paired differences in turns, search turns and queries per question, and the RAG-R1 verdict."""
    lines: list[str] = []
    diffs = {k: learning.paired_difference(mq, sr1, key=k) for k in ("turns", "searches", "queries")
             if all(k in v for r in (mq, sr1) for v in r["per_question"].values())}
    data["paired_differences"] = diffs
    for k, t in diffs.items():
        lines += ["", f"{k.capitalize()} per question, multi-query - search-r1: **{t['mean']:+.2f}**, 95% bootstrap "
                      f"interval [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}] over the {t['n']} questions."]
    if "turns" not in diffs:
        verdict = "unresolved: per-question turns were not recorded for both arms."
    elif diffs["turns"]["ci_low"] > 0:
        verdict = "the opposite of the paper's direction here at this budget: more turns per question."
    elif diffs["turns"]["ci_high"] < 0 and em["ci_low"] > -MQ_EM_MARGIN:
        verdict = (f"the paper's direction holds here at this budget: fewer turns per question, with EM no more "
                   f"than {MQ_EM_MARGIN:.2f} lower (the interval's lower end, {em['ci_low']:+.3f}).")
    elif diffs["turns"]["ci_high"] < 0 and em["ci_high"] < 0:
        verdict = "does not hold here at this budget: fewer turns per question, but lower EM."
    elif diffs["turns"]["ci_high"] < 0:
        verdict = (f"partly: fewer turns per question, but whether EM is kept within {MQ_EM_MARGIN:.2f} is "
                   "unresolved at this budget.")
    else:
        verdict = "unresolved at this budget: the turns interval includes zero."
    data["verdict"] = verdict
    per_turn = {name: sum(v["queries"] for v in r["per_question"].values())
                / max(1.0, sum(v["searches"] for v in r["per_question"].values()))
                for name, r in (("multi-query", mq), ("search-r1", sr1)) if "queries" in diffs}
    if per_turn:
        lines += ["", "Queries per search turn (how much of the saving is parallel queries rather than fewer "
                      "queries): " + ", ".join(f"{name} {v:.2f}" for name, v in per_turn.items()) + "."]
    lines += heuristic_beside({"multi-query": mq, "search-r1": sr1}, "synthetic-mixed", data)
    lines += by_question_type({"multi-query": mq, "search-r1": sr1}, "synthetic-mixed")
    per_q = {name: r["eval_seconds"] / r["n"] for name, r in (("multi-query", mq), ("search-r1", sr1))}
    return lines + ["", "Seconds per question (greedy evaluation, same machine, one run after the other): "
                        + ", ".join(f"{name} {v:.2f}" for name, v in per_q.items()) + ".",
                    "", f"Verdict: {verdict}"]


#: The non-learned baselines on the same synthetic-mixed dev questions and settings (search-r1 protocol).
MIXED_BASELINES = ("python benchmarks/learning.py --task synthetic-mixed --top-k 3 --max-turns 3 --max-doc-chars 450 "
                   "--max-new-tokens 80 --protocol search-r1 --phases baselines --baselines heuristic,oracle "
                   "--name learning_mixed_baselines --out runs/learning_mixed_baselines")
#: Per task: the results file whose ``baseline:heuristic`` ran on the same dev questions and settings as
#: the arms, and where its command is.
BASELINES = {"synthetic-2hop": ("learning_2hop.json", "`benchmarks/results/learning_2hop.md`"),
             "synthetic-mixed": ("learning_mixed_baselines.json", f"`{MIXED_BASELINES}`")}


def heuristic_beside(arms: dict[str, dict[str, Any]], task: str, data: dict[str, Any]) -> list[str]:
    """The rule-based heuristic on the same questions, and each learned arm's paired EM difference from it."""
    file, source = BASELINES[task]
    path = RESULTS / file
    if not path.is_file():
        return ["", f"The heuristic baseline on these questions is not measured yet ({source})."]
    saved = json.loads(path.read_text(encoding="utf-8"))
    row = saved["results"]["baseline:heuristic"]
    heuristic = {"per_question": {q: {"em": em} for q, em in saved["per_question_em"]["baseline:heuristic"].items()}}
    diffs = {name: learning.paired_difference(r, heuristic) for name, r in arms.items()}
    data["vs_heuristic"] = {"heuristic_em": row["em"], **diffs}
    return ["", f"The rule-based heuristic (nothing learned; search-r1 protocol, same questions and settings) scores "
                f"EM {row['em']:.3f} with {row['searches']:.2f} searches per question; learned minus heuristic: "
                + "; ".join(f"{name} {d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
                            for name, d in diffs.items()) + f" ({source})."]


def reward_halves(recs: list[dict[str, Any]]) -> tuple[float, float, float] | None:
    """Mean training reward over the first and second half of the steps, and the std of the per-step means."""
    rewards = [float(r["reward_mean"]) for r in recs if "reward_mean" in r]
    if len(rewards) < 2:
        return None
    half = len(rewards) // 2
    mean = sum(rewards) / len(rewards)
    std = (sum((x - mean) ** 2 for x in rewards) / (len(rewards) - 1)) ** 0.5
    return sum(rewards[:half]) / half, sum(rewards[half:]) / (len(rewards) - half), std


def ppo_verdict(args: argparse.Namespace, ppo: str, grpo: str, em: dict[str, float], data: dict[str, Any]) -> list[str]:
    """Search-R1's PPO-vs-GRPO finding is about convergence and stability, not a winner: say what EM and curves show.

    Search-R1 reports GRPO converging faster and PPO training more stably, at similar final
    performance; so an interval that includes zero is read as "no difference resolved", and the
    training-reward curves are summarised beside it (first and second half of the steps).
    """
    lines = ["", "Training reward (mean of the per-step means; first half of the steps, second half; std over steps):"]
    halves = {}
    for n in (ppo, grpo):
        h = reward_halves(curve_records(args, n))
        halves[n] = h
        lines.append(f"- {n}: " + ("no curve" if h is None else f"{h[0]:+.3f}, {h[1]:+.3f}; std {h[2]:.3f}"))
    data["reward_halves"] = halves
    if em["ci_low"] > 0:
        verdict = "PPO ahead in held-out EM at this budget."
    elif em["ci_high"] < 0:
        verdict = "GRPO ahead in held-out EM at this budget."
    else:
        verdict = ("no difference in held-out EM resolved at this budget (the interval includes zero). Search-R1 "
                   "reports similar final performance, GRPO converging faster and PPO training more stably, over "
                   "runs hundreds of steps long; these 20 steps do not test either.")
    data["verdict"] = verdict
    return lines + ["", f"Verdict: {verdict}"]


def by_question_type(arms: dict[str, dict[str, Any]], task: str) -> list[str]:
    """Per question type (bridge by hops, comparison, single-hop): EM, turns, search turns, queries of each arm.

    Descriptive only (the groups are small; no intervals): where the turns are saved and at what cost.
    """
    from searchenv.tasks import load_task

    kinds = {ex.id: f"{ex.type} ({ex.hops} hop{'s' if ex.hops > 1 else ''})" for ex in load_task(task).examples("dev")}
    keys = ("em", "turns", "searches", "queries")
    if not all(k in v for r in arms.values() for v in r["per_question"].values() for k in keys):
        return []
    groups: dict[str, list[str]] = {}
    for q in next(iter(arms.values()))["per_question"]:
        groups.setdefault(kinds.get(q, "unknown"), []).append(q)
    sizes = sorted(len(ids) for ids in groups.values())
    lines = ["", f"By question type (descriptive; groups of {sizes[0]}-{sizes[-1]} questions, no intervals):", "",
             "| type | questions | " + " | ".join(f"{name} {k}" for name in arms for k in keys) + " |",
             "|---|---:|" + "---:|" * (len(arms) * len(keys))]
    for kind in sorted(groups):
        ids = groups[kind]
        cells = [f"{sum(r['per_question'][q][k] for q in ids) / len(ids):.{3 if k == 'em' else 2}f}"
                 for r in arms.values() for k in keys]
        lines.append(f"| {kind} | {len(ids)} | " + " | ".join(cells) + " |")
    return lines


def report(args: argparse.Namespace) -> None:
    from agents.trainers.plot import plot_runs

    RESULTS.mkdir(parents=True, exist_ok=True)
    _committed_results()  # the committed arms, read before this report rewrites any of their files
    for key, (paper, claim, first, second) in COMPARISONS.items():
        rows = {n: load_arm(args, n) for n in first + second}
        missing = [n for n, r in rows.items() if r is None]
        if key == "multi_query":
            lines = [f"**{paper}**: {claim}. Task synthetic-mixed, {args.n_dev} held-out dev questions, greedy "
                     "decoding; each arm SFT on its own protocol's oracle demonstrations, then 20 GRPO steps "
                     "(outcome reward), LoRA rank 12, otherwise the settings of the 2-hop run.", ""]
        else:
            lines = [f"**{paper}**: {claim}. Task {args.task}, {args.n_dev} held-out dev questions, greedy "
                     f"decoding; every arm {args.steps} steps from the same start (SFT checkpoint of `{args.out}`, "
                     "except `from_base`), LoRA rank 12.", ""]
            lines[-2] += START_NOTES.get(key, "")
        data: dict[str, Any] = {"comparison": key, "paper": paper, "claim": claim, "first": first,
                                "second": second, "missing": missing, "machine": machine(), "arms": {}}
        if any(r is not None for r in rows.values()):
            lines += ["| arm | trainer | reward | options | seed | EM | F1 | searches/q | turns/q | seconds/q (eval) "
                      "| zero-variance groups | entropy (last 5 steps) | generated tokens | train min |",
                      "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for n, r in rows.items():
                if r is None:
                    lines.append(f"| {n} | not run yet | | | | | | | | | | | | |")
                    continue
                arm, c = ARMS[n], curve_stats(args, n)
                zv, ent, gen = c["zero_variance_share"], c["entropy_last5"], c["generated_tokens"]
                opts = json.dumps(arm.options) if arm.options else ""
                turns = f"{r['turns']:.2f}" if "turns" in r else ""
                lines.append(f"| {n} | {arm.trainer} | {json.dumps(arm.reward)} | {opts} | {arm.seed} "
                             f"| {r['em']:.3f} | {r['f1']:.3f} | {r['searches']:.2f} | {turns} | "
                             f"{r['eval_seconds'] / r['n']:.2f} | {'' if zv is None else f'{zv:.0%}'} | "
                             f"{'' if ent is None else f'{ent:.3f}'} | {'' if gen is None else f'{gen:,.0f}'} | "
                             f"{(c['train_seconds'] or r['train_seconds']) / 60:.0f} |")
                data["arms"][n] = {**{k: v for k, v in r.items() if k not in ("examples", "recorded_in")}, **c,
                                   "curve": curve_records(args, n)}
        for n, r in rows.items():
            c = curve_stats(args, n)
            if r is not None and c["probe_episodes"]:
                lines += ["", f"{n}: {c['probe_episodes']} probe episodes in {c['probe_groups']} dead-end groups over "
                              f"{c['steps']} steps; probe EM {c['probe_em']:.3f} (a probe that answers correctly is "
                              "what gives a dead-end group a gradient towards the answer)."]
            if r is not None and (c["dropped_groups"] or c["extra_rounds"]):
                lines += ["", f"{n}: {c['dropped_groups']} groups dropped for zero reward variance, "
                              f"{c['extra_rounds']} extra sampling rounds over {c['steps']} steps."]
        if not missing:
            a = averaged([rows[n] for n in first])  # type: ignore[misc]
            b = averaged([rows[n] for n in second])  # type: ignore[misc]
            d = learning.paired_difference(a, b)
            data["paired_em_difference"] = d
            lines += ["", f"EM difference ({' + '.join(first)}) - ({' + '.join(second)}): **{d['mean']:+.3f}**, "
                          f"95% bootstrap interval over the {d['n']} questions [{d['ci_low']:+.3f}, "
                          f"{d['ci_high']:+.3f}]; questions won / lost {d['a_better']} / {d['b_better']}."]
            if key == "multi_query":
                lines += multi_query_verdict(rows[first[0]], rows[second[0]], d, data)  # type: ignore[arg-type]
            elif key == "ppo":
                lines += ppo_verdict(args, first[0], second[0], d, data)
                lines += heuristic_beside({n: rows[n] for n in first + second}, args.task, data)  # type: ignore[misc]
            else:
                if len(first) > 1 and len(second) > 1:
                    seeds = over_seeds([rows[n] for n in first], [rows[n] for n in second])  # type: ignore[misc]
                    data["over_seeds"] = seeds
                    per_seed = ", ".join(f"{x} - {y}: {p['mean']:+.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]"
                                         for x, y, p in zip(first, second, seeds["per_seed"], strict=False))
                    lo, hi = seeds["two_level_ci"]
                    sentence = (f"Over training seeds: per seed {per_seed}. A two-level bootstrap (seeds, then "
                                f"questions) gives [{lo:+.3f}, {hi:+.3f}]. A permutation test over the "
                                f"{len(seeds['run_ems'])} runs' EMs gives p = {seeds['permutation_p']:.2f} (two-sided, "
                                f"{seeds['splits']} splits)")
                    if seeds["min_p"] > 0.05:
                        sentence += (f"; with {len(first)} and {len(second)} runs the smallest p it can give is "
                                     f"{seeds['min_p']:.2f}, so it cannot reject at 0.05 whatever the result: more "
                                     "seeds are what would make it informative")
                    lines += ["", sentence + "."]
                if d["ci_low"] > 0:
                    verdict = "the paper's direction holds here at this budget."
                elif d["ci_high"] < 0:
                    verdict = "the opposite of the paper's direction here at this budget."
                else:
                    verdict = "unresolved at this budget: the interval includes zero."
                lines += ["", f"Verdict on accuracy: {verdict}"]
                data["verdict"] = verdict
                lines += heuristic_beside({n: rows[n] for n in first + second}, args.task, data)  # type: ignore[misc]
        elif key == "multi_query":
            lines += ["", "Pending: " + "; ".join(f"{n} (`{MULTI_QUERY_RUNS[n]}`)" for n in missing) + "."]
        else:
            lines += ["", f"Pending: {', '.join(missing)} (run `python benchmarks/ablations.py --arms "
                          f"{','.join(missing)}`)."]
        curves = {n: recs for n in first + second if (recs := curve_records(args, n))}
        png = RESULTS / f"ablation_{key}_curves.png"
        if curves:
            with tempfile.TemporaryDirectory(prefix="ablation-curves-") as tmp:
                runs = []
                for n, recs in curves.items():
                    (Path(tmp) / n).mkdir()
                    (Path(tmp) / n / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
                    runs.append(Path(tmp) / n)
                plot_runs(runs, png, labels=[f"ablation_{n}" for n in curves], smooth=5)
        if png.is_file():
            data["curves_png"] = f"benchmarks/results/{png.name}"  # relative: the same on every checkout
            lines += ["", f"Learning curves: `benchmarks/results/ablation_{key}_curves.png`."]
            lost = [n for n in first + second if rows.get(n) is not None and n not in curves]
            if curves and lost:
                lines += [f"({', '.join(lost)}: trained before curves were kept in the results; its curve is in "
                          "the figures of the comparisons it was reported with.)"]
        if key == "multi_query":
            lines += ["", "Commands: " + "; ".join(f"`{MULTI_QUERY_RUNS[n]}`" for n in first + second)
                      + ", then `python benchmarks/ablations.py --report`."]
        else:
            lines += ["", f"Command: `python benchmarks/ablations.py --arms {','.join(first + second)}`."]
        # temporary file, then rename: a killed report leaves each file old or new, never half
        atomic_write_lines(RESULTS / f"ablation_{key}.json", json.dumps(data, indent=2, default=str).splitlines())
        atomic_write_lines(RESULTS / f"ablation_{key}.md", lines)
        print("\n".join(lines), "\n")


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        for name in [a for a in args.arms.split(",") if a]:
            if ARMS[name].reuse:
                learning.log(f"{name}: the learning.py phase {ARMS[name].reuse} (same config)")
                continue
            t0 = time.perf_counter()
            learning.run_phase(args, f"ablation_{name}", lambda name=name: arm_phase(args, name))
            learning.log(f"{name}: {time.perf_counter() - t0:.0f} s")
    report(args)


if __name__ == "__main__":
    main()
