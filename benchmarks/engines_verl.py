"""verl's part of benchmarks/engines.py, run in .venv-verl (verl pins its own transformers).

The same scripted synthetic-2hop episodes (search the question twice, answer) through
:class:`agents.integrations.verl.SearchQAAgentLoop`, with a scripted stand-in for verl's
generation server (its time is measured and left out), against a plain ``SearchQAEnv`` loop and
against this package's rollout engine running the same token-level episodes (its time outside
generation: prompts, parsing, retrieval, encoding replies), in the same process; the loop runs
twice per repeat, as configured by default (the searches of concurrent episodes gathered into one
``search_batch`` call) and with ``batch_searches: false``. Prints one JSON object: seconds per
repeat of each, of the stand-in, and the batcher's counters.

Usage: .venv-verl/bin/python benchmarks/engines_verl.py --n 200 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
# Python puts this folder first on sys.path; keep it last so a script here can never shadow a package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agents.integrations.verl import SearchQAAgentLoop  # noqa: E402
from searchenv.env import SearchQAEnv  # noqa: E402
from searchenv.tasks import load_task  # noqa: E402
from searchenv.tasks.rows import task_rows  # noqa: E402


class ScriptedServer:
    """Stand-in for verl's server manager: two searches of the question, then an answer; timed."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.seconds = 0.0

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        """The next scripted turn of the episode in ``prompt_ids``."""
        start = time.perf_counter()
        after = self.tokenizer.decode(prompt_ids).split("Question:")[-1]
        question = after.strip().splitlines()[0]
        text = f"<search> {question} </search>" if after.count("<information>") < 2 else "<answer> unknown </answer>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        self.seconds += time.perf_counter() - start
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--index", required=True, help="The BM25 index folder benchmarks/engines.py built.")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from agents.policies.hf import resolve_model_path

    examples = list(load_task("synthetic-2hop").examples("dev"))[: args.n]
    rows = task_rows(examples, data_source="bench", split="dev")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("SmolLM2-135M-Instruct")))
    server = ScriptedServer(tokenizer)
    asyncio.set_event_loop(asyncio.new_event_loop())

    def agent_loop(**settings: Any) -> SearchQAAgentLoop:
        config = OmegaConf.create({
            "actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 4096}},
            "searchenv": {"retriever": args.index, "max_turns": 4, "max_new_tokens": 128, **settings}})
        return SearchQAAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                                 processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))

    # the loop as configured by default (concurrent episodes' searches gathered), and each episode
    # searching on its own (batch_searches: false), to show what the gathering is worth
    loops = {"verl": agent_loop(), "verl_unbatched": agent_loop(batch_searches=False)}
    env = SearchQAEnv(examples, retriever=args.index, max_turns=4)

    async def episodes(loop: SearchQAAgentLoop) -> None:  # all samples at once, as verl's worker runs them
        await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for row in rows))

    from agents.rollout import rollout
    from engines import ScriptedTokens

    policy = ScriptedTokens(tokenizer)
    engine_env = SearchQAEnv(examples, retriever=args.index, max_turns=4)
    out: dict[str, list[float]] = {k: [] for k in (
        "plain", "verl", "server", "verl_unbatched", "server_unbatched", "tokenize", "engine_outside_generation",
        "engine_env_retrieval", "verl_cpu", "verl_unbatched_cpu", "engine_cpu", "engine_generation")}
    for loop in loops.values():  # untimed warm-up: first-call costs (thread pools, tokenizer caches) left out
        loop.loop.run_until_complete(episodes(loop))
    # the warm heap frozen and a collection before each timed block (as in benchmarks/engines.py):
    # a full collection over torch's and verl's objects made single repeats 80% slower
    gc.collect()
    gc.freeze()
    for _ in range(args.repeats):
        gc.collect()
        start = time.perf_counter()
        for ex in examples:
            env.reset(options={"example_id": ex.id})
            for turn in (f"<search> {ex.question} </search>", f"<search> {ex.question} </search>",
                         "<answer> unknown </answer>"):
                env.step(turn)
        out["plain"].append(time.perf_counter() - start)
        for name, loop in loops.items():
            server.seconds = 0.0
            gc.collect()
            start, cpu = time.perf_counter(), time.process_time()
            loop.loop.run_until_complete(episodes(loop))
            out[name].append(time.perf_counter() - start)
            out[f"{name}_cpu"].append(time.process_time() - cpu)  # every thread's CPU seconds
            out[name.replace("verl", "server")].append(server.seconds)
        # the tokenizer work the loop itself must do: the prompt, each turn decoded, each reply encoded
        gc.collect()
        start = time.perf_counter()
        for ex in examples:
            env.reset(options={"example_id": ex.id})
            tokenizer.apply_chat_template(env.messages()[:2], add_generation_prompt=True, tokenize=True)
            for turn in (f"<search> {ex.question} </search>", f"<search> {ex.question} </search>",
                         "<answer> unknown </answer>"):
                tokenizer.decode(tokenizer.encode(turn, add_special_tokens=False), skip_special_tokens=True)
                new_text = env.step(turn)[4]["new_text"]
                if new_text:
                    tokenizer.encode(new_text, add_special_tokens=False)
        out["tokenize"].append(time.perf_counter() - start - out["plain"][-1])
        # the same token-level episodes through this package's own rollout engine (the reference loop)
        gc.collect()
        cpu = time.process_time()
        batch = rollout(policy, examples, env=engine_env, group_size=1, max_new_tokens=128, seed=0)
        out["engine_cpu"].append(time.process_time() - cpu)
        stats = batch.stats
        out["engine_outside_generation"].append(stats.wall_seconds - stats.generation_seconds)
        out["engine_env_retrieval"].append(stats.environment_seconds + stats.retrieval_seconds)
        out["engine_generation"].append(stats.generation_seconds)
    out["median_overhead"] = [statistics.median(
        (v - s - p) / p for v, s, p in zip(out["verl"], out["server"], out["plain"], strict=True))]
    for name in loops:
        suffix = name.removeprefix("verl")
        out[f"median_overhead_vs_engine{suffix}"] = [statistics.median(
            (v - s - e) / r for v, s, e, r in zip(out[name], out[f"server{suffix}"], out["engine_outside_generation"],
                                                  out["engine_env_retrieval"], strict=True))]
    # CPU seconds of all threads, the scripted generation taken out of both (it runs on the caller's
    # thread, so its wall time is its CPU time): the work the loop adds, however many cores it spreads over
    out["median_cpu_overhead_vs_engine"] = [statistics.median(
        ((c - s) - (e - g)) / r for c, s, e, g, r in zip(out["verl_cpu"], out["server"], out["engine_cpu"],
                                                         out["engine_generation"], out["engine_env_retrieval"],
                                                         strict=True))]
    from agents.integrations.verl import _BATCHERS

    out["search_batches"] = [b.stats.as_dict() for b in _BATCHERS.values()]  # type: ignore[misc]
    out["median_overhead_beyond_tokenizing"] = [statistics.median(
        (v - s - p - t) / p for v, s, p, t in zip(out["verl"], out["server"], out["plain"], out["tokenize"],
                                                  strict=True))]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
