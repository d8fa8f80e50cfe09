"""The papers' claims settled with seeds, on the CPU: one shared start, at least 5 seeds an arm, a verdict.

Each claim compares arms that start from one checkpoint (default: the packaged searcher's cold-start
SFT model, ``load_searcher(upto="sft")``) and differ only in what the claim is about. Every arm runs
``--seeds`` seeds (seed s of every arm before seed s+1 of any, so a sweep cut short stays balanced),
trains the last ``--train-layers`` layers for ``--steps`` steps and is evaluated greedily on the first
``--n-dev`` dev questions. A claim's report gives, per arm, the interquartile mean (IQM) of the
seeds' final scores with a 95% stratified-bootstrap interval over seeds, the probability of
improvement over seeds, the paired interval over questions (each question's score averaged over
the seeds first), the rule-based heuristic on the same questions, each run's closed-book control
(its EM when every search finds nothing: what it answers from its weights), the learning curves with seeds as
bands, and the verdict of ``_seeds.verdict`` (held, refuted, or unresolved with the seeds the
observed spread would need). ``_seeds`` says why the estimators are written out rather than imported
from ``rliable``.

Claims, in the order they are settled (``--claim``):

| claim | paper | arms (A vs B) | metrics (direction) |
|---|---|---|---|
| ``r3rag-process`` | R3-RAG | outcome + relevance process reward vs outcome | dev EM; mean training EM (higher) |
| ``rl-beyond-sft`` | Search-R1 / ReSearch | GRPO, and PPO, vs the SFT start itself | dev EM (higher) |
| ``frugal`` | FrugalRAG | outcome + 0.1 a search vs outcome | searches (lower); EM (equal, 0.05) |
| ``research-second-hop`` | ReSearch / Search-R1 | GRPO on 2-hop from a 1-hop-only start vs it | 2-hop EM (higher) |

| ``rex`` | REX-RAG | GRPO + 2 probes a dead-end group vs GRPO, 4-hop | dev EM (higher) |
| ``ur2`` | UR2 | the UR2 curriculum vs uniform sampling, mixed | dev EM (higher) |
| ``mmoa`` | MMOA-RAG | joint MAPPO vs MAPPO training one role (each of three) | dev EM (higher) |
| ``r3rag-transfer`` | R3-RAG | process vs outcome, both evaluated with dense and hybrid retrieval | EM (higher) |

Two claims start from a model of their own, built here first from ``--base`` (``START_RECIPES``):
``research-second-hop`` from SFT on synthetic-1hop oracle demonstrations only (every packaged
checkpoint has seen 2-hop), ``mmoa`` from SFT on the ``mmoa-oracle`` pipeline's role turns (the
paper's warm start); ``mmoa``'s arms are evaluated as the ``mmoa-llm`` pipeline, the model in every role,
and share the F1 reward.

The mean training EM over the steps is the area under the learning curve.

Runs are shared between claims when their settings are equal (``frugal``'s outcome arm is
``r3rag-process``'s), and each is cached as ``<out>/<run key>.json`` beside its trainer folder. An
interrupted run continues from its last checkpoint (``--save-every``); run the same command again.
``--max-minutes`` stops starting new runs once that much time has passed (what is running finishes).

    python benchmarks/claims.py --claim r3rag-process --seeds 5    # run or continue the sweep, then report
    python benchmarks/claims.py --report                           # rewrite the report from what is finished

The report is docs/results/claims.md (``--doc``) with benchmarks/results/claims.json and a curve
picture per claim; a claim whose runs are not all finished is listed with the runs it still needs
and the seconds they take at the speed of the runs already finished.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

import _seeds  # noqa: E402
from _common import RESULTS, cpu_flags, machine, paired_difference  # noqa: E402

OUTCOME = {"outcome": 1.0, "format": 0.1}
ROOT = _HERE.parent


@dataclass(frozen=True)
class Arm:
    """One side of a claim: how it trains from the shared start (``trainer="none"``: the start as it is)."""

    trainer: str = "grpo"  # grpo, ppo, mappo (a pipeline's roles) or none
    # term weights; a MAPPO arm's shared reward may be a metric name (f1, em, contains)
    reward: dict[str, float] | str = field(default_factory=lambda: dict(OUTCOME))
    options: dict[str, Any] = field(default_factory=dict)
    # the retriever of the held-out evaluation (training always searches with BM25): bm25, dense or hybrid;
    # an arm that differs only here shares the BM25 arm's training run
    retriever: str = "bm25"


@dataclass(frozen=True)
class Comparison:
    """Arm ``a`` against arm ``b`` on one metric, in the claimed direction (``higher``, ``lower``, ``equal``)."""

    a: str
    b: str
    metric: str
    direction: str


@dataclass(frozen=True)
class Claim:
    """A paper's claim as arms from one start on one task, and the comparisons that settle it."""

    paper: str
    statement: str
    task: str
    arms: dict[str, Arm]
    comparisons: tuple[Comparison, ...]
    pending: str | None = None  # why claims.py cannot run it yet
    start: str | None = None  # a start of START_RECIPES instead of --start
    pipeline: str | None = None  # evaluated as this pipeline with the policy in every role (else a greedy agent)


