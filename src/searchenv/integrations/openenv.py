"""SearchQA-v0 as an OpenEnv environment server (``searchenv serve-openenv``).

:class:`SearchQAEnvironment` is an OpenEnv ``Environment`` whose actions are OpenEnv's MCP-style
``CallToolAction`` / ``ListToolsAction``: the tools are those of the ``tools`` protocol (``search``,
``answer``), ``tools-browse`` (with ``open``) or any other registered tool-call protocol
(``native_tools``), and each call is handed to a
:class:`~searchenv.env.SearchQAEnv` as the one-call turn the protocol reads
(:func:`~searchenv.protocols.tools.tool_turn_text`), so parsing, bad-argument codes, rewards and
the answer check are this package's, exactly as in-process. It is a plain ``Environment``, not an
``MCPEnvironment``: that class builds a FastMCP server and client per instance (and OpenEnv makes
an instance for every discovery request), runs tool calls on the event loop, and puts no reward on
a tool call's observation; OpenEnv routes ``tools/list`` and ``tools/call`` (over ``/mcp`` and the
WebSocket) to ``step`` for an environment whose action class is ``CallToolAction``, which is this.

Every observation of a call (:class:`SearchQAObservation`) carries ``reward`` (the step's shaped
reward), ``reward_terms`` (each term's contribution; they sum to the reward), ``done``, the
tool's reply as ``result``, the new chat messages, and the step's ``info`` as ``metadata``, less
whatever is derived from the answer until the episode ends (:func:`~searchenv.client_view.client_info`:
the gold answers, EM, F1 and the summary come on the final observation only). ``reset`` takes
``seed``, ``split``, ``index`` or ``example_id``; the same seed picks the same question as
``gymnasium.make("SearchQA-v0", ...)`` over the same split. OpenEnv's task API (``list_splits``,
``list_tasks``, ``num_tasks``, ``get_task``, ``get_task_range``) lists the questions (ids and text,
never the answers).

One :class:`SearchQAService` per server opens the retriever once; every session takes a
:class:`SearchQAEnv` over it from a pool and hands it back when the session closes. The app
(:func:`create_app`) is OpenEnv's, in production mode (no stateless ``/reset``, ``/step``), inside
:class:`_Guard`: the Host check, bearer token, JSON-only POST bodies and body limit of
``searchenv serve``, an Origin check on WebSockets, and an idle timeout after which a session's
WebSocket is closed and the session reclaimed. Needs ``openenv`` (``pip install
'searchenv[openenv]'`` in an environment of its own: it pins ``mcp`` and ``fastmcp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata, Observation, State
from pydantic import Field

from searchenv.client_view import check_mode, client_info, client_reward
from searchenv.env import SearchQAEnv
from searchenv.errors import BadTaskRequest
from searchenv.integrations.openenv_manifest import check_range, episode_reward_range, step_reward_range
from searchenv.integrations.openenv_sessions import TRANSPORT, SessionServer
from searchenv.make import check_evidence, resolve_task, shared_retriever
from searchenv.protocols.registry import protocol_names
from searchenv.protocols.tools import tool_turn_text
from searchenv.retrievers.base import Hit, Retriever
from searchenv.rewards import get_reward
from searchenv.serving.server import DEFAULT_ALLOWED_HOSTS, _host_allowed
from searchenv.tasks.example import QAExample
from searchenv.utils.httpclient import check_server_token
from searchenv.utils.text import writable

#: The environment's name in OpenEnv's task routes (``/searchqa/splits`` ...).
ENV_NAME = "searchqa"
#: Most task specs one task-API answer lists.
MAX_TASKS_PER_ANSWER = 1000
#: The least and greatest idle timeout in seconds a server takes (below a second a WebSocket handshake cannot finish).
IDLE_TIMEOUT_BOUNDS = (1.0, 86400.0)
#: The least and greatest ``top_k`` a server takes (``searchenv serve``'s default ``--max-topk``).
TOP_K_BOUNDS = (1, 100)
#: Seconds ``/health`` reuses its last look at the retriever, and waits at most for a new one.
HEALTH_TTL_S = 2.0
HEALTH_WAIT_S = 5.0


class SearchQAObservation(CallToolObservation):
    """What a tool call returns: the reply, the reward and its terms, the new messages, the step's info."""

    reward_terms: dict[str, float] = Field(default_factory=dict, description="Each term's part of the reward.")
    messages: list[dict[str, Any]] = Field(default_factory=list, description="The chat messages this step added.")


