"""A scripted OpenAI-compatible chat server playing the oracle's tool calls (a stand-in for a model).

Each request's last user question picks the example; the number of assistant turns so far picks the
next oracle call (``search`` per hop, then ``answer``), then a closing text reply. Deterministic, so
the same sessions can be played through several clients.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from searchenv.integrations.verifiers import oracle_calls
from searchenv.tasks.example import QAExample


def _reply(examples: Sequence[QAExample], body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages", [])
    text = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    example = next((e for e in examples if e.question in text), None)
    done = sum(1 for m in messages if m.get("role") == "assistant")
    calls = oracle_calls(example) if example is not None else []
    if done < len(calls):
        name, args = calls[done]
        message: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{done}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "Done."}, "stop"
    return {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model", "oracle"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@contextmanager
def scripted_model(examples: Sequence[QAExample]) -> Iterator[str]:
    """Serve the oracle on a free port of 127.0.0.1; yields the base URL (``.../v1``)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self._send({"object": "list", "data": [{"id": "oracle", "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            reply = _reply(examples, body)
            if not body.get("stream"):
                self._send(reply)
                return
            choice = reply["choices"][0]
            delta = dict(choice["message"])
            for i, call in enumerate(delta.get("tool_calls") or []):
                call["index"] = i
            chunks = [{"index": 0, "delta": delta, "finish_reason": None},
                      {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for c in chunks:
                event = {"id": reply["id"], "object": "chat.completion.chunk", "created": 0,
                         "model": reply["model"], "choices": [c]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            usage = {"id": reply["id"], "object": "chat.completion.chunk", "created": 0, "model": reply["model"],
                     "choices": [], "usage": reply["usage"]}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

        def _send(self, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