@dataclass(frozen=True)
class StartRecipe:
    """A start that claims.py builds itself: SFT of ``--base`` on one task's oracle demonstrations."""

    task: str
    demos: int = 200
    steps: int = 40
    batch: int = 8
    lr: float = 3e-4
    # demonstrations of the mmoa-oracle pipeline's role turns (MAPPO's warm start) instead of the oracle agent's
    pipeline: bool = False


#: Starts built here (cached in ``<out>/start-<name>/model``).
START_RECIPES: dict[str, StartRecipe] = {
    # taught only single-hop questions: what RL must then extend to a second hop
    "sft-1hop": StartRecipe("synthetic-1hop"),
    # every role of the MMOA pipeline (rewriter, selector, generator) played by one model, as the paper warms up
    "mmoa-sft": StartRecipe("synthetic-2hop", pipeline=True),
}


CLAIMS: dict[str, Claim] = {
    "r3rag-process": Claim(
        "R3-RAG", "an outcome reward plus a relevance-verified process reward beats the outcome reward alone",
        "synthetic-2hop", {"process": Arm(reward={**OUTCOME, "relevance": 0.2}), "outcome": Arm()},
        (Comparison("process", "outcome", "em", "higher"), Comparison("process", "outcome", "train_em", "higher"))),
    "rl-beyond-sft": Claim(
        "Search-R1 / ReSearch", "RL (GRPO, PPO) from the SFT checkpoint improves on it", "synthetic-2hop",
        {"grpo": Arm(), "ppo": Arm(trainer="ppo"), "start": Arm(trainer="none")},
        (Comparison("grpo", "start", "em", "higher"), Comparison("ppo", "start", "em", "higher"))),
    "frugal": Claim(
        "FrugalRAG", "a cost a search gives fewer searches a question at equal EM", "synthetic-2hop",
        {"frugal": Arm(reward={**OUTCOME, "cost": 0.1}), "outcome": Arm()},
        (Comparison("frugal", "outcome", "searches", "lower"), Comparison("frugal", "outcome", "em", "equal"))),
    "research-second-hop": Claim(
        "ReSearch / Search-R1", "RL from the outcome reward alone teaches the second hop to a policy taught only 1-hop",
        "synthetic-2hop", {"grpo": Arm(), "start": Arm(trainer="none")},
        (Comparison("grpo", "start", "em", "higher"),), start="sft-1hop"),
    "rex": Claim(
        "REX-RAG", "probes out of dead ends help GRPO on long chains", "synthetic-4hop",
        {"probes": Arm(options={"rex_probes": 2}), "plain": Arm()},
        (Comparison("probes", "plain", "em", "higher"),)),
    "ur2": Claim(
        "UR2", "a difficulty curriculum beats uniform sampling", "synthetic-mixed",
        {"curriculum": Arm(options={"curriculum": "ur2", "hard_share": [0.25, 1.0]}), "uniform": Arm()},
        (Comparison("curriculum", "uniform", "em", "higher"),)),
    "mmoa": Claim(
        "MMOA-RAG", "training every role jointly (MAPPO) beats training any one role", "synthetic-2hop",
        {"joint": Arm(trainer="mappo", reward="f1"),
         **{f"{role} only": Arm(trainer="mappo", reward="f1", options={"train_roles": [role]})
            for role in ("rewriter", "selector", "generator")}},
        tuple(Comparison("joint", f"{role} only", "em", "higher") for role in ("rewriter", "selector", "generator")),
        start="mmoa-sft", pipeline="mmoa-llm"),
    "r3rag-transfer": Claim(
        "R3-RAG", "a policy trained with BM25 keeps its gain under dense and hybrid retrieval", "synthetic-2hop",
        {f"{name}@{ret}": Arm(reward=reward, retriever=ret) for ret in ("dense", "hybrid")
         for name, reward in (("process", {**OUTCOME, "relevance": 0.2}), ("outcome", OUTCOME))},
        (Comparison("process@dense", "outcome@dense", "em", "higher"),
         Comparison("process@hybrid", "outcome@hybrid", "em", "higher"))),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claim", action="append", default=[], choices=list(CLAIMS),
                    help="Claim to run (repeat for several; none: only report).")
    ap.add_argument("--report", action="store_true", help="Only write the report from the finished runs.")
    ap.add_argument("--seeds", type=int, default=5, help="Seeds of every arm (at least 5 for a verdict of record).")
    ap.add_argument("--start", default="searcher-sft",
                    help="The shared start: searcher-sft (the packaged searcher's cold-start model), searcher "
                         "(with its RL adapters), or an HF model folder.")
    ap.add_argument("--base", default="smollm2-135m",
                    help="The model a built start (START_RECIPES: a claim's own start) is trained from.")
    ap.add_argument("--start-steps", type=int, default=None, help="SFT steps of a built start (default: its recipe's).")
    ap.add_argument("--start-demos", type=int, default=None,
                    help="Demonstrations of a built start (default: its recipe's).")
    ap.add_argument("--steps", type=int, default=12, help="Training steps of every arm.")
    ap.add_argument("--batch", type=int, default=4, help="Questions a step.")
    ap.add_argument("--group", type=int, default=4, help="Samples a question (GRPO; PPO takes batch x group "
                                                         "questions once each).")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--train-layers", type=int, default=6,
                    help="Layers from the top that train (the rest frozen); 0: every layer.")
    ap.add_argument("--n-dev", type=int, default=100, help="Held-out dev questions each run is evaluated on.")
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--max-doc-chars", type=int, default=450)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="auto", help="auto (CUDA when there is one), cpu or cuda.")
    ap.add_argument("--save-every", type=int, default=2)
    ap.add_argument("--max-minutes", type=float, default=None, help="Start no new run after this many minutes.")
    ap.add_argument("--out", type=Path, default=Path("runs/claims"), help="Run folders and cached results.")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "results" / "claims.md")
    ap.add_argument("--results", type=Path, default=RESULTS, help="Folder of claims.json and the curve pictures.")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.n_dev < 1 or args.train_layers < 0:
        ap.error("--seeds, --steps and --n-dev must be positive, --train-layers at least 0")
    for name in args.claim:
        if CLAIMS[name].pending:
            ap.error(f"{name} cannot run yet: {CLAIMS[name].pending}")
    return args


