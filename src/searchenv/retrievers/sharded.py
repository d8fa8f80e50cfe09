"""Shards: one corpus split by document ranges into several indexes, searched as one.

A corpus too large for one process's memory, or one index build, is split into ``N`` contiguous
document ranges, each its own index folder (built, checked, swapped in and served like any
other). :class:`ShardedRetriever` asks every shard for its top ``k`` (in parallel threads) and
merges them into one top ``k`` by score, then shard order, then rank within the shard, which for
ranges taken in corpus order is the corpus row: over exact (flat) dense shards the merged ranking
equals the unsharded index's, ties included. Shards can be local retrievers or
:class:`~searchenv.retrievers.remote.RemoteRetriever` clients of servers each serving a shard
(give each shard several replica URLs to spread load and fail over).

Scores must be comparable across shards, which holds for dense indexes (cosine similarity with
one encoder) and not for BM25, whose scores depend on each shard's own document frequencies:
:func:`build_sharded` refuses ``bm25`` (a BM25 index is served memory-mapped from one folder).

On disk, ``INDEX/searchenv_shards.json`` lists the shard folders ``INDEX/shard-000-of-004/`` ...
with their document ranges and fingerprints; it is written last, atomically, so a folder with
that file has every shard. A build that is killed resumes: finished shards are kept (recorded in
``INDEX/.shards-progress.json`` with the request they were built for), and the shard in progress
resumes from its encoded chunks. The shard list is read by
:func:`~searchenv.retrievers.index.metadata.read_shards` (importable here too), and a sharded folder
is opened, like any index folder, by :func:`~searchenv.retrievers.kinds.open_index`.
"""

from __future__ import annotations

import hashlib
import heapq
import inspect
import itertools
import json
import os
import re
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Hit, Retriever, RetrieverError, check_k
from searchenv.retrievers.index.metadata import SHARDS_FILE, is_sharded, read_shards
from searchenv.retrievers.kinds import _index_class, open_index

_PROGRESS_FILE = ".shards-progress.json"
#: Index kinds whose scores can be compared across shards.
SHARDABLE_KINDS = ("dense",)


def merge_rankings(rankings: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
    """Merge per-shard rankings (each best first) into one top ``k``.

    Order: score (higher first), then shard (earlier first), then rank within the shard.

    Args:
        rankings: One ranked hit list per shard, in shard order.
        k: Hits to keep.

    Returns:
        The merged top ``k``.
    """
    keyed = ([(-h.score, shard, rank, h) for rank, h in enumerate(hits)] for shard, hits in enumerate(rankings))
    return [item[3] for item in itertools.islice(heapq.merge(*keyed), k)]


def _shard_fingerprint(fingerprints: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(fingerprints)).encode()).hexdigest()[:16]


