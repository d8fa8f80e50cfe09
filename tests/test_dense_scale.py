"""Compressed dense indexes, exact re-ranking from vectors kept on disk, and resumable builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from searchenv.corpus import Document  # noqa: E402
from searchenv.retrievers import open_index  # noqa: E402
from searchenv.retrievers.dense import (  # noqa: E402
    INDEX_PRESETS,
    DenseRetriever,
    FaissOptions,
    default_nlist,
    index_plan,
)
from searchenv.retrievers.index.metadata import META_FILE, read_meta  # noqa: E402

from .test_dense import HashEncoder  # noqa: E402

WORDS = ("amber basalt cedar delta ember fjord granite harbor iris juniper kelp lumen mesa nectar onyx prism "
         "quartz raven sable tundra umber violet willow xenon yarrow zephyr").split()


def _clustered(rng: np.random.Generator, n: int, d: int, centres: int = 40, spread: float = 0.5) -> np.ndarray:
    c = rng.standard_normal((centres, d)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    noise = rng.standard_normal((n, d)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + spread * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall(rows: np.ndarray, ref: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(rows.tolist(), ref.tolist(), strict=True)]))


def _docs(n: int, seed: int = 0) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [Document(f"p{i}", f"{WORDS[i % 26]} {i}", " ".join(rng.choice(WORDS, int(rng.integers(3, 12)))))
            for i in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize(("index_type", "options", "floor"), [
    ("fp16", {}, 0.99),
    ("sq8", {}, 0.9),
    ("ivf-fp16", {"nprobe": 8}, 0.9),
    ("ivf-sq8", {"nprobe": 8}, 0.85),
    ("ivf-pq", {"nprobe": 8, "keep_vectors": "float16", "rerank": 100}, 0.9),
    ("hnsw-sq8", {}, 0.85),
    ("factory:IVF16,PQ8", {"nprobe": 16, "keep_vectors": "float32", "rerank": 200}, 0.9),
])
def test_compressed_indexes_find_what_flat_finds(index_type: str, options: dict[str, object], floor: float) -> None:
    rng = np.random.default_rng(0)
    x, q = _clustered(rng, 4000, 32), _clustered(rng, 64, 32)
    _, ref = DenseRetriever.from_vectors(x).search_vectors(q, 10)
    r = DenseRetriever.from_vectors(x, index_type=index_type, **options)  # type: ignore[arg-type]
    scores, rows = r.search_vectors(q, 10)
    assert _recall(rows, ref) >= floor
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    # one query at a time ranks as the batch does
    single = np.concatenate([r.search_vectors(q[i : i + 1], 10)[1] for i in range(8)])
    np.testing.assert_array_equal(single, rows[:8])


@pytest.mark.slow
def test_rerank_with_every_candidate_is_the_exact_ranking() -> None:
    rng = np.random.default_rng(1)
    x, q = _clustered(rng, 1500, 16), _clustered(rng, 20, 16)
    flat_scores, flat_rows = DenseRetriever.from_vectors(x).search_vectors(q, 10)
    pq = DenseRetriever.from_vectors(x, index_type="ivf-pq", nlist=8, nprobe=8, keep_vectors="float32",
                                     rerank=1500)
    scores, rows = pq.search_vectors(q, 10)
    np.testing.assert_array_equal(rows, flat_rows)
    np.testing.assert_allclose(scores, flat_scores, atol=1e-6)
    # without the kept vectors the ranking is PQ's approximation
    approx = DenseRetriever.from_vectors(x, index_type="ivf-pq", nlist=8, nprobe=8)
    assert not approx.exact_rescoring and approx.search_vectors(q, 10)[1].shape == (20, 10)


def test_index_plan_defaults_and_refusals() -> None:
    assert default_nlist(1_000_000) == 4000 and default_nlist(100) == 2 and default_nlist(5) == 1
    plan = index_plan("ivf-pq", 384, 1_000_000)
    assert plan == {"nlist": 4000, "train_size": 256_000, "pq_m": 96, "pq_bits": 8, "factory": "IVF4000,PQ96x8"}
    assert index_plan("ivf-pq", 16, 1000)["pq_bits"] == 4  # 16 centroids x 39 vectors <= 1000
    assert index_plan("hnsw-sq8", 8, 10, hnsw_m=16)["factory"] == "HNSW16,SQ8"
    assert set(INDEX_PRESETS) >= {"flat", "hnsw", "fp16", "ivf-sq8", "ivf-pq", "hnsw-sq8"}
    with pytest.raises(ValueError, match="pq_m must divide the dimension 384"):
        index_plan("ivf-pq", 384, 1000, pq_m=100)
    with pytest.raises(ValueError, match="nlist 50 is larger than the 10 documents"):
        index_plan("ivf-sq8", 8, 10, nlist=50)
    with pytest.raises(ValueError, match="index_type must be one of"):
        index_plan("ivf", 8, 10)
    with pytest.raises(ValueError, match="FAISS cannot build index 'NotAnIndex'"):
        DenseRetriever.from_vectors(np.eye(4, dtype=np.float32), index_type="factory:NotAnIndex")
    with pytest.raises(ValueError, match="keep_vectors"):
        DenseRetriever.from_vectors(np.eye(4, dtype=np.float32), keep_vectors="bfloat16")
    with pytest.raises(ValueError, match="rerank"):
        DenseRetriever.from_vectors(np.eye(4, dtype=np.float32), rerank=-1)


def test_faiss_options_by_keyword_or_as_one_value_build_the_same_index(tmp_path: Path) -> None:
    """Every FAISS option is one field of FaissOptions, checked when made; keywords are its fields."""
    rng = np.random.default_rng(11)
    x = _clustered(rng, 400, 16)
    opts = FaissOptions(index_type="ivf-pq", nlist=8, nprobe=4, pq_m=4, train_size=300, train_seed=3,
                        keep_vectors="float16", rerank=30)
    by_value = DenseRetriever.from_vectors(x, options=opts)
    by_keyword = DenseRetriever.from_vectors(x, index_type="ivf-pq", nlist=8, nprobe=4, pq_m=4, train_size=300,
                                             train_seed=3, keep_vectors="float16", rerank=30)
    mixed = DenseRetriever.from_vectors(x, options=FaissOptions(index_type="ivf-pq", nlist=8), nprobe=4, pq_m=4,
                                        train_size=300, train_seed=3, keep_vectors="float16", rerank=30)
    q = x[:7]
    for other in (by_keyword, mixed):
        np.testing.assert_array_equal(other.search_vectors(q, 5)[1], by_value.search_vectors(q, 5)[1])
        assert (other.nprobe, other.rerank, other.index_type) == (4, 30, "ivf-pq")
    assert index_plan(opts, 16, 400) == index_plan("ivf-pq", 16, 400, nlist=8, pq_m=4, train_size=300)
    docs = [Document(f"d{i}", WORDS[i % len(WORDS)], " ".join(WORDS[: 1 + i % 7])) for i in range(60)]
    built = DenseRetriever.build(docs, tmp_path / "idx", encoder=HashEncoder(dim=16), show_progress=False,
                                 options=FaissOptions(index_type="hnsw", hnsw_m=8), ef_search=40)
    params = read_meta(tmp_path / "idx")["params"]
    assert (params["hnsw_m"], params["ef_search"], built.index_type, built.ef_search) == (8, 40, "hnsw", 40)
    with pytest.raises(TypeError, match=r"unknown FAISS option\(s\) \['k1'\]; the options are index_type, hnsw_m"):
        DenseRetriever.from_vectors(x, k1=1.2)
    for bad in ({"nprobe": 0}, {"train_seed": -1}, {"hnsw_m": True}, {"nlist": 1.5}, {"index_type": "ivf"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            FaissOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("mmap", [False, True])
def test_compressed_index_round_trip_with_vectors_on_disk(tmp_path: Path, mmap: bool) -> None:
    docs = _docs(600)
    enc = HashEncoder(dim=32)
    built = DenseRetriever.build(docs, tmp_path / "pq", encoder=enc, index_type="ivf-pq", nlist=6, nprobe=2,
                                 keep_vectors="float16", rerank=40, chunk_size=128, show_progress=False)
    meta = read_meta(tmp_path / "pq")
    assert meta["index_type"] == "ivf-pq" and meta["params"]["factory"] == "IVF6,PQ8x3"
    assert meta["params"]["nprobe"] == 2 and "vectors.npy" in meta["files"]
    loaded = DenseRetriever.load(tmp_path / "pq", encoder=enc, mmap=mmap, verify=True)
    assert loaded.exact_rescoring and loaded.nprobe == 2 and loaded.rerank == 40
    queries = [d.text for d in docs[:12]]
    assert loaded.search_batch(queries, 5) == built.search_batch(queries, 5)
    # every cell and every candidate: the flat index's ranking, scores from the float16 copy
    flat = DenseRetriever.build(docs, tmp_path / "flat", encoder=enc, show_progress=False)
    full = open_index(tmp_path / "pq", mmap=mmap, nprobe=6, rerank=600, encoder=enc)
    got, want = full.search_batch(queries, 5), flat.search_batch(queries, 5)
    assert [[h.doc_id for h in hs] for hs in got] == [[h.doc_id for h in hs] for hs in want]
    with pytest.raises(ValueError, match="nprobe"):
        open_index(tmp_path / "pq", nprobe=0)
    with pytest.raises(ValueError, match="option 'k1' does not apply to a dense index"):
        open_index(tmp_path / "pq", k1=1.2)


class CountingEncoder(HashEncoder):
    """Counts the texts it embeds; raises after ``fail_after`` calls when given."""

    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__(dim=32, name="hash-32")
        self.fail_after = fail_after
        self.texts = 0

    def encode(self, texts, batch_size: int = 64):  # type: ignore[no-untyped-def]
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("killed")
        self.texts += len(texts)
        return super().encode(texts, batch_size)


def _faiss_sha(folder: Path) -> str:
    meta = json.loads((folder / META_FILE).read_text())
    return str(meta["files"]["dense.faiss"]["sha256"])


def test_interrupted_build_resumes_and_gives_the_same_index(tmp_path: Path) -> None:
    docs = _docs(1000)
    reference = DenseRetriever.build(docs, tmp_path / "ref", encoder=CountingEncoder(), chunk_size=100,
                                     show_progress=False)
    with pytest.raises(RuntimeError, match="killed"):
        # one encoder call per chunk (batch_size = chunk_size), so the fifth call is the fifth chunk
        DenseRetriever.build(docs, tmp_path / "idx", encoder=CountingEncoder(fail_after=4), chunk_size=100,
                             batch_size=100, show_progress=False)
    (pending,) = (tmp_path / "idx").glob(".encode-*")
    assert sorted(p.name for p in pending.iterdir()) == [f"chunk-00000{i}.npy" for i in range(4)]
    assert not (tmp_path / "idx" / META_FILE).exists()  # nothing published
    resumed_encoder = CountingEncoder()
    resumed = DenseRetriever.build(docs, tmp_path / "idx", encoder=resumed_encoder, chunk_size=100,
                                   show_progress=False)
    assert resumed_encoder.texts == 600  # only the six chunks not yet embedded
    assert _faiss_sha(tmp_path / "idx") == _faiss_sha(tmp_path / "ref")
    assert not list((tmp_path / "idx").glob(".encode-*"))  # removed once published
    assert resumed.search_batch(["amber cedar"], 5) == reference.search_batch(["amber cedar"], 5)
    # another chunk size is another cache key: nothing stale is reused
    other = CountingEncoder()
    DenseRetriever.build(docs, tmp_path / "idx", encoder=other, chunk_size=250, show_progress=False)
    assert other.texts == 1000


def test_killed_build_process_resumes(tmp_path: Path) -> None:
    """A build process killed with SIGKILL mid-way leaves whole chunks; the next build uses them."""
    script = tmp_path / "killed_build.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from tests.test_dense_scale import CountingEncoder, _docs
        from searchenv.retrievers.dense import DenseRetriever

        class Killed(CountingEncoder):
            def encode(self, texts, batch_size=64):
                if len(self.calls) == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                return super().encode(texts, batch_size)

        DenseRetriever.build(_docs(700), {str(tmp_path / "idx")!r}, encoder=Killed(), chunk_size=100,
                             batch_size=100, index_type="ivf-sq8", nlist=4, show_progress=False)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -9, proc.stderr
    (pending,) = (tmp_path / "idx").glob(".encode-*")
    assert len([p for p in pending.iterdir() if p.name.startswith("chunk-")]) == 3
    encoder = CountingEncoder()
    r = DenseRetriever.build(_docs(700), tmp_path / "idx", encoder=encoder, chunk_size=100, index_type="ivf-sq8",
                             nlist=4, show_progress=False)
    assert encoder.texts == 400 and len(r) == 700
    DenseRetriever.build(_docs(700), tmp_path / "fresh", encoder=CountingEncoder(), chunk_size=100,
                         index_type="ivf-sq8", nlist=4, show_progress=False)
    assert _faiss_sha(tmp_path / "idx") == _faiss_sha(tmp_path / "fresh")