def settings(args: argparse.Namespace, task: str) -> dict[str, Any]:
    """Everything that makes two runs of an arm comparable, beside the arm itself and the seed."""
    return {"task": task, "start": getattr(args, "start_label", args.start), "steps": args.steps,
            "batch": args.batch, "group": args.group, "lr": args.lr, "train_layers": args.train_layers,
            "n_dev": args.n_dev, "top_k": args.top_k, "max_turns": args.max_turns,
            "max_doc_chars": args.max_doc_chars, "max_new_tokens": args.max_new_tokens}


def run_key(args: argparse.Namespace, task: str, arm: Arm, seed: int) -> str:
    """A run's folder name: equal settings, arm and seed give the same key in every claim."""
    if arm.trainer == "none":  # the start, evaluated greedily: no seed to vary
        spec: dict[str, Any] = {k: v for k, v in settings(args, task).items()
                                if k in ("task", "start", "n_dev", "top_k", "max_turns", "max_doc_chars",
                                         "max_new_tokens")}
        seed_part = "start"
    else:
        spec = {**settings(args, task), "trainer": arm.trainer, "reward": arm.reward, "options": arm.options}
        seed_part = f"s{seed}"
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    return f"{task}-{arm.trainer}-{digest}-{seed_part}" + ("" if arm.retriever == "bm25" else f"@{arm.retriever}")