class ShardedRetriever:
    """Search several shards of one corpus and merge their rankings (see the module docstring).

    Args:
        shards: Retrievers over disjoint document ranges, in corpus order.
        fingerprint: Fingerprint of the whole (default: a hash of the shards' fingerprints).

    Raises:
        ValueError: If no shard is given.
    """

    kind = "sharded"

    def __init__(self, shards: Sequence[Retriever], *, fingerprint: str | None = None) -> None:
        if not shards:
            raise ValueError("a sharded retriever needs at least one shard")
        self.shards = list(shards)
        self.fingerprint = fingerprint if fingerprint is not None else _shard_fingerprint(
            [str(getattr(s, "fingerprint", "")) for s in self.shards])
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search every shard for the top ``k`` of each query and merge (one call per shard)."""
        check_k(k)
        queries = list(queries)
        if not queries:
            return []
        if len(self.shards) == 1:
            return self.shards[0].search_batch(queries, k)
        per_shard = list(self._executor().map(lambda shard: shard.search_batch(queries, k), self.shards))
        for i, result in enumerate(per_shard):
            if len(result) != len(queries):
                raise RetrieverError(f"shard {i} returned {len(result)} rankings for {len(queries)} queries")
        return [merge_rankings([result[qi] for result in per_shard], k) for qi in range(len(queries))]

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(len(self.shards), thread_name_prefix="searchenv-shard")
            return self._pool

    def __len__(self) -> int:
        sizes: list[int] = [len(s) for s in self.shards]  # type: ignore[arg-type]
        return sum(sizes)

    def doc_ids(self) -> list[str] | None:
        """The ids of every shard's documents, shard by shard (None if a shard cannot list them)."""
        out: list[str] = []
        for shard in self.shards:
            ids = shard.doc_ids() if callable(getattr(shard, "doc_ids", None)) else None  # type: ignore[attr-defined]
            if ids is None:
                return None
            out.extend(ids)
        return out

    def close(self) -> None:
        """Stop the worker threads (and close shards that can be closed)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
        for shard in self.shards:
            close = getattr(shard, "close", None)
            if callable(close):
                close()

    @classmethod
    def load(cls, folder: str | os.PathLike[str], *, mmap: bool = False, verify: bool = False,
             **options: Any) -> ShardedRetriever:
        """Open a sharded index folder written by :func:`build_sharded`, each shard with :func:`open_index`.

        Args:
            folder: The folder holding ``searchenv_shards.json``.
            mmap: Memory-map each shard.
            verify: Check every file's checksum.
            **options: Search options for each shard's ``load`` (``nprobe``, ``rerank``, ...).

        Raises:
            RetrieverError: If the shard list is missing or malformed, or a shard is sharded itself or
                disagrees with it.
        """
        meta = read_shards(folder)
        shards = []
        for entry in meta["shards"]:
            path = Path(folder) / entry["folder"]
            if is_sharded(path):  # a shard is an index of one kind (and a listing may not lead back to itself)
                raise RetrieverError(f"{path}: a shard of {folder} is itself a sharded index; rebuild with "
                                     f"searchenv index --shards {len(meta['shards'])}")
            shard = open_index(path, mmap=mmap, verify=verify, **options)
            got = (len(shard), getattr(shard, "fingerprint", None))  # type: ignore[arg-type]
            if got != (entry["num_docs"], entry["fingerprint"]):
                raise RetrieverError(
                    f"{path}: holds {got[0]} documents with fingerprint {got[1]}, "
                    f"but {SHARDS_FILE} lists {entry['num_docs']} with {entry['fingerprint']}; rebuild with "
                    f"searchenv index --shards {len(meta['shards'])}")
            shards.append(shard)
        return cls(shards, fingerprint=meta["fingerprint"])

    def __repr__(self) -> str:
        return f"ShardedRetriever({len(self.shards)} shards)"


def build_sharded(
    kind: str,
    corpus: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    shards: int,
    **options: Any,
) -> ShardedRetriever:
    """Split a JSONL corpus into ``shards`` contiguous document ranges and index each.

    Args:
        kind: The index kind (``dense``; see :data:`SHARDABLE_KINDS`).
        corpus: The FlashRAG JSONL corpus.
        folder: Where the shard folders and ``searchenv_shards.json`` go.
        shards: Number of shards (at most the number of documents).
        **options: Build options of the kind (``index_type``, ``encoder``, ...), the same for every shard.

    Returns:
        The sharded retriever.

    Raises:
        ValueError: On a kind whose scores are not comparable across shards, or a bad shard count.
    """
    from searchenv.corpus import read_corpus
    from searchenv.retrievers.index.metadata import META_FILE, file_sha256, index_lock

    if kind not in SHARDABLE_KINDS:
        raise ValueError(f"cannot shard a {kind} index: its scores depend on each shard's own statistics, so "
                         f"shards' rankings cannot be merged; shardable kinds: {', '.join(SHARDABLE_KINDS)}")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    cls = _index_class(kind)
    sha = file_sha256(corpus)
    total = sum(1 for _ in read_corpus(corpus))
    if shards > total:
        raise ValueError(f"{shards} shards for {total} documents")
    sizes = [total // shards + (1 if i < total % shards else 0) for i in range(shards)]
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    # what a finished shard was built for; a different request rebuilds it
    request = {"kind": kind, "source_sha256": sha, "shards": shards,
               "options": {k: (v if isinstance(v, (str, int, float, bool, type(None)))
                               else str(getattr(v, "name", type(v).__name__)))  # an encoder object: its name
                           for k, v in sorted(options.items())}}
    with index_lock(root):
        progress_path = root / _PROGRESS_FILE
        try:
            progress = json.loads(progress_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            progress = {}
        if not isinstance(progress, dict) or progress.get("request") != request:
            progress = {"request": request, "done": {}}
        docs = iter(read_corpus(corpus))  # one pass, shard after shard
        entries = []
        start = 0
        for i, size in enumerate(sizes):
            name = f"shard-{i:03d}-of-{shards:03d}"
            part = itertools.islice(docs, size)
            done = progress["done"].get(name)
            if done is not None and (root / name).is_dir():
                for _ in part:  # already built for this request: skip its documents
                    pass
                fingerprint = done
            else:
                built = cls.build(part, root / name, source_sha256=sha, source_path=str(Path(corpus).resolve()),
                                  **options)
                fingerprint = str(built.fingerprint)
                progress["done"][name] = fingerprint
                _write_json(progress_path, progress)
            entries.append({"folder": name, "start": start, "num_docs": size, "fingerprint": fingerprint})
            start += size
        meta = {"kind": ShardedRetriever.kind, "shard_kind": kind, "num_docs": total, "source_sha256": sha,
                "source_path": str(Path(corpus).resolve()), "fingerprint": _shard_fingerprint(
                    [e["fingerprint"] for e in entries]), "shards": entries}
        _write_json(root / SHARDS_FILE, meta)  # the commit: readers now open the new shards
        progress_path.unlink(missing_ok=True)
        listed = {e["folder"] for e in entries}
        for old in root.glob("shard-*-of-*"):  # shards of an earlier build with another count
            if (re.fullmatch(r"shard-\d{3}-of-\d{3}", old.name) and old.is_dir() and old.name not in listed
                    and (old / META_FILE).is_file()):  # an index's shard, not a user's folder
                shutil.rmtree(old, ignore_errors=True)
    accepted = inspect.signature(cls.load).parameters
    return ShardedRetriever.load(root, **{k: v for k, v in options.items() if k == "encoder" and k in accepted})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from searchenv.corpus import atomic_write_lines

    atomic_write_lines(path, json.dumps(data, indent=2).splitlines())
