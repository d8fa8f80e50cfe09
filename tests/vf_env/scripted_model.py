"""A scripted OpenAI-compatible chat server playing the oracle (a stand-in for a model).

Two ways of playing it, one per kind of verifiers environment:

- **tool calls** (``searchqa``): each request's last user question picks the example; the number
  of assistant turns so far picks the next oracle call (``search`` per hop, then ``answer``) as a
  native tool call, then a closing text reply.
- **JSON actions** (verifiers' bundled ``openenv`` taskset, which sends the OpenEnv observation and
  action schema as JSON in the user turn and reads the reply as an action): the first user turn's
  ``observation.example_id`` picks the example, and each reply is one OpenEnv ``call_tool`` action as
  JSON text. Examples in ``bad_first`` open with a malformed call (``search`` without ``query``).

With ``copier=True`` it plays the cheat instead of the oracle, either way: search ``zzz``, then answer
whatever answer-like text it has been shown (:func:`tests.leak.copied_answer`). ``delay_s`` makes
every reply take that long, as a slow model's turn does.

Deterministic, so the same sessions can be played through several clients.
"""

from __future__ import annotations

import http.server
import json
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tests.conftest import serve_http
from tests.leak import copied_answer

from searchenv.integrations.verifiers import oracle_calls
from searchenv.tasks.example import QAExample

#: The malformed first call of an example in ``bad_first`` (JSON-action play).
BAD_CALL: tuple[str, dict[str, Any]] = ("search", {"q": "wrong argument name"})


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _tool_call_message(examples: Sequence[QAExample], messages: list[dict[str, Any]]) -> dict[str, Any]:
    text = " ".join(_text(m) for m in messages if m.get("role") == "user")
    example = next((e for e in examples if e.question in text), None)
    done = sum(1 for m in messages if m.get("role") == "assistant")
    calls = oracle_calls(example) if example is not None else []
    if done < len(calls):
        name, args = calls[done]
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{done}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    return {"role": "assistant", "content": "Done."}


def _copier_message(messages: list[dict[str, Any]], json_actions: bool) -> dict[str, Any]:
    """Search ``zzz``, then answer what the conversation showed that looks like an answer; then stop."""
    done = sum(1 for m in messages if m.get("role") == "assistant")
    if done >= 2:
        return {"role": "assistant", "content": "Done."}
    name, args = ("search", {"query": "zzz"}) if done == 0 else (
        "answer", {"answer": copied_answer([_text(m) for m in messages if m.get("role") in ("user", "tool")])})
    if json_actions:
        return {"role": "assistant", "content": json.dumps({"type": "call_tool", "tool_name": name, "arguments": args})}
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{done}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _json_action_message(examples: Sequence[QAExample], bad_first: Collection[str],
                         messages: list[dict[str, Any]]) -> dict[str, Any]:
    users = [m for m in messages if m.get("role") == "user"]
    observation = json.loads(_text(users[0]))["observation"]
    example = next(e for e in examples if e.id == observation["example_id"])
    calls = [*([BAD_CALL] if example.id in bad_first else []), *oracle_calls(example)]
    done = sum(1 for m in messages if m.get("role") == "assistant")
    name, args = calls[min(done, len(calls) - 1)]
    return {"role": "assistant", "content": json.dumps({"type": "call_tool", "tool_name": name, "arguments": args})}


@contextmanager
def scripted_model(examples: Sequence[QAExample], *, json_actions: bool = False,
                   bad_first: Collection[str] = (), copier: bool = False, delay_s: float = 0.0) -> Iterator[str]:
    """Serve the oracle on a free port of 127.0.0.1; yields the base URL (``.../v1``).

    Args:
        examples: The questions it may be asked (found by question text, or by id in JSON-action play).
        json_actions: Reply with OpenEnv actions as JSON text instead of native tool calls.
        bad_first: Ids of the examples whose play opens with a malformed call (JSON-action play).
        copier: Play the copier (module docstring) instead of the oracle.
        delay_s: Seconds each reply takes.
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self._send({"object": "list", "data": [{"id": "oracle", "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            messages = body.get("messages", [])
            time.sleep(delay_s)
            if copier:
                message = _copier_message(messages, json_actions)
            elif json_actions:
                message = _json_action_message(examples, bad_first, messages)
            else:
                message = _tool_call_message(examples, messages)
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            reply = {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model", "oracle"),
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            if not body.get("stream"):
                self._send(reply)
                return
            delta = dict(message)
            for i, call in enumerate(delta.get("tool_calls") or []):
                call["index"] = i
            chunks = [{"index": 0, "delta": delta, "finish_reason": None},
                      {"index": 0, "delta": {}, "finish_reason": finish}]
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

    with serve_http(Handler) as url:
        yield url + "/v1"