def eval_retriever(args: argparse.Namespace, task: str, name: str) -> Any:
    """The evaluation retriever: a name ``SearchQAEnv`` resolves, or ``hybrid`` (BM25 and dense fused by rank)."""
    if name != "hybrid":
        return name
    from searchenv.make import resolve_retriever
    from searchenv.retrievers.hybrid import HybridRetriever
    from searchenv.tasks.registry import load_task

    corpus = load_task(task).corpus_path
    return HybridRetriever([resolve_retriever("bm25", corpus), resolve_retriever("dense", corpus)])


def greedy(args: argparse.Namespace, policy: Any, pipeline: str | None = None) -> Any:
    """The policy as a greedy agent with its protocol's own system prompt, or in every role of ``pipeline``."""
    if pipeline is not None:
        from agents.baselines.pipelines import make_pipeline

        return make_pipeline(pipeline, policy=policy, max_new_tokens=args.max_new_tokens)
    from agents.baselines import make_agent

    return make_agent("llm", policy=policy, max_new_tokens=args.max_new_tokens, temperature=0.0)


def evaluate_run(args: argparse.Namespace, agent: Any, task: str, retriever: str) -> dict[str, Any]:
    """The agent's episodes on the first ``--n-dev`` dev questions: the row and per-question scores."""
    from agents.evaluation.evaluate import evaluate

    res = evaluate(agent, task=task, split="dev", n=args.n_dev, retriever=eval_retriever(args, task, retriever),
                   retriever_label=retriever, top_k=args.top_k, max_turns=args.max_turns,
                   batch_size=min(args.n_dev, 100), env_kwargs={"max_doc_chars": args.max_doc_chars})
    row, kept = res.row, ("em", "f1", "turns", "searches", "queries")
    return {**{k: row[k] for k in ("em", "f1", "searches", "turns", "answered", "invalid_turns", "evidence_recall")},
            "n": args.n_dev, "eval_seconds": res.seconds, "retriever": retriever,
            "per_question": {e.example_id: {k: float(e.metrics[k]) for k in kept} for e in res.episodes}}


def load_start(args: argparse.Namespace) -> Any:
    """The shared start as an HFPolicy on ``--device``."""
    import torch

    from agents.devices import resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.start in ("searcher", "searcher-sft"):
        from agents.baselines.searcher import load_searcher

        return load_searcher(upto="sft" if args.start == "searcher-sft" else None, device=device)
    from agents.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(args.start, device=device)


def claim_args(args: argparse.Namespace, claim: Claim, build: bool) -> argparse.Namespace | None:
    """``args`` for one claim: with its own start (built first when ``build``), or None if that is not built."""
    if claim.start is None:
        return args
    recipe = START_RECIPES[claim.start]
    steps, demos = args.start_steps or recipe.steps, args.start_demos or recipe.demos
    label = f"{claim.start} from {args.base}" + ("" if (steps, demos) == (recipe.steps, recipe.demos)
                                                 else f" ({demos} demonstrations, {steps} steps)")
    folder = args.out / f"start-{hashlib.sha256(label.encode()).hexdigest()[:10]}" / "model"
    if not (folder / "config.json").is_file():
        if not build:
            return None
        build_start(args, recipe, steps, demos, folder)
    out = argparse.Namespace(**vars(args))
    out.start, out.start_label = str(folder), label
    return out


def build_start(args: argparse.Namespace, recipe: StartRecipe, steps: int, demos: int, folder: Path) -> None:
    """SFT of ``--base`` by a start recipe (resumable), saved as a model folder (written aside, then renamed)."""
    from agents.devices import resolve_device
    from agents.policies.hf import HFPolicy
    from agents.trainers.mappo_sft import MAPPOSFTConfig
    from agents.trainers.sft import SFTConfig, train_sft

    run = folder.parent / "sft"
    fields = {"output_dir": str(run), "task": recipe.task, "num_demos": demos, "steps": steps,
              "batch_size": recipe.batch, "micro_batch_size": 4, "learning_rate": recipe.lr, "lr_schedule": "cosine",
              "warmup_steps": 2, "train_layers": args.train_layers or None, "top_k": args.top_k,
              "max_doc_chars": args.max_doc_chars, "save_every": 5, "progress": False, "log_every": 5,
              "threads": args.threads, "device": args.device}
    cfg = (MAPPOSFTConfig(**fields, max_new_tokens=args.max_new_tokens) if recipe.pipeline
           else SFTConfig(**fields, max_turns=args.max_turns))
    resume = (run / "checkpoint.pt").is_file()
    policy = HFPolicy.from_pretrained(args.base, device=resolve_device(args.device))
    out = train_sft(cfg, policy=policy, resume=resume, overwrite=not resume)
    tmp = folder.with_name(folder.name + ".tmp")
    out["policy"].model.save_pretrained(tmp)
    out["policy"].tokenizer.save_pretrained(tmp)
    tmp.replace(folder)


