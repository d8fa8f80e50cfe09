"""Ray: SearchQA-v0 environment workers as actors, and the retriever as a Ray Serve deployment.

Past one machine the environment side scales out on Ray:

- :class:`RayVectorEnv`: ``num_workers`` Ray actors, each a
  :class:`~searchenv.vector.SearchQAVectorEnv` of ``envs_per_worker`` sub-environments (one
  ``search_batch`` per worker and step), presented to the driver as ONE Gymnasium vector
  environment: actions are split across the workers, stepped in parallel, and the observations,
  rewards and infos put back together in order. Each worker opens its own index, or all of them
  search one shared server (a ``searchenv serve`` URL or :class:`ServeRetriever`).
- :func:`retriever_app` / :class:`ServeRetriever`: a retriever behind Ray Serve, with
  ``num_replicas`` copies and request batching across callers (``@serve.batch``: concurrent
  ``search_batch`` calls become one call per distinct ``k`` on a replica), for clusters where one
  server process is not enough. :class:`ServeRetriever` is a
  :class:`~searchenv.retrievers.base.Retriever` over the deployment's handle, so an environment
  (or a Ray worker) takes it as ``retriever=``::

    import ray
    from ray import serve
    from agents.integrations.ray import RayVectorEnv, ServeRetriever, retriever_app

    ray.init()
    handle = serve.run(retriever_app("indexes/wiki18-bm25", num_replicas=4), name="retriever")
    envs = RayVectorEnv(8, 64, task="data/hotpot_train.jsonl", retriever=ServeRetriever(handle))
    obs, infos = envs.reset(seed=0)

Needs ``ray[serve]`` (``pip install 'searchenv[ray]'``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from ray import serve

from searchenv.retrievers.base import Hit, RetrieverError, check_k
from searchenv.vector import SearchQAVectorEnv


class _EnvWorker:
    """One actor: a :class:`SearchQAVectorEnv` (remote methods mirror its API)."""

    def __init__(self, num_envs: int, autoreset_mode: str, env_kwargs: Mapping[str, Any]) -> None:
        self.envs = SearchQAVectorEnv(num_envs, autoreset_mode=autoreset_mode, **dict(env_kwargs))

    def spaces(self) -> tuple[Any, Any]:
        return self.envs.single_observation_space, self.envs.single_action_space

    def reset(self, seed: Any, options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
        return self.envs.reset(seed=seed, options=options)

    def step(self, actions: Sequence[str]) -> tuple[Any, ...]:
        return self.envs.step(actions)

    def search_calls(self) -> int:
        return self.envs.search_calls


def _merge_infos(parts: Sequence[Mapping[str, Any]], sizes: Sequence[int]) -> dict[str, Any]:
    """Concatenate Gymnasium vector infos (``key`` arrays with ``_key`` masks) of consecutive workers."""
    keys = {k for p in parts for k in p if not k.startswith("_")}
    out: dict[str, Any] = {}
    for key in sorted(keys):
        values: list[Any] = [part.get(key) for part in parts]
        masks = [np.asarray(part.get("_" + key, np.ones(n, dtype=np.bool_)), dtype=np.bool_) if key in part
                 else np.zeros(n, dtype=np.bool_) for part, n in zip(parts, sizes, strict=True)]
        if any(isinstance(v, Mapping) for v in values):  # nested info dicts (final_info): merge recursively
            out[key] = _merge_infos([v if isinstance(v, Mapping) else {} for v in values], sizes)
        else:
            arrays = [np.asarray(v) if v is not None else None for v in values]
            dtypes = {a.dtype for a in arrays if a is not None}
            dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(object)
            out[key] = np.concatenate([(a if a is not None else _blank(n, dtype)).astype(dtype, copy=False)
                                       for a, n in zip(arrays, sizes, strict=True)])
        out["_" + key] = np.concatenate(masks)
    return out


def _blank(n: int, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Filler for a worker that did not report a key (masked out)."""
    return np.full(n, None, dtype=object) if dtype.kind == "O" else np.zeros(n, dtype=dtype)


