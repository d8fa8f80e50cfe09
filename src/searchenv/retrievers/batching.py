"""Concurrent searches gathered into one ``search_batch`` call: :class:`MicroBatcher`.

Callers on one event loop (the retrieval server's requests, a verl agent-loop worker's episodes)
each await :meth:`MicroBatcher.search`; an idle search worker takes every search waiting at that
moment and makes one ``search_batch`` call per distinct ``k`` on a worker thread, so the event
loop never blocks and a batched index (BM25 over a query matrix, a dense encoder, a remote
server) answers many queries at once. There is no waiting window by default: a lone caller is
searched at once, and the searches that arrive while a search runs form the next batch. A failed
search fails every caller of that batch with the same exception.

Batches are formed in turn from the oldest waiting searches and from the smallest (fewest
queries), so a one-query search waits for at most one batch of large ones however many are
queued (a burst of maximum-size requests cannot hold a small one for minutes), and a large search
still gets every other batch however many small ones keep arriving.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from searchenv.env import search_or_error
from searchenv.retrievers.base import Hit, Retriever, check_k


@dataclass
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Hit]]]


@dataclass
class BatchStats:
    """Counters of a :class:`MicroBatcher`.

    Attributes:
        requests: Requests answered (or failed).
        queries: Queries searched.
        search_calls: ``search_batch`` calls made.
        largest_batch: Most queries in one ``search_batch`` call.
    """

    requests: int = 0
    queries: int = 0
    search_calls: int = 0
    largest_batch: int = 0

    def as_dict(self) -> dict[str, float]:
        """The counters plus ``mean_batch`` (queries per search call)."""
        d: dict[str, float] = {k: float(v) for k, v in asdict(self).items()}
        d["mean_batch"] = self.queries / self.search_calls if self.search_calls else 0.0
        return d


@dataclass
class MicroBatcher:
    """Gathers concurrent searches into one ``search_batch`` call per distinct ``k``.

    Searches run on a dedicated thread pool (``workers`` threads, default one), never on the
    event loop. With ``enabled=False`` every request is searched on its own (same thread pool),
    which is what batching is measured against.

    Attributes:
        retriever: The retriever to call.
        window_s: How long the first request of a batch waits for company, in seconds (0: it is
            searched at once; requests that arrive while a search runs form the next batch).
        max_batch: Most queries gathered into one call (a larger request is searched alone).
        enabled: Gather requests; if false, one ``search_batch`` per request.
        workers: Threads that run searches.
    """

    retriever: Retriever
    window_s: float = 0.0
    max_batch: int = 256
    enabled: bool = True
    workers: int = 1
    stats: BatchStats = field(default_factory=BatchStats)

    def __post_init__(self) -> None:
        if not 0 <= self.window_s <= 1:
            raise ValueError(f"window_s must be between 0 and 1 second, got {self.window_s!r}")
        check_k(self.max_batch)
        check_k(self.workers)
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="searchenv-search")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Pending] | None = None  # in arrival order; touched on the loop only
        self._consumers: list[asyncio.Task[None]] = []
        self._smallest_next = False
        self._lock = threading.Lock()

    def _ensure_running(self) -> list[_Pending]:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop or self._pending is None:
                # First request, or a new event loop (e.g. a test client that opened another one).
                self._loop = loop
                self._pending = []
                self._consumers = []
            # A consumer runs while there is work and then ends, so no task is left pending on a
            # loop its owner stops using; up to ``workers`` of them search at a time.
            self._consumers = [t for t in self._consumers if not t.done()]
            if len(self._consumers) < self.workers:
                self._consumers.append(loop.create_task(self._consume(self._pending)))
            return self._pending

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search ``queries`` with the others that arrive within the window.

        Raises:
            Exception: What the retriever raised (every request of the batch gets it), or a
                :class:`RetrieverError` for an answer of the wrong shape
                (:func:`searchenv.env.search_or_error`).
        """
        queries = list(queries)
        if not queries:
            self.stats.requests += 1
            return []
        loop = asyncio.get_running_loop()
        if not self.enabled:
            self._count(1, len(queries))
            results = await loop.run_in_executor(self._executor, search_or_error, self.retriever, queries, k)
            if isinstance(results, Exception):
                raise results
            return results
        future: asyncio.Future[list[list[Hit]]] = loop.create_future()
        self._ensure_running().append(_Pending(queries, k, future))
        return await future

    def _count(self, requests: int, queries: int) -> None:
        self.stats.requests += requests
        self.stats.queries += queries
        self.stats.search_calls += 1
        self.stats.largest_batch = max(self.stats.largest_batch, queries)

    def _take(self, pending: list[_Pending], size: int = 0) -> list[_Pending]:
        """Remove and return the next searches of a batch that holds ``size`` queries so far.

        The first is always taken; then more while the batch is under ``max_batch``, in arrival
        order or smallest first, by turns (see the module docstring).
        """
        if self._smallest_next:
            order = sorted(range(len(pending)), key=lambda i: len(pending[i].queries))  # stable: oldest first
        else:
            order = list(range(len(pending)))
        taken: list[int] = []
        for i in order:
            if taken and size >= self.max_batch:
                break
            taken.append(i)
            size += len(pending[i].queries)
        batch = [pending[i] for i in taken]
        for i in sorted(taken, reverse=True):
            del pending[i]
        return batch

    async def _consume(self, pending: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        while pending:
            self._smallest_next = not self._smallest_next
            batch = self._take(pending)
            size = sum(len(item.queries) for item in batch)
            # This worker is idle, so nothing is gained by making the request wait: search what is
            # queued now; requests that arrive while the search runs queue up and form the next batch.
            if size < self.max_batch and self.window_s > 0:
                await asyncio.sleep(self.window_s)
                if pending:
                    batch += self._take(pending, size)
            groups: dict[int, list[_Pending]] = {}
            for item in batch:
                if not item.future.done():  # skip requests whose client went away
                    groups.setdefault(item.k, []).append(item)
            for k, items in groups.items():
                queries = [q for it in items for q in it.queries]
                self._count(len(items), len(queries))
                results = await loop.run_in_executor(self._executor, search_or_error, self.retriever, queries, k)
                if isinstance(results, Exception):  # handed to every request of the batch
                    for it in items:
                        if not it.future.done():
                            it.future.set_exception(results)
                    continue
                pos = 0
                for it in items:
                    part = results[pos : pos + len(it.queries)]
                    pos += len(it.queries)
                    if not it.future.done():
                        it.future.set_result(part)

    async def aclose(self) -> None:
        """Stop the consumers and the worker threads."""
        for task in self._consumers:
            task.cancel()
        for task in self._consumers:
            try:
                await task
            except (asyncio.CancelledError, RuntimeError):
                pass
        self._consumers = []
        self._pending = None
        self._executor.shutdown(wait=False, cancel_futures=True)
