"""A caching wrapper: identical (query, k) pairs are answered from memory or disk.

:class:`CachedRetriever` keeps a bounded LRU of recent results in memory and, optionally,
every result in a SQLite file. With ``replay=True`` it answers from that file only and
raises :class:`RetrieverError` on a query it has not seen, so an evaluation can be re-run
with exactly the documents it saw the first time, with no index at all.

The file records the wrapped retriever's fingerprint (when it has one); opening the file
with a retriever over another corpus is refused, so a cache never serves stale hits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence, Sized
from pathlib import Path

from searchenv.retrievers.base import Hit, Retriever, RetrieverError, check_k

_Key = tuple[str, int]
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS hits (query TEXT NOT NULL, k INTEGER NOT NULL, hits TEXT NOT NULL, "
    "PRIMARY KEY (query, k))",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


def _encode_hits(hits: Sequence[Hit]) -> str:
    return json.dumps([[h.doc_id, h.title, h.text, h.score] for h in hits], ensure_ascii=False)


def _decode_hits(text: str) -> tuple[Hit, ...]:
    return tuple(Hit(str(i), str(t), str(x), float(s)) for i, t, x, s in json.loads(text))


class CachedRetriever:
    """Serve repeated ``(query, k)`` searches from a bounded in-memory LRU and an optional SQLite file.

    Thread-safe: the cache is guarded by a lock; the wrapped retriever is called outside it,
    once per batch for all missing queries.

    Args:
        inner: The retriever to wrap (may be ``None`` only with ``replay=True``).
        maxsize: Most (query, k) results kept in memory.
        path: SQLite file storing every result (created if missing).
        replay: Answer from ``path`` only; a query not in the file raises :class:`RetrieverError`.

    Raises:
        ValueError: On a bad ``maxsize`` or a missing ``inner``/``path``.
        RetrieverError: If the file belongs to a retriever with another fingerprint, or is unreadable.
    """

    def __init__(
        self,
        inner: Retriever | None,
        *,
        maxsize: int = 100_000,
        path: str | os.PathLike[str] | None = None,
        replay: bool = False,
    ) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be a non-negative integer, got {maxsize!r}")
        if replay and path is None:
            raise ValueError("replay=True needs the path of a cache file")
        if inner is None and not replay:
            raise ValueError("inner retriever is required unless replay=True")
        self.inner = inner
        self.maxsize = maxsize
        self.replay = replay
        self.path = Path(path) if path is not None else None
        self._lru: OrderedDict[_Key, tuple[Hit, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self._db = self._open_db(self.path)

    def _open_db(self, path: Path) -> sqlite3.Connection:
        if self.replay and not path.is_file():
            raise RetrieverError(f"replay cache {path} does not exist")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
            if not self.replay:
                db.execute("PRAGMA journal_mode=WAL")
                for stmt in _SCHEMA:
                    db.execute(stmt)
                db.commit()
            row = db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        except sqlite3.Error as exc:
            raise RetrieverError(f"cannot open retrieval cache {path}: {exc}") from exc
        mine = str(getattr(self.inner, "fingerprint", "") or "")
        if row is not None and mine and row[0] and row[0] != mine:
            db.close()
            raise RetrieverError(
                f"retrieval cache {path} was written for corpus/index {row[0]}, but the retriever has {mine}; "
                "use another cache file"
            )
        if row is None and mine and not self.replay:
            db.execute("INSERT INTO meta (key, value) VALUES ('fingerprint', ?)", (mine,))
            db.commit()
        return db

    # ------------------------------------------------------------------ stats

    @property
    def hit_rate(self) -> float:
        """Fraction of queries answered from the cache (memory or disk); 0.0 before any query."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def stats(self) -> dict[str, float | int]:
        """Counters: ``hits``, ``misses``, ``disk_hits``, ``hit_rate``, ``size`` (entries in memory)."""
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "disk_hits": self.disk_hits,
                "hit_rate": self.hit_rate,
                "size": len(self._lru),
            }

    def __len__(self) -> int:
        inner = self.inner
        return len(inner) if isinstance(inner, Sized) else 0

    def doc_ids(self) -> list[str] | None:
        """The wrapped retriever's document ids (None if it cannot list them)."""
        inner = self.inner
        return inner.doc_ids() if callable(getattr(inner, "doc_ids", None)) else None  # type: ignore[union-attr]

    @property
    def fingerprint(self) -> str:
        """The wrapped retriever's fingerprint (empty when unknown)."""
        return str(getattr(self.inner, "fingerprint", "") or "")

    # ------------------------------------------------------------------ search

    def _remember(self, key: _Key, hits: tuple[Hit, ...]) -> None:
        if self.maxsize == 0:
            return
        self._lru[key] = hits
        self._lru.move_to_end(key)
        while len(self._lru) > self.maxsize:
            self._lru.popitem(last=False)

    def _lookup(self, key: _Key) -> tuple[Hit, ...] | None:
        """Memory, then disk; caller holds the lock."""
        found = self._lru.get(key)
        if found is not None:
            self._lru.move_to_end(key)
            return found
        if self._db is not None:
            try:
                row = self._db.execute("SELECT hits FROM hits WHERE query = ? AND k = ?", key).fetchone()
            except sqlite3.Error as exc:
                raise RetrieverError(f"retrieval cache {self.path} unreadable: {exc}") from exc
            if row is not None:
                hits = _decode_hits(row[0])
                self.disk_hits += 1
                self._remember(key, hits)
                return hits
        return None

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Answer cached queries from the cache and the rest with one call to the wrapped retriever."""
        check_k(k)
        queries = list(queries)
        results: list[tuple[Hit, ...] | None] = [None] * len(queries)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, q in enumerate(queries):
                if q in missing:  # a duplicate of a query already being fetched in this batch
                    missing[q].append(i)
                    self.hits += 1
                    continue
                found = self._lookup((q, k))
                if found is None:
                    missing[q] = [i]
                    self.misses += 1
                else:
                    results[i] = found
                    self.hits += 1
        if missing:
            if self.replay or self.inner is None:
                first = next(iter(missing))
                raise RetrieverError(
                    f"replay cache {self.path} has no result for query {first!r} with k={k} "
                    f"({len(missing)} missing in this batch)"
                )
            fetched = self.inner.search_batch(list(missing), k)
            if len(fetched) != len(missing):
                raise RetrieverError(f"wrapped retriever answered {len(fetched)} of {len(missing)} queries")
            with self._lock:
                rows = []
                for (q, idxs), hits in zip(missing.items(), fetched, strict=True):
                    frozen = tuple(hits)
                    self._remember((q, k), frozen)
                    rows.append((q, k, _encode_hits(frozen)))
                    for i in idxs:
                        results[i] = frozen
                if self._db is not None:
                    try:
                        self._db.executemany("INSERT OR REPLACE INTO hits (query, k, hits) VALUES (?, ?, ?)", rows)
                        self._db.commit()
                    except sqlite3.Error as exc:
                        raise RetrieverError(f"cannot write retrieval cache {self.path}: {exc}") from exc
        return [list(r) if r is not None else [] for r in results]

    def clear(self) -> None:
        """Empty the in-memory cache and reset the counters (the file is kept)."""
        with self._lock:
            self._lru.clear()
            self.hits = self.misses = self.disk_hits = 0

    def close(self) -> None:
        """Close the cache file."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> CachedRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
