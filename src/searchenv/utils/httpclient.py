"""A small JSON-over-HTTP client for servers that are not trusted: deadlines, size caps, retries.

Shared by :class:`~searchenv.retrievers.remote.RemoteRetriever` (retrieval servers) and
:class:`~agents.policies.openai.OpenAIPolicy` (model servers). It speaks HTTP through httpcore
(the ``serve`` extra) directly, so no environment proxy applies, and:

- a call's ``deadline`` bounds everything (every connect, read and write is cut at it, so a
  server dripping one byte at a time cannot hold a call longer);
- answers are capped at ``max_response_bytes`` after decompression (a gzip bomb stops at the cap);
- JSON goes through :func:`searchenv.utils.jsonsafe.loads` (deep nesting, huge integers and invalid
  UTF-8 are refused);
- connection errors, timeouts, 408/429 and 5xx answers are retried with exponential backoff (or
  the server's ``Retry-After``, when that still fits before the deadline);
- every failure is one exception of the caller's class naming the service, the URL and the reason.
"""

from __future__ import annotations

import json
import math
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from searchenv.utils.jsonsafe import DEFAULT_MAX_DEPTH, JSONInputError, loads

#: Answers worth another attempt.
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Default cap on one answer's size in bytes, after decompression.
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: Longest ``Retry-After`` wait honoured, in seconds (longer ones are cut to this).
MAX_RETRY_AFTER = 60.0


def check_token(token: str) -> str:
    """Check that a bearer token can be sent in an HTTP header.

    Tokens are limited to printable ASCII without spaces (RFC 6750 allows fewer characters), so
    a non-ASCII, space or control character is refused here instead of failing, or being
    encoded differently by client and server, later. The message gives the character's position,
    never the token.

    Args:
        token: The token.

    Returns:
        ``token`` unchanged.

    Raises:
        ValueError: If a character is outside ``!`` .. ``~``.
    """
    for i, char in enumerate(token, start=1):
        if not "!" <= char <= "~":
            raise ValueError(
                f"token must be printable ASCII without spaces; character {i} of {len(token)} is not "
                "(non-ASCII, a space or a control character)"
            )
    return token


#: Fewest characters a server accepts in its bearer token: a short one is found by trying (a one-character
#: token falls to a few dozen guesses).
MIN_SERVER_TOKEN_CHARS = 16


def check_server_token(token: str, source: str = "the token") -> str:
    """Check a token a server will require: :func:`check_token`, and at least :data:`MIN_SERVER_TOKEN_CHARS` long.

    Args:
        token: The token.
        source: Where it came from, for the message (``"SEARCHENV_TOKEN"``, ``"--token-file t.txt"``).

    Returns:
        ``token`` unchanged.

    Raises:
        ValueError: Naming ``source`` and the length (never the token), if it is shorter, or a
            character cannot travel in a header.
    """
    check_token(token)
    if len(token) < MIN_SERVER_TOKEN_CHARS:
        raise ValueError(f"{source} has {len(token)} character(s); a server needs at least "
                         f"{MIN_SERVER_TOKEN_CHARS} (a short token is found by trying): e.g. "
                         "`python -c 'import secrets; print(secrets.token_urlsafe(24))'`")
    return token


def check_call_options(timeout: float, retries: int, backoff: float) -> None:
    """Validate the options every client of this module takes.

    Raises:
        ValueError: If ``timeout`` is not a positive finite number, ``retries`` not a non-negative
            integer, or ``backoff`` not a non-negative finite number.
    """
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    if not (isinstance(backoff, int | float) and math.isfinite(backoff) and backoff >= 0):
        raise ValueError(f"backoff must be a non-negative number, got {backoff!r}")


def error_text(body: bytes) -> str:
    """The server's error message: ``error``/``detail`` of a JSON body, else the first 200 characters."""
    try:
        payload = loads(body, "error answer", max_depth=DEFAULT_MAX_DEPTH)
    except JSONInputError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(payload, dict):
        for key in ("error", "detail"):
            if key in payload:
                value = payload[key]
                if isinstance(value, dict) and isinstance(value.get("message"), str):  # OpenAI's shape
                    value = value["message"]
                return str(value)[:500]
    return str(payload)[:200]


