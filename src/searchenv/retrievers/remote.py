r"""An HTTP client for retrieval servers, speaking the two dialects found in the field.

``search-r1`` (default): the batched shape of Search-R1's ``retrieval_server.py``, also used
by verl, SkyRL-gym's search tool and projects built on Search-R1. One request per batch::

    POST /retrieve  {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "12", "contents": "\"Title\"\nText"}, "score": 0.83}, ...], ...]}

With ``return_scores: false`` the inner items are the bare documents. The title is the first
line of ``contents`` (split with :func:`searchenv.corpus.split_contents`).

``query``: the single-query shape of rLLM's local retrieval server (``examples/search``),
one request per query (sent concurrently over the connection pool)::

    POST /retrieve  {"query": "q1", "top_k": 3}
    ->  {"query": "q1", "results": [{"id": "12", "content": "Title\nText", "score": 0.83}, ...]}

Items may also carry ``contents`` or separate ``title``/``text`` fields (searchenv's server
sends ``title``, ``text`` and ``content``).

Failures (nothing listening, timeouts, non-2xx answers, malformed JSON or shapes) raise
:class:`RetrieverError`. Connection errors, timeouts, 429 and 5xx answers are retried with
exponential backoff while the call's overall ``timeout`` lasts.

Several URLs are replicas of one index: requests go to them in turn (round robin), and a request
that fails on one replica (nothing listening, a timeout, a 5xx, a malformed answer) is sent at
once to the next; the failed replica is tried last for ``replica_cooldown`` seconds. A request the
server refuses (a 4xx: too many queries, a bad token) is not sent elsewhere, since every replica
would refuse it.

A server is not trusted: ``timeout`` is a deadline for the whole call (every connect, read and
write is cut at it, so a server dripping one byte at a time cannot hold a call longer), answers
are capped at ``max_response_bytes`` after decompression (a gzip bomb stops at the cap), JSON
goes through :func:`searchenv.utils.jsonsafe.loads` (deep nesting, huge integers and invalid UTF-8
become :class:`RetrieverError`) and a score must be a finite number.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from searchenv.corpus import split_contents
from searchenv.retrievers.base import Hit, RetrieverError, check_k, check_queries
from searchenv.utils.httpclient import DEFAULT_MAX_RESPONSE_BYTES, JSONClient, check_call_options, check_token

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES", "DIALECTS", "TOKEN_ENV", "RemoteRetriever", "check_token", "is_server_url",
    "parse_query", "parse_search_r1", "remote_from_url",
]

DIALECTS = ("search-r1", "query")
#: The bearer token's environment variable: ``searchenv serve`` reads it (``SEARCHENV_SERVER_TOKEN``,
#: its former name, too) and a retriever given as a server URL sends it.
TOKEN_ENV = "SEARCHENV_TOKEN"


def _endpoint(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/retrieve``; a URL with a path is kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"url must be an http(s) URL like http://127.0.0.1:8000, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/retrieve"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _hit_from_document(doc: Any, score: Any, where: str) -> Hit:
    if not isinstance(doc, dict):
        raise RetrieverError(f"{where}: expected a document object, got {type(doc).__name__}")
    doc_id = doc.get("id", doc.get("_id", doc.get("docid", "")))
    if isinstance(doc.get("title"), str) and isinstance(doc.get("text"), str):
        title, text = doc["title"], doc["text"]
    else:
        contents = doc.get("contents", doc.get("content"))
        if not isinstance(contents, str):
            raise RetrieverError(f"{where}: document has no string 'contents' (keys: {sorted(doc)})")
        title, text = split_contents(contents)
    try:
        value = float(score) if score is not None else 0.0
    except (TypeError, ValueError):
        raise RetrieverError(f"{where}: score {str(score)[:50]!r} is not a number") from None
    except OverflowError:  # an integer beyond the float range
        value = math.inf
    if not math.isfinite(value):
        raise RetrieverError(f"{where}: score {str(score)[:50]} is not a finite number")
    return Hit(str(doc_id), title, text, value)


def parse_search_r1(payload: Any, n_queries: int) -> list[list[Hit]]:
    """Read a Search-R1 ``/retrieve`` answer.

    Args:
        payload: The decoded JSON body.
        n_queries: How many queries were sent.

    Returns:
        One hit list per query.

    Raises:
        RetrieverError: If the body does not have the Search-R1 shape.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise RetrieverError("malformed search-r1 answer: expected an object with a list 'result'")
    result = payload["result"]
    if len(result) != n_queries:
        raise RetrieverError(f"malformed search-r1 answer: {len(result)} result lists for {n_queries} queries")
    out: list[list[Hit]] = []
    for qi, items in enumerate(result):
        if not isinstance(items, list):
            raise RetrieverError(f"malformed search-r1 answer: result[{qi}] is not a list")
        hits = []
        for j, item in enumerate(items):
            where = f"search-r1 answer result[{qi}][{j}]"
            if isinstance(item, dict) and isinstance(item.get("document"), dict):
                hits.append(_hit_from_document(item["document"], item.get("score"), where))
            else:
                hits.append(_hit_from_document(item, item.get("score") if isinstance(item, dict) else None, where))
        out.append(hits)
    return out


