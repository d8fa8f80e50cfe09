"""Which dense index fits a Wikipedia-sized corpus on one node, and what does it cost in recall?

For each index type (``flat``, ``fp16``, ``ivf-sq8``, ``ivf-pq`` with and without exact
re-ranking from float16 vectors kept on disk, ``hnsw``, ``hnsw-sq8``), over ``--docs`` unit
vectors of the encoder's dimension (random, scattered around ``--clusters`` centres as in
``retrieval_dense.py``, so that neighbours mean something):

* build time and peak RSS of the building process (it memory-maps the input vectors, which
  counts towards its RSS), index file size;
* RSS added by loading the index into memory, and by memory-mapping it and answering queries;
* queries/s one query per call and in batches of 64, through ``DenseRetriever.search_vectors``;
* recall@10 against the flat index's top 10 (its exact ranking), for several ``nprobe`` of the
  inverted-file types.

Each build and each measurement runs in a fresh subprocess (clean RSS), and each writes its result
into ``--workdir`` first, so a run that is stopped resumes where it was (``--fresh`` starts over).
Then the arithmetic to 21M x 768: bytes per vector of each type, measured here, scaled.

Finally real encoding on a smaller corpus: ``DenseRetriever.build`` with the packaged
all-MiniLM-L6-v2 over ``--encode-docs`` generated passages (documents/s, streamed in chunks).

Usage: python benchmarks/retrieval_scale.py [--docs 1000000] [--dim 384] [--queries 1000]
       [--types flat fp16 ...] [--encode-docs 5000] [--workdir /tmp/searchenv-scale] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402
from retrieval_dense import clustered, load_average, unit_vectors  # noqa: E402
from searchenv.corpus import atomic_write_lines  # noqa: E402

# name -> (DenseRetriever index_type, build options, query options); "ivf-pq+rerank" queries the
# ivf-pq build (which also keeps float16 vectors) with exact re-ranking of 100 candidates.
TYPES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "flat": ("flat", {}, {}),
    "fp16": ("fp16", {}, {}),
    "ivf-sq8": ("ivf-sq8", {}, {}),
    "ivf-pq": ("ivf-pq", {"keep_vectors": "float16"}, {}),
    "ivf-pq+rerank": ("ivf-pq", {}, {"rerank": 100}),
    "hnsw": ("hnsw", {"ef_construction": 80}, {"ef_search": 128}),
    "hnsw-sq8": ("hnsw-sq8", {"ef_construction": 80}, {"ef_search": 128}),
}
BUILT_AS = {"ivf-pq+rerank": "ivf-pq"}
NPROBES = (8, 16, 32, 64)
K = 10


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class _NoDocs(Sequence[Any]):
    """Stands for the documents (``search_vectors`` never reads them), costing no memory."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        raise IndexError("no documents in this benchmark")