class _Retryable(Exception):
    """An attempt failed in a way that another attempt may fix."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class _Deadlines:
    """An httpcore network backend that cuts every connect, read and write at the caller's deadline.

    httpcore gives each socket operation its own timeout, so a server sending one byte at a time
    could hold a request forever; here each operation gets at most what is left until the
    deadline that the calling thread set (:meth:`until`). Connections of the pool are used by
    one thread at a time, so a thread-local deadline is the one of the request being made.
    """

    def __init__(self) -> None:
        import httpcore

        self._httpcore = httpcore
        self._backend = httpcore.SyncBackend()
        self._local = threading.local()

    def until(self, deadline: float | None) -> None:
        """Set (or with ``None`` clear) this thread's deadline, a ``time.monotonic()`` value."""
        self._local.deadline = deadline

    def cut(self, timeout: float | None, error: type[Exception]) -> float | None:
        """``timeout`` shortened to what is left of the deadline; ``error`` if nothing is."""
        deadline = getattr(self._local, "deadline", None)
        if deadline is None:
            return timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise error("deadline passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> _DeadlineStream:
        """Open a connection within the deadline."""
        timeout = self.cut(timeout, self._httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options), self)

    def sleep(self, seconds: float) -> None:
        """Sleep (httpcore's retry pause; unused with retries=0)."""
        time.sleep(seconds)


class _DeadlineStream:
    """A connection of :class:`_Deadlines` (see there)."""

    def __init__(self, stream: Any, deadlines: _Deadlines) -> None:
        self._stream = stream
        self._deadlines = deadlines

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read within the deadline."""
        return bytes(self._stream.read(max_bytes, self._deadlines.cut(timeout, self._deadlines._httpcore.ReadTimeout)))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write within the deadline."""
        self._stream.write(buffer, self._deadlines.cut(timeout, self._deadlines._httpcore.WriteTimeout))

    def close(self) -> None:
        """Close the connection."""
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> _DeadlineStream:
        """Upgrade to TLS within the deadline."""
        timeout = self._deadlines.cut(timeout, self._deadlines._httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout), self._deadlines)

    def get_extra_info(self, info: str) -> Any:
        """Connection details that httpcore asks for (socket, readability)."""
        return self._stream.get_extra_info(info)


def read_capped(chunks: Iterable[bytes], headers: dict[str, str], limit: int,
                error: type[Exception] = RuntimeError) -> bytes:
    """An answer's body, decompressed, refusing one over ``limit`` bytes without holding more.

    Args:
        chunks: The raw body as it arrives.
        headers: The answer's headers, names in lower case.
        limit: Largest body in bytes, after decompression.
        error: Exception class raised on failure.

    Raises:
        error: If the body (or its declared ``Content-Length``) exceeds ``limit``, or it uses an
            encoding other than identity, gzip or deflate.
    """
    too_large = f"answer larger than the limit of {limit} bytes (max_response_bytes)"
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise error(too_large)
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        decoder: Any = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
    elif encoding in ("", "identity"):
        decoder = None
    else:
        raise error(f"answer uses the unsupported Content-Encoding {encoding!r}")
    body = bytearray()
    try:
        for chunk in chunks:
            # max_length stops a decompression bomb at the cap instead of expanding it whole
            body += decoder.decompress(chunk, limit + 1 - len(body)) if decoder else chunk
            if len(body) > limit:
                raise error(too_large)
        if decoder:
            body += decoder.flush()
    except zlib.error as exc:
        raise error(f"answer is not valid {encoding} data ({exc})") from None
    if len(body) > limit:
        raise error(too_large)
    return bytes(body)