def train_config(args: argparse.Namespace, task: str, arm: Arm, seed: int, run_dir: Path) -> tuple[Any, Any]:
    """``(config, train function)`` of one seed of an arm."""
    common = {"output_dir": str(run_dir), "task": task, "split": "train",
              "reward": arm.reward if isinstance(arm.reward, str) else dict(arm.reward),
              "steps": args.steps, "learning_rate": args.lr, "train_layers": args.train_layers or None, "seed": seed,
              "kl_coef": 0.0, "temperature": 1.0, "top_k": args.top_k, "max_turns": args.max_turns,
              "max_doc_chars": args.max_doc_chars, "max_new_tokens": args.max_new_tokens, "micro_batch_size": 4,
              "save_every": args.save_every, "progress": False, "log_every": 1, "threads": args.threads,
              "device": args.device}
    if arm.trainer == "ppo":
        from agents.trainers.ppo import PPOConfig, train_ppo

        return PPOConfig(batch_size=args.batch * args.group, samples_per_question=1, **common), train_ppo
    if arm.trainer == "mappo":  # each role acts once: no turn budget
        from agents.trainers.mappo import MAPPOConfig, train_mappo

        common.pop("max_turns")
        return MAPPOConfig(batch_size=args.batch, samples_per_question=args.group, **common, **arm.options), train_mappo
    from agents.trainers.grpo import GRPOConfig, train_grpo

    options = {k: tuple(v) if isinstance(v, list) else v for k, v in arm.options.items()}
    return GRPOConfig(batch_size=args.batch, group_size=args.group, **common, **options), train_grpo


def run_one(args: argparse.Namespace, task: str, arm: Arm, seed: int, pipeline: str | None = None) -> dict[str, Any]:
    """Train (or continue) one seed of an arm, evaluate it (as ``pipeline``'s roles if given), cache its result."""
    key = run_key(args, task, arm, seed)
    path = args.out / f"{key}.json"
    if path.is_file():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    run_dir = args.out / key.split("@")[0]  # an arm evaluated with another retriever shares the BM25 arm's run
    t0 = time.perf_counter()
    policy = load_start(args)
    steps, curve = 0, []
    if arm.trainer != "none":
        cfg, train = train_config(args, task, arm, seed, run_dir)
        resume = (run_dir / "checkpoint.pt").is_file()
        out = train(cfg, policy=policy, resume=resume, overwrite=not resume)
        policy, steps = out["policy"], out["step"]
        from agents.trainers.metrics import read_metrics

        curve = read_metrics(run_dir)
    train_s = time.perf_counter() - t0
    policy.model.eval()
    row = evaluate_run(args, greedy(args, policy, pipeline), task, arm.retriever)
    closed = evaluate_run(args, greedy(args, policy, pipeline), task, "closed-book")["em"]
    result = {"key": key, "task": task, "trainer": arm.trainer, "reward": arm.reward, "options": arm.options,
              "seed": seed, "steps": steps, "train_seconds": train_s, "settings": settings(args, task),
              "train_em": sum(float(r.get("em", 0.0)) for r in curve) / len(curve) if curve else None,
              "curve": curve, **{k: v for k, v in row.items() if k != "examples"}, "closed_book_em": closed,
              "machine": machine(),
              "cpu_flags": cpu_flags(), "load": os.getloadavg()}
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)
    print(json.dumps({"run": key, "em": result["em"], "searches": result["searches"],
                      "seconds": round(train_s + result["eval_seconds"])}), flush=True)
    return result


def heuristic(args: argparse.Namespace, task: str) -> dict[str, Any]:
    """The rule-based heuristic on the same dev questions and settings (cached)."""
    from agents.baselines import make_agent

    path = args.out / f"heuristic-{task}-{args.n_dev}-{args.top_k}-{args.max_turns}-{args.max_doc_chars}.json"
    if path.is_file():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    row = evaluate_run(args, make_agent("heuristic"), task, "bm25")
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(row, default=str), encoding="utf-8")
    tmp.replace(path)
    return row


