"""Index kinds: which class builds and loads each kind of saved index, and opening an index by its kind.

A kind maps to ``"module:Class"``, imported only when an index of that kind is built or opened,
so naming ``dense`` costs no torch import until it is used.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from searchenv.retrievers.base import Retriever
from searchenv.retrievers.index.metadata import META_FILE, check_fresh, damaged, read_meta

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


def names_kind(spec: object) -> bool:
    """Whether ``spec`` asks for an index of a kind built from a corpus (``"bm25"``), not an index folder.

    A name that is both a kind and an index folder in the working directory is the folder, as
    :func:`searchenv.make.resolve_retriever` opens it (with a warning there).
    """
    from searchenv.retrievers.index.metadata import META_FILE

    return isinstance(spec, str) and spec in _KINDS and not os.path.isfile(os.path.join(spec, META_FILE))


def _index_class(kind: str) -> Any:
    if kind not in _KINDS:
        raise ValueError(f"unknown retriever {kind!r}; known: {', '.join(index_kinds())}")
    module, _, name = _KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)



def open_unsharded(
    folder: str | os.PathLike[str],
    *,
    mmap: bool = False,
    corpus: str | os.PathLike[str] | None = None,
    verify: bool = False,
    **options: Any,
) -> Retriever:
    """Reopen a saved index of one kind (not a sharded one) with the class its metadata names.

    Arguments, checks and errors are those of :func:`searchenv.retrievers.registry.open_index`.
    """
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
