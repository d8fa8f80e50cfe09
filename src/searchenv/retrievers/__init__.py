"""Retrievers: the :class:`Retriever` protocol, BM25, dense, hybrid, cache and remote.

:func:`open_index` reopens any saved index by the kind written in its metadata;
:func:`build_index` builds one by name; :func:`retriever_for_corpus` does either,
caching built indexes on disk keyed by the corpus file's hash. Every build is swapped in
atomically and every open checks the files (see :mod:`searchenv.retrievers.index_meta`).
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Hit, Retriever, RetrieverError, check_k
from searchenv.retrievers.index_meta import (
    META_FILE,
    IndexIntegrityError,
    StaleIndexError,
    another_corpus,
    check_fresh,
    damaged,
    file_sha256,
    index_lock,
    read_meta,
)

__all__ = [
    "Hit",
    "IndexIntegrityError",
    "Retriever",
    "RetrieverError",
    "StaleIndexError",
    "build_index",
    "cached_index_folder",
    "check_k",
    "index_kinds",
    "open_index",
    "register_index_kind",
    "retriever_for_corpus",
]

# kind -> "module:Class"; the class has build(documents, folder, *, source_sha256, source_path, **opts),
# which writes through index_meta.publish_index, and load(folder, *, mmap, verify).
_KINDS: dict[str, str] = {
    "bm25": "searchenv.retrievers.bm25:BM25Retriever",
    "dense": "searchenv.retrievers.dense:DenseRetriever",
}


def register_index_kind(kind: str, target: str) -> None:
    """Register an index kind as ``"module:Class"`` (a class with ``build`` and ``load``)."""
    _KINDS[kind] = target


def index_kinds() -> list[str]:
    """Names accepted by :func:`build_index`."""
    return sorted(_KINDS)


def _index_class(kind: str) -> Any:
    if kind not in _KINDS:
        raise ValueError(f"unknown retriever {kind!r}; known: {', '.join(index_kinds())}")
    module, _, name = _KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def open_index(
    folder: str | os.PathLike[str],
    *,
    mmap: bool = False,
    corpus: str | os.PathLike[str] | None = None,
    verify: bool = False,
    **options: Any,
) -> Retriever:
    """Reopen a saved index of any kind.

    Every open compares each file's size and the counts (documents, rows, vectors) with the
    metadata; ``verify=True`` also compares each file's SHA-256 (reads the whole index).

    Args:
        folder: The index folder.
        mmap: Memory-map large arrays instead of reading them.
        corpus: If given, refuse the index unless it was built from this corpus file.
        verify: Check every file's checksum too.
        **options: Search-time options of the kind's ``load`` (a dense index's ``nprobe``,
            ``ef_search``, ``rerank``, ``encoder``).

    Returns:
        The retriever.

    Raises:
        RetrieverError: If the folder is not an index; StaleIndexError if it is stale;
            IndexIntegrityError if its files are damaged (naming the file and the rebuild command).
    """
    from searchenv.retrievers.sharded import ShardedRetriever, is_sharded, read_shards

    if is_sharded(folder):
        shards = read_shards(folder)
        if corpus is not None and shards.get("source_sha256") != file_sha256(corpus):
            source = shards.get("source_path")
            if isinstance(source, str) and source and Path(source).resolve() != Path(corpus).resolve():
                raise StaleIndexError(another_corpus(folder, shards.get("shard_kind"), source,
                                                     shards.get("fingerprint"), corpus, options=" --shards N"))
            raise StaleIndexError(f"sharded index {folder} was not built from {corpus}; rebuild it with "
                                  f"searchenv index --corpus {corpus} --out {folder} --shards N")
        return ShardedRetriever.load(folder, mmap=mmap, verify=verify, **options)
    meta = read_meta(folder)
    if corpus is not None:
        check_fresh(folder, corpus)
    try:
        cls = _index_class(meta["kind"])
    except (ValueError, KeyError, TypeError):  # a kind this searchenv does not know: never imported
        raise damaged(folder, {k: v for k, v in meta.items() if k != "kind"},
                      f"{META_FILE} names the index kind {meta.get('kind')!r:.60}, which is not one of "
                      f"{', '.join(index_kinds())}") from None
    accepted = inspect.signature(cls.load).parameters
    for name in options:
        if name not in accepted or name in ("folder", "mmap", "verify"):
            raise ValueError(f"option {name!r} does not apply to a {meta['kind']} index")
    retriever: Retriever = cls.load(folder, mmap=mmap, verify=verify, **options)
    return retriever


def build_index(
    kind: str, corpus: str | os.PathLike[str], folder: str | os.PathLike[str], **options: Any
) -> Retriever:
    """Index a JSONL corpus file with the retriever ``kind`` and swap it into ``folder``.

    The old index in ``folder`` (if any) stays whole until the new one is complete; a process
    that opened it keeps reading it.

    Args:
        kind: ``bm25``, ``dense`` or another registered kind.
        corpus: The FlashRAG JSONL corpus.
        folder: Where to save the index.
        **options: Passed to the kind's ``build`` (e.g. ``k1``, ``index_type``); ``shards=N``
            (N > 1) splits the corpus into N indexes searched as one
            (:func:`searchenv.retrievers.sharded.build_sharded`).

    Returns:
        The retriever over the new index.
    """
    from searchenv.corpus import read_corpus

    shards = options.pop("shards", None)
    if shards not in (None, 1):
        from searchenv.retrievers.sharded import build_sharded

        return build_sharded(kind, corpus, folder, shards, **options)
    cls = _index_class(kind)
    sha = file_sha256(corpus)
    docs = read_corpus(corpus)
    retriever: Retriever = cls.build(
        docs, folder, source_sha256=sha, source_path=str(Path(corpus).resolve()), **options
    )
    return retriever


def cached_index_folder(
    kind: str, corpus: str | os.PathLike[str], cache_root: Path | None = None, *, sha: str | None = None,
    **options: Any,
) -> Path:
    """The folder :func:`retriever_for_corpus` keeps the index of ``corpus`` in (built or not).

    Args:
        kind: A registered index kind.
        corpus: The corpus file.
        cache_root: Cache folder (default ``searchenv.tasks.cache_dir() / "indexes"``).
        sha: The corpus file's SHA-256 when the caller has it (else it is computed).
        **options: Build options (part of the cache key).
    """
    from searchenv.tasks.registry import cache_dir

    root = cache_root if cache_root is not None else cache_dir() / "indexes"
    sha = sha if sha is not None else file_sha256(corpus)
    opt_key = "-".join(f"{k}={options[k]}" for k in sorted(options))
    return root / f"{kind}-{sha[:16]}{('-' + opt_key) if opt_key else ''}"


def retriever_for_corpus(
    kind: str, corpus: str | os.PathLike[str], cache_root: Path | None = None, **options: Any
) -> Retriever:
    """Open the cached index of ``corpus`` for ``kind``, building it on first use.

    Processes that ask for one cache entry at once take turns (a lock on its folder): the first
    builds, the others wait and open what it built. A damaged entry is rebuilt.

    Args:
        kind: A registered index kind.
        corpus: The corpus file.
        cache_root: Cache folder (default ``searchenv.tasks.cache_dir() / "indexes"``).
        **options: Build options (part of the cache key).

    Returns:
        The retriever.
    """
    sha = file_sha256(corpus)
    folder = cached_index_folder(kind, corpus, cache_root, sha=sha, **options)
    folder.mkdir(parents=True, exist_ok=True)
    with index_lock(folder):
        try:
            if read_meta(folder, expected_kind=kind).get("source_sha256") == sha:
                return open_index(folder)
        except RetrieverError:
            pass  # not built yet, damaged, or of an older format: build it (again)
        return build_index(kind, corpus, folder, **options)
