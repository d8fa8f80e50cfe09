r"""Dense retrieval: a sentence-transformers encoder and a FAISS inner-product index.

Documents are embedded as ``title\ntext`` (FlashRAG ``contents``) into unit vectors, so
inner product is cosine similarity. The index type is chosen by name (:data:`INDEX_PRESETS`) or
given as any FAISS factory string (``index_type="factory:IVF65536,PQ96"``):

* ``flat``: exact search (``IndexFlatIP``), batched through BLAS.
* ``hnsw``: approximate search on a navigable small-world graph (``IndexHNSWFlat``);
  ``hnsw_m`` links per node, ``ef_construction`` and ``ef_search`` trade build and query
  time for recall.
* Compressed, for corpora whose fp32 vectors do not fit in memory: ``fp16`` and ``sq8``
  (every vector scanned, stored in 2 or 1 bytes per dimension), ``ivf-fp16``, ``ivf-sq8`` and
  ``ivf-pq`` (an inverted file of ``nlist`` k-means cells, ``nprobe`` of them scanned per
  query; PQ stores ``pq_m`` bytes per vector), and ``hnsw-sq8`` (the graph over 8-bit vectors).
  Quantisers and cells are trained on ``train_size`` documents drawn with ``train_seed``.

A compressed index ranks by FAISS's approximate scores. With ``keep_vectors="float32"`` (or
``"float16"``) the build also writes every vector to ``vectors.npy``, which a search memory-maps
to rescore the best ``rerank`` candidates exactly (and the top ``k + 8`` always): recall of an
approximate index at a small memory cost, since only the candidates' rows are read from disk.

Building is streamed and resumable: documents are embedded ``chunk_size`` at a time (sorted by
length within the chunk, so batches pad little) and each chunk is written to
``INDEX/.encode-<key>/`` before the next starts. A killed build started again with the same
corpus, encoder and chunk size re-encodes only the chunks it had not finished, and gives the same
index as an uninterrupted build; the chunk folder is removed once the index is published.

An index folder holds the shared :class:`~searchenv.retrievers.index.docstore.DocStore` files and ``dense.faiss``
(written by ``faiss.write_index``, no pickle) in its data folder, and ``searchenv_index.json``
with the corpus fingerprint, the encoder name, the dimension and every file's size and checksum;
it is built and swapped in as :mod:`searchenv.retrievers.index.metadata` describes. A flat index of
one corpus is byte-identical from build to build; an HNSW graph is built with several threads and
can differ. :meth:`DenseRetriever.load` refuses an index whose metadata, vectors and documents
disagree, or an encoder other than the one it was built with. With ``mmap=True`` the vectors
(flat and scalar-quantised codes, inverted lists) are memory-mapped, so an index larger than RAM
is served from the page cache.

Rankings are canonical: FAISS is asked for a few extra neighbours, which are rescored one pair at
a time in float64 (from the stored vectors: the flat and HNSW-flat index's own, or ``vectors.npy``)
and ordered by score, then by corpus row. Tied documents always come back in the same order, and
a query vector's ranking does not depend on the other queries of its batch (FAISS's own scores
differ in the last bits between its batched BLAS and single-query kernels). A compressed index
without ``vectors.npy`` orders FAISS's scores, which are computed one query at a time, by score
then row. A neural encoder's query vector itself can differ in the last bits with the batch it was
encoded in (padding changes the matrix shapes), so near-ties between documents can still swap
there.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.corpus import Document
from searchenv.encoders import EncoderLike, load_encoder, resolve_encoder
from searchenv.retrievers.base import Hit, RetrieverError, check_k, check_queries
from searchenv.retrievers.faiss_index import (
    _ENCODE_PREFIX,
    _RESCORE_BLOCK,
    _TIE_MARGIN,
    BLAS_DATABASE_BLOCK,
    BLAS_THRESHOLD,
    FACTORY_PREFIX,
    INDEX_FILE,
    INDEX_PRESETS,
    INDEX_TYPES,
    KEEP_VECTORS,
    VECTORS_FILE,
    FaissOptions,
    _as_unit_rows,
    _check_optional_positive,
    _check_positive,
    _check_rerank,
    _chunk_sample,
    _configure_faiss_once,
    _encode_chunks,
    _exact_vectors,
    _iter_chunks,
    _new_index,
    _sample_rows,
    _train,
    configure_faiss_blas,
    default_nlist,
    index_plan,
)
from searchenv.retrievers.index.docstore import DocStore
from searchenv.retrievers.index.metadata import (
    StaleIndexError,
    check_count,
    damaged,
    index_lock,
    load_index,
    publish_index,
)

__all__ = [
    "BLAS_DATABASE_BLOCK",
    "BLAS_THRESHOLD",
    "DenseRetriever",
    "FACTORY_PREFIX",
    "FaissOptions",
    "INDEX_FILE",
    "INDEX_PRESETS",
    "INDEX_TYPES",
    "KEEP_VECTORS",
    "VECTORS_FILE",
    "configure_faiss_blas",
    "default_nlist",
    "index_plan",
]


class DenseRetriever:
    """Dense passage retrieval over a FAISS index (see the module docstring).

    Build with :meth:`build` (from documents, encoding them) or :meth:`from_vectors`
    (precomputed vectors, in memory); reopen a saved index with :meth:`load`.

    Args:
        index: A FAISS index with inner-product metric, one vector per document row.
        docs: Row-aligned documents (a :class:`DocStore` or a sequence of documents).
        fingerprint: Corpus fingerprint.
        encoder: An encoder object, an encoder name or folder (loaded on the first text query),
            or ``None`` if only :meth:`search_vectors` will be used.
        encoder_name: The encoder name recorded with the index; a different ``encoder`` is refused.
        ef_search: HNSW candidate-list size at query time (HNSW indexes only).
        nprobe: Inverted-file cells scanned per query (IVF indexes only).
        rerank: Candidates fetched from an approximate index and rescored exactly with
            ``rerank_vectors`` (at least ``k + 8`` are always fetched; 0: just those).
        rerank_vectors: ``(num_docs, dim)`` vectors (float32 or float16, in memory or
            memory-mapped) used to rescore a compressed index's candidates.
        index_type: The name the index was built with (inferred for flat and HNSW-flat).
        query_batch_size: Queries per encoder forward pass.

    Raises:
        ValueError: If the index, documents and vectors have different lengths, or an option is invalid.
        RetrieverError: If ``encoder`` is not the one named by ``encoder_name``.
    """

    kind = "dense"

    def __init__(
        self,
        index: Any,
        docs: DocStore | Sequence[Document],
        *,
        fingerprint: str = "",
        encoder: EncoderLike | str | os.PathLike[str] | None = None,
        encoder_name: str | None = None,
        ef_search: int = 128,
        nprobe: int = 32,
        rerank: int = 0,
        rerank_vectors: np.ndarray | None = None,
        index_type: str | None = None,
        query_batch_size: int = 256,
    ) -> None:
        import faiss

        if int(index.ntotal) != len(docs):
            raise ValueError(f"index holds {index.ntotal} vectors but there are {len(docs)} documents")
        self._index = index
        self._docs = docs
        self.fingerprint = fingerprint
        self.dim = int(index.d)
        self.ef_search = _check_positive("ef_search", ef_search)
        self.nprobe = _check_positive("nprobe", nprobe)
        self.rerank = _check_rerank(rerank)
        self.query_batch_size = _check_positive("query_batch_size", query_batch_size)
        self._vectors = _exact_vectors(index)
        if index_type is None:
            is_hnsw = isinstance(index, faiss.IndexHNSW)
            index_type = ("hnsw" if is_hnsw else "flat") if self._vectors is not None else type(index).__name__
        self.index_type = index_type
        if rerank_vectors is not None and rerank_vectors.shape != (len(docs), self.dim):
            raise ValueError(f"rerank_vectors have shape {rerank_vectors.shape}, expected {(len(docs), self.dim)}")
        # the vectors candidates are rescored with: the index's own fp32 ones, else those kept on disk
        self._exact = self._vectors if self._vectors is not None else rerank_vectors
        self.exact_rescoring = self._exact is not None
        if isinstance(index, faiss.IndexFlat):
            _configure_faiss_once()
        self._encoder: EncoderLike | None = None
        self._encoder_spec: str | os.PathLike[str] | None = None
        self._encoder_lock = threading.Lock()
        if encoder is None or isinstance(encoder, (str, os.PathLike)):
            self._encoder_spec = encoder if encoder is not None else encoder_name
            name = resolve_encoder(encoder)[0] if encoder is not None else encoder_name
        else:
            self._encoder = encoder
            name = encoder.name
            if int(encoder.dim) != self.dim:
                raise RetrieverError(f"encoder {encoder.name!r} has dimension {encoder.dim}, the index {self.dim}")
        if encoder_name is not None and name != encoder_name:
            raise RetrieverError(
                f"this index was built with encoder {encoder_name!r}; refusing to query it with {name!r} "
                "(rebuild the index with the new encoder)"
            )
        self.encoder_name = name

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        folder: str | os.PathLike[str],
        *,
        source_sha256: str = "",
        source_path: str = "",
        encoder: EncoderLike | str | os.PathLike[str] | None = None,
        options: FaissOptions | None = None,
        batch_size: int = 64,
        chunk_size: int = 4096,
        device: str = "cpu",
        show_progress: bool = True,
        **option_fields: Any,
    ) -> DenseRetriever:
        """Embed ``documents``, index them and swap the new index into ``folder`` atomically.

        Documents are written to a fresh folder first and then embedded ``chunk_size`` at a time
        into chunk files under ``folder/.encode-<key>/`` (the key hashes the corpus fingerprint,
        the encoder and the chunk size), so memory stays bounded by one chunk plus the FAISS index,
        and a build that is killed and started again re-encodes only the missing chunks. The new
        index replaces the old one only when complete, so a failed or killed build loses nothing.

        Args:
            documents: The corpus (any iterable; read once).
            folder: Index folder (created; a previous index in it is replaced).
            source_sha256: Hash of the corpus file, stored for cache checks.
            source_path: The corpus file, named in rebuild hints.
            encoder: Encoder object, name or local folder; ``None`` is the packaged all-MiniLM-L6-v2.
            options: The FAISS options (:class:`FaissOptions`: index type, HNSW, inverted-file and PQ
                sizes, training sample, kept vectors, re-ranking); default every default.
            batch_size: Documents per encoder forward pass.
            chunk_size: Documents read and embedded per step (and per resumable chunk).
            device: Torch device when the encoder is loaded by name.
            show_progress: Show a progress bar (tqdm) while embedding.
            **option_fields: Fields of :class:`FaissOptions` by keyword (``index_type="hnsw"``,
                ``keep_vectors="float16"``), replacing those of ``options``.

        Returns:
            The retriever over the saved index.

        Raises:
            ValueError: On an empty corpus or an invalid option.
            TypeError: For a keyword that is not a build argument or a field of :class:`FaissOptions`.
        """
        import faiss

        opts = FaissOptions.of(options, **option_fields)
        for name, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
            _check_positive(name, value)
        enc = load_encoder(encoder, device=device) if encoder is None or isinstance(
            encoder, (str, os.PathLike)) else encoder
        root = Path(folder)
        dim = int(enc.dim)
        if opts.pq_m is not None and dim % opts.pq_m:
            raise ValueError(f"pq_m must divide the dimension {dim}, got {opts.pq_m}")

        def write(data: Path) -> dict[str, Any]:
            n, fingerprint = DocStore.write(data, documents)
            if n == 0:
                raise ValueError("cannot build a dense index over an empty corpus")
            plan = index_plan(opts, dim, n)
            key = hashlib.sha256(json.dumps([fingerprint, enc.name, dim, chunk_size]).encode()).hexdigest()[:16]
            chunks = _encode_chunks(DocStore(data), enc, root / f"{_ENCODE_PREFIX}{key}", chunk_size=chunk_size,
                                    batch_size=batch_size, show_progress=show_progress)
            index = _new_index(opts.index_type, dim, plan, opts.ef_construction)
            _train(index, lambda: _chunk_sample(chunks, _sample_rows(n, plan.get("train_size", n), opts.train_seed)))
            for vectors in _iter_chunks(chunks):
                index.add(vectors)
            faiss.write_index(index, str(data / INDEX_FILE))
            if opts.keep_vectors != "none":
                kept = np.lib.format.open_memmap(data / VECTORS_FILE, mode="w+", dtype=opts.keep_vectors,
                                                 shape=(n, dim))
                start = 0
                for vectors in _iter_chunks(chunks):
                    kept[start : start + len(vectors)] = vectors
                    start += len(vectors)
                kept.flush()
                del kept
            params = {"hnsw_m": opts.hnsw_m, "ef_construction": opts.ef_construction, "ef_search": opts.ef_search,
                      "nprobe": opts.nprobe, "rerank": opts.rerank, "keep_vectors": opts.keep_vectors,
                      "train_seed": opts.train_seed, "chunk_size": chunk_size, **plan}
            return {
                "kind": cls.kind, "fingerprint": fingerprint, "num_docs": n, "source_sha256": source_sha256,
                "source_path": source_path, "encoder": enc.name, "dim": dim, "index_type": opts.index_type,
                "params": params,
            }

        root.mkdir(parents=True, exist_ok=True)
        with index_lock(root):
            publish_index(root, write)
            for leftover in root.glob(_ENCODE_PREFIX + "*"):  # this build's chunks and older ones
                if re.fullmatch(r"\.encode-[0-9a-f]{16}", leftover.name) and leftover.is_dir():  # not a user's file
                    shutil.rmtree(leftover, ignore_errors=True)
        return cls.load(folder, encoder=enc)

    @classmethod
    def from_vectors(
        cls,
        vectors: np.ndarray,
        documents: Sequence[Document] | None = None,
        *,
        normalize: bool = True,
        encoder: EncoderLike | str | os.PathLike[str] | None = None,
        options: FaissOptions | None = None,
        **option_fields: Any,
    ) -> DenseRetriever:
        """An in-memory retriever over precomputed vectors (tests, benchmarks, custom encoders).

        Args:
            vectors: ``(num_docs, dim)`` floating-point embeddings.
            documents: Row-aligned documents; default ``Document(str(row), "", "")``.
            normalize: L2-normalise the rows (inner product is then cosine similarity).
            encoder: Encoder for text queries (optional).
            options: The FAISS options (:class:`FaissOptions`); ``keep_vectors`` keeps a copy of the
                vectors in memory for exact re-ranking of a compressed index.
            **option_fields: Fields of :class:`FaissOptions` by keyword, replacing those of ``options``.

        Returns:
            The retriever (not saved anywhere).

        Raises:
            ValueError: For an invalid option or vectors that are not a finite 2-D float array.
            TypeError: For a keyword that is not an argument or a field of :class:`FaissOptions`.
        """
        opts = FaissOptions.of(options, **option_fields)
        arr = _as_unit_rows(vectors, None, normalize=normalize)
        docs = list(documents) if documents is not None else [Document(str(i), "", "") for i in range(len(arr))]
        if len(docs) != len(arr):
            raise ValueError(f"{len(arr)} vectors but {len(docs)} documents")
        plan = index_plan(opts, arr.shape[1], len(arr))
        index = _new_index(opts.index_type, arr.shape[1], plan, opts.ef_construction)
        _train(index, lambda: arr[_sample_rows(len(arr), plan.get("train_size", len(arr)), opts.train_seed)])
        index.add(arr)
        kept = None if opts.keep_vectors == "none" else arr.astype(opts.keep_vectors)
        return cls(index, docs, encoder=encoder, ef_search=opts.ef_search, nprobe=opts.nprobe, rerank=opts.rerank,
                   rerank_vectors=kept, index_type=opts.index_type)

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike[str],
        *,
        mmap: bool = False,
        verify: bool = False,
        encoder: EncoderLike | str | os.PathLike[str] | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
        rerank: int | None = None,
        expected_fingerprint: str | None = None,
    ) -> DenseRetriever:
        """Open a saved index (no pickle), checking it on the way.

        Args:
            folder: The index folder.
            mmap: Memory-map the vectors (``faiss.IO_FLAG_MMAP_IFC``: flat and scalar-quantised
                codes, inverted lists) and the documents. ``vectors.npy`` is always memory-mapped.
            verify: Also compare every file's SHA-256 with the metadata (reads every byte).
            encoder: Encoder to query with; default the one recorded in the metadata, loaded
                on the first text query. Another encoder than the recorded one is refused.
            ef_search: Override the HNSW query-time candidate-list size.
            nprobe: Override the inverted-file cells scanned per query.
            rerank: Override the candidates rescored exactly (needs ``vectors.npy`` to matter).
            expected_fingerprint: Refuse the index unless it was built from this corpus.

        Returns:
            The retriever.

        Raises:
            RetrieverError: If the folder is not a dense index or the encoder differs from the
                recorded one.
            IndexIntegrityError: If files are missing, differ from the metadata, or the vectors,
                documents and metadata disagree.
            StaleIndexError: If ``expected_fingerprint`` differs from the recorded fingerprint.
        """
        import faiss

        for name, option in (("ef_search", ef_search), ("nprobe", nprobe)):
            _check_optional_positive(name, option)
        if rerank is not None:
            _check_rerank(rerank)

        def open_data(meta: dict[str, Any], data: Path) -> DenseRetriever:
            if expected_fingerprint is not None and meta.get("fingerprint") != expected_fingerprint:
                raise StaleIndexError(
                    f"index {folder} was built from corpus {meta.get('fingerprint')}, expected {expected_fingerprint}"
                )
            path = data / INDEX_FILE
            flags = 0
            if mmap:
                flags = getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP) | faiss.IO_FLAG_READ_ONLY
            try:
                index = faiss.read_index(str(path), flags)
            except RuntimeError as exc:
                raise damaged(folder, meta, f"{path}: unreadable FAISS index ({str(exc).splitlines()[0]})") from exc
            docs = DocStore(data, mmap_mode=mmap)
            n = meta["num_docs"]
            check_count(folder, meta, "inconsistent dense index: vectors in dense.faiss vs metadata",
                        int(index.ntotal), n)
            check_count(folder, meta, "inconsistent dense index: documents in docs.jsonl vs metadata", len(docs), n)
            check_count(folder, meta, "inconsistent dense index: dimension of dense.faiss vs metadata",
                        int(index.d), meta.get("dim"))
            kept = None
            if (data / VECTORS_FILE).is_file():
                try:
                    kept = np.load(data / VECTORS_FILE, mmap_mode="r")
                except (OSError, ValueError) as exc:
                    raise damaged(folder, meta, f"{data / VECTORS_FILE}: unreadable ({exc})") from exc
                if kept.shape != (n, meta.get("dim")) or kept.dtype not in (np.float32, np.float16):
                    raise damaged(folder, meta, f"inconsistent dense index: {VECTORS_FILE} holds {kept.dtype} "
                                                f"{kept.shape}, expected ({n}, {meta.get('dim')})")
            params = meta.get("params") or {}
            return cls(
                index,
                docs,
                fingerprint=str(meta["fingerprint"]),
                encoder=encoder,
                encoder_name=str(meta["encoder"]),
                ef_search=ef_search if ef_search is not None else int(params.get("ef_search", 128)),
                nprobe=nprobe if nprobe is not None else int(params.get("nprobe", 32)),
                rerank=rerank if rerank is not None else int(params.get("rerank", 0)),
                rerank_vectors=kept,
                index_type=str(meta.get("index_type", "flat")),
            )

        return load_index(folder, cls.kind, open_data, verify=verify)

    # ------------------------------------------------------------------ search

    def __len__(self) -> int:
        return len(self._docs)

    def doc_ids(self) -> list[str]:
        """The ids of the indexed documents, in row order."""
        docs = self._docs
        return docs.ids() if isinstance(docs, DocStore) else [d.id for d in docs]

    @property
    def encoder(self) -> EncoderLike:
        """The query encoder, loaded on first use.

        Raises:
            RetrieverError: If the retriever has no encoder or it cannot be loaded.
        """
        if self._encoder is None:
            with self._encoder_lock:
                if self._encoder is None:
                    if self._encoder_spec is None:
                        raise RetrieverError("this dense retriever has no encoder; use search_vectors")
                    try:
                        enc = load_encoder(self._encoder_spec)
                    except (ValueError, OSError) as exc:
                        raise RetrieverError(f"cannot load encoder {self._encoder_spec!r}: {exc}") from exc
                    if enc.dim != self.dim:
                        raise RetrieverError(f"encoder {enc.name!r} has dimension {enc.dim}, the index {self.dim}")
                    self._encoder = enc
        return self._encoder

    def search_vectors(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search with query embeddings.

        Args:
            queries: ``(num_queries, dim)`` floating-point vectors (normalised by the caller).
            k: Hits per query.

        Returns:
            ``(scores, rows)``, each ``(num_queries, min(k, num_docs))``, best first, ties by row;
            scores are float64 (exact where the vectors are at hand: merged rankings of several
            shards order exactly as one index would). An approximate index may find fewer
            neighbours; missing places hold row ``-1`` and score ``-inf``.
        """
        import faiss

        faiss_any: Any = faiss  # the SWIG module's attributes are not all visible to type checkers
        check_k(k)
        q = _as_unit_rows(queries, self.dim, normalize=False)
        n = int(self._index.ntotal)
        k_out = min(k, n)
        if q.shape[0] == 0 or n == 0:
            return np.zeros((q.shape[0], k_out), dtype=np.float64), np.zeros((q.shape[0], k_out), dtype=np.int64)
        k_fetch = min(n, k + _TIE_MARGIN)
        scores: np.ndarray | None = None
        try:
            if isinstance(self._index, faiss.IndexHNSW):
                k_fetch = min(n, max(k_fetch, self.rerank))
                params = faiss_any.SearchParametersHNSW(efSearch=max(self.ef_search, k_fetch))
                scores, rows = self._index.search(q, k_fetch, params=params)
            elif isinstance(self._index, faiss.IndexIVF):
                k_fetch = min(n, max(k_fetch, self.rerank))
                params = faiss_any.SearchParametersIVF(nprobe=min(self.nprobe, int(self._index.nlist)))
                scores, rows = self._index.search(q, k_fetch, params=params)
            elif self._vectors is not None and self._vectors.flags.aligned and q.shape[0] < BLAS_THRESHOLD:
                # A few queries: one BLAS matrix-vector product over the stored vectors, faster than
                # FAISS's per-pair SIMD path with OpenMP threads on a busy machine. Memory-mapped
                # vectors start at an unaligned file offset, where numpy's product leaves BLAS and is
                # slower than FAISS: FAISS there (see benchmarks/retrieval_dense.py).
                sims = q @ self._vectors.T
                rows = np.argpartition(-sims, k_fetch - 1, axis=1)[:, :k_fetch] if k_fetch < n else (
                    np.broadcast_to(np.arange(n), (q.shape[0], n)))
            else:
                if self._vectors is None:
                    k_fetch = min(n, max(k_fetch, self.rerank))
                scores, rows = self._index.search(q, k_fetch)
        except RuntimeError as exc:
            raise RetrieverError(f"FAISS search failed: {str(exc).splitlines()[0]}") from exc
        missing = rows < 0
        if self._exact is not None:
            # FAISS's kernels differ with the batch size (BLAS or SIMD), so the last bits of a score
            # can depend on the other queries of the batch. Rescore the candidates one pair at a
            # time in float64, then order by score and row: a query's ranking no longer depends on
            # its batch. For a compressed index this is the exact re-ranking from vectors.npy.
            safe = np.where(missing, 0, rows)
            q64 = q.astype(np.float64)
            exact = np.empty(rows.shape, dtype=np.float64)
            for start in range(0, len(q), _RESCORE_BLOCK):  # blocks of queries: the candidates stay in cache
                stop = start + _RESCORE_BLOCK
                cand = np.asarray(self._exact[safe[start:stop]], dtype=np.float64)
                exact[start:stop] = np.einsum("qkd,qd->qk", cand, q64[start:stop])
        else:  # a compressed index's own scores, computed one query at a time
            exact = np.asarray(scores, dtype=np.float64)
        exact[missing] = -np.inf
        tie_rows = np.where(missing, np.iinfo(np.int64).max, rows)
        order = np.lexsort((tie_rows, -exact), axis=-1)[:, :k_out]
        return np.take_along_axis(exact, order, axis=1), np.take_along_axis(rows, order, axis=1)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Rank documents for each query (see :class:`searchenv.retrievers.base.Retriever`).

        All queries are embedded in batches of ``query_batch_size`` and searched in one FAISS call.
        """
        check_k(k)
        queries = check_queries(queries)
        if not queries:
            return []
        encoder = self.encoder
        try:
            vectors = encoder.encode(queries, batch_size=self.query_batch_size)
        except (RuntimeError, OSError) as exc:
            raise RetrieverError(f"query encoding failed: {exc}") from exc
        scores, rows = self.search_vectors(vectors, k)
        out: list[list[Hit]] = []
        try:
            for score_row, row_ids in zip(scores, rows, strict=True):
                hits = []
                for score, row in zip(score_row.tolist(), row_ids.tolist(), strict=True):
                    if row < 0 or not math.isfinite(score):
                        continue
                    d = self._docs[row]
                    hits.append(Hit(d.id, d.title, d.text, float(score)))
                out.append(hits)
        except (OSError, ValueError) as exc:  # a damaged or vanished memory-mapped document store
            raise RetrieverError(f"dense search failed reading documents: {exc}") from exc
        return out

    def __repr__(self) -> str:
        return (f"DenseRetriever({len(self)} docs, index_type={self.index_type!r}, "
                f"encoder={self.encoder_name!r})")
