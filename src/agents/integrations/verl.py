"""verl: SearchQA-v0 episodes as a verl agent loop (``AgentLoopBase``, registered as ``searchqa_agent``).

verl's agent loop workers instantiate the loop per sample and call ``run(sampling_params,
**row)``; the loop talks to verl's generation servers (vLLM or SGLang) through
``server_manager.generate(prompt_ids=...)`` with token ids in and token ids out. Each turn here:

1. generate from the episode's token ids so far, with the protocol's stop strings (``stop``, kept
   in the output: see below) and at most ``max_new_tokens`` (bounded by what is left of
   ``rollout.response_length``);
2. hand the text (decoded, cut after the first stop string) to ``SearchQAEnv.prepare_step``,
   search, ``finish_step``. verl runs every sample of a batch at once on one event loop, so the
   searches of the episodes whose turns are ready together are gathered into one
   ``search_batch`` call (:class:`searchenv.retrievers.batching.MicroBatcher`, on a worker
   thread: a slow retriever, a server or a dense encoder, never holds up the event loop), as the
   rollout engine gathers each turn's queries; a failed search is an infrastructure error of
   every episode in its batch. ``batch_searches: false`` searches each episode on its own, in a
   worker thread except for an in-memory BM25 index (``search_in_thread`` overrides);
3. append the generated ids as generated (``response_mask`` 1, their log-probs) and the
   environment's reply encoded once (``response_mask`` 0, log-prob 0); under ``tools`` the reply
   is the chat template's own text between the turns (the end of the assistant message, the
   ``tool`` message, the next generation prompt: :func:`agents.policies.chat.reply_text`), as in the
   rollout engine.

The output's ``reward_score`` is the episode return under the reward preset (verl then skips its
own reward function for these samples and puts the score on the last response token: verl 0.9.1
takes one score per agent-loop sample, so the per-turn rewards, which sum to it, travel as
``extra_fields["turn_scores"]``, verl's own key for them). An episode in which the retriever failed
(``infra_error``) scores 0 with a ``response_mask`` of all 0: an outage teaches nothing, as in the
TRL adapter. ``extra_fields["reward_extra_info"]`` holds the episode's EM, F1, searches, invalid
turns, infrastructure errors, ... (:data:`REWARD_EXTRA_KEYS`, the same keys for every sample), which
verl lists as ``reward_extra_keys`` and averages per data source in its validation metrics
(``val-aux/<data source>/em/mean@1``, ...); ``extra_fields`` also carry ``searchenv_metrics``
(:func:`searchenv.metrics.episode_metrics`) and ``searchenv_reward_terms`` (per-turn terms). The
loop's time in generation and in retrieval goes to verl's agent-loop timing metrics
(``agent_loop/generate_sequences/*``, ``agent_loop/tool_calls/*``).

The stop strings go to the generation server in the parameters of verl's rollout backend
(``actor_rollout_ref.rollout.name``): ``include_stop_str_in_output`` for vLLM and TensorRT-LLM,
``no_stop_trim`` for SGLang, whose server passes the parameters on to SGLang unchanged.

Settings come from the trainer config's ``searchenv`` block (``+searchenv.retriever=...`` on the
command line; see ``docs/engines/verl/searchqa_grpo.yaml``): ``retriever`` (index folder or server URL),
``corpus``, ``protocol``, ``reward``, ``top_k``, ``max_turns``, ``max_doc_chars``,
``max_new_tokens``, ``batch_searches``, ``search_in_thread``. Rows are those
``searchenv rows`` writes (the question, gold answers and evidence are read with
:func:`searchenv.tasks.rows.example_from_row`). The environment objects
are pooled per process, so the index is opened once.

Needs ``verl`` (its own virtual environment: it pins its own transformers; see docs/engines/verl.md).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from agents.policies.chat import reply_ids, reply_text, template_renderer
from searchenv.env import SearchQAEnv
from searchenv.idle_envs import IdleEnvs
from searchenv.metrics import episode_metrics
from searchenv.retrievers.base import Hit
from searchenv.retrievers.batching import MicroBatcher
from searchenv.tasks.rows import example_from_row
from searchenv.vector import search_round

_ENV_KEYS = frozenset({"retriever", "corpus", "protocol", "reward", "top_k", "max_turns", "max_doc_chars"})
_LOOP_KEYS = frozenset({"max_new_tokens", "batch_searches", "search_in_thread"})
#: The episode numbers in ``extra_fields["reward_extra_info"]``: verl reads the first sample's keys for
#: the whole batch, so every sample carries exactly these (``evidence_recall`` only exists with gold evidence).
REWARD_EXTRA_KEYS = ("em", "f1", "contains", "searches", "queries", "duplicate_queries", "turns", "invalid_turns",
                     "infra_errors", "answered", "answer_admissible", "opens", "return")
#: How each of verl's rollout backends is asked to keep the stop string in the output.
_KEEP_STOP = {"vllm": "include_stop_str_in_output", "trtllm": "include_stop_str_in_output", "sglang": "no_stop_trim"}
_POOL = IdleEnvs()  # verl instantiates the loop per sample: environments are reused across samples
_BATCHERS: dict[int, MicroBatcher] = {}  # one per retriever object (pooled environments share it)
_BATCHERS_LOCK = threading.Lock()


def _batcher(retriever: Any) -> MicroBatcher:
    """The process's :class:`MicroBatcher` over ``retriever`` (it holds the retriever, so its id stays unique)."""
    with _BATCHERS_LOCK:
        batcher = _BATCHERS.get(id(retriever))
        if batcher is None or batcher.retriever is not retriever:
            batcher = _BATCHERS[id(retriever)] = MicroBatcher(retriever)
        return batcher


