"""Concurrent searches gathered into one ``search_batch`` call: :class:`MicroBatcher`.

Callers on one event loop (the retrieval server's requests, a verl agent-loop worker's episodes)
each await :meth:`MicroBatcher.search`; an idle search worker takes the searches waiting at that
moment and makes one ``search_batch`` call per distinct ``k`` on a worker thread, so the event
loop never blocks and a batched index (BM25 over a query matrix, a dense encoder, a remote
server) answers many queries at once. There is no waiting window by default: a lone caller is
searched at once, and the searches that arrive while a search runs form the next batch. A failed
search fails every caller of that batch with the same exception.

Small and large searches share the worker without one starving the other. Each query costs its
``k`` plus :data:`QUERY_COST`; a search costing more than ``quantum`` (or with ``max_batch``
queries or more) is *large* and is searched in parts. A batch takes the small searches whole, in
arrival order, and parts of the large ones by turns (round robin: each caller with a large
search in progress gets a part in turn; at most :data:`LARGE_IN_TURN` are in progress, the others
wait in arrival order, so that many large callers cannot hold many partial answers). While small
searches are arriving (one in the last second), the large parts of a batch cost at most
``quantum`` together, so a small search waits for at most one such part, however many large ones
are queued, and after a batch with large parts the worker takes no batch of large parts alone for
as long as those took (large ones get at most :data:`LARGE_SHARE` of its time, half, leaving the
rest, and the event loop's share of the interpreter, to the small ones); otherwise a batch fills
with large ones up to ``max_batch`` queries. Every batch holds at least one query of a large search if one waits, so a
stream of small ones cannot starve them either.

A caller that gives up (its task cancelled, as the server does when a client disconnects) is
dropped at once: its queries still waiting are never searched, and a part already being searched
is not waited for.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass, field

from searchenv.retrievers.base import Hit, Retriever, RetrieverError, check_k, search_or_error

#: What a query costs besides its ``k`` hits: the search itself, about as much work as ten hits
#: on a BM25 index (reading and returning a hit dominates a large ``k``).
QUERY_COST = 10

#: Seconds after the last small search arrived during which large ones are searched in small parts.
SMALL_ACTIVE_S = 1.0

#: Most large searches in progress at once (taking turns); the others wait in arrival order. Their
#: partial results are held in memory, so this bounds what many large callers at once can hold.
LARGE_IN_TURN = 4
#: The most of the worker's time that batches of large parts alone take while small searches arrive.
LARGE_SHARE = 1 / 2


@dataclass(eq=False)
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Hit]]]
    small: bool
    results: list[list[Hit]] = field(default_factory=list)  # filled in as the parts are answered
    taken: int = 0  # queries handed to a search call so far
    answered: int = 0  # queries answered so far


@dataclass
class BatchStats:
    """Counters of a :class:`MicroBatcher`.

    Attributes:
        requests: Requests answered (or failed).
        queries: Queries searched.
        search_calls: ``search_batch`` calls made.
        largest_batch: Most queries in one ``search_batch`` call.
        dropped_requests: Requests given up by their callers before they were answered (a client
            that disconnected).
        dropped_queries: Queries of those requests that were never searched.
    """

    requests: int = 0
    queries: int = 0
    search_calls: int = 0
    largest_batch: int = 0
    dropped_requests: int = 0
    dropped_queries: int = 0

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
        max_batch: Most queries gathered into one call (a larger request is searched in parts).
        enabled: Gather requests; if false, one ``search_batch`` per request.
        workers: Threads that run searches.
        quantum: Cost (``k`` plus :data:`QUERY_COST` per query) above which a request is large
            and searched in parts; while small requests arrive, the large parts of one batch
            cost at most this much together (see the module docstring).
    """

    retriever: Retriever
    window_s: float = 0.0
    max_batch: int = 256
    enabled: bool = True
    workers: int = 1
    quantum: int = 128
    stats: BatchStats = field(default_factory=BatchStats)

    def __post_init__(self) -> None:
        if not 0 <= self.window_s <= 1:
            raise ValueError(f"window_s must be between 0 and 1 second, got {self.window_s!r}")
        check_k(self.max_batch)
        check_k(self.workers)
        if isinstance(self.quantum, bool) or not isinstance(self.quantum, int) or self.quantum < 1:
            raise ValueError(f"quantum must be a positive integer, got {self.quantum!r}")
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="searchenv-search")
        self._loop: asyncio.AbstractEventLoop | None = None
        # touched on the loop only: small requests in arrival order, large ones in turn order
        self._small: deque[_Pending] = deque()
        self._large: deque[_Pending] = deque()  # in progress, taking turns
        self._large_waiting: deque[_Pending] = deque()  # not started, in arrival order
        self._small_at = float("-inf")  # loop time the last small request arrived
        self._large_after = float("-inf")  # no batch of large parts alone before this loop time
        self._arrived = asyncio.Event()  # a small request arrived (wakes a consumer that lets large ones rest)
        self._waiting: set[_Pending] = set()  # every request not answered yet, queued or being searched
        self._consumers: list[asyncio.Task[None]] = []
        self._lock = threading.Lock()

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop:
                # First request, or a new event loop (e.g. a test client that opened another one).
                self._loop = loop
                self._small, self._large, self._large_waiting = deque(), deque(), deque()
                self._waiting = set()
                self._small_at = self._large_after = float("-inf")
                self._arrived = asyncio.Event()
                self._consumers = []
            # A consumer runs while there is work and then ends, so no task is left pending on a
            # loop its owner stops using; up to ``workers`` of them search at a time.
            self._consumers = [t for t in self._consumers if not t.done()]
            if len(self._consumers) < self.workers:
                self._consumers.append(loop.create_task(self._consume()))

    async def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search ``queries`` with the others waiting (see the module docstring).

        Cancelling the awaiting task drops the queries not yet searched.

        Raises:
            Exception: What the retriever raised (every request of the batch gets it), or a
                :class:`RetrieverError` for an answer of the wrong shape
                (:func:`searchenv.retrievers.base.search_or_error`).
        """
        queries = list(queries)
        if not queries:
            self.stats.requests += 1
            return []
        loop = asyncio.get_running_loop()
        if not self.enabled:
            self._count(len(queries))
            self.stats.requests += 1
            results = await loop.run_in_executor(self._executor, search_or_error, self.retriever, queries, k)
            if isinstance(results, Exception):
                raise results
            return results
        future: asyncio.Future[list[list[Hit]]] = loop.create_future()
        small = len(queries) * (k + QUERY_COST) <= self.quantum and len(queries) < self.max_batch
        item = _Pending(queries, k, future, small, results=[[] for _ in queries])
        self._ensure_running()
        self._waiting.add(item)
        if small:
            self._small.append(item)
            self._small_at = loop.time()
            self._arrived.set()
        else:
            self._large_waiting.append(item)
        try:
            return await future
        except asyncio.CancelledError:
            if not future.cancelled():  # the batcher set a result or an error, then this task was cancelled
                raise
            self._drop(item)
            raise
        finally:
            self._waiting.discard(item)

    async def search_or_error(self, queries: Sequence[str], k: int) -> list[list[Hit]] | Exception:
        """:meth:`search`, with a failure returned, not raised (:func:`~searchenv.retrievers.base.search_or_error`).

        What ``SearchQAEnv.finish_step`` takes as a step's hits: an exception there is an
        infrastructure-error step. Cancellation still propagates.
        """
        try:
            return await self.search(queries, k)
        except Exception as exc:  # any retriever failure is an infrastructure error, not a crash
            return exc

    def _drop(self, item: _Pending) -> None:
        """Forget a request whose caller gave up: its waiting queries are never searched."""
        for queue in (self._small, self._large, self._large_waiting):
            if item in queue:
                queue.remove(item)
        self.stats.dropped_requests += 1
        self.stats.dropped_queries += len(item.queries) - item.taken

    def _count(self, queries: int) -> None:
        self.stats.queries += queries
        self.stats.search_calls += 1
        self.stats.largest_batch = max(self.stats.largest_batch, queries)

    def _take(self, now: float) -> list[tuple[_Pending, int, int]]:
        """Remove the next batch from the queues: ``(request, first query, end)`` per request or part.

        Small requests whole, in arrival order, leaving room for one query of a large request if
        one waits; then parts of large requests by turns, within ``quantum`` while small requests
        are arriving, else up to ``max_batch`` queries (see the module docstring).
        """
        while len(self._large) < LARGE_IN_TURN and self._large_waiting:
            self._large.append(self._large_waiting.popleft())
        batch: list[tuple[_Pending, int, int]] = []
        size = 0
        room = self.max_batch - (1 if self._large else 0)
        while self._small and size + len(self._small[0].queries) <= room:
            item = self._small.popleft()
            batch.append((item, 0, len(item.queries)))
            item.taken = len(item.queries)
            size += item.taken
        small_active = now - self._small_at < SMALL_ACTIVE_S
        budget = self.quantum if small_active else None
        for _ in range(len(self._large)):
            if size >= self.max_batch and batch:
                break
            item = self._large[0]
            left = len(item.queries) - item.taken
            n = min(left, max(1, self.max_batch - size))
            if budget is not None:
                n = min(n, budget // (item.k + QUERY_COST))
                if n < 1 and any(not it.small for it, _, _ in batch):
                    break
                n = max(1, n)
                budget -= n * (item.k + QUERY_COST)
            batch.append((item, item.taken, item.taken + n))
            item.taken += n
            size += n
            self._large.popleft()
            if item.taken < len(item.queries):
                self._large.append(item)  # its next part waits for the others' turns
            if budget is not None and budget <= 0:
                break
        while budget is None and self._large_waiting and size < self.max_batch:
            # no small requests about: whole large ones fill the batch (a part only if one may start)
            item = self._large_waiting[0]
            n = min(len(item.queries), self.max_batch - size)
            if n < len(item.queries) and len(self._large) >= LARGE_IN_TURN:
                break
            self._large_waiting.popleft()
            batch.append((item, 0, n))
            item.taken = n
            size += n
            if n < len(item.queries):
                self._large.append(item)
        return batch

    async def _consume(self) -> None:
        loop = asyncio.get_running_loop()
        while self._small or self._large or self._large_waiting:
            now = loop.time()
            if not self._small and now < self._large_after and now - self._small_at < SMALL_ACTIVE_S:
                # large parts alone take at most LARGE_SHARE of the worker's time while small requests arrive
                self._arrived.clear()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), self._large_after - now)
                continue
            # This worker is idle, so nothing is gained by making the request wait: search what is
            # queued now; requests that arrive while the search runs queue up and form the next batch.
            if self.window_s > 0 and sum(len(it.queries) for it in self._small) < self.max_batch:
                await asyncio.sleep(self.window_s)
            batch = self._take(loop.time())
            groups: dict[int, list[tuple[_Pending, int, int]]] = {}
            for part in batch:
                groups.setdefault(part[0].k, []).append(part)
            # the groups with small requests first, so that their answers leave before large parts run
            order = sorted(groups, key=lambda k: (not any(p.small for p, _, _ in groups[k]), k))
            for k in order:
                parts = [p for p in groups[k] if not p[0].future.done()]  # callers that went away: skipped
                if not parts:
                    continue
                queries = [q for item, a, b in parts for q in item.queries[a:b]]
                self._count(len(queries))
                started = loop.time()
                results = await loop.run_in_executor(self._executor, search_or_error, self.retriever, queries, k)
                if any(not item.small for item, _, _ in parts):
                    took = loop.time() - started  # rest so that the large parts had LARGE_SHARE of the time
                    self._large_after = loop.time() + took * (1 - LARGE_SHARE) / LARGE_SHARE
                pos = 0
                for item, a, b in parts:
                    if item.future.done():  # gave up while its part was searched
                        pos += b - a
                        continue
                    if isinstance(results, Exception):  # handed to every request of the call
                        self._fail(item, results)
                        continue
                    item.results[a:b] = results[pos : pos + b - a]
                    pos += b - a
                    item.answered += b - a
                    if item.answered == len(item.queries):
                        self.stats.requests += 1
                        item.future.set_result(item.results)

    def _fail(self, item: _Pending, exc: BaseException) -> None:
        """Fail a request (and forget its parts still waiting)."""
        for queue in (self._large, self._large_waiting):
            if item in queue:
                queue.remove(item)
        self.stats.requests += 1
        item.future.set_exception(exc)

    async def aclose(self) -> None:
        """Stop the consumers and the worker threads; requests still waiting fail with a RetrieverError."""
        for task in self._consumers:
            task.cancel()
        for task in self._consumers:
            try:
                await task
            except (asyncio.CancelledError, RuntimeError):
                pass
        self._consumers = []
        waiting, self._waiting = self._waiting, set()
        self._small, self._large, self._large_waiting = deque(), deque(), deque()
        for item in waiting:
            if not item.future.done():
                item.future.set_exception(RetrieverError("the search service is shutting down"))
        self._loop = None
        self._executor.shutdown(wait=False, cancel_futures=True)
