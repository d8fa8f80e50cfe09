"""Building and caching saved indexes of any kind, sharded ones included, and opening them.

:func:`open_index` reopens any saved index by the kind written in its metadata (it lives in
:mod:`searchenv.retrievers.kinds`, beside the kinds it opens, and is importable here);
:func:`build_index` builds one by name; :func:`retriever_for_corpus` does either,
caching built indexes on disk keyed by the corpus file's hash. Every build is swapped in
atomically and every open checks the files (see :mod:`searchenv.retrievers.index.metadata`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Retriever, RetrieverError
from searchenv.retrievers.index.metadata import file_sha256, index_lock, read_meta
from searchenv.retrievers.kinds import _index_class, index_kinds, open_index, register_index_kind

__all__ = [
    "build_index",
    "cached_index_folder",
    "index_kinds",
    "open_index",
    "register_index_kind",
    "retriever_for_corpus",
]


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

    Raises:
        ValueError: Naming the corpus file, if it holds no document (a ``CorpusFormatError`` naming its
            file, line and field if a line is malformed).
    """
    from searchenv.corpus import iter_corpus, read_corpus

    if next(iter_corpus(corpus), None) is None:  # the first document read (and the file closed), or none
        raise ValueError(f"{corpus}: cannot build an index over an empty corpus (the file holds no document)")
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