class RayVectorEnv(VectorEnv):
    """SearchQA-v0 sub-environments spread over Ray actors, stepped as one vector environment.

    Args:
        num_workers: Ray actors.
        envs_per_worker: Sub-environments per actor (``num_envs`` is their product).
        autoreset_mode: As for :class:`~searchenv.vector.SearchQAVectorEnv`.
        worker_options: Ray actor options (``num_cpus``, ``resources``, ...; default ``num_cpus=1``).
        timeout: Seconds to wait for the workers on any call; a worker that cannot be scheduled
            (fewer free CPUs than ``num_workers`` x ``num_cpus``) raises instead of hanging.
        **env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments for every worker (a retriever
            object must be serializable: an index folder, a server URL or a
            :class:`ServeRetriever`; each worker opens a named index itself).

    Raises:
        ValueError: On a bad count.
    """

    def __init__(self, num_workers: int, envs_per_worker: int, *, autoreset_mode: str = "next_step",
                 worker_options: Mapping[str, Any] | None = None, timeout: float = 600.0,
                 **env_kwargs: Any) -> None:
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        actor: Any = ray.remote(_EnvWorker).options(**{"num_cpus": 1, **dict(worker_options or {})})
        self.workers: list[Any] = [actor.remote(envs_per_worker, autoreset_mode, env_kwargs)
                                   for _ in range(num_workers)]
        self.sizes = [envs_per_worker] * num_workers
        self.timeout = timeout
        self.num_envs = num_workers * envs_per_worker
        try:
            obs_space, act_space = self._get([self.workers[0].spaces.remote()])[0]
        except BaseException:
            self.close_extras()  # nothing left pending in the cluster
            raise
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = spaces.Tuple([obs_space] * self.num_envs)
        self.action_space = spaces.Tuple([act_space] * self.num_envs)
        self.metadata = {"autoreset_mode": autoreset_mode, "render_modes": []}
        self.render_mode = None

    def _split(self, values: Sequence[Any]) -> list[list[Any]]:
        out, pos = [], 0
        for n in self.sizes:
            out.append(list(values[pos : pos + n]))
            pos += n
        return out

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
              ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every worker (seeds and per-environment options are split in order; see the vector env)."""
        if seed is None or isinstance(seed, int):
            starts = np.cumsum([0, *self.sizes[:-1]])
            seeds: list[Any] = [None if seed is None else int(seed + s) for s in starts]
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"seed has {len(seed)} entries for {self.num_envs} sub-environments")
            seeds = self._split(seed)
        if options is None or isinstance(options, Mapping):
            if options and "reset_mask" in options:
                masks = self._split(list(np.asarray(options["reset_mask"], dtype=np.bool_)))
                opts: list[Any] = [{**options, "reset_mask": np.asarray(m)} for m in masks]
            else:
                opts = [options] * len(self.workers)
        else:
            if len(options) != self.num_envs:
                raise ValueError(f"options has {len(options)} entries for {self.num_envs} sub-environments")
            opts = self._split(options)
        results = self._get([w.reset.remote(s, o) for w, s, o in zip(self.workers, seeds, opts, strict=True)])
        obs = tuple(o for part, _ in results for o in part)
        return obs, _merge_infos([info for _, info in results], self.sizes)

    def step(self, actions: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray,
                                                    dict[str, Any]]:
        """Step every worker with its share of ``actions`` in parallel; results in order."""
        if isinstance(actions, str) or len(actions) != self.num_envs:
            raise ValueError(f"step() needs a sequence of {self.num_envs} actions (one string per sub-environment)")
        results = self._get([w.step.remote(a) for w, a in zip(self.workers, self._split(actions), strict=True)])
        obs = tuple(o for r in results for o in r[0])
        rewards = np.concatenate([r[1] for r in results])
        terminated = np.concatenate([r[2] for r in results])
        truncated = np.concatenate([r[3] for r in results])
        return obs, rewards, terminated, truncated, _merge_infos([r[4] for r in results], self.sizes)

    @property
    def search_calls(self) -> int:
        """``search_batch`` calls made by all workers."""
        return int(sum(self._get([w.search_calls.remote() for w in self.workers])))

    def _get(self, refs: list[Any]) -> list[Any]:
        try:
            return list(ray.get(refs, timeout=self.timeout))
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"Ray env workers did not answer within {self.timeout:g} s; if the cluster has fewer free CPUs than "
                f"{len(self.workers)} workers need, lower worker_options['num_cpus']"
            ) from None

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []


@serve.deployment
class RetrieverDeployment:
    """A retriever served by Ray Serve: concurrent calls are batched into one search per ``k``.

    Args:
        retriever: An index folder, a server URL, or ``bm25``/``dense`` with ``corpus``.
        corpus: Corpus file for a named index kind.
        max_batch_size: Most calls gathered into one batch.
        batch_wait_timeout_s: How long the first call of a batch waits for others.
    """

    def __init__(self, retriever: str, corpus: str | None = None, max_batch_size: int = 64,
                 batch_wait_timeout_s: float = 0.003) -> None:
        from searchenv.make import resolve_retriever

        self.retriever = resolve_retriever(retriever, corpus)
        self.search.set_max_batch_size(max_batch_size)  # type: ignore[attr-defined]
        self.search.set_batch_wait_timeout_s(batch_wait_timeout_s)  # type: ignore[attr-defined]
        self.calls = 0

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.003)
    async def search(self, requests: list[tuple[list[str], int]]) -> list[list[list[Hit]]]:
        """One ``search_batch`` per distinct ``k`` for all the batched calls; each call gets its own hits."""
        by_k: dict[int, list[int]] = {}
        for i, (_, k) in enumerate(requests):
            by_k.setdefault(k, []).append(i)
        out: list[list[list[Hit]]] = [[] for _ in requests]
        for k, members in by_k.items():
            queries = [q for i in members for q in requests[i][0]]
            self.calls += 1
            hits = self.retriever.search_batch(queries, k)
            pos = 0
            for i in members:
                n = len(requests[i][0])
                out[i] = [list(h) for h in hits[pos : pos + n]]
                pos += n
        return out

    def search_calls(self) -> int:
        """``search_batch`` calls this replica made."""
        return self.calls


def retriever_app(retriever: str, *, corpus: str | None = None, num_replicas: int = 1, max_batch_size: int = 64,
                  batch_wait_timeout_s: float = 0.003, ray_actor_options: Mapping[str, Any] | None = None) -> Any:
    """A Ray Serve application serving ``retriever`` (run it with ``serve.run(app, name=...)``).

    Args:
        retriever: An index folder, a server URL, or ``bm25``/``dense`` with ``corpus``.
        corpus: Corpus file for a named index kind.
        num_replicas: Copies of the retriever (each loads the index).
        max_batch_size: Most calls batched into one search on a replica.
        batch_wait_timeout_s: Batching window in seconds.
        ray_actor_options: Per-replica Ray options (default ``num_cpus=1``).
    """
    return RetrieverDeployment.options(  # type: ignore[attr-defined]
        num_replicas=num_replicas, ray_actor_options={"num_cpus": 1, **dict(ray_actor_options or {})},
    ).bind(retriever, corpus, max_batch_size, batch_wait_timeout_s)


class ServeRetriever:
    """A :class:`~searchenv.retrievers.base.Retriever` over a :class:`RetrieverDeployment` handle.

    Args:
        handle: The ``DeploymentHandle`` ``serve.run`` returned, or an application name given to
            ``serve.run`` (looked up with ``serve.get_app_handle``).
        timeout: Seconds to wait for one ``search_batch``.
    """

    def __init__(self, handle: Any, timeout: float = 60.0) -> None:
        self.handle = serve.get_app_handle(handle) if isinstance(handle, str) else handle
        self.timeout = timeout

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Search on the deployment (see :class:`~searchenv.retrievers.base.Retriever`)."""
        check_k(k)
        queries = list(queries)
        if not queries:
            return []
        try:
            return list(self.handle.search.remote((queries, k)).result(timeout_s=self.timeout))
        except Exception as exc:  # Ray wraps the replica's error; the env turns this into an infra error
            raise RetrieverError(f"Ray Serve retriever failed: {type(exc).__name__}: {str(exc)[:300]}") from exc
