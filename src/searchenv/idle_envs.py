"""Idle environments kept for reuse: engines (SkyRL, verl) build one environment per trajectory.

Building a :class:`~searchenv.env.SearchQAEnv` checks and sizes everything it is given; an engine
that makes one per trajectory pays that thousands of times per step. :class:`IdleEnvs` hands back an
environment that an earlier trajectory with the same settings released, and builds one only when
none is idle; everything runs in the caller's process and threads (no worker processes). Environments
are reset with ``options={"example": ...}``, so which questions one was built with does not matter;
the index behind them is opened once per process anyway (:func:`searchenv.env.resolve_retriever`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from searchenv.env import SearchQAEnv
from searchenv.tasks.example import QAExample
from searchenv.utils.moved import renamed_names


class IdleEnvs(dict[str, list[SearchQAEnv]]):
    """Idle environments per settings key (a dict: key -> idle environments), thread-safe.

    Args:
        max_free: Most idle environments kept per key (more released ones are dropped).
    """

    def __init__(self, max_free: int = 4096) -> None:
        super().__init__()
        self.max_free = max_free
        self._lock = threading.Lock()

    @staticmethod
    def key(settings: Mapping[str, Any]) -> str:
        """The key of ``SearchQAEnv`` keyword arguments (their JSON, keys sorted)."""
        return json.dumps(dict(settings), sort_keys=True, default=repr)

    def acquire(self, settings: Mapping[str, Any], example: QAExample,
                key: str | None = None) -> tuple[str, SearchQAEnv]:
        """An idle environment with these settings, or a new one built over ``[example]``.

        Args:
            settings: ``SearchQAEnv`` keyword arguments (``retriever`` included; default ``bm25``).
            example: A question to build a new environment with (reset it with the episode's own).
            key: ``IdleEnvs.key(settings)``, when the caller has it already.

        Returns:
            The key to :meth:`release` the environment under, and the environment.
        """
        key = self.key(settings) if key is None else key
        free = self.get(key)
        if free:  # list.pop is atomic: no lock on the common path (engines take one env per trajectory)
            try:
                return key, free.pop()
            except IndexError:  # another thread took the last one
                pass
        with self._lock:  # building under the lock: the index is opened once per process
            kwargs = dict(settings)
            return key, SearchQAEnv([example], retriever=kwargs.pop("retriever", "bm25"), **kwargs)

    def release(self, key: str, env: SearchQAEnv) -> None:
        """Hand ``env`` back for the next trajectory with the same settings."""
        free = self.get(key)
        if free is None:
            with self._lock:
                free = self.setdefault(key, [])
        if len(free) < self.max_free:  # list.append is atomic; the bound is approximate under threads
            free.append(env)


# The module was searchenv.envpool and the class EnvPool (not the EnvPool library: no worker processes);
# the old names read for one release.
__getattr__ = renamed_names(__name__, {"EnvPool": (__name__, "IdleEnvs")})
