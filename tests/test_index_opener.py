"""One index opener: ``searchenv.retrievers.kinds.open_index`` opens every saved index folder, sharded or not.

The registry, the package and a sharded index's shards all call it; the names it replaced still import.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import searchenv.retrievers as retrievers
from searchenv.retrievers import RetrieverError, kinds, registry, sharded
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.retrievers.index import metadata
from searchenv.retrievers.sharded import SHARDS_FILE, ShardedRetriever
from tests.conftest import DOCS


def _bm25_shards(root: Path) -> dict[str, object]:
    """Two BM25 indexes listed as the shards of ``root`` (written by hand: ``build_sharded`` refuses bm25)."""
    entries = []
    for i, part in enumerate((DOCS[:5], DOCS[5:])):
        name = f"shard-{i:03d}-of-002"
        built = BM25Retriever.build(part, root / name)
        entries.append({"folder": name, "num_docs": len(part), "fingerprint": built.fingerprint})
    listing = {"kind": "sharded", "shard_kind": "bm25", "fingerprint": "f" * 16, "shards": entries}
    (root / SHARDS_FILE).write_text(json.dumps(listing), encoding="utf-8")
    return listing


def test_every_index_folder_opens_through_one_function(tmp_path: Path) -> None:
    listing = _bm25_shards(tmp_path / "sh")
    opened = retrievers.open_index(tmp_path / "sh")
    assert isinstance(opened, ShardedRetriever) and len(opened) == len(DOCS) and opened.fingerprint == "f" * 16
    assert [type(s) for s in opened.shards] == [BM25Retriever, BM25Retriever]
    assert opened.search_batch(["Karsk mountain town"], 1)[0][0].doc_id == "d4"
    assert type(kinds.open_index(tmp_path / "sh" / "shard-000-of-002")) is BM25Retriever
    assert type(ShardedRetriever.load(tmp_path / "sh")) is ShardedRetriever
    with pytest.raises(ValueError, match="option 'nprobe' does not apply to a bm25 index"):
        kinds.open_index(tmp_path / "sh", nprobe=4)  # each shard's kind checks the options
    (tmp_path / "sh" / "shard-001-of-002" / SHARDS_FILE).write_text(json.dumps(listing), encoding="utf-8")
    with pytest.raises(RetrieverError, match="shard-001-of-002: a shard of .* is itself a sharded index"):
        kinds.open_index(tmp_path / "sh")
    with pytest.raises(RetrieverError, match="not a searchenv index"):
        kinds.open_index(tmp_path)


def test_the_opener_is_importable_from_its_old_places() -> None:
    assert registry.open_index is kinds.open_index is retrievers.open_index
    with pytest.warns(DeprecationWarning, match="kinds.open_unsharded is now searchenv.retrievers.kinds.open_index"):
        from searchenv.retrievers.kinds import open_unsharded
    assert open_unsharded is kinds.open_index
    assert (sharded.SHARDS_FILE, sharded.is_sharded, sharded.read_shards) == (
        metadata.SHARDS_FILE, metadata.is_sharded, metadata.read_shards)
    with pytest.raises(AttributeError, match="has no attribute 'open_everything'"):
        kinds.open_everything  # noqa: B018