def _timed(fn: Any, repeats: int) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs after a warm-up run (the warm-up's, with 0)."""
    t0 = time.perf_counter()
    fn()
    times = [time.perf_counter() - t0] if repeats == 0 else []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ------------------------------------------------------------------------------------ workers


def build_worker(work: Path, name: str) -> dict[str, Any]:
    import faiss

    from searchenv.retrievers.dense import DenseRetriever

    index_type, options, _ = TYPES[name]
    x = np.load(work / "vectors.npy", mmap_mode="r")
    t0 = time.perf_counter()
    r = DenseRetriever.from_vectors(x, index_type=index_type, normalize=False, **options)
    build_s = time.perf_counter() - t0
    path = work / f"{name}.faiss"
    faiss.write_index(r._index, str(path))
    size = path.stat().st_size
    extra = 0
    if options.get("keep_vectors"):
        kept = work / f"{name}.vectors.npy"
        np.save(kept, r._exact)
        extra = kept.stat().st_size
    plan = {k: v for k, v in (r.__dict__.items()) if k in ("nprobe", "ef_search", "rerank")}
    index: Any = r._index
    storage: Any = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else index
    return {"code_bytes": int(storage.code_size), "build_s": build_s, "file_mb": size / 1e6,
            "kept_vectors_mb": extra / 1e6,
            "peak_rss_build_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
            "nlist": int(index.nlist) if hasattr(index, "nlist") else None, "defaults": plan,
            "faiss_threads": faiss.omp_get_max_threads()}


def query_worker(work: Path, name: str, mmap: bool, single: int, repeats: int) -> dict[str, Any]:
    import faiss

    from searchenv.retrievers.dense import DenseRetriever

    index_type, _, query_options = TYPES[name]
    q = np.load(work / "queries.npy")
    before = rss_mb()
    flags = (faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY) if mmap else 0
    built = BUILT_AS.get(name, name)
    index = faiss.read_index(str(work / f"{built}.faiss"), flags)
    loaded = rss_mb()
    kept = None
    if query_options.get("rerank"):
        kept = np.load(work / f"{built}.vectors.npy", mmap_mode="r")
    n = int(index.ntotal)

    def retriever(**over: Any) -> DenseRetriever:
        return DenseRetriever(index, _NoDocs(n), rerank_vectors=kept, index_type=index_type,
                              **{**query_options, **over})

    out: dict[str, Any] = {"rss_load_mb": loaded - before}
    truth = np.load(work / "truth.npy") if (work / "truth.npy").is_file() else None
    settings = [{"nprobe": p} for p in NPROBES] if hasattr(index, "nlist") else [{}]
    if mmap:  # memory-mapped: the RSS that answering takes (one pass of the queries), not the speed
        settings, repeats, single = settings[-1:], 0, min(single, 20)
    rows_out = []
    for setting in settings:
        r = retriever(**setting)
        t64 = _timed(lambda r=r: [r.search_vectors(q[i : i + 64], K) for i in range(0, len(q), 64)], repeats)
        t1 = _timed(lambda r=r: [r.search_vectors(q[i : i + 1], K) for i in range(single)], repeats and max(
            1, repeats // 2))
        if mmap:
            rows_out.append({**setting, "qps_batch64": len(q) / t64, "qps_batch1": single / t1})
            continue
        _, rows = r.search_vectors(q, K)
        if truth is None and name == "flat":
            np.save(work / "truth.npy", rows)
            truth = rows
        recall = None if truth is None else float(np.mean(
            [len(set(a) & set(b)) / K for a, b in zip(rows.tolist(), truth.tolist(), strict=True)]))
        rows_out.append({**setting, "qps_batch64": len(q) / t64, "qps_batch1": single / t1, "recall_at_10": recall})
    out["settings"] = rows_out
    out["rss_after_queries_mb"] = rss_mb() - before
    return out


def run_worker(args: argparse.Namespace, step: str, name: str, mmap: bool = False) -> dict[str, Any]:
    """One measurement in a fresh process, cached in the work folder."""
    work = Path(args.workdir)
    result = work / f"result-{step}-{name}{'-mmap' if mmap else ''}.json"
    if result.is_file():
        return dict(json.loads(result.read_text()))
    args.measured = True
    cmd = [sys.executable, __file__, "--worker", step, "--name", name, "--workdir", str(work),
           "--single", str(args.single), "--repeats", str(args.repeats)] + (["--mmap"] if mmap else [])
    print(f"[{time.strftime('%H:%M:%S')}] {step} {name}{' (mmap)' if mmap else ''}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{step} {name} failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    tmp = result.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, result)
    return dict(data)


# ------------------------------------------------------------------------------------ encoding


def encode_real(n_docs: int, work: Path) -> dict[str, Any]:
    from searchenv.encoders import load_encoder
    from searchenv.retrievers.dense import DenseRetriever
    from searchenv.tasks.synthetic import stream_passages

    enc = load_encoder()
    docs = list(stream_passages(n_docs, seed=0))
    folder = work / "real-encoding"
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    DenseRetriever.build(docs, folder, encoder=enc, index_type="ivf-sq8", chunk_size=1024, show_progress=False)
    total = time.perf_counter() - t0
    chars = sum(len(d.contents) for d in docs) / len(docs)
    import torch

    return {"docs": n_docs, "seconds": total, "docs_per_s": n_docs / total, "mean_chars": chars,
            "torch_threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------ main


def scale_to(bytes_per_vector: float, n: int) -> float:
    return bytes_per_vector * n / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--spread", type=float, default=0.6)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200, help="queries timed one per call")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    ap.add_argument("--encode-docs", type=int, default=5000, help="0 skips real encoding")
    ap.add_argument("--workdir", default="/tmp/searchenv-scale")
    ap.add_argument("--fresh", action="store_true", help="forget results of an earlier run")
    ap.add_argument("--worker", choices=["build", "query"], help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.workdir)

    if args.worker == "build":
        print(json.dumps(build_worker(work, args.name)))
        return
    if args.worker == "query":
        print(json.dumps(query_worker(work, args.name, args.mmap, args.single, args.repeats)))
        return

    spec = {"docs": args.docs, "dim": args.dim, "clusters": args.clusters, "spread": args.spread,
            "queries": args.queries}
    if args.fresh or not (work / "spec.json").is_file() or json.loads((work / "spec.json").read_text()) != spec:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        rng = np.random.default_rng(0)
        centres = unit_vectors(rng, args.clusters, args.dim)
        x = np.lib.format.open_memmap(work / "vectors.npy", mode="w+", dtype=np.float32, shape=(args.docs, args.dim))
        for start in range(0, args.docs, 100_000):
            stop = min(args.docs, start + 100_000)
            x[start:stop] = clustered(rng, centres, stop - start, args.spread)
        x.flush()
        del x
        np.save(work / "queries.npy", clustered(rng, centres, args.queries, args.spread))
        atomic_write_lines(work / "spec.json", [json.dumps(spec)])  # last: it marks the vectors complete
    started = work / "load_before.json"  # the load when this run (possibly resumed) first started
    if not started.is_file():
        atomic_write_lines(started, [json.dumps(load_average())])
    load_before = json.loads(started.read_text())

    names = ["flat", *[t for t in args.types if t != "flat"]]  # flat first: it gives the ground truth
    results: dict[str, Any] = {}
    for name in names:
        build = run_worker(args, "build", BUILT_AS.get(name, name))
        query = run_worker(args, "query", name)
        mapped = run_worker(args, "query", name, mmap=True)
        results[name] = {"build": build, "query": query, "mmap": mapped}

    encoding = None
    if args.encode_docs:
        result = work / f"result-encode-{args.encode_docs}.json"
        if not result.is_file():
            print(f"[{time.strftime('%H:%M:%S')}] real encoding of {args.encode_docs} passages", flush=True)
            atomic_write_lines(result, [json.dumps(encode_real(args.encode_docs, work))])
            args.measured = True
        encoding = json.loads(result.read_text())
    ended = work / "load_after.json"  # the load when the last step was measured
    if getattr(args, "measured", False) or not ended.is_file():
        atomic_write_lines(ended, [json.dumps(load_average())])
    load_after = json.loads(ended.read_text())

    # ---------------------------------------------------------------- the table and the arithmetic
    n, wiki_n, wiki_dim = args.docs, 21_000_000, 768
    lines = [
        f"Dense indexes over {n:,} x {args.dim} unit vectors (random, around {args.clusters} centres), "
        f"{args.queries:,} queries, top-{K}; recall@{K} against the flat index's exact top {K}.",
        "",
        "| index | build (s) | peak RSS building (MB) | file (MB) | RSS loaded (MB) "
        "| RSS memory-mapped: opened / after the queries (MB) | setting | queries/s, batch 1 | queries/s, batch 64 "
        "| recall@10 |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    wiki_rows = []
    for name in names:
        b, qd, m = results[name]["build"], results[name]["query"], results[name]["mmap"]
        for i, s in enumerate(qd["settings"]):
            setting = ", ".join(f"{k} {v}" for k, v in s.items() if k in ("nprobe",)) or "default"
            if TYPES[name][2]:
                setting = ", ".join([*(f"{k} {v}" for k, v in TYPES[name][2].items()),
                                     *([setting] if setting != "default" else [])])
            kept = f" + {b['kept_vectors_mb']:,.0f} vectors on disk" if TYPES[name][2].get("rerank") else ""
            head = (f"| {name} | {b['build_s']:.0f} | {b['peak_rss_build_mb']:,.0f} | "
                    f"{b['file_mb']:,.0f}{kept} | "
                    f"{qd['rss_load_mb']:,.0f} | {m['rss_load_mb']:,.0f} / {m['rss_after_queries_mb']:,.0f} |"
                    ) if i == 0 else "| | | | | | |"
            recall = "" if s["recall_at_10"] is None else f"{s['recall_at_10']:.3f}"
            lines.append(f"{head} {setting} | {s['qps_batch1']:,.0f} | {s['qps_batch64']:,.0f} | {recall} |")
        if name in BUILT_AS:
            lines[-len(qd["settings"])] = lines[-len(qd["settings"])].replace(
                f"| {name} | {b['build_s']:.0f} | {b['peak_rss_build_mb']:,.0f} |", f"| {name} | (the same) | |", 1)
        # bytes per vector held in memory (the index file; kept vectors stay on disk): the codes scale
        # with the dimension, the rest (ids, graph links, centroids spread over the vectors) does not
        in_memory_bpv = b["file_mb"] * 1e6 / n
        per_dim = in_memory_bpv - b["code_bytes"] + b["code_bytes"] * wiki_dim / args.dim
        wiki_rows.append((name, in_memory_bpv, per_dim, max(s["recall_at_10"] or 0 for s in qd["settings"])))
    lines += ["", f"**At 21M x 768** (wiki-18 with e5-base): memory for the index itself: each type's "
              f"measured bytes per vector, with its codes scaled by 768/{args.dim} (ids, graph links and centroids "
              "kept as measured), beside the best recall@10 measured here:", "",
              "| index | bytes/vector here | est. bytes/vector at 768 | est. GB at 21M | fits 16 GB "
              "| best recall@10 here |",
              "|---|---:|---:|---:|---|---:|"]
    for name, bpv, bpv768, best in wiki_rows:
        gb = scale_to(bpv768, wiki_n)
        lines.append(f"| {name} | {bpv:,.0f} | {bpv768:,.0f} | {gb:,.1f} | {'yes' if gb < 14 else 'no'} | {best:.3f} |")
    pq = results.get("ivf-pq+rerank")
    if pq:
        here, nlist_here = pq["query"]["settings"][0], results["ivf-pq"]["build"]["nlist"]
        nlist_wiki = round(4 * (wiki_n**0.5))
        # coarse search ~ nlist x d, scanning ~ (n / nlist) x nprobe x code bytes, re-ranking ~ rerank x d:
        # with nlist ~ 4 sqrt(n), each grows by about (nlist ratio) x (dimension ratio)
        factor = nlist_wiki / nlist_here * wiki_dim / args.dim
        lines += ["", f"Expected speed at 21M x 768 for ivf-pq+rerank (nprobe {here['nprobe']}, rerank 100): "
                      f"nlist grows from {nlist_here:,} to about {nlist_wiki:,} (4 sqrt(n)), so the coarse search "
                      f"(nlist x d) and the cells scanned (n / nlist vectors each, codes of d/4 bytes) each cost about "
                      f"{factor:.1f}x more per query, the re-ranking (100 x d) {wiki_dim / args.dim:.0f}x; counting "
                      f"{factor:.1f}x for all of it (a lower bound on speed): about "
                      f"{here['qps_batch64'] / factor:,.0f} queries/s in batches of 64 and "
                      f"{here['qps_batch1'] / factor:,.0f} one at a time on this machine, if the kept vectors' "
                      "pages are cached (uncached, each query reads 100 random rows of 1.5 KB from disk). An estimate "
                      "from the arithmetic, not a measurement; recall at that size depends on nprobe, tuned on real "
                      "queries."]
    lines += ["", "These vectors sit in tight clusters, so every query's neighbours share its cell: recall does not "
                  "grow with nprobe here, and IVF looks better than on real embeddings, whose neighbours spread over "
                  "several cells. Measure nprobe against flat on your own queries (`searchenv eval-retrieval`)."]
    if encoding:
        lines += ["", f"Real encoding: `DenseRetriever.build` with the packaged all-MiniLM-L6-v2 on CPU "
                      f"({encoding['torch_threads']} torch threads) over {encoding['docs']:,} generated passages "
                      f"(mean {encoding['mean_chars']:.0f} characters), ivf-sq8, chunks of 1,024: "
                      f"{encoding['docs_per_s']:,.0f} documents/s ({encoding['seconds']:.0f} s in all)."]
    lines += ["", f"1-min load average {load_before} before, {load_after} after. 'fits 16 GB' leaves 2 GB for the "
                  "process and the documents' offsets.",
              "", f"Command: `python benchmarks/retrieval_scale.py {' '.join(sys.argv[1:])}`".rstrip()]
    data = {"spec": spec, "results": results, "encoding": encoding, "load_average_1min_before": load_before,
            "load_average_1min_after": load_after,
            "wiki_estimate": [{"index": a, "bytes_per_vector": b, "bytes_per_vector_768": c,
                               "gb_at_21m": scale_to(c, wiki_n), "best_recall_at_10": d} for a, b, c, d in wiki_rows]}
    write_results("retrieval_scale", data, "\n".join(lines))


if __name__ == "__main__":
    main()
