r"""Policies on a model served over an OpenAI-compatible API (vLLM, SGLang, llama.cpp, TGI, hosted).

Two classes, one per API:

:class:`OpenAICompletionsPolicy` (``POST /v1/completions``)
    A :class:`~agents.policies.base.Policy`: agents keep their context as token ids of the
    model's own tokenizer (given locally, ``tokenizer=``) and the server continues it. Prompts
    are sent as token ids where the server accepts them (vLLM, SGLang and llama.cpp do: the
    context reaches the model exactly) and otherwise as the decoded text, special tokens kept
    (``prompt_format="auto"`` finds out on the first request; ``transformers serve`` takes text).
    A server given text tokenizes it itself, so it sees the agent's ids only where they are the
    tokenizer's own encoding of the text (:meth:`OpenAICompletionsPolicy.is_exact`); the others
    are counted in ``usage["inexact_prompts"]``, with a warning, as greedy outputs may differ
    from the same model in process there (docs/reference/agents.md, Served models).
    Use it for base and instruct models whose tokenizer you have.
:class:`OpenAIChatPolicy` (``POST /v1/chat/completions``)
    A :class:`~agents.policies.base.ChatPolicy`: agents send the conversation as messages
    (system, user, each assistant turn, and each environment reply as a ``user`` message) and
    the server applies its chat template. No tokenizer is needed, so it also reaches hosted
    models; it cannot continue a prefix, so answer-slot agents (``direct``, ``rag``) ask for
    the answer instead of opening ``<answer>`` themselves. Under the ``tools`` protocol it is a
    native tool caller: it sends the protocol's tools (``tools=``), the episode's calls as
    ``tool_calls`` and the results as ``tool`` messages with their ``tool_call_id``, and turns
    the ``tool_calls`` of the reply back into the protocol's text, the server's call ids kept
    (:func:`searchenv.protocols.tool_turn_text`).

Both send the protocol's stop strings, one request per prompt with at most ``max_concurrency``
in flight, each with a per-request seed (reproducible where the server honours ``seed``) and a
``timeout`` deadline; connection errors, timeouts, 408/429 and 5xx answers are retried with
exponential backoff (or the server's ``Retry-After``). A request that still fails, or whose answer
cannot be read (any exception while turning it into a :class:`~agents.policies.base.Generation`),
does not lose the others: :class:`ModelRequestsError` holds every generation that came back, so an
agent fails only that prompt's episode (a timeout's message names ``--request-timeout`` and
``--concurrency``).
Token usage is summed in :attr:`usage`.

What a served model gives differs from an in-process one (:class:`~agents.policies.hf.HFPolicy`):

- ``Generation.text`` always ends with the stop string that ended it. Servers differ: OpenAI's
  API and vLLM's default leave it out, ``transformers serve`` keeps it. A reply with a stop
  string inside is cut just after it; a reply that stopped without one gets back the stop
  string the server names (vLLM's ``stop_reason``) or, failing that, the closing tag whose
  opening tag the reply left open; otherwise it ended at end-of-sequence (``"eos"``).
- A chat reply whose ``content`` is null or empty is read from its reasoning field
  (:data:`REASONING_FIELDS`), where vLLM and SGLang put all the text of a reasoning model when its
  turn ended (at a stop string) inside the reasoning; a reply with no text there either and no
  tool calls is an empty reply: its request fails (its episode fails, naming why), rather than
  the episode going on with a silent turn.
- ``Generation.token_ids`` are the text re-encoded with the local tokenizer, plus its
  end-of-sequence token after an ``"eos"`` finish (empty for a chat policy without a tokenizer),
  not the sampled ids, and ``logprobs`` is None; ``n_tokens`` is the
  server's own count. Train with in-process models (exact ids and log-probs); use served models
  to evaluate and to generate rollouts where retokenization does not matter.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents.policies.base import (
    Generation,
    chat_template_ids,
    check_sampling,
    prepare_prompts,
    request_seeds,
)
from searchenv.errors import ModelRequestsError, ModelServerError
from searchenv.protocols import tool_turn_text

#: Environment variable read for the API key when none is given.
API_KEY_ENV = "OPENAI_API_KEY"
#: Fields of a chat reply's message that hold a reasoning model's text when its server parses it out of
#: ``content`` (vLLM and SGLang: ``reasoning_content``; some servers: ``reasoning``).
REASONING_FIELDS = ("reasoning_content", "reasoning")
PROMPT_FORMATS = ("auto", "ids", "text")


def api_base(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/v1``; a URL with a path is kept (trailing ``/`` dropped).

    Raises:
        ValueError: If ``url`` is not an http(s) URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"model URL must be an http(s) URL like http://127.0.0.1:8000/v1, got {url!r}")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def restore_stop(text: str, finish_reason: Any, stop: Sequence[str], stop_reason: Any = None) -> tuple[str, str]:
    """A served reply as the :class:`~agents.policies.base.Policy` contract has it: ``(text, finish_reason)``.

    Args:
        text: The reply's text.
        finish_reason: The server's ``finish_reason`` (``"stop"``, ``"length"``, ...).
        stop: The stop strings sent.
        stop_reason: vLLM's ``stop_reason`` (the stop string that matched, a token id, or None).

    Returns:
        The text cut just after the first stop string in it, or with the stop string the server
        left out put back; and ``"stop"``, ``"length"`` or ``"eos"``.
    """
    cuts = [(i + len(s), s) for s in stop if (i := text.find(s)) >= 0]
    if cuts:
        end = min(cuts)[0]
        return text[:end], "stop"
    if finish_reason == "length":
        return text, "length"
    if isinstance(stop_reason, str) and stop_reason in stop:
        return text + stop_reason, "stop"
    # OpenAI's API does not say which stop string matched: put back a closing tag whose opening
    # tag the reply left open (the last one opened wins); end-of-sequence otherwise.
    best: tuple[int, str] | None = None
    for s in stop:
        if s.startswith("</") and s.endswith(">"):
            opened = text.rfind("<" + s[2:])
            if opened >= 0 and text.find(s, opened) < 0 and (best is None or opened > best[0]):
                best = (opened, s)
    if best is not None:
        return text + best[1], "stop"
    return text, "eos"


class _OpenAIBase:
    """What both APIs share: the HTTP client, the worker pool, retries, usage and reply parsing."""

    endpoint_path = ""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        tokenizer: Any = None,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout: float = 300.0,
        retries: int = 3,
        backoff: float = 1.0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        from searchenv.utils.httpclient import JSONClient, check_call_options, check_token

        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
        check_call_options(timeout, retries, backoff)
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError(f"model must be a non-empty string (the served model's name), got {model!r}")
        self.base_url = api_base(base_url)
        self.url = self.base_url + self.endpoint_path
        self.timeout = float(timeout)
        self.max_concurrency = max_concurrency
        self.extra_body = dict(extra_body or {})
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        headers = [("Authorization", f"Bearer {check_token(key)}")] if key else []
        self._client = JSONClient(service="model server", error=ModelServerError, retries=retries,
                                  backoff=float(backoff), headers=headers, max_connections=max_concurrency)
        self.tokenizer = _load_tokenizer(tokenizer)
        self._model = model
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="searchenv-openai")
        self._lock = threading.Lock()
        self._usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0,
                       "inexact_prompts": 0}

    # ------------------------------------------------------------------ tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with the local tokenizer, no special tokens added."""
        return [int(t) for t in self._need_tokenizer().encode(text, add_special_tokens=False)]

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` with the local tokenizer, special tokens kept."""
        return str(self._need_tokenizer().decode(list(token_ids), skip_special_tokens=False))

    def chat_prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of a chat with the local tokenizer's chat template and generation prompt."""
        return chat_template_ids(self._need_tokenizer(), messages)

    def _need_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise ValueError(
                f"{type(self).__name__} without a tokenizer has no token ids; pass tokenizer= (the served "
                "model's tokenizer: a model folder, .gguf file or packaged name)"
            )
        return self.tokenizer

    # ------------------------------------------------------------------ server

    @property
    def model(self) -> str:
        """The served model's name: as given, else the first one ``GET /v1/models`` lists."""
        if self._model is None:
            try:
                listing = self._client.get(self.base_url + "/models", time.monotonic() + min(self.timeout, 30.0))
                self._model = str(listing["data"][0]["id"])
            except (ModelServerError, KeyError, IndexError, TypeError) as exc:
                raise ModelServerError(
                    f"cannot tell which model {self.base_url} serves ({exc}); name it with model= (--served-model)"
                ) from None
        return self._model

    @property
    def usage(self) -> dict[str, float]:
        """Totals so far: requests, prompt and completion tokens (as the server counted), retries, seconds.

        ``inexact_prompts`` counts prompts sent as text whose ids the server's tokenizer does not
        make again from that text (see :meth:`OpenAICompletionsPolicy.is_exact`).
        """
        with self._lock:
            return {**self._usage, "retries": self._client.retried}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        try:
            payload = self._client.post(self.url, body, start + self.timeout, timeout=self.timeout)
        except ModelServerError as exc:
            if "answer within" not in str(exc):
                raise
            # A busy server queues requests: say which settings give it room.
            raise ModelServerError(
                f"{exc} (a busy server queues requests: allow each more time with --request-timeout / timeout= "
                f"(now {self.timeout:g} s), or send fewer at once with --concurrency / max_concurrency= "
                f"(now {self.max_concurrency}))"
            ) from None
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
            raise ModelServerError(f"model server {self.url} answered without 'choices': {str(payload)[:200]}")
        usage = _usage_of(payload)
        with self._lock:
            self._usage["requests"] += 1
            self._usage["seconds"] += time.monotonic() - start
            for key in ("prompt_tokens", "completion_tokens"):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    self._usage[key] += value
        return payload

    def _sampling(self, max_new_tokens: int, temperature: float, top_p: float, stop: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_new_tokens, "temperature": float(temperature)}
        if temperature > 0 and top_p < 1:
            body["top_p"] = float(top_p)
        if stop:
            body["stop"] = list(stop)
        return body

    def _run(self, bodies: Sequence[dict[str, Any]], read: Callable[[dict[str, Any]], str],
             stop: Sequence[str]) -> list[Generation]:
        def one(body: dict[str, Any]) -> Generation:
            payload = self._post(body)
            choice = payload["choices"][0]
            if not isinstance(choice, dict):
                raise ModelServerError(f"model server {self.url} answered a choice that is not an object")
            text, finish = restore_stop(read(choice), choice.get("finish_reason"), stop, choice.get("stop_reason"))
            count = _usage_of(payload).get("completion_tokens")
            ids: tuple[int, ...] = ()
            if self.tokenizer is not None:
                ids = tuple(self.encode(text))
                eos = getattr(self.tokenizer, "eos_token_id", None)
                if finish == "eos" and isinstance(eos, int):
                    ids += (eos,)  # as an in-process model reports it: the sampled end-of-sequence token
            n_tokens = count if isinstance(count, int) and not isinstance(count, bool) else len(ids)
            message = choice.get("message")
            calls = bool(isinstance(message, dict) and message.get("tool_calls"))
            return Generation(text, ids, None, finish, n_tokens, tool_calls=calls)

        def attempt(body: dict[str, Any]) -> Generation | ModelServerError:
            try:
                return one(body)
            except ModelServerError as exc:
                return exc
            except Exception as exc:  # reading one answer went wrong: that prompt fails, not the whole call
                return ModelServerError(f"model server {self.url}: its answer could not be read "
                                        f"({type(exc).__name__}: {str(exc)[:200]})")

        results = [attempt(bodies[0])] if len(bodies) == 1 else list(self._pool.map(attempt, bodies))
        failed = [r for r in results if isinstance(r, ModelServerError)]
        if failed:
            raise _requests_error(failed[0], len(failed), [r if isinstance(r, Generation) else None for r in results],
                                  [str(r) if isinstance(r, ModelServerError) else None for r in results])
        return [r for r in results if isinstance(r, Generation)]

    def close(self) -> None:
        """Close the connections and worker threads."""
        self._client.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> _OpenAIBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r}, model={self._model!r})"


class OpenAICompletionsPolicy(_OpenAIBase):
    """A :class:`~agents.policies.base.Policy` on ``POST {base_url}/completions``.

    Args:
        base_url: The API root (``http://127.0.0.1:8000/v1``; ``/v1`` is added to a bare host).
        tokenizer: The served model's tokenizer: a transformers tokenizer, or a packaged model
            name, ``.gguf`` file or model folder to load it from (offline). Required: contexts are
            token ids.
        model: The served model's name (default: the first that ``GET /v1/models`` lists).
        prompt_format: ``"ids"`` sends token ids, ``"text"`` the decoded text (special tokens
            kept), ``"auto"`` tries ids and falls back to text for good if the server refuses them.
        api_key: Sent as a bearer token (default: ``$OPENAI_API_KEY`` if set).
        max_concurrency: Requests in flight at once.
        timeout: Deadline in seconds for one request, retries included.
        retries: Extra attempts after a connection error, timeout, 408/429 or 5xx answer.
        backoff: First retry delay in seconds, doubled on each further retry.
        extra_body: More request fields sent as they are (``{"include_stop_str_in_output": True}``
            for vLLM, ``{"top_k": 20}``, ...).

    Raises:
        ValueError: On a bad option, or no tokenizer.
    """

    endpoint_path = "/completions"

    def __init__(self, base_url: str, *, tokenizer: Any, prompt_format: str = "auto", **kwargs: Any) -> None:
        if tokenizer is None:
            raise ValueError("the completions API needs the served model's tokenizer (tokenizer=); "
                             "without one, use OpenAIChatPolicy")
        if prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
        super().__init__(base_url, tokenizer=tokenizer, **kwargs)
        self.prompt_format = prompt_format

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue every prompt, one request each (see :class:`~agents.policies.base.Policy`).

        Raises:
            ModelRequestsError: If a request fails after its retries (a :class:`ModelServerError` whose
                message says why, and a :class:`~agents.policies.base.GenerationError` holding the
                generations of the requests that did not fail).
        """
        ids, seeds = prepare_prompts(prompts, stop=stop, max_new_tokens=max_new_tokens, temperature=temperature,
                                     top_p=top_p, seed=seed, encode=self.encode, seeds=request_seeds)
        if not ids:
            return []
        try:
            common = {**self._sampling(max_new_tokens, temperature, top_p, stop), **self.extra_body}
            if self.prompt_format == "auto":
                self._probe(ids[0], common)
        except ModelServerError as exc:
            raise _all_failed(exc, len(prompts)) from None
        prompts_sent: list[list[int]] | list[str] = ids
        if self.prompt_format == "text":
            prompts_sent = [self.decode(p) for p in ids]
            inexact = sum(self._server_ids(t) != p for p, t in zip(ids, prompts_sent, strict=True))
            if inexact:
                with self._lock:
                    self._usage["inexact_prompts"] += inexact
                warnings.warn(
                    f"{inexact} of {len(ids)} prompt(s) sent as text to {self.url} re-encode to other token ids "
                    "than the agent's context (a piece of text encoded on its own, such as an environment reply "
                    "ending in a blank line before the model's next turn, or a split the model generated): "
                    "the server sees other tokens there, so its output may differ from the same model in "
                    "process. A server that takes token ids (vLLM, SGLang, llama.cpp) gets them exactly "
                    "(docs/reference/agents.md, Served models)",
                    UserWarning,
                    stacklevel=2,
                )
        return self._run(_bodies(common, "prompt", prompts_sent, seeds), _completion_text, stop)

    def is_exact(self, prompt: Sequence[int]) -> bool:
        """Whether the server is given exactly these token ids.

        Always when ids are sent; as text (``prompt_format="text"``, e.g. ``transformers serve``),
        when the served model's tokenizer makes these ids again from the decoded text, as the
        server does with a string prompt (special tokens added as its tokenizer adds them).
        """
        if self.prompt_format == "ids":
            return True
        ids = [int(t) for t in prompt]
        return self._server_ids(self.decode(ids)) == ids

    def _server_ids(self, text: str) -> list[int]:
        """The ids a server that takes text makes of ``text`` (the tokenizer called as ``transformers serve`` does)."""
        return [int(t) for t in self._need_tokenizer()(text)["input_ids"]]

    def _probe(self, prompt: list[int], common: dict[str, Any]) -> None:
        """Settle ``prompt_format="auto"``: ids if the server takes a token-id prompt, else text."""
        try:
            self._post({**common, "prompt": prompt, "max_tokens": 1})
            self.prompt_format = "ids"
        except ModelServerError as exc:
            if exc.http_status not in (400, 422):
                raise
            self.prompt_format = "text"


class OpenAIChatPolicy(_OpenAIBase):
    """A :class:`~agents.policies.base.ChatPolicy` on ``POST {base_url}/chat/completions``.

    Args:
        base_url: The API root (``http://127.0.0.1:8000/v1``; ``/v1`` is added to a bare host).
        tokenizer: Optional: with one (as for :class:`OpenAICompletionsPolicy`) generations carry
            re-encoded token ids and the policy also offers ``encode``/``decode``.
        **kwargs: ``model``, ``api_key``, ``max_concurrency``, ``timeout``, ``retries``,
            ``backoff``, ``extra_body`` as for :class:`OpenAICompletionsPolicy`.
    """

    endpoint_path = "/chat/completions"

    def generate_chat(
        self,
        conversations: Sequence[Sequence[Mapping[str, Any]]],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Generation]:
        """The next assistant message of every conversation, one request each.

        Args:
            conversations: Messages: ``{"role": "system"/"user"/"assistant", "content": str}``; with
                ``tools`` also assistant messages with ``tool_calls`` (arguments as an object or a
                JSON string) and ``{"role": "tool", "tool_call_id": str, "content": str}``.
            stop: As for :meth:`~agents.policies.base.Policy.generate` (leave it empty with
                ``tools``: a server's tool-call parser needs the call's closing markup).
            max_new_tokens: As for :meth:`~agents.policies.base.Policy.generate`.
            temperature: As for :meth:`~agents.policies.base.Policy.generate`.
            top_p: As for :meth:`~agents.policies.base.Policy.generate`.
            seed: As for :meth:`~agents.policies.base.Policy.generate`.
            tools: OpenAI function definitions sent as ``tools`` (native tool calling); a reply's
                ``tool_calls`` come back as text (:func:`searchenv.protocols.tool_turn_text`).

        Raises:
            ValueError: If a message is not one of those shapes.
            ModelRequestsError: If a request fails after its retries (a :class:`ModelServerError` whose
                message says why, and a :class:`~agents.policies.base.GenerationError` holding the
                generations of the requests that did not fail).
        """
        check_sampling(conversations, stop, max_new_tokens, temperature, top_p)
        if not conversations:
            return []
        seeds = request_seeds(seed, len(conversations))
        all_messages = [[_api_message(msg, c, m, tools is not None) for m, msg in enumerate(conv)]
                        for c, conv in enumerate(conversations)]
        try:
            common = {**self._sampling(max_new_tokens, temperature, top_p, stop), **self.extra_body}
        except ModelServerError as exc:
            raise _all_failed(exc, len(conversations)) from None
        if tools is not None:
            common["tools"] = [dict(t) for t in tools]
        return self._run(_bodies(common, "messages", all_messages, seeds), _chat_text, stop)


def _api_message(msg: Any, c: int, m: int, tools: bool) -> dict[str, Any]:
    """One message as the chat API takes it (tool calls' arguments as JSON strings); raises ValueError naming it."""
    where = f"conversation {c} message {m}"
    if not isinstance(msg, Mapping):
        raise ValueError(f"{where}: expected a message object, got {str(msg)[:100]}")
    role, content = msg.get("role"), msg.get("content")
    if tools and role == "tool":
        if not isinstance(msg.get("tool_call_id"), str) or not isinstance(content, str):
            raise ValueError(f"{where}: a tool message needs string 'tool_call_id' and 'content', got {str(msg)[:100]}")
        return {"role": "tool", "tool_call_id": msg["tool_call_id"], "content": content}
    if role not in ("system", "user", "assistant") or not isinstance(content, str):
        kinds = "system/user/assistant (tool with tools=)" if not tools else "system/user/assistant/tool"
        raise ValueError(f"{where}: expected role {kinds} and string content, got {str(msg)[:100]}")
    out: dict[str, Any] = {"role": role, "content": content}
    calls = msg.get("tool_calls")
    if tools and role == "assistant" and calls:
        out["tool_calls"] = []
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise ValueError(f"{where}: a tool call needs a 'function' with a 'name', got {str(call)[:100]}")
            args = fn.get("arguments", {})
            text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            out["tool_calls"].append({"id": str(call.get("id", "")), "type": "function",
                                      "function": {"name": fn["name"], "arguments": text}})
    return out



def _requests_error(first: ModelServerError, count: int, results: Sequence[Generation | None],
                    errors: Sequence[str | None]) -> ModelRequestsError:
    """One :class:`ModelRequestsError` for a call whose ``count`` failures start with ``first``."""
    message = str(first) if count == len(results) == 1 else f"{count} of {len(results)} requests failed; {first}"
    error = ModelRequestsError(message, results, errors)
    error.http_status = first.http_status
    return error


def _all_failed(exc: ModelServerError, n: int) -> ModelRequestsError:
    """A failure before any request was sent (the model's name, the prompt-format probe), for all ``n`` prompts."""
    if isinstance(exc, ModelRequestsError):
        return exc
    return _requests_error(exc, n, [None] * n, [str(exc)] * n)


def _bodies(common: Mapping[str, Any], field: str, values: Sequence[Any],
            seeds: Sequence[int | None]) -> list[dict[str, Any]]:
    """One request body per prompt: the shared fields, the prompt under ``field``, and its seed."""
    return [{**common, field: v, **({"seed": s} if s is not None else {})} for v, s in zip(values, seeds, strict=True)]


def _usage_of(payload: dict[str, Any]) -> dict[str, Any]:
    usage = payload.get("usage")
    return usage if isinstance(usage, dict) else {}


def _completion_text(choice: dict[str, Any]) -> str:
    text = choice.get("text")
    if not isinstance(text, str):
        raise ModelServerError("model server answered a completion choice without string 'text'")
    return text


def _chat_text(choice: dict[str, Any]) -> str:
    """The text of a chat choice: its content, its tool calls as text, or else its reasoning (see the module docstring).

    Raises:
        ModelServerError: For a choice without a message or string content, or an empty reply
            (no text in the content or a reasoning field, and no tool calls).
    """
    message = choice.get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if calls and isinstance(calls, list):  # native tool calls: said as the tools protocol's text (finish "eos")
        content = message.get("content")  # type: ignore[union-attr]
        return tool_turn_text(content if isinstance(content, str) else "", calls, ids=True)
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) and content.strip():
        return content
    if not isinstance(message, dict) or not (isinstance(content, str) or content is None and
                                             message.get("role") == "assistant"):
        raise ModelServerError("model server answered a chat choice without string 'message.content'")
    for field in REASONING_FIELDS:  # a reasoning model whose server parsed all its text out as reasoning
        reasoning = message.get(field)
        if isinstance(reasoning, str) and reasoning.strip():
            return reasoning
    raise ModelServerError(
        f"model server sent an empty reply: no text in 'message.content' or {' or '.join(map(repr, REASONING_FIELDS))}"
        f" and no 'tool_calls' (finish_reason {str(choice.get('finish_reason'))[:40]!r})")


def _load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object as it is; a name or path loaded offline (:func:`agents.policies.hf.resolve_model_path`).

    Raises:
        ValueError: If the name is neither packaged nor a local path.
    """
    if tokenizer is None or not isinstance(tokenizer, str | os.PathLike):
        return tokenizer
    from transformers import AutoTokenizer

    from agents.policies.hf import resolve_model_path

    return AutoTokenizer.from_pretrained(str(resolve_model_path(tokenizer)))


def openai_policy(base_url: str, *, api: str = "auto", tokenizer: Any = None,
                  **kwargs: Any) -> OpenAICompletionsPolicy | OpenAIChatPolicy:
    """A policy on an OpenAI-compatible server.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8000/v1``.
        api: ``"completions"``, ``"chat"``, or ``"auto"``: completions when a tokenizer is given
            (exact contexts), chat otherwise.
        tokenizer: The served model's tokenizer (object, packaged name, ``.gguf`` or folder).
        **kwargs: Options of :class:`OpenAICompletionsPolicy` / :class:`OpenAIChatPolicy`.

    Raises:
        ValueError: For an unknown ``api``, or completions without a tokenizer.
    """
    if api not in ("auto", "completions", "chat"):
        raise ValueError(f"api must be auto, completions or chat, got {api!r}")
    if api == "completions" or (api == "auto" and tokenizer is not None):
        return OpenAICompletionsPolicy(base_url, tokenizer=tokenizer, **kwargs)
    return OpenAIChatPolicy(base_url, tokenizer=tokenizer, **kwargs)
