"""Index kinds and the one index opener: which class builds and loads each kind, and :func:`open_index`.

A kind maps to ``"module:Class"``, imported only when an index of that kind is built or opened,
so naming ``dense`` costs no torch import until it is used. :func:`open_index` opens any saved
index folder with the class its metadata names: a folder of one kind (``searchenv_index.json``)
with that kind's class, a sharded one (``searchenv_shards.json``) with
:class:`~searchenv.retrievers.sharded.ShardedRetriever`, whose ``load`` opens each shard here.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Retriever
from searchenv.retrievers.index.metadata import (
    META_FILE,
    StaleIndexError,
    another_corpus,
    check_fresh,
    damaged,
    file_sha256,
    is_sharded,
    read_meta,
    read_shards,
)
from searchenv.utils.moved import renamed_names
from searchenv.utils.registry import Registry

# kind -> "module:Class"; the class has build(documents, folder, *, source_sha256, source_path, **opts),
# which writes through index_meta.publish_index, and load(folder, *, mmap, verify).
_KINDS: Registry[str] = Registry("retriever", {
    "bm25": "searchenv.retrievers.bm25:BM25Retriever",
    "dense": "searchenv.retrievers.dense:DenseRetriever",
})
# The class of a sharded folder: opened, never built by name (build_index(kind, ..., shards=N) writes one).
_SHARDED = "searchenv.retrievers.sharded:ShardedRetriever"


def register_index_kind(kind: str, target: str) -> None:
    """Register an index kind as ``"module:Class"`` (a class with ``build`` and ``load``).

    Raises:
        ValueError: If ``kind`` is not a non-empty string.
    """
    _KINDS.register(kind, target)


def index_kinds() -> list[str]:
    """Names accepted by :func:`build_index`."""
    return _KINDS.names()


def names_kind(spec: object) -> bool:
    """Whether ``spec`` asks for an index of a kind built from a corpus (``"bm25"``), not an index folder.

    A name that is both a kind and an index folder in the working directory is the folder, as
    :func:`searchenv.make.resolve_retriever` opens it (with a warning there).
    """
    return isinstance(spec, str) and spec in _KINDS and not os.path.isfile(os.path.join(spec, META_FILE))


def _class(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _index_class(kind: str) -> Any:
    return _class(_KINDS[kind])  # an unknown kind: UnknownNameError (a ValueError) naming the kinds


def open_index(
    folder: str | os.PathLike[str],
    *,
    mmap: bool = False,
    corpus: str | os.PathLike[str] | None = None,
    verify: bool = False,
    **options: Any,
) -> Retriever:
    """Reopen a saved index of any kind, sharded or not, with the class its metadata names.

    Every open compares each file's size and the counts (documents, rows, vectors) with the
    metadata; ``verify=True`` also compares each file's SHA-256 (reads the whole index).

    Args:
        folder: The index folder.
        mmap: Memory-map large arrays instead of reading them.
        corpus: If given, refuse the index unless it was built from this corpus file.
        verify: Check every file's checksum too.
        **options: Search-time options of the kind's ``load`` (a dense index's ``nprobe``,
            ``ef_search``, ``rerank``, ``encoder``); a sharded index passes them to each shard.

    Returns:
        The retriever.

    Raises:
        RetrieverError: If the folder is not an index; StaleIndexError if it is stale;
            IndexIntegrityError if its files are damaged (naming the file and the rebuild command).
        ValueError: For an option the kind's ``load`` does not take.
    """
    sharded = is_sharded(folder)
    if sharded:
        if corpus is not None:
            shards = read_shards(folder)
            if shards.get("source_sha256") != file_sha256(corpus):
                source = shards.get("source_path")
                if isinstance(source, str) and source and Path(source).resolve() != Path(corpus).resolve():
                    raise StaleIndexError(another_corpus(folder, shards.get("shard_kind"), source,
                                                         shards.get("fingerprint"), corpus, options=" --shards N"))
                raise StaleIndexError(f"sharded index {folder} was not built from {corpus}; rebuild it with "
                                      f"searchenv index --corpus {corpus} --out {folder} --shards N")
        kind, target = "sharded", _SHARDED
    else:
        meta = read_meta(folder)
        if corpus is not None:
            check_fresh(folder, corpus)
        named = meta.get("kind")
        if not isinstance(named, str) or named not in _KINDS:  # a kind this searchenv does not know: never imported
            raise damaged(folder, {k: v for k, v in meta.items() if k != "kind"},
                          f"{META_FILE} names the index kind {named!r:.60}, which is not one of "
                          f"{', '.join(index_kinds())}")
        kind, target = named, _KINDS[named]
    cls = _class(target)
    if not sharded:  # a sharded index's load hands the options to each shard's open, which checks them here
        accepted = inspect.signature(cls.load).parameters
        for name in options:
            if name not in accepted or name in ("folder", "mmap", "verify"):
                raise ValueError(f"option {name!r} does not apply to a {kind} index")
    retriever: Retriever = cls.load(folder, mmap=mmap, verify=verify, **options)
    return retriever


__getattr__ = renamed_names(__name__, {"open_unsharded": (__name__, "open_index")})
