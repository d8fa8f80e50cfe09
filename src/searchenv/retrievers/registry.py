"""Opening, building and caching saved indexes of any kind, sharded ones included.

:func:`open_index` reopens any saved index by the kind written in its metadata;
:func:`build_index` builds one by name; :func:`retriever_for_corpus` does either,
caching built indexes on disk keyed by the corpus file's hash. Every build is swapped in
atomically and every open checks the files (see :mod:`searchenv.retrievers.index.metadata`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Retriever, RetrieverError
from searchenv.retrievers.index.metadata import (
    StaleIndexError,
    another_corpus,
    file_sha256,
    index_lock,
    read_meta,
)
from searchenv.retrievers.kinds import _index_class, index_kinds, open_unsharded, register_index_kind

__all__ = [
    "build_index",
    "cached_index_folder",
    "index_kinds",
    "open_index",
    "register_index_kind",
    "retriever_for_corpus",
]


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
    return open_unsharded(folder, mmap=mmap, corpus=corpus, verify=verify, **options)


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
