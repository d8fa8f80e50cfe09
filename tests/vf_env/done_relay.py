"""A pass-through relay that ends an OpenAI chat stream with ``data: [DONE]`` when the server left it out.

``transformers serve`` (5.24) ends its ``/v1/chat/completions`` streams after the last chunk, without
the ``data: [DONE]`` line the OpenAI API sends; verifiers 0.4's interception server relays a model's
stream only once it has seen that line, and otherwise fails the turn ("upstream stream ended before
its terminal event"). This relay stands in for that one missing line and nothing else: every request
and every byte of every reply are passed through unchanged, and ``data: [DONE]`` is added only at the
end of a ``text/event-stream`` reply that did not send it.
"""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from tests.conftest import serve_http

_DONE = b"data: [DONE]\n\n"
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


@contextmanager
def done_relay(upstream: str) -> Iterator[str]:
    """Relay to ``upstream`` (a base URL ending in ``/v1``) on a free port of 127.0.0.1; yields its base URL."""
    client = httpx.Client(base_url=upstream.rstrip("/").removesuffix("/v1"), timeout=httpx.Timeout(600.0))

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            self._relay("GET", None)

        def do_POST(self) -> None:  # noqa: N802
            self._relay("POST", self.rfile.read(int(self.headers.get("Content-Length", 0))))

        def _relay(self, method: str, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            with client.stream(method, self.path, content=body, headers=headers) as reply:
                self.send_response(reply.status_code)
                for key, value in reply.headers.items():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                tail = b""
                for data in reply.iter_raw():
                    if data:
                        self._chunk(data)
                        tail = (tail + data)[-64:]
                if reply.headers.get("content-type", "").startswith("text/event-stream") and \
                        not tail.rstrip().endswith(b"data: [DONE]"):
                    self._chunk(_DONE)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def log_message(self, *args: Any) -> None:
            pass

    try:
        with serve_http(Handler) as url:
            yield url + "/v1"
    finally:
        client.close()
