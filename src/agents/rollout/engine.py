"""The rollout engine: continuous batching of SearchQA episodes, one ``generate`` and one search round per round."""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agents.policies.base import Policy
from agents.policies.chat import chat_renderer, reply_ids, reply_text
from agents.rollout.records import ProbeStart, RolloutBatch, RolloutStats, TokenEpisode
from agents.rollout.seeds import episode_seed
from searchenv.env import SearchQAEnv, StepRequest
from searchenv.retrievers.base import Hit, Retriever
from searchenv.tasks import QAExample
from searchenv.vector import search_round


@dataclass
class _Live:
    rec: TokenEpisode
    env: SearchQAEnv
    turn: int = 0
    request: StepRequest | None = None


Example = QAExample | str | int | Mapping[str, Any]


class RolloutEngine:
    """Run many episodes concurrently with batched generation and batched retrieval.

    Args:
        policy: Any :class:`~agents.policies.base.Policy` (token-id prompts, per-prompt seeds).
        env: A :class:`~searchenv.env.SearchQAEnv` (shallow copies of it run the concurrent
            episodes, sharing its examples, retriever, protocol and reward), a list of such
            environments (one per concurrent episode), or a zero-argument factory. Gymnasium
            wrappers are looked through (``env.unwrapped``).
        concurrency: Episodes in flight at once (ignored for a list of environments).
        max_new_tokens: Cap on tokens per turn.
        max_total_tokens: Cap on prompt + completion tokens per episode; an episode that reaches
            it ends with ``stop_reason="max_total_tokens"`` (a turn cut by it is not sent to the
            environment; environment text that does not fit is cut).
        max_completion_tokens: Cap on completion tokens (generated and environment) per episode,
            enforced as ``max_total_tokens`` is and ending with the same stop reason (TRL's
            ``max_completion_length``); default no cap beyond ``max_total_tokens``.
        temperature: Sampling temperature (0 for greedy).
        top_p: Nucleus sampling threshold.
        stop: Stop strings; default the environment protocol's (``</search>``, ``</answer>``).
    """

    def __init__(
        self,
        policy: Policy,
        env: SearchQAEnv | Sequence[SearchQAEnv] | Callable[[], SearchQAEnv],
        *,
        concurrency: int = 32,
        max_new_tokens: int = 256,
        max_total_tokens: int = 4096,
        max_completion_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
    ) -> None:
        for name, value in (
            ("concurrency", concurrency),
            ("max_new_tokens", max_new_tokens),
            ("max_total_tokens", max_total_tokens),
            ("max_completion_tokens", 1 if max_completion_tokens is None else max_completion_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(temperature, int | float) or not temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        for attr in ("generate", "encode", "chat_prompt_ids"):
            if not callable(getattr(policy, attr, None)):
                raise TypeError(f"policy must have {attr}() (see agents.policies.base.Policy)")
        self.policy = policy
        self.envs = _env_pool(env, concurrency)
        self.max_new_tokens = max_new_tokens
        self.max_total_tokens = max_total_tokens
        self.max_completion_tokens = max_completion_tokens
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        if isinstance(stop, str):
            raise TypeError("stop must be a sequence of strings, not one string")
        self.stop = tuple(stop) if stop is not None else tuple(self.envs[0].protocol.stop)
        self._hits: dict[int, list[list[Hit]] | Exception] = {}
        self._render = chat_renderer(policy) if self.envs[0].protocol.native_tools else None

    def run(
        self, examples: Sequence[Example], *, group_size: int = 1, seed: int = 0, first_index: int = 0,
        starts: Sequence[ProbeStart | None] | None = None,
    ) -> RolloutBatch:
        """Run ``group_size`` episodes of every example.

        Args:
            examples: Each a :class:`~searchenv.tasks.QAExample` (by id if the environment has it,
                else as a custom question), an example id, an example index, or a dict of
                ``reset`` options.
            group_size: Samples per example (GRPO groups).
            seed: Seeds everything random in the run.
            first_index: Index of the first episode (episode ``k`` is seeded from ``(seed, k)``), so a
                run split into parts reproduces the episodes of one whole run.
            starts: One entry per episode (example-major), a :class:`ProbeStart` to begin from an
                earlier episode's turns and a probe, or ``None`` for a fresh episode.

        Returns:
            The episodes in input order (example-major), with run statistics.
        """
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        if isinstance(first_index, bool) or not isinstance(first_index, int) or first_index < 0:
            raise ValueError(f"first_index must be a non-negative int, got {first_index!r}")
        if isinstance(examples, str | Mapping):
            raise TypeError("examples must be a sequence of examples")
        options = [self._reset_options(ex) for ex in examples]
        stats = RolloutStats(episodes=len(options) * group_size)
        if starts is not None and len(starts) != stats.episodes:
            raise ValueError(f"starts has {len(starts)} entries for {stats.episodes} episodes")
        t_start = time.perf_counter()
        pending = deque(
            (g * group_size + s, g, s, options[g], None if starts is None else starts[g * group_size + s])
            for g in range(len(options)) for s in range(group_size)
        )
        records: list[TokenEpisode | None] = [None] * stats.episodes
        slots: list[_Live | None] = [None] * len(self.envs)
        prompt_cache: dict[str, list[int]] = {}
        while pending or any(slots):
            t0 = time.perf_counter()
            for i, env in enumerate(self.envs):
                while slots[i] is None and pending:
                    live = self._start(env, *pending.popleft(), seed=seed, first_index=first_index,
                                       prompt_cache=prompt_cache)
                    if live.rec.stop_reason:  # the prompt alone fills the token budget
                        records[live.rec.index - first_index] = live.rec
                    else:
                        slots[i] = live
            active = [(i, lv) for i, lv in enumerate(slots) if lv is not None]
            env_s = time.perf_counter() - t0
            stats.environment_seconds += env_s
            if not active:
                continue
            stats.rounds += 1
            gen_s = self._generate_round([lv for _, lv in active], seed)
            stats.generation_seconds += gen_s
            t1 = time.perf_counter()
            stepping = [(i, lv) for i, lv in active if lv.request is not None]
            retr_s = self._search_round([lv for _, lv in stepping], stats)
            stats.retrieval_seconds += retr_s
            for _i, lv in stepping:
                self._finish_step(lv)
            round_env_s = time.perf_counter() - t1 - retr_s
            stats.environment_seconds += round_env_s
            for i, lv in active:
                lv.rec.generation_seconds += gen_s
                lv.rec.environment_seconds += env_s + round_env_s + retr_s
                if lv.rec.stop_reason:
                    records[lv.rec.index - first_index] = lv.rec
                    slots[i] = None
        done = [r for r in records if r is not None]
        if len(done) != stats.episodes:  # pragma: no cover - internal invariant
            raise RuntimeError(f"{stats.episodes - len(done)} episodes did not finish")
        stats.generated_tokens = sum(r.num_generated_tokens for r in done)
        stats.env_tokens = sum(len(r.completion_ids) - r.num_generated_tokens for r in done)
        stats.wall_seconds = time.perf_counter() - t_start
        return RolloutBatch(done, stats)

    # ---- one round -------------------------------------------------------------------------
    def _room(self, rec: TokenEpisode, extra: int = 0) -> int:
        """Tokens the episode may still add (``extra`` of them already planned) under both token caps."""
        used = len(rec.completion_ids) + extra
        room = self.max_total_tokens - len(rec.prompt_ids) - used
        if self.max_completion_tokens is not None:
            room = min(room, self.max_completion_tokens - used)
        return room

    def _reset_options(self, ex: Example) -> dict[str, Any]:
        if isinstance(ex, QAExample):
            env = self.envs[0]
            known = {e.id: e for e in env.examples}
            if known.get(ex.id) == ex:
                return {"example_id": ex.id}
            return {
                "id": ex.id,
                "question": ex.question,
                "answers": list(ex.answers),
                "evidence_ids": list(ex.evidence_ids),
            }
        if isinstance(ex, str):
            return {"example_id": ex}
        if isinstance(ex, int) and not isinstance(ex, bool):
            return {"index": ex}
        if isinstance(ex, Mapping):
            return dict(ex)
        raise TypeError(f"an example must be a QAExample, an id, an index or reset options, got {type(ex).__name__}")

    def _start(
        self, env: SearchQAEnv, index: int, group: int, sample: int, options: dict[str, Any],
        start: ProbeStart | None, *, seed: int, first_index: int, prompt_cache: dict[str, list[int]],
    ) -> _Live:
        index += first_index
        ep_seed = episode_seed(seed, index)
        env.reset(seed=ep_seed, options=options)
        messages = env.messages()[:2]
        key = repr(messages)
        if key not in prompt_cache:
            prompt_cache[key] = [int(t) for t in self.policy.chat_prompt_ids(messages)]
        rec = TokenEpisode(index, group, sample, env.example.id, ep_seed, list(prompt_cache[key]))
        live = _Live(rec, env)
        if self._room(rec) <= 0:
            self._end_early(live)
        elif start is not None:
            self._replay(live, start)
        return live

    def _replay(self, lv: _Live, start: ProbeStart) -> None:
        """Step the environment through ``start.turns`` turns of the source episode, then insert the probe."""
        rec, src = lv.rec, start.source
        if src.example_id != rec.example_id:
            raise ValueError(f"a probe of example {rec.example_id!r} cannot replay an episode of {src.example_id!r}")
        for t in range(start.turns):
            if rec.stop_reason:
                return
            ids, (s0, s1) = list(src.generated_ids[t]), src.turn_spans[t]
            begin = len(rec.completion_ids)
            rec.completion_ids.extend(ids)
            rec.loss_mask.extend([1] * len(ids))
            rec.logprobs.extend(src.logprobs[s0:s1] if s1 - s0 == len(ids) else [math.nan] * len(ids))
            rec.turn_spans.append((begin, len(rec.completion_ids)))
            rec.generated_ids.append(ids)
            rec.turn_texts.append(src.turn_texts[t])
            rec.finish_reasons.append(src.finish_reasons[t])
            rec.replayed_turns += 1
            lv.turn += 1
            lv.request = lv.env.prepare_step(src.turn_texts[t])
            if lv.request.queries:
                found = search_round({0: (lv.env.retriever, lv.env.top_k, lv.request.queries)})[0]
                if found is not None:
                    self._hits[id(lv)] = found
            self._finish_step(lv)
        if rec.stop_reason:
            return
        probe = [int(t) for t in self.policy.encode(start.probe_text)]
        if self._room(rec, len(probe)) <= 0:
            self._end_early(lv)
            return
        begin = len(rec.completion_ids)
        rec.completion_ids.extend(probe)
        rec.loss_mask.extend([0] * len(probe))
        rec.logprobs.extend([0.0] * len(probe))
        rec.probe_span = (begin, len(rec.completion_ids))

    def _generate_round(self, active: list[_Live], seed: int) -> float:
        """One ``generate`` call for every live episode; record the turns; prepare the steps."""
        prompts = [lv.rec.prompt_ids + lv.rec.completion_ids for lv in active]
        budgets = [self._room(lv.rec) for lv in active]
        seeds = [episode_seed(seed, lv.rec.index, lv.turn) for lv in active]
        t0 = time.perf_counter()
        gens = self.policy.generate(
            prompts,
            stop=self.stop,
            max_new_tokens=min(self.max_new_tokens, max(budgets)),
            temperature=self.temperature,
            top_p=self.top_p,
            seed=seeds,
        )
        gen_s = time.perf_counter() - t0
        if len(gens) != len(prompts):
            raise RuntimeError(f"policy returned {len(gens)} generations for {len(prompts)} prompts")
        for lv, gen, budget in zip(active, gens, budgets, strict=True):
            rec = lv.rec
            ids = [int(t) for t in gen.token_ids]
            lps = [float(x) for x in gen.logprobs] if gen.logprobs is not None else [math.nan] * len(ids)
            text, reason = gen.text, gen.finish_reason
            cut = len(ids) > budget or (len(ids) == budget and reason == "length")
            if len(ids) > budget:  # a prefix of a sample is a sample with a smaller limit
                ids, lps, reason = ids[:budget], lps[:budget], "length"
                text = self.policy.decode(ids)
            start = len(rec.completion_ids)
            rec.completion_ids.extend(ids)
            rec.loss_mask.extend([1] * len(ids))
            rec.logprobs.extend(lps)
            rec.turn_spans.append((start, len(rec.completion_ids)))
            rec.generated_ids.append(ids)
            rec.turn_texts.append(text)
            rec.finish_reasons.append(reason)
            lv.turn += 1
            if cut:
                rec.rewards.append(0.0)
                rec.reward_terms.append({})
                self._end_early(lv)
                lv.request = None
            else:
                lv.request = lv.env.prepare_step(text)
        return gen_s

    def _search_round(self, stepping: list[_Live], stats: RolloutStats) -> float:
        """One ``search_batch`` per retriever for all queries of the round; hits stored on the lives."""
        seconds = 0.0

        def count(queries: int, took: float) -> None:
            nonlocal seconds
            seconds += took
            stats.search_calls += 1
            stats.queries += queries

        members = {id(lv): (lv.env.retriever, lv.env.top_k, lv.request.queries)
                   for lv in stepping if lv.request is not None}
        found = search_round(members, on_call=count)
        self._hits = {key: hits for key, hits in found.items() if hits is not None}
        return seconds

    def _finish_step(self, lv: _Live) -> None:
        rec, request = lv.rec, lv.request
        if request is None:  # pragma: no cover - guarded by the caller
            return
        lv.request = None
        _, reward, terminated, truncated, info = lv.env.finish_step(request, self._hits.pop(id(lv), None))
        if self._render is not None and info["new_text"]:  # native tool calls: the template's markup
            messages = lv.env.messages()
            turn = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
            end, reply = reply_text(self._render, messages, turn, done=bool(terminated or truncated))
            new_ids = reply_ids(self.policy.encode, rec.generated_ids[-1], end, reply)
        else:
            new_ids = self.policy.encode(info["new_text"]) if info["new_text"] else []
        room = self._room(rec)
        out_of_tokens = not (terminated or truncated) and len(new_ids) >= room
        new_ids = new_ids[: max(0, room)]
        start = len(rec.completion_ids)
        rec.completion_ids.extend(new_ids)
        rec.loss_mask.extend([0] * len(new_ids))
        rec.logprobs.extend([0.0] * len(new_ids))
        if new_ids:
            rec.env_spans.append((start, len(rec.completion_ids)))
        rec.env_ids.append(new_ids)
        rec.rewards.append(float(reward))
        rec.reward_terms.append(dict(info.get("reward_terms", {})))
        rec.step_infos.append(info)
        rec.infra_error = rec.infra_error or bool(info.get("infra_error"))
        if terminated or truncated:
            rec.terminated, rec.truncated = bool(terminated), bool(truncated)
            rec.stop_reason = "answered" if terminated else "max_turns"
            rec.info = dict(info)
        elif out_of_tokens:
            self._end_early(lv)

    def _end_early(self, lv: _Live) -> None:
        """End an episode at the token budget; the environment reports its final info."""
        rec = lv.rec
        rec.truncated, rec.terminated, rec.stop_reason = True, False, "max_total_tokens"
        rec.info = lv.env.end_episode("max_total_tokens")


def _env_pool(
    env: SearchQAEnv | Sequence[SearchQAEnv] | Callable[[], SearchQAEnv], concurrency: int
) -> list[SearchQAEnv]:
    if isinstance(env, Sequence):
        envs = [_unwrap(e) for e in env]
        if not envs:
            raise ValueError("env must hold at least one environment")
        if len({id(e) for e in envs}) != len(envs):
            raise ValueError("the environments in env must be distinct objects")
        return envs
    if not isinstance(env, gym.Env):
        if not callable(env):
            raise TypeError(f"env must be a SearchQAEnv, a list of them or a factory, got {type(env).__name__}")
        return [_unwrap(env()) for _ in range(concurrency)]
    base = _unwrap(env)
    # Shallow copies share the examples, retriever, protocol and reward; reset() gives each its own state.
    return [base] + [copy.copy(base) for _ in range(concurrency - 1)]


def _unwrap(env: Any) -> SearchQAEnv:
    inner = getattr(env, "unwrapped", env)
    for attr in ("prepare_step", "finish_step", "messages", "reset"):
        if not callable(getattr(inner, attr, None)):
            raise TypeError(f"env must be a SearchQAEnv (with prepare_step/finish_step), got {type(inner).__name__}")
    return inner


def rollout(
    policy: Policy,
    examples: Sequence[Example],
    retriever: Retriever | str = "bm25",
    *,
    env: SearchQAEnv | Sequence[SearchQAEnv] | None = None,
    group_size: int = 1,
    protocol: Any = "search-r1",
    top_k: int = 3,
    max_turns: int = 4,
    reward: Any = "default",
    max_new_tokens: int = 256,
    max_total_tokens: int = 4096,
    max_completion_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    concurrency: int = 64,
    env_kwargs: Mapping[str, Any] | None = None,
    starts: Sequence[ProbeStart | None] | None = None,
) -> RolloutBatch:
    """Run ``group_size`` episodes per example with a :class:`RolloutEngine`.

    Args:
        policy: The policy.
        examples: ``QAExample`` objects (or ids / indices / reset options when ``env`` is given).
        retriever: A retriever object (or ``"bm25"``/``"dense"`` with ``corpus`` in ``env_kwargs``).
        env: Use this environment (or these environments) instead of building one.
        group_size: Samples per example.
        protocol: Action protocol name.
        top_k: Documents per query.
        max_turns: Turn budget per episode.
        reward: Reward preset name, weights or callable.
        max_new_tokens: Cap on tokens per turn.
        max_total_tokens: Cap on prompt + completion tokens per episode.
        max_completion_tokens: Cap on completion tokens per episode (default none).
        temperature: Sampling temperature (0 for greedy).
        top_p: Nucleus sampling threshold.
        seed: Seeds the run.
        concurrency: Episodes in flight at once.
        env_kwargs: More ``SearchQAEnv`` arguments (``max_doc_chars``, ``corpus``, ...).
        starts: Per episode, a :class:`ProbeStart` or ``None`` (see :meth:`RolloutEngine.run`).

    Returns:
        The episodes (example-major) and run statistics.
    """
    if env is None:
        unique: dict[str, QAExample] = {}
        for ex in examples:
            if not isinstance(ex, QAExample):
                raise TypeError("without env=, examples must be QAExample objects")
            unique.setdefault(ex.id, ex)
        env = SearchQAEnv(
            list(unique.values()),
            retriever=retriever,
            protocol=protocol,
            top_k=top_k,
            max_turns=max_turns,
            reward=reward,
            **dict(env_kwargs or {}),
        )
    engine = RolloutEngine(
        policy,
        env,
        concurrency=min(concurrency, max(1, len(examples) * group_size)),
        max_new_tokens=max_new_tokens,
        max_total_tokens=max_total_tokens,
        max_completion_tokens=max_completion_tokens,
        temperature=temperature,
        top_p=top_p,
    )
    return engine.run(examples, group_size=group_size, seed=seed, starts=starts)
