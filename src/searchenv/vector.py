"""A Gymnasium vector environment for SearchQA-v0 that batches retrieval across sub-environments.

Stepping ``n`` sub-environments one by one would call the retriever ``n`` times per step.
:class:`SearchQAVectorEnv` parses every action first (``prepare_step``), sends the queries of
all sub-environments to ONE ``retriever.search_batch`` call, then completes every step
(``finish_step``), with Gymnasium's autoreset semantics::

    from searchenv.vector import SearchQAVectorEnv

    envs = SearchQAVectorEnv(8, task="synthetic-2hop", retriever="bm25", max_turns=4)
    obs, infos = envs.reset(seed=0)                    # obs: a tuple of 8 transcripts
    obs, rewards, terminated, truncated, infos = envs.step(actions)   # actions: 8 strings

The sub-environments are shallow copies of one :class:`~searchenv.env.SearchQAEnv`, so they
share its examples, retriever (one index in memory), protocol and reward; each keeps its own
episode state. ``gymnasium.make_vec("searchenv:SearchQA-v0", num_envs=8, ...)`` builds one when
the environment's spec names this class as its ``vector_entry_point``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from searchenv.env import SearchQAEnv, StepRequest
from searchenv.retrievers.base import Hit, Retriever, search_or_error
from searchenv.step_info import StepInfo

_K = TypeVar("_K")

#: One member's answer from :func:`search_round`: one hit list per query, the exception of its group's
#: failed ``search_batch`` call (the step becomes an infrastructure error), or None without queries.
SearchResult = list[list[Hit]] | Exception | None

_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
    **{m.value: m for m in AutoresetMode},
}


class SearchQAVectorEnv(VectorEnv):
    """``num_envs`` SearchQA episodes stepped together, with one retrieval call per step.

    ## Spaces
    ``single_observation_space`` / ``single_action_space`` are the sub-environment's
    :class:`~searchenv.spaces.UnicodeText` spaces; the batched spaces are ``Tuple`` spaces of
    them (as Gymnasium batches text spaces): observations are a tuple of strings, actions any
    sequence of ``num_envs`` strings.

    ## Autoreset
    ``autoreset_mode="next_step"`` (Gymnasium's default): after a sub-environment ends, the next
    ``step`` ignores its action, resets it and returns the first observation with reward 0.
    ``"same_step"``: it is reset within the step that ended it; that step's last observation and
    info are in ``infos["final_obs"]`` / ``infos["final_info"]``. ``"disabled"``: reset ended
    sub-environments yourself with ``reset(options={"reset_mask": mask})``.

    ## Info
    Gymnasium's vector layout: ``infos[key]`` is an array over sub-environments and
    ``infos["_" + key]`` says which of them reported ``key``.

    Args:
        num_envs: Number of sub-environments.
        envs: Use these environments instead of building them (``num_envs`` is then ignored).
        autoreset_mode: ``"next_step"``, ``"same_step"``, ``"disabled"`` or an ``AutoresetMode``.
        max_episode_steps: End episodes after this many turns if fewer than ``max_turns`` (what
            ``gymnasium.make_vec(..., max_episode_steps=N)`` passes), with the end-of-episode info.
        **env_kwargs: Arguments of :class:`~searchenv.env.SearchQAEnv` (``task``, ``retriever``, ...).
    """

    def __init__(
        self,
        num_envs: int = 1,
        *,
        envs: Sequence[SearchQAEnv] | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        if isinstance(autoreset_mode, str):
            if autoreset_mode not in _MODES:
                raise ValueError(
                    f"autoreset_mode must be 'next_step', 'same_step' or 'disabled', got {autoreset_mode!r}"
                )
            autoreset_mode = _MODES[autoreset_mode]
        if not isinstance(autoreset_mode, AutoresetMode):
            raise TypeError(f"autoreset_mode must be a str or AutoresetMode, got {type(autoreset_mode).__name__}")
        if envs is not None:
            if env_kwargs:
                raise ValueError(f"env arguments {sorted(env_kwargs)} given together with envs=")
            subs = [getattr(e, "unwrapped", e) for e in envs]
            if not subs or not all(isinstance(e, SearchQAEnv) for e in subs):
                raise TypeError("envs must be a non-empty sequence of SearchQAEnv")
            if len({id(e) for e in subs}) != len(subs):
                raise ValueError("envs must be distinct objects")
        else:
            if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
                raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
            base = SearchQAEnv(**env_kwargs)
            subs = [base] + [copy.copy(base) for _ in range(num_envs - 1)]
        if max_episode_steps is not None:
            if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1:
                raise ValueError(f"max_episode_steps must be a positive integer, got {max_episode_steps!r}")
            for env in subs:
                env.step_limit = max_episode_steps
        self.envs: list[SearchQAEnv] = subs
        self.num_envs = len(subs)
        self.autoreset_mode = autoreset_mode
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None
        self.single_observation_space = max(subs, key=lambda e: e.observation_space.max_length).observation_space
        self.single_action_space = subs[0].action_space
        self.observation_space = spaces.Tuple([self.single_observation_space] * self.num_envs)
        self.action_space = spaces.Tuple([self.single_action_space] * self.num_envs)
        self._needs_reset = np.ones(self.num_envs, dtype=np.bool_)
        self._started = np.zeros(self.num_envs, dtype=np.bool_)
        self._obs: list[str] = [""] * self.num_envs
        #: ``search_batch`` calls made by :meth:`step` (one per retriever per step with queries).
        self.search_calls = 0

    # ---- reset -----------------------------------------------------------------------------
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset sub-environments.

        Args:
            seed: An int (sub-environment ``i`` gets ``seed + i``), one seed per sub-environment, or None.
            options: Reset options for every sub-environment, or one dict per sub-environment. A
                ``"reset_mask"`` boolean array resets only the marked sub-environments.

        Returns:
            The observations (a tuple of transcripts) and the vector info.
        """
        n = self.num_envs
        mask = np.ones(n, dtype=np.bool_)
        per_env: list[dict[str, Any] | None]
        if options is None or isinstance(options, Mapping):
            shared = dict(options or {})
            if "reset_mask" in shared:
                mask = np.asarray(shared.pop("reset_mask"), dtype=np.bool_)
                if mask.shape != (n,):
                    raise ValueError(f"reset_mask must have shape ({n},), got {mask.shape}")
            per_env = [dict(shared) if shared else None] * n
        else:
            if len(options) != n:
                raise ValueError(f"options has {len(options)} entries for {n} sub-environments")
            per_env = [dict(o) if o else None for o in options]
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, int) and not isinstance(seed, bool):
            seeds = [seed + i for i in range(n)]
        elif isinstance(seed, Sequence) and not isinstance(seed, str):
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed has {len(seeds)} entries for {n} sub-environments")
        else:
            raise TypeError(f"seed must be None, an int or one seed per sub-environment, got {seed!r}")
        infos: dict[str, Any] = StepInfo()
        for i in np.flatnonzero(mask):
            self._obs[i], info = self.envs[i].reset(seed=seeds[i], options=per_env[i])
            self._needs_reset[i] = False
            self._started[i] = True
            infos = self._add_info(infos, info, int(i))
        return tuple(self._obs), infos

    # ---- step ------------------------------------------------------------------------------
    def step(
        self, actions: Sequence[str]
    ) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-environment with its action; one ``search_batch`` for all queries.

        Args:
            actions: One model turn (a string) per sub-environment.

        Returns:
            Observations (tuple of str), rewards (float64), terminations, truncations (bool), infos.

        Raises:
            ValueError: If the number of actions is not ``num_envs``.
            RuntimeError: If :meth:`reset` was never called, or (autoreset disabled) a
                sub-environment that ended was not reset.
        """
        n = self.num_envs
        if isinstance(actions, str) or len(actions) != n:
            raise ValueError(f"step() needs a sequence of {n} actions (one string per sub-environment)")
        if not self._started.all():
            raise RuntimeError("call reset() before step()")
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        truncated = np.zeros(n, dtype=np.bool_)
        step_infos: list[dict[str, Any]] = [{} for _ in range(n)]
        requests: dict[int, StepRequest] = {}
        for i in range(n):
            if self._needs_reset[i]:
                if self.autoreset_mode == AutoresetMode.NEXT_STEP:
                    self._obs[i], step_infos[i] = self.envs[i].reset()
                    self._needs_reset[i] = False
                    continue
                raise RuntimeError(f"sub-environment {i} ended; reset it with options={{'reset_mask': ...}}")
            requests[i] = self.envs[i].prepare_step(actions[i])
        hits = self._search(requests)
        infos: dict[str, Any] = StepInfo()
        for i, request in requests.items():
            env = self.envs[i]
            obs, reward, term, trunc, info = env.finish_step(request, hits.get(i))
            rewards[i], terminated[i], truncated[i] = float(reward), term, trunc
            self._obs[i], step_infos[i] = obs, info
            if term or trunc:
                if self.autoreset_mode == AutoresetMode.SAME_STEP:
                    infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                    self._obs[i], step_infos[i] = env.reset()
                else:
                    self._needs_reset[i] = True
        for i in range(n):
            infos = self._add_info(infos, step_infos[i], i)
        return tuple(self._obs), rewards, terminated, truncated, infos

    def _search(self, requests: Mapping[int, StepRequest]) -> dict[int, list[list[Hit]] | Exception]:
        def count(queries: int, seconds: float) -> None:
            self.search_calls += 1

        found = search_round(
            {i: (self.envs[i].retriever, self.envs[i].top_k, r.queries) for i, r in requests.items()}, on_call=count
        )
        return {i: hits for i, hits in found.items() if hits is not None}

    def close_extras(self, **kwargs: Any) -> None:
        """Close the sub-environments."""
        for env in self.envs:
            env.close()


def search_round(
    members: Mapping[_K, tuple[Retriever, int, Sequence[str]]],
    *,
    on_call: Callable[[int, float], None] | None = None,
) -> dict[_K, SearchResult]:
    """The batched search round every multi-episode caller uses: one ``search_batch`` per (retriever, k).

    Members (live episodes) are grouped by retriever object and ``k`` in the order they first
    appear; each group's queries, member after member, go to ONE :func:`~searchenv.retrievers.base.search_or_error`
    call, and the hits are sliced back to their members. A failed call (any exception, a
    malformed answer) becomes every member's result of that group, so each of their steps
    turns into an infrastructure error in ``finish_step``; other groups are unaffected.

    Args:
        members: Per member key: ``(retriever, k, queries)``; a member without queries is not searched.
        on_call: Called after each ``search_batch`` call with its number of queries and its wall
            seconds (slicing included), for the caller's counters.

    Returns:
        Per member key, in the order of ``members``: its hit lists (one fresh list per query),
        the group's exception, or None for a member without queries.
    """
    groups: dict[tuple[int, int], list[_K]] = {}
    for key, (retriever, k, queries) in members.items():
        if queries:
            groups.setdefault((id(retriever), k), []).append(key)
    out: dict[_K, SearchResult] = dict.fromkeys(members)
    for (_, k), keys in groups.items():
        queries = [q for key in keys for q in members[key][2]]
        started = time.perf_counter()
        hits = search_or_error(members[keys[0]][0], queries, k)
        if isinstance(hits, Exception):  # every member's step becomes an infra error
            out.update((key, hits) for key in keys)
        else:
            pos = 0
            for key in keys:
                m = len(members[key][2])
                out[key] = [list(h) for h in hits[pos : pos + m]]
                pos += m
        if on_call is not None:
            on_call(len(queries), time.perf_counter() - started)
    return out