class SearchQAResetObservation(Observation):
    """The start of an episode: the question, the chat so far and the tools to call."""

    example_id: str = Field(description="The question's id.")
    question: str = Field(description="The question.")
    messages: list[dict[str, Any]] = Field(description="The system and user messages.")
    tool_specs: list[dict[str, Any]] = Field(description="The tools, in the OpenAI function format.")


class SearchQAState(State):
    """The session's episode: question id, split, turns taken and whether it has ended."""

    example_id: str | None = None
    split: str | None = None
    done: bool = True


class _LockedRetriever:
    """A retriever shared by every session's thread, searched by one at a time."""

    def __init__(self, retriever: Retriever) -> None:
        self._retriever = retriever
        self._lock = threading.Lock()
        self.kind = getattr(retriever, "kind", type(retriever).__name__)
        self.fingerprint = getattr(retriever, "fingerprint", None)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        with self._lock:
            return self._retriever.search_batch(queries, k)

    def __len__(self) -> int:
        return len(self._retriever)  # type: ignore[arg-type]


class SearchQAService:
    """What every session of one server shares: the questions per split, the open retriever, a pool of envs.

    Args:
        task: A task name (all its splits are served) or a FlashRAG QA JSONL file (served as ``split``).
        retriever: An index folder, a server URL, ``bm25``/``dense`` with ``corpus``, or a retriever.
        corpus: Corpus file for a named index kind (default: the task's).
        split: The split a QA file is served as, and the split ``reset`` uses when none is given.
        protocol: A tool-call protocol (``native_tools``): ``tools``, ``tools-browse`` or one registered
            with :func:`~searchenv.protocols.register_protocol`.
        reward: A preset name or ``{term: weight}``.
        reward_range: The declared range of a step's reward (default: :func:`step_reward_range`).
        mode: ``training`` (every step's reward and terms) or ``evaluation`` (no reward, term or metric
            before the episode ends; the last observation carries the return): :data:`searchenv.client_view.MODES`.
        **env_kwargs: ``top_k`` (within :data:`TOP_K_BOUNDS`), ``max_turns``, ``max_doc_chars``,
            ``max_turn_chars`` ... for :class:`~searchenv.env.SearchQAEnv`.

    Raises:
        ValueError: On an unknown protocol, task or split, a ``top_k`` out of bounds, or a reward whose
            range cannot be bounded.
    """

    def __init__(self, task: str | os.PathLike[str], *, retriever: str | os.PathLike[str] | Retriever,
                 corpus: str | os.PathLike[str] | None = None, split: str = "train", protocol: str = "tools",
                 reward: str | Mapping[str, float] = "default", reward_range: Sequence[float] | None = None,
                 mode: str = "training", **env_kwargs: Any) -> None:
        self.mode = check_mode(mode)
        tool_calls = protocol_names(native_tools=True)  # each call is a turn: any tool-call protocol serves
        if protocol not in tool_calls:
            raise ValueError(f"protocol must be one of {', '.join(tool_calls)} (tool calls), got {protocol!r}")
        top_k = env_kwargs.get("top_k", 3)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not TOP_K_BOUNDS[0] <= top_k <= TOP_K_BOUNDS[1]:
            raise ValueError(f"top_k must be an integer in [{TOP_K_BOUNDS[0]}, {TOP_K_BOUNDS[1]}], got {top_k!r}")
        from searchenv.tasks.qa_files import looks_like_file

        self.task = str(task)
        if looks_like_file(self.task) or os.path.isfile(self.task):
            examples, corpus_path = resolve_task(task, split, corpus)
            self.splits: dict[str, list[QAExample]] = {split: examples}
        else:
            from searchenv.tasks.registry import load_task

            named = load_task(self.task)
            self.splits = {name: list(exs) for name, exs in named.splits.items() if exs}
            _, corpus_path = resolve_task(self.task, next(iter(self.splits)), corpus)
        if split not in self.splits:
            raise ValueError(f"task {self.task!r} has no split {split!r}; it has {sorted(self.splits)}")
        self.default_split = split
        #: The split of each question id (the first that holds it).
        self.split_of: dict[str, str] = {}
        for name, exs in self.splits.items():
            for example in exs:
                self.split_of.setdefault(example.id, name)
        opened = shared_retriever(retriever, corpus_path)
        for examples in self.splits.values():
            check_evidence(opened, examples, task, retriever)
        self.retriever = _LockedRetriever(opened)
        self.env_kwargs = {"protocol": protocol, "reward": reward, **env_kwargs}
        probe = SearchQAEnv(self.splits[split], retriever=self.retriever, **self.env_kwargs)
        self.tools = probe.protocol.tools
        #: The range of a reward a client is sent: a step's in training mode, an episode's in evaluation mode.
        self.step_range = (check_range(reward_range) if reward_range is not None
                           else step_reward_range(get_reward(reward), probe.protocol))
        self.reward_range = (self.step_range if self.mode == "training"
                             else episode_reward_range(self.step_range, probe.max_turns))
        self._free: dict[str, list[SearchQAEnv]] = {name: [probe] if name == split else [] for name in self.splits}
        self._lock = threading.Lock()

    def readiness(self) -> str | None:
        """Why the retriever cannot answer a search now (one search of one document), or None when it can."""
        try:
            self.retriever.search_batch(["health check"], 1)
        except Exception as exc:  # noqa: BLE001 - whatever stops a search makes the server unready
            return f"the retriever cannot answer: {type(exc).__name__}: {str(exc)[:300]}"
        return None

    def acquire(self, split: str) -> SearchQAEnv:
        """A free environment over ``split``'s questions (built when none is free).

        Raises:
            ValueError: If there is no such split.
        """
        if split not in self.splits:
            raise ValueError(f"no split {split!r}; the splits are {sorted(self.splits)}")
        with self._lock:
            if self._free[split]:
                return self._free[split].pop()
        return SearchQAEnv(self.splits[split], retriever=self.retriever, **self.env_kwargs)

    def release(self, split: str, env: SearchQAEnv) -> None:
        """Hand ``env`` back for the next session (kept while fewer than 4096 are free)."""
        with self._lock:
            if len(self._free[split]) < 4096:
                self._free[split].append(env)

    def examples(self, split: str) -> list[QAExample]:
        """The questions of ``split``.

        Raises:
            ValueError: If there is no such split.
        """
        if not isinstance(split, str) or split not in self.splits:
            raise ValueError(f"no split {split!r}; the splits are {sorted(self.splits)}")
        return self.splits[split]


