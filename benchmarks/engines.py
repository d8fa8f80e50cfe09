"""What each engine adapter adds per episode on top of the environment and retrieval.

The same scripted episodes (synthetic-2hop dev, BM25: search the question, search it again,
answer) run through:

- ``plain``: ``SearchQAEnv.reset`` + ``step`` (the environment and retrieval work itself);
- ``skyrl``: :class:`searchenv.integrations.skyrl.SearchQASkyRLEnv`, built per episode as SkyRL
  builds one environment per trajectory, from a row that carries ``max_turns`` as SkyRL's
  generator writes it into every row, ``init`` + ``step`` + ``get_metrics`` + ``close``;
- ``trl-tools``: :class:`agents.integrations.trl.SearchQAToolEnv` (``environment_factory``), one
  instance reset per episode as TRL pools them: ``reset`` + ``search`` x2 + ``answer`` + ``get_reward``;
- ``trl-rollout``: :class:`agents.integrations.trl.SearchQARollout` (``rollout_func``) with a
  scripted token-level policy (SmolLM2's tokenizer); its overhead is the call's time minus the
  rollout engine's own wall time inside it (the prompt lookup and the conversion to TRL's
  fields), compared with the engine's environment + retrieval seconds of the same call;
- ``verl``: :class:`agents.integrations.verl.SearchQAAgentLoop` in ``.venv-verl``
  (``benchmarks/engines_verl.py``) with a scripted stand-in for verl's generation server, whose time
  is left out, against this package's rollout engine running the same token-level episodes (its
  time outside generation), as a share of the engine's environment + retrieval seconds (which, as
  for the TRL row, include encoding the environment's replies).

SkyRL's extra microseconds are also taken apart: each piece of its trajectories (row parsing, the
environment object, the pool, ``init``, ``step``, ``get_metrics``, ``close``) timed inside the loop,
cold as in the real loop, beside the plain reset and steps they wrap.

The goal is an overhead under 5% of the environment + retrieval time. SkyRL and TRL tools wrap the
plain environment itself, so they are also measured paired: every episode runs through the plain
environment and both adapters back to back, in rotating order, and the overhead (summed over all
episodes) gets a bootstrap interval over episodes; the goal counts as met when the whole interval
is under 5%. Whole-block repeats are interleaved and their medians reported beside it. The load
average is recorded before and after.

The SkyRL and TRL-tools pairs are measured again over a corpus of realistic size (``--scale-passages``:
the task's 20,000 passages plus a million generated ones, BM25, built once into the task's cache),
where a search costs what it costs against a real corpus rather than a toy one.

And Ray environment workers (:class:`agents.integrations.ray.RayVectorEnv`): episodes per second
of the same scripted episodes with 64 sub-environments on 1 actor vs 2 actors of 32, on a local
``ray.init(num_cpus=2)`` (the driver shares the two cores).

Usage: python benchmarks/engines.py [--n 200] [--repeats 5] [--ray-steps 60] [--scale-passages 1000000]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Python puts this folder first on sys.path; keep it last so a script here can never shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from _common import write_results  # noqa: E402
from agents.policies.base import Generation  # noqa: E402
from searchenv.env import SearchQAEnv  # noqa: E402
from searchenv.tasks import QAExample, load_task  # noqa: E402


def turns(question: str) -> list[str]:
    """The scripted episode of a question: two searches and an answer."""
    return [f"<search> {question} </search>", f"<search> {question} </search>", "<answer> unknown </answer>"]


class ScriptedTokens:
    """A token-level policy that plays :func:`turns` from its context (for the rollout engine)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""
        return str(self.tokenizer.decode(list(ids)))

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The chat prompt's ids."""
        from agents.policies.base import chat_template_ids

        return chat_template_ids(self.tokenizer, messages)

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any) -> list[Generation]:
        """The next scripted turn of each context."""
        out = []
        for p in prompts:
            context = self.decode(p)
            question = re.search(r"Question: (.*)", context)
            seen = context.split("Question:")[-1].count("<information>")
            q = question.group(1).strip() if question else "x"
            text = f"<search> {q} </search>" if seen < 2 else "<answer> unknown </answer>"
            ids = tuple(self.encode(text))
            out.append(Generation(text, ids, tuple(-1.0 for _ in ids), "stop"))
        return out