def sweep(args: argparse.Namespace, name: str, started: float) -> None:
    """Every seed of every arm of a claim, seed by seed; stops starting runs past ``--max-minutes``."""
    claim = CLAIMS[name]
    heuristic(args, claim.task)
    args = claim_args(args, claim, build=True)  # type: ignore[assignment]
    for seed in range(args.seeds):
        for arm in claim.arms.values():
            if args.max_minutes is not None and time.perf_counter() - started > 60 * args.max_minutes:
                print(f"{name}: --max-minutes reached; run the same command again to continue", flush=True)
                return
            run_one(args, claim.task, arm, seed, claim.pipeline)


def kept(args: argparse.Namespace) -> Path:
    """Where the report keeps a copy of every finished run's result (committed: run folders stay on one machine)."""
    return args.results / "claims_runs"


def finished(args: argparse.Namespace, claim: Claim) -> dict[str, list[dict[str, Any]]]:
    """The finished runs of each arm, by seed (the start arm: its one evaluation, once per seed).

    A run's result is read from ``--out``, else from the copy the report kept in ``<results>/claims_runs``.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for arm_name, arm in claim.arms.items():
        runs = []
        for seed in range(args.seeds):
            name = f"{run_key(args, claim.task, arm, seed)}.json"
            path = next((p for p in (args.out / name, kept(args) / name) if p.is_file()), None)
            if path is not None:
                runs.append(json.loads(path.read_text(encoding="utf-8")))
        out[arm_name] = runs
    return out


def keep_results(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Copy every finished run's result from ``--out`` into ``<results>/claims_runs``; return all kept results."""
    from searchenv.corpus import atomic_write_lines

    folder = kept(args)
    for path in sorted(args.out.glob("*.json")) if args.out.is_dir() else []:
        if not path.name.startswith("heuristic-") and not (folder / path.name).is_file():
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_lines(folder / path.name, path.read_text(encoding="utf-8").splitlines())
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def averaged(runs: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Each question's ``metric`` averaged over the runs (the questions all of them answered)."""
    ids = set.intersection(*(set(r["per_question"]) for r in runs))
    return {"per_question": {q: {metric: sum(r["per_question"][q][metric] for r in runs) / len(runs)}
                             for q in sorted(ids)}}


def compare(claim: Claim, runs: dict[str, list[dict[str, Any]]], c: Comparison) -> dict[str, Any]:
    """IQM and interval of each side over seeds, the paired interval over questions, and the verdict."""
    a, b = runs[c.a], runs[c.b]
    n = min(len(a), len(b)) if claim.arms[c.b].trainer != "none" else len(a)
    a = a[:n]
    b = b[:n] if claim.arms[c.b].trainer != "none" else b[:1] * n
    sa, sb = [float(r[c.metric]) for r in a], [float(r[c.metric]) for r in b]
    row: dict[str, Any] = {"a": c.a, "b": c.b, "metric": c.metric, "direction": c.direction, "seeds": n,
                           "a_seeds": sa, "b_seeds": sb,
                           "a_iqm": _seeds.iqm(sa), "a_iqm_ci": _seeds.iqm_interval(sa),
                           "b_iqm": _seeds.iqm(sb), "b_iqm_ci": _seeds.iqm_interval(sb),
                           "improvement": _seeds.probability_of_improvement(sa, sb)}
    if c.metric == "train_em":  # a training-curve statistic: no per-question values
        mean = sum(sa) / n - sum(sb) / n
        lo, hi = _seeds.mean_difference_interval(sa, sb)
        row["questions"] = {"n": 0, "mean": mean, "ci_low": lo, "ci_high": hi}
    else:
        row["questions"] = paired_difference(averaged(a, c.metric), averaged(b, c.metric), key=c.metric)
    row.update(_seeds.verdict(c.direction, sa, sb, row["questions"]))
    return row


def draw_curves(args: argparse.Namespace, name: str, runs: dict[str, list[dict[str, Any]]]) -> str | None:
    """The trained arms' learning curves, seeds as bands, into ``<results>/claims_<name>_curves.png``."""
    from agents.trainers.plot import plot_runs

    with tempfile.TemporaryDirectory(prefix="claim-curves-") as tmp:
        folders, labels = [], []
        for arm_name, arm_runs in runs.items():
            for r in arm_runs:
                if r.get("curve"):
                    folder = Path(tmp) / r["key"]
                    folder.mkdir()
                    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r["curve"]))
                    folders.append(folder)
                    labels.append(arm_name)
        if not folders:
            return None
        png = args.results / f"claims_{name}_curves.png"
        plot_runs(folders, png, labels=labels)
    return png.name


