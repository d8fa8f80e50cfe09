"""How fast `searchenv serve-openenv` plays episodes, and what the server costs over the same episodes in process.

Run in the OpenEnv environment (`make .venv-openenv/.installed`)::

    .venv-openenv/bin/python benchmarks/openenv_load.py --sessions 1 16 64 --episodes 128

A BM25 index of synthetic-2hop's corpus is built in a temporary folder and `searchenv serve-openenv` serves the
task's dev split from it in a process of its own. For each number of concurrent sessions, OpenEnv's own
WebSocket client (`MCPToolClient`) plays `--episodes` oracle episodes in all (search each hop's question,
then answer), each session one episode after another; every step's latency (client send to answer) is
recorded. The same episodes (seeds and calls) are then played in this process through
`gymnasium.make("SearchQA-v0", protocol="tools")`, one after another, and their rewards must equal the
served ones. Load averages before and after are recorded; measure on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import searchenv  # noqa: E402,F401  (registers SearchQA-v0)
from _common import write_results  # noqa: E402
from searchenv.protocols import Answer, Search, get_protocol  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.tasks import load_task  # noqa: E402

TASK, SPLIT = "synthetic-2hop", "dev"


def _calls(example: Any) -> list[tuple[str, dict[str, Any]]]:
    hops = [("search", {"query": sub.question}) for sub in example.decomposition or ()]
    return [*(hops or [("search", {"query": example.question})])[:3], ("answer", {"answer": example.answers[0]})]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(index: Path, max_sessions: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [str(Path(sys.executable).parent / "searchenv"), "serve-openenv", "--task", TASK, "--index", str(index),
           "--port", str(port), "--max-sessions", str(max_sessions), "--max-connections", str(4 * max_sessions + 64),
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not start: {proc.stderr.read().decode() if proc.stderr else ''}")


async def _session(url: str, seeds: list[int], by_id: dict[str, Any], latencies: list[float],
                   rewards: dict[int, list[float]]) -> None:
    async with MCPToolClient(base_url=url) as client:
        for seed in seeds:
            first = await client.reset(seed=seed, split=SPLIT)
            example = by_id[first.observation.example_id]
            got = []
            for name, args in _calls(example):
                t0 = time.perf_counter()
                result = await client.step(CallToolAction(tool_name=name, arguments=args))
                latencies.append(time.perf_counter() - t0)
                got.append(float(result.reward or 0.0))
                if result.done:
                    break
            rewards[seed] = got


def served(url: str, sessions: int, episodes: int, by_id: dict[str, Any]) -> dict[str, Any]:
    seeds = list(range(episodes))
    latencies: list[float] = []
    rewards: dict[int, list[float]] = {}

    async def run() -> None:
        await asyncio.gather(*(_session(url, seeds[i::sessions], by_id, latencies, rewards) for i in range(sessions)))

    t0 = time.perf_counter()
    asyncio.run(run())
    seconds = time.perf_counter() - t0
    lat = np.array(latencies) * 1000
    return {"sessions": sessions, "episodes": episodes, "seconds": round(seconds, 3),
            "episodes_per_s": round(episodes / seconds, 2), "steps": len(latencies),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "rewards": rewards}


def in_process(index: Path, episodes: int, by_id: dict[str, Any]) -> dict[str, Any]:
    env = gym.make("SearchQA-v0", task=TASK, split=SPLIT, retriever=str(index), protocol="tools").unwrapped
    protocol = get_protocol("tools")
    rewards: dict[int, list[float]] = {}
    steps = 0
    t0 = time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
        got = []
        for name, args in _calls(by_id[env.example.id]):
            turn = protocol.format_action(Search((args["query"],)) if name == "search" else Answer(args["answer"]))
            _, reward, terminated, truncated, _ = env.step(turn)
            steps += 1
            got.append(float(reward))
            if terminated or truncated:
                break
        rewards[seed] = got
    seconds = time.perf_counter() - t0
    return {"episodes": episodes, "seconds": round(seconds, 3), "episodes_per_s": round(episodes / seconds, 2),
            "ms_per_step": round(1000 * seconds / steps, 3), "rewards": rewards}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--episodes", type=int, default=128)
    args = ap.parse_args()
    load_before = os.getloadavg()
    task = load_task(TASK)
    by_id = {e.id: e for e in task.examples(SPLIT)}
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "idx"
        from searchenv.corpus import read_corpus

        BM25Retriever.build(read_corpus(task.corpus_path), index)
        local = in_process(index, args.episodes, by_id)
        rows = []
        proc, url = _serve(index, max(args.sessions))
        try:
            served(url, 1, 4, by_id)  # warm-up: first searches, first connections
            for n in args.sessions:
                row = served(url, n, args.episodes, by_id)
                if row.pop("rewards") != local["rewards"]:
                    raise RuntimeError(f"{n} sessions: served rewards differ from in-process ones")
                row["vs_in_process"] = round(row["episodes_per_s"] / local["episodes_per_s"], 3)
                rows.append(row)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    local.pop("rewards")
    load_after = os.getloadavg()
    lines = [
        f"`searchenv serve-openenv` on 127.0.0.1 ({TASK} {SPLIT}, BM25 top 3, `tools` protocol), driven by OpenEnv's "
        f"`MCPToolClient` over WebSocket: {args.episodes} oracle episodes (each hop's question searched, then the "
        "gold answer) per row, split over the concurrent sessions. Latency is one step, client send to answer. "
        "Rewards equal the in-process run's, episode by episode.",
        "",
        "| concurrent sessions | episodes/s | vs in process | step p50 (ms) | step p99 (ms) | steps |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| in process (`gymnasium.make`, one after another) | {local['episodes_per_s']} | 1 | "
        f"{local['ms_per_step']} (mean) | - | - |",
    ]
    for r in rows:
        lines.append(f"| {r['sessions']} | {r['episodes_per_s']} | {r['vs_in_process']} | {r['p50_ms']} | "
                     f"{r['p99_ms']} | {r['steps']} |")
    lines += ["", f"Load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} (1 min); "
              f"{os.cpu_count()} CPUs. The server and the client share this machine."]
    cmd = (".venv-openenv/bin/python benchmarks/openenv_load.py --sessions "
           + " ".join(map(str, args.sessions)) + f" --episodes {args.episodes}")
    write_results("openenv_load", {"in_process": local, "rows": rows,
                                   "load_before": load_before, "load_after": load_after}, "\n".join(lines), cmd)


if __name__ == "__main__":
    main()