def plain_episode(env: SearchQAEnv, ex: QAExample) -> None:
    """One scripted episode on the plain environment: the environment and retrieval work itself."""
    env.reset(options={"example_id": ex.id})
    for t in turns(ex.question):
        env.step(t)


#: SkyRL's generator writes its ``max_turns`` into every row before it builds the environment
#: (``env_extras["max_turns"] = self.max_turns``); the plain environment's default budget, so the
#: episodes are the same.
SKYRL_MAX_TURNS = 4


def skyrl_rows(examples: Sequence[QAExample]) -> list[dict[str, Any]]:
    """The dataset rows SkyRL hands its environments: the question's fields and the generator's max_turns."""
    return [{"question": ex.question, "answers": list(ex.answers), "evidence_ids": list(ex.evidence_ids), "id": ex.id,
             "max_turns": SKYRL_MAX_TURNS} for ex in examples]


def skyrl_env_class() -> Any:
    """`SearchQASkyRLEnv`, imported here: skyrl-gym is not in .venv-verl, which imports this file."""
    from searchenv.integrations.skyrl import SearchQASkyRLEnv

    return SearchQASkyRLEnv


def skyrl_episode(env_class: Any, config: dict[str, Any], row: dict[str, Any]) -> None:
    """One trajectory as SkyRL runs it: an environment built from the row, init, steps, metrics, close."""
    env = env_class(config, row)
    env.init()
    for t in turns(row["question"]):
        env.step(t)
    env.get_metrics()
    env.close()  # as SkyRL's generator does at the end of a trajectory


def tools_episode(env: Any, ex: QAExample) -> None:
    """One episode through TRL's tools; TRL builds an instance once and resets it for each rollout."""
    env.reset(example_id=ex.id)
    env.search(ex.question)
    env.search(ex.question)
    env.answer("unknown")
    env.get_reward()


def run_plain(env: SearchQAEnv, examples: Sequence[QAExample]) -> float:
    start = time.perf_counter()
    for ex in examples:
        plain_episode(env, ex)
    return time.perf_counter() - start


def run_skyrl(index: str, examples: Sequence[QAExample]) -> float:
    env_class, config = skyrl_env_class(), {"retriever": index}
    rows = skyrl_rows(examples)  # the dataset rows exist before the trajectories start
    start = time.perf_counter()
    for row in rows:
        skyrl_episode(env_class, config, row)
    return time.perf_counter() - start


def run_tools(make_env: Any, examples: Sequence[QAExample]) -> float:
    env = make_env()
    start = time.perf_counter()
    for ex in examples:
        tools_episode(env, ex)
    return time.perf_counter() - start


def paired_episodes(env: SearchQAEnv, index: str, make_tools: Any, examples: Sequence[QAExample],
                    repeats: int) -> dict[str, list[list[float]]]:
    """Seconds per episode of ``plain``, ``skyrl`` and ``trl-tools``, the three interleaved episode by episode.

    Each episode runs through the three back to back, in an order that rotates with the episode and
    the repeat (each goes first, second and third equally often, so neither the warmth the one
    before leaves in the CPU caches nor drift in the machine's speed favours one). Slow drift that
    moves whole repeats (another process, the CPU's clock) then cancels within each episode, which
    block medians cannot do. Returns ``{name: [[seconds of episode i] per repeat]]}``.
    """
    env_class, config = skyrl_env_class(), {"retriever": index}
    rows = skyrl_rows(examples)
    tools = make_tools()
    arms = {"plain": lambda i: plain_episode(env, examples[i]),
            "skyrl": lambda i: skyrl_episode(env_class, config, rows[i]),
            "trl-tools": lambda i: tools_episode(tools, examples[i])}
    names = list(arms)
    clock = time.perf_counter
    out: dict[str, list[list[float]]] = {n: [] for n in names}
    for r in range(repeats):
        per = {n: [0.0] * len(examples) for n in names}
        gc.collect()
        for i in range(len(examples)):
            k = (i + r) % len(names)
            for n in names[k:] + names[:k]:
                start = clock()
                arms[n](i)
                per[n][i] = clock() - start
        for n in names:
            out[n].append(per[n])
    return out