def _task_spec(split: str, index: int, example: QAExample) -> dict[str, Any]:
    """One question as the task API lists it: never its answers."""
    return {"split": split, "index": index, "id": example.id, "question": example.question}


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (tuples as lists, anything else as its text)."""
    return json.loads(json.dumps(value, default=str))


class SearchQAEnvironment(Environment):
    """One session: a :class:`~searchenv.env.SearchQAEnv` episode driven by tool calls (module docstring).

    Args:
        service: The server's shared questions, retriever and environment pool.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, service: SearchQAService) -> None:
        super().__init__()
        self.service = service
        self._env: SearchQAEnv | None = None
        self._split: str | None = None
        self._episode_id: str | None = None
        self._steps = 0

    # ---- episodes -------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, split: str | None = None,
              index: int | None = None, example_id: str | None = None, **kwargs: Any) -> SearchQAResetObservation:
        """Start an episode: a question chosen by ``seed`` (as in-process), or by ``index`` / ``example_id``.

        Without ``split``, an ``example_id`` is looked up in every served split; otherwise the default split is used.

        Raises:
            ValueError: On an unknown argument or split, a bad seed or index, an unknown question id.
        """
        if kwargs:
            raise ValueError(f"unknown reset argument(s) {sorted(kwargs)[:5]}; reset takes seed, episode_id, "
                             "split, index, example_id")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if split is None and isinstance(example_id, str):  # the split that holds the question, if one does
            split = self.service.split_of.get(example_id)
        split = self.service.default_split if split is None else split
        if not isinstance(split, str) or split not in self.service.splits:
            raise ValueError(f"no split {split!r}; the splits are {sorted(self.service.splits)}")
        options: dict[str, Any] = {}
        if index is not None:
            options["index"] = index
        if example_id is not None:
            if not isinstance(example_id, str):
                raise ValueError(f"example_id must be a string, got {type(example_id).__name__}")
            options["example_id"] = example_id
        if self._env is None or split != self._split:
            self._release()
            self._env, self._split = self.service.acquire(split), split
        _, info = self._env.reset(seed=seed, options=options or None)
        self._episode_id = writable(episode_id) if isinstance(episode_id, str) else info["example_id"]
        self._steps = 0
        messages = self._env.messages()
        return SearchQAResetObservation(example_id=info["example_id"], question=self._env.example.question,
                                        messages=messages, tool_specs=self.service.tools, done=False, reward=None)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """List the tools, or make one tool call as one turn of the episode.

        Raises:
            RuntimeError: If no episode is in progress.
            TypeError: For an action that is not a tool call or a tool listing.
        """
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[
                Tool(name=t["function"]["name"], description=t["function"]["description"],
                     input_schema=t["function"]["parameters"]) for t in self.service.tools])
        if not isinstance(action, CallToolAction):
            raise TypeError(f"an action must be a tool call or a tool listing, got {type(action).__name__}")
        env = self._env
        if env is None or self.state.done:
            raise RuntimeError("no episode in progress: send a reset first (an ended episode takes no more calls)")
        turn = tool_turn_text("", [{"function": {"name": action.tool_name, "arguments": action.arguments}}])
        before = len(env.messages())
        _, reward, terminated, truncated, info = env.step(turn)
        self._steps += 1
        new = env.messages()[before:]
        reply = new[-1]["content"] if len(new) > 1 else info["new_text"]
        done = bool(terminated or truncated)
        shown, terms = client_reward(float(reward), info, done=done, mode=self.service.mode)
        return SearchQAObservation(tool_name=writable(action.tool_name), result=reply, done=done,
                                   reward=shown, reward_terms=terms, messages=_json_safe(new),
                                   metadata=_json_safe(client_info(info, done=done, mode=self.service.mode)))

    @property
    def state(self) -> SearchQAState:
        """The session's episode so far."""
        env = self._env
        done = env is None or env._done
        example = None if env is None or env._example is None else env._example.id
        return SearchQAState(episode_id=self._episode_id, step_count=self._steps, example_id=example,
                             split=self._split, done=done)

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version for ``/metadata``."""
        low, high = self.service.reward_range
        shown = ("a step's reward lies in" if self.service.mode == "training" else
                 "no reward, reward term or metric before the episode ends; the last observation's reward, the "
                 "episode's return, lies in")
        return EnvironmentMetadata(
            name="SearchQA-v0", version="0",
            description=(f"Answer a question by searching a corpus with tool calls "
                         f"({', '.join(t['function']['name'] for t in self.service.tools)}); task "
                         f"{self.service.task}; mode: {self.service.mode} ({shown} [{low}, {high}])."))

    def close(self) -> None:
        """Hand the session's environment back to the pool."""
        self._release()

    def _release(self) -> None:
        env, self._env = self._env, None
        if env is not None and self._split is not None:
            self.service.release(self._split, env)

    # ---- OpenEnv's task API -------------------------------------------------------------------------
    def list_splits(self) -> list[dict[str, str]]:
        """The served splits."""
        kinds = {"train": "train", "dev": "validation", "validation": "validation", "test": "test"}
        return [{"name": s, "type": kinds.get(s, "validation")} for s in self.service.splits]

    def _examples(self, split: Any) -> list[QAExample]:
        try:
            return self.service.examples(split)
        except ValueError as exc:
            raise BadTaskRequest(str(exc)) from None

    def num_tasks(self, split: str) -> int:
        """How many questions ``split`` holds.

        Raises:
            BadTaskRequest: If there is no such split (a ``ValueError``; 400 over HTTP).
        """
        return len(self._examples(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """Question ``index`` of ``split`` (id and text).

        Raises:
            BadTaskRequest: If there is no such split or ``index`` is out of range.
        """
        examples = self._examples(split)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(examples):
            raise BadTaskRequest(f"index {index!r} is out of range for split {split!r} ({len(examples)} questions)")
        return _task_spec(split, index, examples[index])

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Questions ``[start, stop)`` of ``split``, at most :data:`MAX_TASKS_PER_ANSWER` of them.

        Raises:
            BadTaskRequest: If there is no such split, or ``start`` or ``stop`` is not an integer or None.
        """
        examples = self._examples(split)
        for name, value in (("start", start), ("stop", stop)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise BadTaskRequest(f"{name} must be an integer or null, got {value!r}")
        first, last, _ = slice(start, stop).indices(len(examples))
        last = min(last, first + MAX_TASKS_PER_ANSWER)
        return [_task_spec(split, i, examples[i]) for i in range(first, last)]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The first :data:`MAX_TASKS_PER_ANSWER` questions of ``split`` (``num_tasks`` has the count)."""
        return self.get_task_range(split, 0, MAX_TASKS_PER_ANSWER)


class _Guard:
    """ASGI middleware: ``searchenv serve``'s checks around OpenEnv's app, plus WebSocket idle timeouts.

    HTTP: the Host header must be an IP address or an allowed name (400), the bearer token must
    match (401), a POST body must be declared ``application/json`` (415) and within
    ``max_body_bytes`` (413). WebSocket: the same Host and token checks, and an ``Origin`` (a
    browser's page) must name this server, else the handshake is refused (403); a connection that
    sends no message for ``idle_timeout`` seconds is closed (1000, with the reason), which ends its
    session. The HTTP server's request timeout bounds only the handshake's arrival. ``GET /health``
    answers 503 with the reason while ``ready`` names one (the retriever cannot answer), looking again
    at most every :data:`HEALTH_TTL_S` seconds and waiting at most :data:`HEALTH_WAIT_S` for an answer.
    """

    def __init__(self, app: Any, *, token: str | None, allowed_hosts: Sequence[str], max_body_bytes: int,
                 idle_timeout: float, ready: Any = None) -> None:
        self.app = app
        self.token = check_server_token(token).encode() if token else None
        self.hosts = {h.lower() for h in allowed_hosts}
        self.max_body_bytes = max_body_bytes
        self.idle_timeout = idle_timeout
        self.ready = ready
        self._probe: asyncio.Future[str | None] | None = None
        self._probed_at = 0.0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        TRANSPORT.set(scope["type"])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._refusal(scope, headers)
        if scope["type"] == "websocket":
            if problem is not None:
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 1008, "reason": problem[1][:120]})
                return
            await self.app(scope, *self._idle_session(receive, send))
            return
        if problem is not None:
            await _send_json(send, *problem)
            return
        if self.ready is not None and scope.get("method") == "GET" and scope.get("path", "").rstrip("/") == "/health":
            reason = await self._readiness()
            if reason is not None:
                body = json.dumps({"status": "unhealthy", "error": reason, "detail": reason}).encode()
                await send({"type": "http.response.start", "status": 503,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        if scope.get("method") == "POST":
            await self._post(scope, headers, receive, send)
            return
        await self.app(scope, receive, send)

    async def _readiness(self) -> str | None:
        """Why the server cannot serve a search now, else None (one look shared by concurrent requests)."""
        now = time.monotonic()
        if self._probe is None or (self._probe.done() and now - self._probed_at > HEALTH_TTL_S):
            self._probed_at = now
            self._probe = asyncio.ensure_future(asyncio.to_thread(self.ready))
        try:
            return await asyncio.wait_for(asyncio.shield(self._probe), HEALTH_WAIT_S)
        except asyncio.TimeoutError:
            return f"the retriever has not answered a search within {HEALTH_WAIT_S:g} s"

    def _refusal(self, scope: dict[str, Any], headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if not _host_allowed(host, self.hosts):
            return 400, (f"Host header {host[:100]!r} is not allowed: use the server's IP address, localhost, or "
                         "a name given with --allowed-host")
        origin = headers.get("origin")
        if scope["type"] == "websocket" and origin is not None and origin.partition("://")[2].lower() != host.lower():
            return 403, f"a WebSocket from a web page ({origin[:100]!r}) is not allowed"
        if self.token is not None:
            scheme, _, given = headers.get("authorization", "").strip().partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"), self.token):
                return 401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')"
        return None

    async def _post(self, scope: dict[str, Any], headers: dict[str, str], receive: Any, send: Any) -> None:
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            await _send_json(send, 415, f"Content-Type must be application/json, got {media_type[:100] or 'none'!r}")
            return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await _send_json(send, 413, f"request body of {declared[:20]} bytes exceeds the limit of "
                                        f"{self.max_body_bytes} bytes")
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                await _send_json(send, 413, f"request body exceeds the limit of {self.max_body_bytes} bytes")
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if scope.get("path", "").rstrip("/").endswith("/mcp"):
            refusal = _bad_mcp_session(body)
            if refusal is not None:
                await _send_json(send, 400, refusal)
                return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _idle_session(self, receive: Any, send: Any) -> tuple[Any, Any]:
        """``receive`` and ``send`` for a WebSocket session closed after ``idle_timeout`` s without a message.

        On the timeout the client gets a close frame (1000) whose reason names the limit, and the
        application a disconnect (which ends the session); what the application sends after that
        is dropped, as the connection is closed.
        """
        timeout = self.idle_timeout
        closed = False

        async def guarded_send(message: dict[str, Any]) -> None:
            if not closed:
                await send(message)

        async def wrapped() -> dict[str, Any]:
            nonlocal closed
            try:
                message: dict[str, Any] = await asyncio.wait_for(receive(), timeout)
            except asyncio.TimeoutError:
                reason = f"session idle for {timeout:g} s (the server's --idle-timeout)"
                if not closed:
                    closed = True
                    with contextlib.suppress(Exception):  # the client may have gone already
                        await send({"type": "websocket.close", "code": 1000, "reason": reason})
                return {"type": "websocket.disconnect", "code": 1000, "reason": reason}
            if message["type"] == "websocket.disconnect":
                closed = True
            return message

        return wrapped, guarded_send


def _bad_mcp_session(body: bytes) -> str | None:
    """Why a ``POST /mcp`` body's ``params.session_id`` cannot name a session (OpenEnv answers 500), else None.

    Only that field is checked here; everything else of the JSON-RPC request is OpenEnv's to answer.
    """
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None
    params = request.get("params") if isinstance(request, dict) else None
    if not isinstance(params, dict) or params.get("session_id") is None:
        return None
    session_id = params["session_id"]
    if not isinstance(session_id, str):
        return f"params.session_id must be a string, got {type(session_id).__name__}"
    if writable(session_id) != session_id:
        return f"params.session_id is not Unicode text: {writable(session_id)[:80]!r} holds a lone surrogate"
    return None


async def _send_json(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message, "detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def create_app(service: SearchQAService, *, max_sessions: int = 64, idle_timeout: float = 300.0,
               token: str | None = None, allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
               max_body_bytes: int = 2 * 1024 * 1024) -> Any:
    """OpenEnv's app (production mode) serving ``service``, inside the guard (module docstring).

    Args:
        service: The shared questions and retriever.
        max_sessions: Most sessions at once; one more takes the place of the longest-idle abandoned
            session made over HTTP, or is refused with OpenEnv's ``CAPACITY_REACHED`` saying how long to
            wait (:class:`~searchenv.integrations.openenv_sessions.SessionServer`).
        idle_timeout: Seconds a session may go without a message before it is closed and reclaimed
            (within :data:`IDLE_TIMEOUT_BOUNDS`).
        token: Bearer token required on every route (at least
            :data:`~searchenv.utils.httpclient.MIN_SERVER_TOKEN_CHARS` characters); None for none.
        allowed_hosts: Names accepted in the ``Host`` header besides IP addresses (``"*"``: any).
        max_body_bytes: Largest HTTP body (a WebSocket message's limit is set in :func:`uvicorn_config`).

    Returns:
        An ASGI application.

    Raises:
        ValueError: On a bad limit or token.
    """
    for name, value in (("max_sessions", max_sessions), ("max_body_bytes", max_body_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    low, high = IDLE_TIMEOUT_BOUNDS
    if isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float) or not low <= idle_timeout <= high:
        raise ValueError(f"idle_timeout must be a number of seconds in [{low:g}, {high:g}], got {idle_timeout!r}")
    from fastapi import FastAPI

    factory = functools.partial(SearchQAEnvironment, service)
    # what openenv's create_fastapi_app builds, with the server that makes room for new sessions
    app = FastAPI(title="OpenEnv Environment HTTP API", version="1.0.0", docs_url="/docs", redoc_url="/redoc",
                  openapi_url="/openapi.json")
    server = SessionServer(
        factory, CallToolAction, SearchQAObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout),
        env_name=ENV_NAME, state_cls=SearchQAState, reset_observation_cls=SearchQAResetObservation,
        idle_timeout=float(idle_timeout))
    server.register_routes(app, mode="production")
    app.add_exception_handler(BadTaskRequest, _bad_task_request)
    return _Guard(app, token=token, allowed_hosts=allowed_hosts, max_body_bytes=max_body_bytes,
                  idle_timeout=idle_timeout, ready=service.readiness)


async def _bad_task_request(request: Any, exc: Exception) -> Any:
    """A :class:`~searchenv.errors.BadTaskRequest` over HTTP: 400 and ``{"detail": the reason}``."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"detail": str(exc)}, status_code=400)


def uvicorn_config(app: Any, host: str = "127.0.0.1", port: int = 8000, *, max_message_bytes: int = 2 * 1024 * 1024,
                   connections: Any = None, log_level: str = "info") -> Any:
    """``searchenv serve``'s uvicorn configuration (connection limits, timeouts) with WebSockets on.

    A WebSocket message over ``max_message_bytes`` closes its connection with 1009 (message too big).
    """
    from searchenv.serving.server import uvicorn_config as http_config

    config = http_config(app, host, port, connections=connections, log_level=log_level)
    config.ws = "websockets-sansio"
    config.ws_max_size = max_message_bytes
    config.ws_max_queue = 4
    config.lifespan = "on"
    return config


#: What :func:`app_from_environ` reads: each variable, the setting it gives and its default (``serve-openenv``'s).
ENVIRONMENT_VARIABLES: dict[str, tuple[str, str]] = {
    "SEARCHQA_TASK": ("task", "synthetic-2hop"),
    "SEARCHQA_SPLIT": ("split", "train"),
    "SEARCHQA_INDEX": ("index", "bm25"),
    "SEARCHQA_CORPUS": ("corpus", ""),
    "SEARCHQA_PROTOCOL": ("protocol", "tools"),
    "SEARCHQA_REWARD": ("reward", "default"),
    "SEARCHQA_REWARD_RANGE": ("reward_range", ""),
    "SEARCHQA_MODE": ("mode", "training"),
    "SEARCHQA_TOP_K": ("top_k", "3"),
    "SEARCHQA_MAX_TURNS": ("max_turns", "4"),
    "SEARCHQA_MAX_DOC_CHARS": ("max_doc_chars", "1500"),
    "SEARCHQA_MAX_SESSIONS": ("max_sessions", "64"),
    "SEARCHQA_IDLE_TIMEOUT": ("idle_timeout", "300"),
    "SEARCHQA_ALLOWED_HOSTS": ("allowed_hosts", ""),
    "SEARCHENV_TOKEN": ("token", ""),
}


def settings_from_environ(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The served settings from environment variables (:data:`ENVIRONMENT_VARIABLES`), checked.

    Numbers must be positive; ``SEARCHQA_TOP_K`` lies in :data:`TOP_K_BOUNDS`, ``SEARCHQA_IDLE_TIMEOUT``
    in :data:`IDLE_TIMEOUT_BOUNDS`; ``SEARCHENV_TOKEN``, when set, has at least
    :data:`~searchenv.utils.httpclient.MIN_SERVER_TOKEN_CHARS` characters; ``SEARCHQA_REWARD_RANGE``
    is ``LOW,HIGH`` (``serve-openenv --reward-range``), needed by a reward whose range is not computed.

    Raises:
        ValueError: Naming the variable and its value (never the token's), for a number that is not one
            or out of range, a short token, or a malformed range.
    """
    env = os.environ if environ is None else environ
    got: dict[str, Any] = {key: env.get(name, default) for name, (key, default) in ENVIRONMENT_VARIABLES.items()}
    kind = {"top_k": int, "max_turns": int, "max_doc_chars": int, "max_sessions": int, "idle_timeout": float}
    bounds: dict[str, tuple[float, float]] = {"top_k": TOP_K_BOUNDS, "idle_timeout": IDLE_TIMEOUT_BOUNDS}
    for name, (setting, _) in ENVIRONMENT_VARIABLES.items():
        if setting not in kind:
            continue
        try:
            value = kind[setting](got[setting])
        except ValueError:
            raise ValueError(f"{name} must be a number, got {got[setting]!r}") from None
        if not value > 0:  # NaN is not positive either
            raise ValueError(f"{name} must be positive, got {got[setting]!r}")
        low, high = bounds.get(setting, (0, math.inf))
        if not low <= value <= high:
            raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {got[setting]!r}")
        got[setting] = value
    got["corpus"] = got["corpus"] or None
    try:
        check_mode(got["mode"])
    except ValueError as exc:
        raise ValueError(f"SEARCHQA_MODE: {exc}") from None
    got["token"] = check_server_token(got["token"], "SEARCHENV_TOKEN") if got["token"] else None
    got["allowed_hosts"] = [h.strip() for h in got["allowed_hosts"].split(",") if h.strip()]
    given = got["reward_range"].strip()
    if given:
        parts = given.replace(",", " ").split()
        try:
            got["reward_range"] = check_range([float(p) for p in parts])
        except ValueError as exc:
            raise ValueError(f"SEARCHQA_REWARD_RANGE must be LOW,HIGH (e.g. -1,1): {exc}; got {given!r}") from None
    else:
        got["reward_range"] = None
    return got


def app_from_environ(environ: Mapping[str, str] | None = None) -> Any:
    """The ``serve-openenv`` app configured by environment variables, for tools that import an app.

    OpenEnv's packaging (``openenv.yaml``'s ``app:``, its Dockerfile's ``uvicorn server.app:app``,
    ``UVProvider``) imports a module-level ASGI app; :mod:`searchenv.integrations.openenv_server`
    builds it with this. The variables and defaults are :data:`ENVIRONMENT_VARIABLES`: the defaults
    are ``searchenv serve-openenv --task synthetic-2hop --index bm25``'s.

    Raises:
        ValueError: On a bad variable (named), task, split, protocol or reward.
    """
    s = settings_from_environ(environ)
    service = SearchQAService(s["task"], retriever=s["index"], corpus=s["corpus"], split=s["split"],
                              protocol=s["protocol"], reward=s["reward"], reward_range=s["reward_range"],
                              mode=s["mode"], top_k=s["top_k"],
                              max_turns=s["max_turns"], max_doc_chars=s["max_doc_chars"])
    return create_app(service, max_sessions=s["max_sessions"], idle_timeout=s["idle_timeout"], token=s["token"],
                      allowed_hosts=[*DEFAULT_ALLOWED_HOSTS, *s["allowed_hosts"]])
