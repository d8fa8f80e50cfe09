"""How fast is BM25 retrieval, and how much does the environment add per step?

1. Queries/s of the bm25s-backed retriever vs rank-bm25 on the same generated corpus
   (100k passages by default), measured in one run. Goal: bm25s >= 100x rank-bm25.
2. The environment's per-step overhead with retrieval excluded (parse + render + reward),
   as a median in microseconds. Goal: < 100 us.

Usage: python benchmarks/retrieval_bm25.py [--passages 100000] [--queries 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402
from searchenv.corpus import Document, read_corpus, write_corpus  # noqa: E402
from searchenv.env import SearchQAEnv  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever, RankBM25Retriever  # noqa: E402
from searchenv.tasks import QAExample  # noqa: E402
from searchenv.tasks.synthetic import stream_passages  # noqa: E402


def make_queries(docs: list[Document], n: int, seed: int) -> list[str]:
    """Queries a search agent might write: a passage title plus a few words of its text."""
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.choice(len(docs), size=n, replace=False):
        words = docs[int(i)].text.split()
        pick = rng.choice(len(words), size=min(3, len(words)), replace=False)
        out.append(" ".join([docs[int(i)].title, *(words[int(j)] for j in sorted(pick))]))
    return out


def qps(retriever: object, queries: list[str], k: int) -> tuple[float, list[list[str]]]:
    t = time.perf_counter()
    res = retriever.search_batch(queries, k)  # type: ignore[attr-defined]
    return len(queries) / (time.perf_counter() - t), [[h.doc_id for h in hits] for hits in res]


def step_overhead(docs: list[Document], bm25: BM25Retriever, reps: int) -> dict[str, float]:
    """Median time of prepare_step + finish_step with precomputed hits (retrieval excluded)."""
    examples = [QAExample(f"q{i}", f"Where was {d.title} born?", (d.title,), (d.id,)) for i, d in enumerate(docs[:50])]
    env = SearchQAEnv(examples, retriever=bm25, max_turns=2, reward="default")
    search_turn = "<think>I need the birthplace.</think>\n<search> " + examples[0].question + " </search>"
    hits = bm25.search_batch([examples[0].question], 3)
    answer_turn = "<think>Found it.</think>\n<answer> " + docs[0].title + " </answer>"
    times: dict[str, list[float]] = {"search_step": [], "answer_step": [], "invalid_step": []}
    for i in range(reps):
        env.reset(seed=i)
        t = time.perf_counter_ns()
        req = env.prepare_step(search_turn)
        env.finish_step(req, hits)
        times["search_step"].append((time.perf_counter_ns() - t) / 1e3)
        t = time.perf_counter_ns()
        req = env.prepare_step(answer_turn)
        env.finish_step(req)
        times["answer_step"].append((time.perf_counter_ns() - t) / 1e3)
        env.reset(seed=i)
        t = time.perf_counter_ns()
        req = env.prepare_step("I will just guess <answer> Paris")
        env.finish_step(req)
        times["invalid_step"].append((time.perf_counter_ns() - t) / 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=400, help="queries for bm25s")
    ap.add_argument("--rank-queries", type=int, default=20, help="queries for rank-bm25 (slow)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        t = time.perf_counter()
        write_corpus(corpus, stream_passages(args.passages, seed=args.seed))
        gen_s = time.perf_counter() - t
        docs = read_corpus(corpus)
        queries = make_queries(docs, args.queries, args.seed)

        t = time.perf_counter()
        fast = BM25Retriever.build(docs, Path(tmp) / "idx")
        build_fast = time.perf_counter() - t
        t = time.perf_counter()
        ref = RankBM25Retriever(docs)
        build_ref = time.perf_counter() - t

        qps(fast, queries[:20], args.k)  # warm-up
        fast_qps, _ = qps(fast, queries, args.k)
        ref_qps, _ = qps(ref, queries[: args.rank_queries], args.k)
        overhead = step_overhead(docs, fast, reps=2000)

    speedup = fast_qps / ref_qps
    data = {
        "passages": args.passages,
        "k": args.k,
        "queries_bm25s": args.queries,
        "queries_rank_bm25": args.rank_queries,
        "corpus_generation_s": round(gen_s, 2),
        "build_s": {"bm25s": round(build_fast, 2), "rank_bm25": round(build_ref, 2)},
        "queries_per_s": {"bm25s": round(fast_qps, 1), "rank_bm25": round(ref_qps, 2)},
        "speedup_bm25s_over_rank_bm25": round(speedup, 1),
        "goal_speedup": 100,
        "env_step_overhead_median_us": {k: round(v, 1) for k, v in overhead.items()},
        "goal_step_overhead_us": 100,
    }
    table = "\n".join(
        [
            f"BM25 on {args.passages:,} generated passages, top-{args.k}, one process",
            "",
            "| retriever | build (s) | queries/s |",
            "|---|---:|---:|",
            f"| bm25s (searchenv `bm25`) | {build_fast:.1f} | {fast_qps:,.0f} |",
            f"| rank-bm25 (BM25Okapi) | {build_ref:.1f} | {ref_qps:,.2f} |",
            f"| **speed-up** | | **{speedup:,.0f}x** (goal >= 100x) |",
            "",
            "| env step, retrieval excluded | median (us) |",
            "|---|---:|",
            *(f"| {k.replace('_', ' ')} | {v:.1f} |" for k, v in overhead.items()),
            "",
            "Goal: step overhead < 100 us.",
        ]
    )
    write_results("retrieval_bm25", data, table)


if __name__ == "__main__":
    main()