_ENCODE_LOCK = threading.Lock()  # replies encoded with a slow (Python) tokenizer, one thread at a time
_REPLY_TOKENIZERS: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, its private backend or None)
_REPLY_TOKENIZERS_LOCK = threading.Lock()
_PROBE = "<information> Doc 1 (Vela Quenn) Vela Quenn, born 1871 in Karsk, \u00e9tude n\u00b02. </information>\n\n"


def _reply_tokenizer(tokenizer: Any) -> Any:
    """The process's private backend for ``tokenizer`` (:func:`_private_backend`), made once.

    verl builds an agent loop per sample, and copying a backend takes about 0.1 s; the entry holds
    the tokenizer, so its id stays unique.
    """
    with _REPLY_TOKENIZERS_LOCK:
        entry = _REPLY_TOKENIZERS.get(id(tokenizer))
        if entry is None or entry[0] is not tokenizer:
            entry = _REPLY_TOKENIZERS[id(tokenizer)] = (tokenizer, _private_backend(tokenizer))
        return entry[1]


def _private_backend(tokenizer: Any) -> Any:
    """A private copy of a fast tokenizer's Rust backend for encoding replies on worker threads, or None.

    The transformers tokenizer is shared with verl, whose own threads tokenize with it too, and
    transformers resets truncation and padding on that shared backend when a call asks for other
    settings: a copy that nobody configures can encode on any number of threads at once. None
    for a slow tokenizer, or if the copy encodes a probe reply differently.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(backend.to_str())
    own.no_truncation()
    own.no_padding()
    ids = own.encode_batch([_PROBE], add_special_tokens=False)[0].ids
    return own if list(ids) == list(tokenizer.encode(_PROBE, add_special_tokens=False)) else None


def _cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """``text`` up to and including the first stop string in it (as the environment must see the turn)."""
    ends = [i + len(s) for s in stop if (i := text.find(s)) >= 0]
    return text[: min(ends)] if ends else text


#: The weight versions verl's server manager puts in each turn's ``extra_fields``; verl's v1 trainer
#: reads ``min_global_steps`` and ``max_global_steps`` of every sample (its staleness metrics).
_STEP_KEYS = ("global_steps", "min_global_steps", "max_global_steps")


def _track_steps(steps: dict[str, Any], fields: dict[str, Any]) -> None:
    """Fold one turn's weight versions into the episode's, as verl's tool agent loop does.

    The first turn gives all three; a later turn moves ``max_global_steps`` on (when it has one).
    """
    if not steps:
        steps.update({key: fields[key] for key in _STEP_KEYS if key in fields})
    elif fields.get("max_global_steps") is not None:
        steps["max_global_steps"] = fields["max_global_steps"]


@register("searchqa_agent")
class SearchQAAgentLoop(AgentLoopBase):
    """A verl agent loop that runs one SearchQA-v0 episode per sample (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = dict(self.config.get("searchenv", {}) or {})
        self.max_new_tokens = int(settings.pop("max_new_tokens", 256))
        self.batch_searches = bool(settings.pop("batch_searches", True))
        self.search_in_thread: bool | None = settings.pop("search_in_thread", None)
        unknown = set(settings) - _ENV_KEYS
        if unknown:
            raise ValueError(f"unknown searchenv setting(s) {sorted(unknown)}; known: {sorted(_ENV_KEYS | _LOOP_KEYS)}")
        self.env_settings = settings
        self.env_key = IdleEnvs.key(settings)
        self.response_length = int(self.rollout_config.response_length)
        backend = getattr(self.rollout_config, "name", None) or "vllm"  # verl's own default backend
        if backend not in _KEEP_STOP:
            raise ValueError(f"SearchQAAgentLoop does not know verl's rollout backend {backend!r}; "
                             f"known: {sorted(_KEEP_STOP)}")
        self.backend = str(backend)
        self._reply_tokenizer = _reply_tokenizer(self.tokenizer)

    def _encode(self, text: str) -> list[int]:
        """The token ids of an environment reply (no special tokens added); safe on any thread."""
        if self._reply_tokenizer is None:
            with _ENCODE_LOCK:
                return list(self.tokenizer.encode(text, add_special_tokens=False))
        # encode_batch releases the GIL: the other episodes go on while the reply is encoded
        return list(self._reply_tokenizer.encode_batch([text], add_special_tokens=False)[0].ids)

    def _in_thread(self, env: SearchQAEnv) -> bool:
        """Search in a worker thread unless told otherwise; by default inline only for an in-memory BM25 index."""
        if self.search_in_thread is not None:
            return bool(self.search_in_thread)
        from searchenv.retrievers.bm25 import BM25Retriever

        return not isinstance(env.retriever, BM25Retriever)

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        """Run one episode for the row in ``kwargs`` with verl's generation servers.

        Args:
            sampling_params: verl's sampling parameters (the loop adds stop strings and ``max_tokens``).
            priority: The sample's scheduling priority, which verl assigns per sample; passed on to
                the server manager (vLLM schedules by it) and, under ``full_determinism``, the
                episode's request id.
            **kwargs: The dataset row.
        """
        example = example_from_row(kwargs)
        key, env = _POOL.acquire(self.env_settings, example, self.env_key)
        try:
            return await self._episode(env, example, sampling_params, int(priority))
        finally:
            _POOL.release(key, env)

    async def _episode(self, env: SearchQAEnv, example: Any, sampling_params: dict[str, Any],
                       priority: int) -> AgentLoopOutput:
        loop = asyncio.get_running_loop()
        # One request id for the whole episode, as verl's own agent loops do: the server manager
        # routes a request id to the same server every turn (a sticky session), so each turn's
        # prompt, which extends the last, hits that server's prefix cache.
        deterministic = bool(getattr(self.rollout_config, "full_determinism", False))
        request_id = f"det-{priority}" if deterministic else uuid4().hex
        extra = {"priority": priority} if priority else {}
        env.reset(options={"example": example})
        prompt_ids = list(await self.ct_build_initial_tokens(env.messages()[:2]))
        stop = tuple(env.protocol.stop)
        render = template_renderer(self.tokenizer) if env.protocol.native_tools else None
        in_thread = not self.batch_searches and self._in_thread(env)  # only for ungathered searches
        response_ids: list[int] = []
        response_mask: list[int] = []
        logprobs: list[float] = []
        reward_terms: list[dict[str, float]] = []
        turn_scores: list[float] = []
        final: dict[str, Any] | None = None
        steps: dict[str, Any] = {}  # the weight versions the turns were generated with (verl's v1 trainer reads them)
        turns = 0
        generate_s = search_s = 0.0
        while final is None:
            budget = min(self.max_new_tokens, self.response_length - len(response_ids))
            if budget < 1:  # the response budget is spent: end unanswered
                final = env.end_episode("response_length")
                break
            params = {**sampling_params, "stop": list(stop), _KEEP_STOP[self.backend]: True, "max_tokens": budget}
            started = time.perf_counter()
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids + response_ids,
                                                     sampling_params=params, **extra)
            generate_s += time.perf_counter() - started
            _track_steps(steps, out.extra_fields or {})
            ids = [int(t) for t in out.token_ids][:budget]
            text = _cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), stop)
            response_ids += ids
            response_mask += [1] * len(ids)
            lps = list(out.log_probs or [])[: len(ids)]
            logprobs += [float(x) for x in lps] + [0.0] * (len(ids) - len(lps))
            turns += 1
            request = env.prepare_step(text)
            hits: list[list[Hit]] | Exception | None = None
            started = time.perf_counter()
            if request.queries and self.batch_searches:  # with the other episodes' searches of this moment
                hits = await _batcher(env.retriever).search_or_error(request.queries, env.top_k)
            elif request.queries and in_thread:  # do not hold up the other episodes on this event loop
                one = {0: (env.retriever, env.top_k, request.queries)}
                hits = (await loop.run_in_executor(None, search_round, one))[0]
            elif request.queries:
                hits = search_round({0: (env.retriever, env.top_k, request.queries)})[0]
            _, reward, terminated, truncated, info = env.finish_step(request, hits)
            search_s += time.perf_counter() - started
            reward_terms.append(dict(info["reward_terms"]))
            turn_scores.append(float(reward))
            if terminated or truncated:
                final = info
                break
            # encoded on verl's worker threads, as verl's own loops tokenize (the tokenizer releases the GIL,
            # so the other episodes go on meanwhile)
            if render is not None and info["new_text"]:  # tools: the template's markup around the tool message
                messages = env.messages()
                turn = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
                end, reply = reply_text(render, messages, turn, done=False)
                env_ids = await loop.run_in_executor(None, reply_ids, self._encode, ids, end, reply)
            else:
                env_ids = await loop.run_in_executor(None, self._encode, info["new_text"]) if info["new_text"] else []
            response_ids += env_ids
            response_mask += [0] * len(env_ids)
            logprobs += [0.0] * len(env_ids)
        n = self.response_length
        metrics = episode_metrics(final)
        score = float(final["summary"]["return"])
        mask = response_mask[:n]
        if metrics["infra_errors"] > 0:  # the retriever failed: nothing to learn from this episode
            mask, score, turn_scores = [0] * len(mask), 0.0, [0.0] * len(turn_scores)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:n],
            response_mask=mask,
            response_logprobs=logprobs[:n],
            reward_score=score,
            num_turns=2 * turns,
            metrics=AgentLoopMetrics(generate_sequences=generate_s, tool_calls=search_s),
            extra_fields={**steps, "reward_extra_info": {key: metrics[key] for key in REWARD_EXTRA_KEYS},
                          "turn_scores": turn_scores,
                          "searchenv_metrics": metrics, "searchenv_reward_terms": reward_terms},
        )