def _duration(seconds: float) -> str:
    """Seconds as minutes under two hours, else as hours."""
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _ci(pair: Any) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def progress_lines(args: argparse.Namespace, name: str, claim: Claim, runs: dict[str, list[dict[str, Any]]],
                   entry: dict[str, Any], need: str) -> list[str]:
    """A claim not yet reached: each arm's finished runs and the heuristic on the same questions, no verdict."""
    h = heuristic(args, claim.task)
    entry["heuristic_em"] = h["em"]
    lines = [f"### {name}: {claim.paper} (in progress)", "", f"Claim: {claim.statement}. Task {claim.task}, "
             f"{args.n_dev} dev questions; heuristic EM {h['em']:.3f} on them. No verdict until every arm has "
             f"its seeds ({need}).", ""]
    for arm_name, rs in runs.items():
        if rs:
            ems = ", ".join(f"{r['em']:.3f}" for r in rs)
            lines.append(f"- {arm_name}: dev EM {ems} (seeds {', '.join(str(r['seed']) for r in rs)}).")
            lines += arm_lines(arm_name, rs, h)
    return [*lines, ""]


def arm_lines(arm_name: str, runs: list[dict[str, Any]], h: dict[str, Any]) -> list[str]:
    """An arm's closed-book controls, and its EM minus the heuristic's over the same questions with the interval."""
    lines = []
    closed = [r["closed_book_em"] for r in runs if r.get("closed_book_em") is not None]
    if closed:
        lines.append(f"- {arm_name}, closed-book control (every search finds nothing), EM: "
                     f"{', '.join(f'{v:.3f}' for v in closed)}.")
    d = paired_difference(averaged(runs, "em"), {"per_question": {q: {"em": v["em"]} for q, v in
                                                                  h["per_question"].items()}})
    lines.append(f"- {arm_name} minus the heuristic, EM over questions: {d['mean']:+.3f} "
                 f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}].")
    return lines