def parse_query(payload: Any) -> list[Hit]:
    """Read a single-query (rLLM-style) answer ``{"results": [{"id", "content", "score"}, ...]}``.

    Raises:
        RetrieverError: If the body does not have that shape.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), list):
        raise RetrieverError("malformed query-dialect answer: expected an object with a list 'results'")
    return [
        _hit_from_document(item, item.get("score") if isinstance(item, dict) else None, f"results[{j}]")
        for j, item in enumerate(payload["results"])
    ]


class RemoteRetriever:
    """A :class:`~searchenv.retrievers.base.Retriever` backed by an HTTP retrieval server.

    Args:
        url: Server base URL (``http://127.0.0.1:8000``, ``/retrieve`` is appended) or the
            full endpoint URL; or several, replicas of one index (see the module docstring).
        dialect: ``search-r1`` (batched) or ``query`` (one query per request).
        timeout: Deadline in seconds for one :meth:`search_batch` call, retries included: every
            connect, read and write is cut at it, however slowly the server sends.
        retries: Extra attempts after a connection error, timeout, 408/429 or 5xx answer.
        backoff: First retry delay in seconds; doubled on each further retry.
        token: Bearer token sent as ``Authorization: Bearer <token>`` (printable ASCII).
        max_queries_per_request: ``search-r1`` batches larger than this are split into several
            requests (keep it at or below the server's limit).
        concurrency: Parallel requests in the ``query`` dialect (and connection-pool size).
        max_response_bytes: Largest answer in bytes, after decompression (32 MiB).
        replica_cooldown: Seconds a replica that failed is tried only after the others.

    Raises:
        ValueError: On a bad URL, dialect, token or option.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        dialect: str = "search-r1",
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.1,
        token: str | None = None,
        max_queries_per_request: int = 256,
        concurrency: int = 8,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        replica_cooldown: float = 5.0,
    ) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")
        check_call_options(timeout, retries, backoff)
        check_k(max_queries_per_request)
        check_k(concurrency)
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be a positive integer, got {max_response_bytes!r}")
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("url must be a server URL or a non-empty list of them")
        self.urls = [_endpoint(u) for u in urls]
        if len(set(self.urls)) != len(self.urls):
            raise ValueError(f"the same replica is listed twice: {self.urls}")
        if not (isinstance(replica_cooldown, (int, float)) and 0 <= replica_cooldown < math.inf):
            raise ValueError(f"replica_cooldown must be a non-negative number of seconds, got {replica_cooldown!r}")
        self.url = self.urls[0]
        self.replica_cooldown = float(replica_cooldown)
        #: Requests sent to another replica after one failed.
        self.failovers = 0
        self._next_replica = 0
        self._down_until = dict.fromkeys(self.urls, 0.0)
        self._replica_lock = threading.Lock()
        self.dialect = dialect
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_queries_per_request = max_queries_per_request
        self.concurrency = concurrency
        self.max_response_bytes = max_response_bytes
        headers = [("Authorization", f"Bearer {check_token(token)}")] if token else []
        self._client = JSONClient(service="retrieval server", error=RetrieverError, retries=retries,
                                  backoff=self.backoff, headers=headers, max_connections=max(concurrency, 4),
                                  max_response_bytes=max_response_bytes)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _post(self, body: dict[str, Any], deadline: float) -> Any:
        """POST ``body`` with retries until ``deadline`` (a ``time.monotonic()`` value).

        With replicas, each attempt goes to the next replica in turn, healthy ones first.
        """
        if len(self.urls) == 1:
            return self._client.post(self.url, body, deadline, timeout=self.timeout)
        failures: list[str] = []
        for attempt in range(self.retries + 1):
            for url in self._replica_order():
                if time.monotonic() >= deadline:
                    break
                try:
                    answer = self._client.post(url, body, deadline, timeout=self.timeout, retries=0)
                except RetrieverError as exc:
                    if getattr(exc, "http_status", None) is not None:
                        raise  # refused: every replica would refuse it
                    failures.append(str(exc))
                    with self._replica_lock:
                        self._down_until[url] = time.monotonic() + self.replica_cooldown
                        self.failovers += 1
                    continue
                with self._replica_lock:
                    self._down_until[url] = 0.0
                return answer
            delay = self.backoff * (2**attempt)
            if attempt == self.retries or time.monotonic() + delay >= deadline:
                break
            time.sleep(delay)
        raise RetrieverError(f"all {len(self.urls)} replicas failed within {self.timeout:g} s: "
                             + "; ".join(failures[-len(self.urls):] or ["no time left"]))

    def _replica_order(self) -> list[str]:
        """The replicas from the next one in turn, those not in their cooldown first."""
        with self._replica_lock:
            start = self._next_replica
            self._next_replica = (start + 1) % len(self.urls)
            now = time.monotonic()
            rotated = self.urls[start:] + self.urls[:start]
            return sorted(rotated, key=lambda u: self._down_until[u] > now)  # stable: keeps the turn

    # ------------------------------------------------------------------ search

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search all queries on the server (see :class:`~searchenv.retrievers.base.Retriever`)."""
        check_k(k)
        queries = check_queries(queries)
        if not queries:
            return []
        deadline = time.monotonic() + self.timeout
        if self.dialect == "search-r1":
            out: list[list[Hit]] = []
            step = self.max_queries_per_request
            for start in range(0, len(queries), step):
                chunk = queries[start : start + step]
                body = {"queries": chunk, "topk": k, "return_scores": True}
                out.extend(hits[:k] for hits in parse_search_r1(self._post(body, deadline), len(chunk)))
            return out

        def one(q: str) -> list[Hit]:
            return parse_query(self._post({"query": q, "top_k": k}, deadline))[:k]

        if len(queries) == 1:
            return [one(queries[0])]
        return list(self._executor().map(one, queries))

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="searchenv-remote")
            return self._pool

    def health(self) -> dict[str, Any]:
        """``GET /health`` on the server (one attempt, within ``timeout``).

        Raises:
            RetrieverError: If the server does not answer with a JSON object.
        """
        parts = urlsplit(self.url)
        url = urlunsplit((parts.scheme, parts.netloc, "/health", "", ""))
        try:
            payload = self._client.get(url, time.monotonic() + self.timeout)
        except RetrieverError as exc:
            raise RetrieverError(f"health check failed: {exc}") from None
        if not isinstance(payload, dict):
            raise RetrieverError(f"health check of {url}: expected a JSON object")
        return payload

    def close(self) -> None:
        """Close the connection pool and worker threads."""
        self._client.close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.url if len(self.urls) == 1 else self.urls
        return f"RemoteRetriever({where!r}, dialect={self.dialect!r})"


def is_server_url(spec: object) -> bool:
    """Whether a retriever given by name is the URL of a retrieval server."""
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def remote_from_url(url: str) -> RemoteRetriever:
    """A :class:`RemoteRetriever` for a retriever given as a server URL, with ``$SEARCHENV_TOKEN`` if set.

    Comma-separated URLs are replicas of one index (``http://a:8000,http://b:8000``).
    """
    urls = [u.strip() for u in url.split(",") if u.strip()]
    return RemoteRetriever(urls if len(urls) > 1 else url, token=os.environ.get(TOKEN_ENV) or None)