def paired_overhead(per_episode: dict[str, list[list[float]]], name: str, reps: int = 5000) -> dict[str, float]:
    """``name``'s time over ``plain``'s minus 1 (sums over all episodes and repeats), with a 95% interval.

    The interval is a percentile bootstrap over episodes: each resample draws episodes with
    replacement and keeps each drawn episode's pairs (all repeats) together.
    """
    import numpy as np

    a = np.asarray(per_episode[name]).sum(axis=0)  # seconds per episode, summed over repeats
    b = np.asarray(per_episode["plain"]).sum(axis=0)
    rng = np.random.default_rng(12345)
    idx = rng.integers(0, len(a), size=(reps, len(a)))
    boots = a[idx].sum(axis=1) / b[idx].sum(axis=1) - 1.0
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"overhead": float(a.sum() / b.sum() - 1.0), "ci_low": float(lo), "ci_high": float(hi),
            "us_per_episode": float(1e6 * (a.sum() - b.sum()) / a.size / len(per_episode[name])),
            "plain_ms_per_episode": float(1e3 * b.sum() / b.size / len(per_episode[name]))}


def skyrl_parts(index: str, examples: Sequence[QAExample], repeats: int) -> dict[str, float]:
    """Where SkyRL's extra microseconds go: each piece of a trajectory timed in the loop itself.

    The same episodes as :func:`run_skyrl`, each piece between two ``perf_counter_ns`` calls (the
    pieces run cold, as in the real loop, where retrieval evicts them from the caches). ``init``
    and ``step`` wrap the environment's own ``reset`` and ``step``: those are timed inside the
    wrapper too, so what the wrapper adds is measured within the same call (a timed stand-in
    method adds its own call, about 0.1 µs, to the wrapper's share). Returns µs per episode, the
    least over ``repeats`` passes, per piece.
    """
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    from searchenv.integrations import skyrl
    from searchenv.integrations.skyrl import SearchQASkyRLEnv
    from searchenv.tasks.rows import example_from_row

    clock = time.perf_counter_ns
    config = {"retriever": index}
    rows = skyrl_rows(examples)
    passes: list[dict[str, int]] = []
    inner = [0]

    def timed(method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            out = method(*args, **kwargs)
            inner[0] += clock() - start
            return out
        return call

    for _ in range(repeats):
        t = dict.fromkeys(("settings", "row parsing", "env object", "pool acquire", "init wrapper", "step wrapper",
                           "get_metrics", "close"), 0)
        gc.collect()
        for row in rows:  # SearchQASkyRLEnv.__init__, piece by piece, in its order
            a = clock()
            settings, key = skyrl._settings(config)
            settings, key = skyrl._with_turns(settings, key, int(row["max_turns"]))
            b = clock()
            example = example_from_row(row)
            c = clock()
            obj = SearchQASkyRLEnv.__new__(SearchQASkyRLEnv)
            BaseTextEnv.__init__(obj)
            d = clock()
            obj._key, obj.env = skyrl._POOL.acquire(settings, example, key)
            e = clock()
            obj.example, obj.max_turns, obj.final_info = example, obj.env.max_turns, None
            env = obj.env
            env.reset, env.step = timed(env.reset), timed(env.step)  # instance attributes shadow the methods
            inner[0] = 0
            e2 = clock()
            obj.init()
            f = clock()
            reset_s, inner[0] = inner[0], 0
            for turn in turns(row["question"]):
                obj.step(turn)
            g = clock()
            step_s = inner[0]
            del env.reset, env.step
            obj.get_metrics()
            h = clock()
            obj.close()
            i = clock()
            for name, span in {"settings": b - a, "row parsing": c - b, "env object": d - c, "pool acquire": e - d,
                               "init wrapper": f - e2 - reset_s, "step wrapper": g - f - step_s,
                               "get_metrics": h - g, "close": i - h}.items():
                t[name] += span
        passes.append(t)
    return {name: min(p[name] for p in passes) / len(examples) / 1000 for name in passes[0]}


def verl_overhead(index: str, n: int, repeats: int) -> dict[str, list[float]] | None:
    """Run benchmarks/engines_verl.py in .venv-verl (verl pins its own transformers); None without it."""
    import json
    import subprocess

    python = Path(__file__).resolve().parents[1] / ".venv-verl" / "bin" / "python"
    if not python.exists():
        return None
    proc = subprocess.run([str(python), str(Path(__file__).with_name("engines_verl.py")), "--n", str(n),
                           "--repeats", str(repeats), "--index", index], capture_output=True, text=True, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def ray_throughput(here: str, index: str, examples: Sequence[QAExample], steps: int,
                   repeats: int) -> dict[str, list[float]]:
    """Episodes per second through :class:`~agents.integrations.ray.RayVectorEnv` with 1 and 2 actors."""
    import ray

    from agents.integrations.ray import RayVectorEnv
    from searchenv.tasks import write_qa_jsonl

    qa = str(Path(index).parent / "engines-bench-qa.jsonl")
    write_qa_jsonl(qa, examples)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows: dict[str, list[float]] = {"1x64": [], "2x32": []}
    try:
        # Ray's CPU counts are logical: 0.5 each lets all three actors live at once (the OS shares the cores)
        opts = {"num_cpus": 0.5}
        pools = {"1x64": RayVectorEnv(1, 64, task=qa, retriever=index, max_turns=3, worker_options=opts),
                 "2x32": RayVectorEnv(2, 32, task=qa, retriever=index, max_turns=3, worker_options=opts)}
        for _ in range(repeats):
            for name, envs in pools.items():
                obs, _ = envs.reset(seed=0)
                done = 0
                start = time.perf_counter()
                for _ in range(steps):  # search the question, then answer (then an autoreset step)
                    acts = ["<answer> unknown </answer>" if "<information>" in o.rsplit("Question:", 1)[-1]
                            else f"<search> {o.rsplit('Question:', 1)[-1].strip().splitlines()[0]} </search>"
                            for o in obs]
                    obs, _, term, trunc, _ = envs.step(acts)
                    done += int(term.sum() + trunc.sum())
                rows[name].append(done / (time.perf_counter() - start))
        for envs in pools.values():
            envs.close()
    finally:
        ray.shutdown()
    return rows


def scaled_index(corpus_path: Path, filler: int) -> str:
    """A BM25 index of the task's corpus plus ``filler`` generated passages (ids ``fill-*``), built once.

    The questions and their evidence stay the task's; the filler makes each search cost what it
    costs over a corpus of realistic size (the task's own corpus has a few thousand passages).
    """
    import dataclasses
    import itertools

    from searchenv.corpus import read_corpus
    from searchenv.retrievers.bm25 import BM25Retriever
    from searchenv.tasks.synthetic import stream_passages

    index = corpus_path.parent / f"bm25-engines-bench-{filler}"
    if not index.is_dir():
        docs = itertools.chain(read_corpus(corpus_path), (dataclasses.replace(d, id=f"fill-{d.id}")
                                                          for d in stream_passages(filler, seed=1)))
        BM25Retriever.build(docs, index)
    return str(index)


def goal(p: dict[str, float], limit: float = 0.05) -> str:
    """``met`` when the whole interval is under ``limit``, ``not met`` when it is all above, else ``unresolved``."""
    if p["ci_high"] < limit:
        return "met"
    return "not met" if p["ci_low"] >= limit else "unresolved: the interval spans 5%"


def paired_rows(paired: dict[str, dict[str, float]], skyrl_label: str, tools_label: str) -> list[str]:
    """The header, the plain baseline and the two paired adapters as Markdown table rows."""
    rows = ["| adapter | ms / episode | baseline ms / episode | overhead vs env + retrieval | goal < 5% |",
            "|---|---:|---:|---:|---|",
            f"| plain SearchQAEnv (baseline) | {paired['skyrl']['plain_ms_per_episode']:.3f} | - | - | - |"]
    for label, p in ((skyrl_label, paired["skyrl"]), (tools_label, paired["trl-tools"])):
        rows.append(f"| {label} | {p['plain_ms_per_episode'] + p['us_per_episode'] / 1000:.3f} | "
                    f"{p['plain_ms_per_episode']:.3f} | {100 * p['overhead']:+.1f}% [{100 * p['ci_low']:+.1f}%, "
                    f"{100 * p['ci_high']:+.1f}%] | {goal(p)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="Episodes per adapter and repeat.")
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved repeats (median reported).")
    parser.add_argument("--ray-steps", type=int, default=60, help="Vector steps per Ray measurement (0: skip).")
    parser.add_argument("--scale-passages", type=int, default=1_000_000,
                        help="Also measure SkyRL and TRL tools over the corpus plus this many generated passages "
                             "(0: skip). Built once into the task's cache: a million passages take about 72 s and "
                             "3.3 GB to index here (benchmarks/results/retrieval_bm25_scale.md).")
    parser.add_argument("--scale-n", type=int, default=100, help="Episodes per repeat over the scaled corpus.")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from agents.integrations.trl import SearchQARollout, SearchQAToolEnv
    from agents.policies.hf import resolve_model_path
    from searchenv.corpus import read_corpus
    from searchenv.retrievers.bm25 import BM25Retriever

    load_before = os.getloadavg()
    task = load_task("synthetic-2hop")
    examples = list(task.examples("dev"))[: args.n]
    index = str(task.corpus_path.parent / "bm25-engines-bench")
    if not Path(index).is_dir():
        BM25Retriever.build(read_corpus(task.corpus_path), index)
    env = SearchQAEnv(examples, retriever=index)
    make_tools = SearchQAToolEnv.factory(examples, retriever=index)
    trl = SearchQARollout(examples, retriever=index, max_turns=4)
    policy = ScriptedTokens(AutoTokenizer.from_pretrained(str(resolve_model_path("SmolLM2-135M-Instruct"))))
    prompts = [ex.question for ex in examples]

    times: dict[str, list[float]] = {k: [] for k in ("plain", "skyrl", "trl-tools", "engine", "trl-rollout")}
    env_retrieval: list[float] = []
    adapter: list[float] = []
    # Untimed warm-up, then the heap frozen: the imported libraries' millions of objects are never
    # traversed again, and each timed block starts from a collection, so a full collection that
    # happens to fall into one block does not decide its time (it made single repeats 80% slower).
    run_plain(env, examples[:20])
    run_skyrl(index, examples[:20])
    gc.collect()
    gc.freeze()
    for _ in range(args.repeats):
        gc.collect()
        times["plain"].append(run_plain(env, examples))
        gc.collect()
        times["skyrl"].append(run_skyrl(index, examples))
        gc.collect()
        times["trl-tools"].append(run_tools(make_tools, examples))
        gc.collect()
        start = time.perf_counter()
        trl.run(prompts, policy, seed=0, eos_token_id=policy.tokenizer.eos_token_id)
        times["trl-rollout"].append(time.perf_counter() - start)
        stats = trl.last_stats  # the engine's own run inside this call: the adapter's work is the rest
        times["engine"].append(stats.wall_seconds)
        adapter.append(times["trl-rollout"][-1] - stats.wall_seconds)
        env_retrieval.append(stats.environment_seconds + stats.retrieval_seconds)
    per_episode = paired_episodes(env, index, make_tools, examples, args.repeats)
    paired = {n: paired_overhead(per_episode, n) for n in ("skyrl", "trl-tools")}
    parts = skyrl_parts(index, examples, args.repeats)
    scaled: dict[str, dict[str, float]] = {}
    if args.scale_passages:
        big = scaled_index(task.corpus_path, args.scale_passages)
        few = examples[: args.scale_n]
        big_env = SearchQAEnv(few, retriever=big)
        run_plain(big_env, few[:5])  # opens the index and warms it, untimed
        gc.collect()
        per_big = paired_episodes(big_env, big, SearchQAToolEnv.factory(few, retriever=big), few,
                                  max(3, args.repeats // 3))
        scaled = {n: paired_overhead(per_big, n) for n in ("skyrl", "trl-tools")}
    verl = verl_overhead(index, args.n, args.repeats)
    ray_rows = ray_throughput(str(Path(__file__).resolve().parent), index, examples, args.ray_steps,
                              args.repeats) if args.ray_steps else {}
    load_after = os.getloadavg()

    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["plain"]
    rows = {
        "skyrl": paired["skyrl"]["overhead"],
        "trl-tools": paired["trl-tools"]["overhead"],
        "skyrl-block-median": (med["skyrl"] - base) / base,
        "trl-tools-block-median": (med["trl-tools"] - base) / base,
        "trl-rollout": statistics.median(a / e for a, e in zip(adapter, env_retrieval, strict=True)),
    }
    per_ep = {k: 1000 * v / args.n for k, v in med.items()}
    table = "\n".join([
        f"Adapter overhead per episode, {args.n} scripted synthetic-2hop episodes (2 searches + answer, BM25), "
        f"{args.repeats} repeats; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after. SkyRL and "
        "TRL tools: each episode run through the plain environment and both adapters back to back, in rotating "
        "order, and the overhead is their time over the plain time summed over all episodes, with a 95% "
        "bootstrap interval over episodes; the goal is met when the whole interval is under 5%. The "
        "token-level rows: median of the interleaved repeats.",
        "",
        *paired_rows(paired, "SkyRL-gym `SearchQASkyRLEnv` (built per episode)",
                     "TRL `SearchQAToolEnv` (environment_factory)"),
        f"| TRL `SearchQARollout` (rollout_func) vs the rollout engine inside it | {per_ep['trl-rollout']:.3f} | "
        f"{per_ep['engine']:.3f} | {100 * rows['trl-rollout']:+.1f}% | "
        f"{'met' if rows['trl-rollout'] < 0.05 else 'not met'} |",
    ])
    skyrl_note = "\n\n" + (
        "SkyRL's extra work per episode, piece by piece, timed inside the loop (µs, least of "
        f"{args.repeats} passes; the wrappers' shares are their time beyond the environment's own reset and "
        "steps, timed within the same calls): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
        + f"; sum {sum(parts.values()):.1f} µs, against {paired['skyrl']['us_per_episode']:.1f} µs "
        "from the paired episodes above.\n")
    if verl:
        med_v = {k: 1000 * statistics.median(verl[k]) / args.n for k in ("plain", "verl", "server", "tokenize")}
        med_v.update({k: 1000 * statistics.median(verl[k]) / args.n for k in ("verl_unbatched", "server_unbatched")})
        rows["verl"] = verl["median_overhead_vs_engine"][0]
        rows["verl-unbatched"] = verl["median_overhead_vs_engine_unbatched"][0]
        rows["verl-vs-plain-env"] = verl["median_overhead"][0]
        engine = 1000 * statistics.median(verl["engine_outside_generation"]) / args.n
        [batches] = verl["search_batches"] or [{"mean_batch": 0.0}]
        table += "\n" + (
            f"| verl `SearchQAAgentLoop` vs the rollout engine on the same token-level episodes (in .venv-verl; "
            f"generation time left out of both; concurrent episodes' searches gathered, "
            f"{batches['mean_batch']:.0f} queries per call) | {med_v['verl'] - med_v['server']:.3f} | {engine:.3f} | "
            f"{100 * rows['verl']:+.1f}% | {'met' if rows['verl'] < 0.05 else 'not met'} |\n"
            f"| the same with `batch_searches: false` (one search call per episode and turn) | "
            f"{med_v['verl_unbatched'] - med_v['server_unbatched']:.3f} | {engine:.3f} | "
            f"{100 * rows['verl-unbatched']:+.1f}% | {'met' if rows['verl-unbatched'] < 0.05 else 'not met'} |"
        )
        if verl.get("median_cpu_overhead_vs_engine"):
            rows["verl-cpu"] = verl["median_cpu_overhead_vs_engine"][0]
            cpu = {k: 1000 * statistics.median(verl[k]) / args.n
                   for k in ("verl_cpu", "engine_cpu", "engine_generation")}
            table += "\n" + (
                f"| the verl loop in CPU time, all threads (the work it adds, however many cores it spreads over; "
                f"replies are encoded on verl's worker threads) | {cpu['verl_cpu'] - med_v['server']:.3f} | "
                f"{cpu['engine_cpu'] - cpu['engine_generation']:.3f} | {100 * rows['verl-cpu']:+.1f}% | "
                f"{'met' if rows['verl-cpu'] < 0.05 else 'not met'} |")
    spread = {"SkyRL": [(k - p) / p for k, p in zip(times["skyrl"], times["plain"], strict=True)],
              "TRL rollout_func": [a / e for a, e in zip(adapter, env_retrieval, strict=True)]}
    if verl:
        spread["verl"] = [(v - s - e) / r for v, s, e, r in zip(verl["verl"], verl["server"],
                                                                verl["engine_outside_generation"],
                                                                verl["engine_env_retrieval"], strict=True)]
    table += (f"\n\nThe same two adapters timed as whole {args.n}-episode blocks, interleaved (median of the repeats): "
              f"SkyRL {100 * rows['skyrl-block-median']:+.1f}%, "
              f"TRL tools {100 * rows['trl-tools-block-median']:+.1f}%.")
    table += "\n\nBlock overhead per repeat, least to most: " + "; ".join(
        f"{name} {100 * min(v):+.1f}% to {100 * max(v):+.1f}%" for name, v in spread.items()) + "."
    table += skyrl_note
    if scaled:
        table += "\n".join([
            "", f"The same, paired, over a corpus of realistic size: the task's corpus plus "
            f"{args.scale_passages:,} generated passages (BM25), {args.scale_n} episodes x "
            f"{max(3, args.repeats // 3)} repeats.", "",
            *paired_rows(scaled, "SkyRL-gym `SearchQASkyRLEnv`", "TRL `SearchQAToolEnv`"),
        ]) + "\n"
    if ray_rows:
        one, two = statistics.median(ray_rows["1x64"]), statistics.median(ray_rows["2x32"])
        table += "\n".join([
            "", f"Ray environment workers: {args.ray_steps} vector steps of 64 scripted sub-environments "
            f"(search, answer, autoreset), local ray.init(num_cpus=2), median of {args.repeats}.", "",
            "| workers | episodes / s | vs 1 worker |", "|---|---:|---:|",
            f"| 1 actor x 64 envs | {one:.0f} | 1.00x |", f"| 2 actors x 32 envs | {two:.0f} | {two / one:.2f}x |",
        ])
    write_results("engines", {"n": args.n, "repeats": args.repeats, "seconds": times, "paired": paired,
                              # seconds per episode summed over the repeats: what the intervals resample
                              "paired_episode_seconds": {n: [round(sum(col), 9) for col in zip(*v, strict=True)]
                                                         for n, v in per_episode.items()},
                              "ray_episodes_per_s": ray_rows,
                              "verl_seconds": verl, "skyrl_parts_us": parts, "scaled_paired": scaled,
                              "scale_passages": args.scale_passages,
                              "engine_env_retrieval_seconds": env_retrieval, "trl_adapter_seconds": adapter,
                              "overhead": rows,
                              "load_before": load_before, "load_after": load_after}, table,
                  command=" ".join(["python benchmarks/engines.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
