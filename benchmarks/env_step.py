"""What one SearchQA-v0 episode costs in the environment itself, against an earlier version of the code.

Every step's info carries the episode so far (outcome and summary), so a wrapper that ends an episode from
outside (Gymnasium's TimeLimit) still hands them over; this measures what that costs. The same scripted
episodes (synthetic-2hop dev: search the question, search it again, answer) run against a fixed in-memory
retriever (so retrieval costs next to nothing and the environment's own work shows) and against BM25,
in this checkout and in ``--baseline-src`` (``git archive COMMIT src``), each in a process of its own,
alternating, ``--repeats`` times; medians and the ratio are reported::

    git archive de0ab7a src | (mkdir -p /tmp/searchenv-de0ab7a && tar -x -C /tmp/searchenv-de0ab7a)
    python benchmarks/env_step.py --baseline-src /tmp/searchenv-de0ab7a/src --baseline-label de0ab7a
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
import searchenv
from searchenv.env import SearchQAEnv
from searchenv.retrievers.base import Hit

class Fixed:
    hits = [Hit(f"d{i}", f"Title {i}", "Some text of the passage. " * 20, 1.0 - i / 10) for i in range(3)]
    def search_batch(self, queries, k):
        return [self.hits[:k] for _ in queries]

n, kind = int(sys.argv[1]), sys.argv[2]
env = SearchQAEnv("synthetic-2hop", split="dev", retriever=Fixed() if kind == "fixed" else "bm25")
questions = [env.examples[i % len(env.examples)] for i in range(n)]
for ex in questions[:20]:  # warm-up
    env.reset(options={"example": ex}); env.step(f"<search> {ex.question} </search>"); env.step("<answer> x </answer>")
t0 = time.perf_counter()
for ex in questions:
    env.reset(options={"example": ex})
    env.step(f"<search> {ex.question} </search>")
    env.step(f"<search> {ex.question} </search>")
    env.step(f"<answer> {ex.answers[0]} </answer>")
print(json.dumps({"us_per_episode": 1e6 * (time.perf_counter() - t0) / n}))
"""


def run(src: Path, n: int, kind: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", WORKER, str(n), kind], env=env, capture_output=True, text=True,
                         check=True, timeout=900)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["us_per_episode"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--baseline-src", type=Path, required=True)
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows = {}
    for kind in ("fixed", "bm25"):
        times: dict[str, list[float]] = {"this": [], "baseline": []}
        for _ in range(args.repeats):
            times["this"].append(run(ROOT / "src", args.n, kind))
            times["baseline"].append(run(args.baseline_src, args.n, kind))
        this, base = statistics.median(times["this"]), statistics.median(times["baseline"])
        rows[kind] = {"this_us": round(this, 1), "baseline_us": round(base, 1), "ratio": round(this / base, 3),
                      "runs": times}
    load_after = os.getloadavg()
    lines = [
        f"One scripted synthetic-2hop episode (reset, two searches, answer) in `SearchQAEnv`, µs, median of "
        f"{args.repeats} runs of {args.n} episodes each, this checkout and {args.baseline_label} alternating in "
        "processes of their own (one thread).",
        "",
        f"| retriever | this checkout | {args.baseline_label} | ratio |",
        "|---|---:|---:|---:|",
    ]
    for kind, label in (("fixed", "fixed in-memory hits (the environment's own work)"), ("bm25", "BM25, top 3")):
        r = rows[kind]
        lines.append(f"| {label} | {r['this_us']} | {r['baseline_us']} | {r['ratio']} |")
    lines += ["", f"Load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} (1 min)."]
    cmd = (f"python benchmarks/env_step.py --baseline-src {args.baseline_src} --baseline-label "
           f"{args.baseline_label} --n {args.n} --repeats {args.repeats}")
    write_results("env_step", {"rows": rows, "load_before": load_before, "load_after": load_after},
                  "\n".join(lines), cmd)


if __name__ == "__main__":
    main()
