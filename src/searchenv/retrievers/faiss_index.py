"""FAISS for the dense retriever: its options, index types and plans, BLAS settings, and resumable encoding.

:class:`FaissOptions` holds every FAISS option of a dense index, checked once; the resumable
encoding writes a build's vectors chunk by chunk.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.encoders import EncoderLike
from searchenv.retrievers.index.docstore import DocStore

INDEX_FILE = "dense.faiss"
#: Every vector, written at build with ``keep_vectors`` and memory-mapped for exact re-ranking.
VECTORS_FILE = "vectors.npy"
#: Named index types and the FAISS factory strings they stand for (inner-product metric).
INDEX_PRESETS: dict[str, str] = {
    "flat": "Flat",
    "hnsw": "HNSW{hnsw_m},Flat",
    "fp16": "SQfp16",
    "sq8": "SQ8",
    "ivf-fp16": "IVF{nlist},SQfp16",
    "ivf-sq8": "IVF{nlist},SQ8",
    "ivf-pq": "IVF{nlist},PQ{pq_m}x{pq_bits}",
    "hnsw-sq8": "HNSW{hnsw_m},SQ8",
}
INDEX_TYPES = tuple(INDEX_PRESETS)
#: ``index_type`` given as ``factory:<FAISS factory string>``.
FACTORY_PREFIX = "factory:"
KEEP_VECTORS = ("none", "float32", "float16")
# Chunks of a build in progress live in INDEX/.encode-<key>/ so that a killed build can resume.
_ENCODE_PREFIX = ".encode-"
# Extra neighbours fetched so that ties at the k-th place are broken by corpus row, not by FAISS.
_TIE_MARGIN = 8
# Queries whose candidates are rescored together (a block's float64 candidates fit in cache).
_RESCORE_BLOCK = 8
# Batched flat search goes through BLAS (one matrix product per block of documents) from this many
# queries on, in blocks of this many documents; see configure_faiss_blas.
BLAS_THRESHOLD = 20
BLAS_DATABASE_BLOCK = 16384
_blas_lock = threading.Lock()
_blas_configured = False


def configure_faiss_blas(threshold: int = BLAS_THRESHOLD, database_block: int = BLAS_DATABASE_BLOCK) -> None:
    """Make FAISS use BLAS matrix products for batched exact search.

    FAISS 1.15 sets ``distance_compute_blas_threshold`` to 128000 queries, so a batch of a few
    hundred queries is scored pair by pair with SIMD dot products; with BLAS (as FAISS did up to
    1.14, threshold 20) and blocks of 16384 documents, batched flat search runs several times
    faster (``benchmarks/retrieval_dense.py`` measures it). This changes FAISS's process-wide
    settings; a threshold already lower, or a block already larger, is left alone. Called once, the first
    time a flat :class:`DenseRetriever` is created.

    Args:
        threshold: Use BLAS from this many queries per search call.
        database_block: Documents per BLAS block.
    """
    import faiss

    cvar: Any = faiss.cvar
    if cvar.distance_compute_blas_threshold > threshold:
        cvar.distance_compute_blas_threshold = threshold
    if cvar.distance_compute_blas_database_bs < database_block:
        cvar.distance_compute_blas_database_bs = database_block


def _configure_faiss_once() -> None:
    global _blas_configured
    with _blas_lock:
        if not _blas_configured:
            configure_faiss_blas()
            _blas_configured = True


def _check_index_type(index_type: str) -> str:
    if isinstance(index_type, str) and (index_type in INDEX_PRESETS or (
            index_type.startswith(FACTORY_PREFIX) and index_type[len(FACTORY_PREFIX):].strip())):
        return index_type
    raise ValueError(f"index_type must be one of {', '.join(INDEX_TYPES)} or {FACTORY_PREFIX}<FAISS factory string>, "
                     f"got {index_type!r}")


def _check_positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_optional_positive(name: str, value: int | None) -> int | None:
    return None if value is None else _check_positive(name, value)


def _check_rerank(rerank: int) -> int:
    if isinstance(rerank, bool) or not isinstance(rerank, int) or rerank < 0:
        raise ValueError(f"rerank must be a non-negative integer, got {rerank!r}")
    return rerank


def _check_keep_vectors(keep_vectors: str) -> str:
    if keep_vectors not in KEEP_VECTORS:
        raise ValueError(f"keep_vectors must be one of {', '.join(KEEP_VECTORS)}, got {keep_vectors!r}")
    return keep_vectors


@dataclass(frozen=True)
class FaissOptions:
    """How a dense index is built and searched: every FAISS option, checked when made.

    ``DenseRetriever.build``, ``DenseRetriever.from_vectors`` and :func:`index_plan` take one as
    ``options=`` or its fields as keywords (``index_type="ivf-pq", nprobe=8``); :meth:`of` joins the two.

    Attributes:
        index_type: A name of :data:`INDEX_PRESETS` or ``factory:<FAISS factory string>``.
        hnsw_m: HNSW links per node.
        ef_construction: HNSW candidate-list size while building.
        ef_search: HNSW candidate-list size at query time (stored with the index; changeable on load).
        nlist: Inverted-file cells (default :func:`default_nlist`).
        nprobe: Inverted-file cells scanned per query (stored; changeable on load).
        pq_m: PQ bytes per vector for ``ivf-pq`` (default ``dim // 4``); must divide the dimension.
        train_size: Vectors the quantiser is trained on (see :func:`index_plan`).
        train_seed: Seed of the training sample.
        keep_vectors: ``float32`` or ``float16`` keeps every vector (``vectors.npy``, or in memory)
            for exact re-ranking of a compressed index; ``none`` does not.
        rerank: Candidates rescored exactly at query time (stored; changeable on load).

    Raises:
        ValueError: For an unknown index type or keep_vectors value, or a count that is not a positive
            integer (``rerank`` and ``train_seed``: non-negative).
    """

    index_type: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None
    nprobe: int = 32
    pq_m: int | None = None
    train_size: int | None = None
    train_seed: int = 0
    keep_vectors: str = "none"
    rerank: int = 0

    def __post_init__(self) -> None:
        _check_index_type(self.index_type)
        for name in ("hnsw_m", "ef_construction", "ef_search", "nprobe"):
            _check_positive(name, getattr(self, name))
        for name in ("nlist", "pq_m", "train_size"):
            _check_optional_positive(name, getattr(self, name))
        _check_rerank(self.rerank)
        if isinstance(self.train_seed, bool) or not isinstance(self.train_seed, int) or self.train_seed < 0:
            raise ValueError(f"train_seed must be a non-negative integer, got {self.train_seed!r}")
        _check_keep_vectors(self.keep_vectors)

    @classmethod
    def of(cls, options: FaissOptions | None = None, **fields_given: Any) -> FaissOptions:
        """``options`` (default: every default) with the fields named by keyword replaced.

        Raises:
            TypeError: For a keyword that is no field, naming it and the fields.
            ValueError: For a value the fields refuse.
        """
        unknown = sorted(set(fields_given) - set(OPTION_NAMES))
        if unknown:
            raise TypeError(f"unknown FAISS option(s) {unknown}; the options are {', '.join(OPTION_NAMES)}")
        base = options if options is not None else cls()
        if not isinstance(base, FaissOptions):
            raise TypeError(f"options must be FaissOptions, got {type(base).__name__}")
        return replace(base, **fields_given) if fields_given else base


#: The fields of :class:`FaissOptions`, in order.
OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(FaissOptions))


def default_nlist(num_docs: int) -> int:
    """Inverted-file cells for ``num_docs`` vectors.

    About ``4 * sqrt(n)`` (FAISS's guidance is 4-16 x sqrt(n)), and at most one cell per 39
    documents so that k-means has data for each.
    """
    return max(1, min(round(4 * math.sqrt(num_docs)), num_docs // 39))


def index_plan(
    index_type: str | FaissOptions,
    dim: int,
    num_docs: int,
    **option_fields: Any,
) -> dict[str, Any]:
    """Resolve an index type into the FAISS factory string and the parameters it was built with.

    Args:
        index_type: A name of :data:`INDEX_PRESETS`, ``factory:<FAISS factory string>``, or the
            whole :class:`FaissOptions`.
        dim: Vector dimension.
        num_docs: Documents to index.
        **option_fields: Fields of :class:`FaissOptions` by keyword; those that shape the plan are
            ``hnsw_m``, ``nlist`` (default :func:`default_nlist`), ``pq_m`` (must divide ``dim``;
            default ``dim // 4``) and ``train_size`` (default ``max(64 * nlist, 65536)``, at most ``num_docs``).

    Returns:
        ``{"factory": ..., "nlist": ..., "pq_m": ..., "pq_bits": ..., "train_size": ...}``
        (the entries that apply).

    Raises:
        ValueError: On an unknown type or parameters that do not fit the dimension.
    """
    if isinstance(index_type, FaissOptions):
        opts = FaissOptions.of(index_type, **option_fields)
    else:
        opts = FaissOptions.of(index_type=index_type, **option_fields)
    nlist, pq_m, train_size = opts.nlist, opts.pq_m, opts.train_size
    if opts.index_type.startswith(FACTORY_PREFIX):
        factory = opts.index_type[len(FACTORY_PREFIX):].strip()
        return {"factory": factory, "train_size": min(num_docs, train_size or 65536)}
    template = INDEX_PRESETS[opts.index_type]
    plan: dict[str, Any] = {}
    if "{nlist}" in template:
        plan["nlist"] = nlist if nlist is not None else default_nlist(num_docs)
        if plan["nlist"] > num_docs:
            raise ValueError(f"nlist {plan['nlist']} is larger than the {num_docs} documents")
    if "{hnsw_m}" in template:
        plan["hnsw_m"] = opts.hnsw_m
    if template not in ("Flat", "HNSW{hnsw_m},Flat"):
        plan["train_size"] = min(num_docs, train_size or max(64 * plan.get("nlist", 1), 65536))
    if "{pq_m}" in template:
        plan["pq_m"] = pq_m if pq_m is not None else (dim // 4 if dim % 4 == 0 else dim)
        if dim % plan["pq_m"]:
            raise ValueError(f"pq_m must divide the dimension {dim}, got {plan['pq_m']}")
        # 2**bits centroids per sub-quantiser, with the 39 training vectors each that k-means wants
        plan["pq_bits"] = max(1, min(8, int(math.log2(max(plan["train_size"] / 39, 2)))))
    plan["factory"] = template.format(**plan)
    return plan


def _new_index(index_type: str, dim: int, plan: dict[str, Any], ef_construction: int) -> Any:
    import faiss

    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    index: Any
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, plan["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
    else:
        try:
            index = faiss.index_factory(dim, plan["factory"], faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise ValueError(f"FAISS cannot build index {plan['factory']!r}: {str(exc).splitlines()[0]}") from None
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efConstruction = ef_construction
    return index


def _as_unit_rows(vectors: np.ndarray, dim: int | None, *, normalize: bool) -> np.ndarray:
    """Validate a 2-D float matrix and return it as C-contiguous float32, optionally L2-normalised."""
    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise ValueError(f"vectors must be a 2-D array, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"vectors have dimension {arr.shape[1]}, the index has {dim}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"vectors must be floating point, got {arr.dtype}")
    arr = np.array(arr, dtype=np.float32, order="C", copy=True) if normalize else np.ascontiguousarray(
        arr, dtype=np.float32
    )
    if not np.isfinite(arr).all():
        raise ValueError("vectors contain NaN or infinity")
    if normalize:
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        np.divide(arr, norms, out=arr, where=norms > 0)
    return arr


def _exact_vectors(index: Any) -> np.ndarray | None:
    """The ``(ntotal, d)`` float32 vectors of a flat or HNSW-flat index (no copy), else ``None``."""
    import faiss

    storage: Any = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else index
    if not isinstance(storage, faiss.IndexFlat):
        return None
    n, d = int(storage.ntotal), int(storage.d)
    if n == 0:
        return np.zeros((0, d), dtype=np.float32)
    view: np.ndarray = faiss.rev_swig_ptr(storage.get_xb(), n * d).reshape(n, d)
    return view


def _train(index: Any, sample: Callable[[], np.ndarray]) -> None:
    """Train ``index`` on ``sample()`` if it needs training (quantisers, inverted-file cells)."""
    if not index.is_trained:
        try:
            index.train(sample())
        except RuntimeError as exc:
            raise ValueError(f"FAISS could not train the index: {str(exc).splitlines()[0]}") from None


def _sample_rows(num_docs: int, size: int, seed: int) -> np.ndarray:
    """Sorted rows of the training sample (all rows when ``size >= num_docs``)."""
    if size >= num_docs:
        return np.arange(num_docs)
    return np.sort(np.random.default_rng(seed).choice(num_docs, size, replace=False))


def _save_npy_atomically(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _encode_chunks(
    store: DocStore,
    enc: EncoderLike,
    cache: Path,
    *,
    chunk_size: int,
    batch_size: int,
    show_progress: bool,
) -> list[Path]:
    """Embed every document into ``cache/chunk-NNNNNN.npy``, skipping chunks already there.

    Each chunk's texts are encoded sorted by length (batches of similar lengths pad little), one
    encoder call per ``batch_size`` texts so the progress bar moves per batch, and put back in
    corpus order; a chunk is written to a temporary file and renamed, so a chunk file is whole or
    absent. A build that finds finished chunks (a killed build's) says that it resumes.
    """
    import sys

    from tqdm import tqdm

    n, dim = len(store), int(enc.dim)
    cache.mkdir(parents=True, exist_ok=True)
    spans = [(start, min(n, start + chunk_size)) for start in range(0, n, chunk_size)]
    paths = [cache / f"chunk-{number:06d}.npy" for number in range(len(spans))]
    finished = [_finished_chunk(path, stop - start, dim) for path, (start, stop) in zip(paths, spans, strict=True)]
    resumed = sum(stop - start for done, (start, stop) in zip(finished, spans, strict=True) if done)
    if resumed and show_progress:
        tqdm.write(f"resuming a dense build: {resumed:,} of {n:,} documents already embedded "
                   f"({sum(finished)} of {len(spans)} chunks in {cache})", file=sys.stderr)
    with tqdm(total=n, initial=resumed, desc=f"embedding ({enc.name})", unit="doc",
              disable=not show_progress) as bar:
        for path, (start, stop), done in zip(paths, spans, finished, strict=True):
            if done:
                continue
            texts = [store[i].contents for i in range(start, stop)]
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            parts = []
            for lo in range(0, len(order), batch_size):
                batch = [texts[i] for i in order[lo : lo + batch_size]]
                parts.append(_as_unit_rows(enc.encode(batch, batch_size=batch_size), dim, normalize=True))
                bar.update(len(batch))
            encoded = np.concatenate(parts)
            vectors = np.empty_like(encoded)
            vectors[order] = encoded
            _save_npy_atomically(path, vectors)
    return paths


def _finished_chunk(path: Path, rows: int, dim: int) -> bool:
    """Whether ``path`` holds a whole chunk of ``rows`` x ``dim`` float32 vectors (else it is encoded again)."""
    if not path.is_file():
        return False
    try:
        done = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False  # unreadable: encode it again
    return bool(done.shape == (rows, dim) and done.dtype == np.float32)


def _chunk_sample(paths: Sequence[Path], rows: np.ndarray) -> np.ndarray:
    """The vectors of ``rows`` (sorted corpus rows) gathered from the chunk files."""
    parts = []
    offset = 0
    for path in paths:
        chunk = np.load(path, mmap_mode="r")
        lo, hi = np.searchsorted(rows, [offset, offset + len(chunk)])
        if hi > lo:
            parts.append(np.asarray(chunk[rows[lo:hi] - offset], dtype=np.float32))
        offset += len(chunk)
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def _iter_chunks(paths: Sequence[Path]) -> Iterator[np.ndarray]:
    for path in paths:
        yield np.ascontiguousarray(np.load(path), dtype=np.float32)