def report(args: argparse.Namespace) -> None:
    """docs/results/claims.md and benchmarks/results/claims.json from the finished runs."""
    from searchenv.corpus import atomic_write_lines

    data: dict[str, Any] = {"settings": {k: v for k, v in settings(args, "").items() if k != "task"},
                            "seeds": args.seeds, "machine": machine(), "cpu_flags": cpu_flags(), "claims": {}}
    all_runs = keep_results(args)
    timed = [r for r in all_runs if r.get("settings") == settings(args, r.get("task")) and r.get("trainer") != "none"]
    run_seconds = sum(r["train_seconds"] + r["eval_seconds"] for r in timed) / len(timed) if timed else None
    # an arm evaluated with another retriever shares the BM25 arm's training: it costs an evaluation
    eval_seconds = sum(r["eval_seconds"] for r in timed) / len(timed) if timed else None
    head = ["| claim | paper | comparison | A: IQM [95% CI] | B: IQM [95% CI] | P(A better) [95% CI] | "
            "A - B over questions [95% CI] | seeds | verdict |", "|---|---|---|---|---|---|---|---:|---|"]
    sections: list[str] = []
    for name, claim in CLAIMS.items():
        entry: dict[str, Any] = {"paper": claim.paper, "statement": claim.statement, "task": claim.task}
        data["claims"][name] = entry
        if claim.pending:
            entry["pending"] = claim.pending
            head.append(f"| {name} | {claim.paper} | | | | | | | not run: {claim.pending} |")
            continue
        cargs = claim_args(args, claim, build=False)
        if cargs is None:
            need = sum(args.seeds if arm.trainer != "none" else 1 for arm in claim.arms.values())
            entry["missing_runs"] = need
            head.append(f"| {name} | {claim.paper} | | | | | | | not reached: its start ({claim.start}, "
                        f"`START_RECIPES`) is built first, then {need} runs |")
            continue
        runs = finished(cargs, claim)
        todo = {arm_name: max(0, (args.seeds if arm.trainer != "none" else 1) - len(runs[arm_name]))
                for arm_name, arm in claim.arms.items()}
        missing = sum(todo.values())
        entry["runs"] = {a: [r["key"] for r in rs] for a, rs in runs.items()}
        if missing:
            seconds = (sum(n * (eval_seconds if claim.arms[a].retriever != "bm25" else run_seconds)
                           for a, n in todo.items()) if run_seconds and eval_seconds else None)
            need = (f"{missing} runs still needed, about {_duration(seconds)} at {_duration(run_seconds)} a "
                    "trained run" if seconds else f"{missing} runs still needed")
            entry["missing_runs"], entry["seconds_needed"] = missing, seconds
            head.append(f"| {name} | {claim.paper} | | | | | | | not reached: {need} |")
            if any(runs.values()):
                sections += progress_lines(args, name, claim, runs, entry, need)
            continue
        h = heuristic(args, claim.task)
        entry["heuristic_em"] = h["em"]
        own = f" Start: {cargs.start_label} (`START_RECIPES`)." if claim.start else ""
        lines = [f"### {name}: {claim.paper}", "", f"Claim: {claim.statement}. Task {claim.task}, {args.n_dev} "
                 f"dev questions; heuristic EM {h['em']:.3f} on them.{own}", ""]
        entry["comparisons"] = []
        for c in claim.comparisons:
            row = compare(claim, runs, c)
            entry["comparisons"].append(row)
            q = row["questions"]
            need = ("" if row["verdict"] != "unresolved" else " (no difference seen)" if row["seeds_needed"] is None
                    else f" (seeds needed: {row['seeds_needed']})")
            p_ci = row.get("improvement_interval")
            head.append(f"| {name} | {claim.paper} | {c.a} vs {c.b}: {c.metric} ({c.direction}) | {row['a_iqm']:.3f} "
                        f"{_ci(row['a_iqm_ci'])} | {row['b_iqm']:.3f} {_ci(row['b_iqm_ci'])} | "
                        f"{row['improvement']:.2f} {_ci(p_ci) if p_ci else ''} | {q['mean']:+.3f} "
                        f"[{q['ci_low']:+.3f}, {q['ci_high']:+.3f}] | {row['seeds']} | {row['verdict']}{need} |")
            lines.append(f"- {c.a} vs {c.b}, {c.metric}: per seed {', '.join(f'{v:.3f}' for v in row['a_seeds'])} "
                         f"vs {', '.join(f'{v:.3f}' for v in row['b_seeds'])}; {row['verdict']} ({row['reason']}).")
        for arm_name, rs in runs.items():
            lines += arm_lines(arm_name, rs, h)
        png = draw_curves(cargs, name, runs)
        if png:
            entry["curves_png"] = f"benchmarks/results/{png}"
            lines += ["", f"![{name} learning curves](../../benchmarks/results/{png})"]
        sections += lines + [""]
    load = os.getloadavg()
    data["load"] = load
    text = ["# The papers' claims, settled with seeds", "",
            f"Every arm starts from `{args.start}`, trains "
            f"{f'its last {args.train_layers} layers' if args.train_layers else 'every layer'} for {args.steps} "
            f"steps of {args.batch} questions x {args.group} samples (learning rate {args.lr}), {args.seeds} seeds, "
            f"and is evaluated greedily on the first {args.n_dev} dev questions (BM25 top {args.top_k}, "
            f"{args.max_turns} turns, {args.max_doc_chars} characters a document). IQM and its interval: over "
            "seeds (stratified bootstrap, as rliable); P(A better): probability of improvement over seeds; the "
            "paired interval: over questions, each averaged over the seeds (for `train_em`, a statistic of the "
            "training curve, it is the difference of the seed means with its bootstrap interval over seeds). The "
            "verdict rule is "
            "`benchmarks/_seeds.py::verdict`, fixed before any run finished.", "", *head, "", *sections,
            f"Machine: {machine()['cpus']} CPUs ({', '.join(cpu_flags()) or 'no listed flags'}), load "
            f"{load[0]:.2f} when the report was written. Command: `python benchmarks/claims.py --claim NAME "
            f"--seeds {args.seeds}`, then `python benchmarks/claims.py --report`."]
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(args.doc, text)
    args.results.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(args.results / "claims.json", json.dumps(data, indent=1, default=str).splitlines())
    print("\n".join(head))


def main(argv: list[str] | None = None) -> None:
    """Run the claims asked for (continuing their sweeps), then write the report."""
    args = parse_args(argv)
    started = time.perf_counter()
    if not args.report:
        for name in args.claim:
            sweep(args, name, started)
    report(args)


if __name__ == "__main__":
    main()
