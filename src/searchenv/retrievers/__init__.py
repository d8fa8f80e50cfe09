"""Retrievers: the :class:`Retriever` protocol, BM25, dense, hybrid, sharded and cached.

:func:`open_index` reopens any saved index by the kind written in its metadata;
:func:`build_index` builds one by name; :func:`retriever_for_corpus` does either,
caching built indexes on disk keyed by the corpus file's hash. Every build is swapped in
atomically and every open checks the files (see :mod:`searchenv.retrievers.index.metadata`).

Modules: :mod:`.base` (:class:`Retriever`, :class:`Hit`, :class:`NoDocuments`: the closed-book
control), :mod:`.kinds` (index kinds, the class of each, and the one opener), :mod:`.registry`
(build and cache indexes), :mod:`.bm25`, :mod:`.dense` (with :mod:`.faiss_index`), :mod:`.hybrid`,
:mod:`.sharded`, :mod:`.remote` (the HTTP client of a retrieval server, in every peer's dialect),
:mod:`.cache`, :mod:`.batching`, and ``index/`` (metadata, document store). How well a retriever finds a
task's evidence is :mod:`searchenv.retrieval_quality`.
"""

from __future__ import annotations

from searchenv.retrievers.base import CLOSED_BOOK, Hit, NoDocuments, Retriever, RetrieverError, check_k, check_queries
from searchenv.retrievers.index.metadata import (
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
from searchenv.retrievers.kinds import _index_class, index_kinds, register_index_kind
from searchenv.retrievers.registry import build_index, cached_index_folder, open_index, retriever_for_corpus

__all__ = [
    "CLOSED_BOOK",
    "META_FILE",
    "Hit",
    "IndexIntegrityError",
    "NoDocuments",
    "Retriever",
    "RetrieverError",
    "StaleIndexError",
    "_index_class",
    "another_corpus",
    "build_index",
    "cached_index_folder",
    "check_fresh",
    "check_k",
    "check_queries",
    "damaged",
    "file_sha256",
    "index_kinds",
    "index_lock",
    "open_index",
    "read_meta",
    "register_index_kind",
    "retriever_for_corpus",
]