def _retry_after(headers: dict[str, str]) -> float | None:
    """Seconds of a numeric ``Retry-After`` header (capped at :data:`MAX_RETRY_AFTER`), else None."""
    value = headers.get("retry-after", "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if seconds == seconds else None


class JSONClient:
    """POST and GET JSON within a deadline, with retries, over a pool of keep-alive connections.

    Args:
        service: What the server is, for messages (``"retrieval server"``, ``"model server"``).
        error: Exception class of every failure.
        retries: Extra attempts after a connection error, timeout, 408/429 or 5xx answer.
        backoff: First retry delay in seconds; doubled on each further retry.
        headers: Headers sent with every request (``Host`` is added from the URL).
        max_connections: Size of the connection pool (concurrent requests).
        max_response_bytes: Largest answer in bytes, after decompression.
    """

    def __init__(
        self,
        *,
        service: str,
        error: type[Exception],
        retries: int,
        backoff: float,
        headers: Sequence[tuple[str, str]] = (),
        max_connections: int = 8,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        import httpcore

        self.service = service
        self.error = error
        self.retries = retries
        self.backoff = backoff
        self.max_response_bytes = max_response_bytes
        self._headers = [("Accept", "application/json"), ("Accept-Encoding", "gzip, deflate"), *headers]
        self._deadlines = _Deadlines()
        # httpcore directly (httpx's transport): no environment proxies, and our deadline backend
        self._http = httpcore.ConnectionPool(max_connections=max_connections,
                                             max_keepalive_connections=max_connections,
                                             network_backend=self._deadlines)  # type: ignore[arg-type]
        #: Retries made so far (all calls, from any thread).
        self.retried = 0
        self._retried_lock = threading.Lock()

    def post(self, url: str, body: Any, deadline: float, *, timeout: float | None = None,
             retries: int | None = None) -> Any:
        """POST ``body`` as JSON to ``url`` with retries until ``deadline``; the decoded JSON answer.

        Args:
            url: The endpoint.
            body: Anything :func:`json.dumps` takes.
            deadline: A ``time.monotonic()`` value that bounds the call, retries included.
            timeout: The caller's timeout that set ``deadline``, for messages (default: what is
                left of the deadline now).
            retries: Extra attempts for this call (default: the client's ``retries``).

        Raises:
            error: On a refused request (non-retryable 4xx; the exception's ``http_status`` is set),
                malformed JSON, or when the attempts or the time run out; the message names the
                service, the URL and the reason.
        """
        import httpcore

        if timeout is None:
            timeout = max(deadline - time.monotonic(), 0.0)
        data = json.dumps(body).encode()
        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            if deadline - time.monotonic() <= 0:
                raise self.error(f"{self.service} {url} did not answer within {timeout:g} s")
            retry_after: float | None = None
            try:
                status, payload, headers = self.request("POST", url, data, deadline)
                if status in RETRYABLE_STATUS:
                    raise _Retryable(f"HTTP {status}: {error_text(payload)}", _retry_after(headers))
                if not 200 <= status < 300:
                    why = error_text(payload)
                    refused = self.error(f"{self.service} {url} refused the request: HTTP {status}: {why}")
                    refused.http_status = status  # type: ignore[attr-defined]
                    raise refused
                return self.json(payload, url)
            except _Retryable as exc:
                reason, retry_after = str(exc), exc.retry_after
            except httpcore.TimeoutException:
                reason = f"no answer within {timeout:g} s"
            except httpcore.NetworkError as exc:
                reason = f"cannot reach the server ({type(exc).__name__}: {exc})"
            except httpcore.ProtocolError as exc:
                reason = f"no valid HTTP answer ({type(exc).__name__}: {exc})"
            delay = max(self.backoff * (2**attempt), retry_after or 0.0)
            if attempt >= retries or time.monotonic() + delay >= deadline:
                raise self.error(f"{self.service} {url} failed after {attempt + 1} attempt(s): {reason}")
            time.sleep(delay)
            attempt += 1
            with self._retried_lock:
                self.retried += 1

    def get(self, url: str, deadline: float) -> Any:
        """GET ``url`` once within ``deadline``; the decoded JSON answer.

        Raises:
            error: If the server cannot be reached, answers non-2xx or sends malformed JSON.
        """
        import httpcore

        try:
            status, body, _ = self.request("GET", url, None, deadline)
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise self.error(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
        if not 200 <= status < 300:
            raise self.error(f"GET {url} failed: HTTP {status}: {error_text(body)}")
        return self.json(body, url)

    def request(self, method: str, url: str, body: bytes | None,
                deadline: float) -> tuple[int, bytes, dict[str, str]]:
        """One request: ``(status, body, headers)``, all of it within ``deadline``.

        httpcore's errors pass through; an answer over the size cap raises ``error``.
        """
        from urllib.parse import urlsplit

        left = deadline - time.monotonic()
        headers = [("Host", urlsplit(url).netloc), *self._headers]
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        self._deadlines.until(deadline)
        try:
            with self._http.stream(method, url, headers=headers, content=body,
                                   extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), left)}
                                   ) as response:
                fields = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
                stream: Iterator[bytes] = response.iter_stream()
                try:
                    return response.status, read_capped(stream, fields, self.max_response_bytes, self.error), fields
                except self.error as exc:
                    raise self.error(f"{self.service} {url}: {exc}") from None
        finally:
            self._deadlines.until(None)

    def json(self, payload: bytes, url: str) -> Any:
        """Decode an answer with :func:`searchenv.utils.jsonsafe.loads`; ``error`` if it is malformed."""
        try:
            return loads(payload, f"answer of {url}", max_depth=DEFAULT_MAX_DEPTH)
        except JSONInputError as exc:
            raise self.error(f"{self.service} sent malformed JSON: {exc}") from None

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
