"""SearchQA-v0 as a SkyRL-gym environment (``skyrl_gym.envs.base_text_env.BaseTextEnv``).

SkyRL's generator builds one environment per trajectory with ``skyrl_gym.make(env_class,
env_config=..., extras=<the dataset row>)``, calls ``init(prompt)``, then ``step(model_text)``
until ``done``. :class:`SearchQASkyRLEnv` runs a :class:`~searchenv.env.SearchQAEnv` underneath,
so the protocol, the reward terms and the answer parsing (from the model's own last turn only,
not from the chat that holds retrieved documents) are this package's::

    from searchenv.integrations.skyrl import register

    register()  # as "searchqa", in the trainer's entry point (Ray workers import it too)
    env = skyrl_gym.make("searchqa", env_config={"retriever": "runs/idx", "reward": "r3-rag"},
                         extras={"question": "...", "answers": ["..."], "evidence_ids": ["d3"]})

``env_config`` (SkyRL's ``environment.skyrl_gym.searchqa`` section; a dict, an OmegaConf config,
or the typed section SkyRL's trainer passes, :class:`agents.integrations.skyrl.SearchQAEnvConfig`):
``retriever`` (index folder, server URL, or ``bm25``/``dense`` with ``corpus``), ``corpus``,
``protocol`` (``search-r1``), ``reward`` (a preset name or ``{term: weight}``), ``top_k`` (3),
``max_turns`` (4), ``max_doc_chars`` (1500). The index is opened once per process and shared by
every environment over it, and a closed environment (SkyRL closes each at the end of its
trajectory) is reused by the next one with the same settings: SkyRL builds one per trajectory.

``extras`` (the dataset row, read by :func:`searchenv.tasks.rows.example_from_row`): the question
as ``question`` (or ``extra_info.question``), gold answers as ``answers`` or Search-R1/SkyRL's
``reward_spec.ground_truth.target``, and optionally ``evidence_ids`` (for evidence recall and
relevance rewards) and ``id``. ``max_turns`` in the row
overrides the config's.

``init`` returns the protocol's own system and user messages for the question (the instructions
must match what the environment parses); each ``step`` returns the environment's reply as a
``user`` message (under ``tools``: the ``tool`` message with the call's id, or a ``user``
message after a turn with no readable call, as :meth:`SearchQAEnv.messages` has them), the
step's shaped reward, ``done`` when the agent answered or ran out of turns,
and as ``metadata`` the step's ``info`` (action type, queries, document ids, reward terms and, at
the end only, the gold answers, EM, F1 and the episode summary: :func:`searchenv.client_view.client_info`).
:meth:`~SearchQASkyRLEnv.get_metrics` gives :func:`searchenv.metrics.episode_metrics`, which SkyRL
averages over episodes. Needs ``skyrl-gym`` (``pip install 'searchenv[skyrl]'``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from searchenv.client_view import client_info
from searchenv.env import SearchQAEnv
from searchenv.idle_envs import IdleEnvs
from searchenv.metrics import episode_metrics
from searchenv.tasks.rows import example_from_row

#: The name :func:`register` registers by default.
ENV_ID = "searchqa"
_CONFIG_KEYS = frozenset({"retriever", "corpus", "protocol", "reward", "top_k", "max_turns", "max_doc_chars"})
_lock = threading.Lock()
#: Closed environments per settings, reused by the next trajectories (SkyRL builds one env per trajectory).
_POOL = IdleEnvs()
_SETTINGS: dict[int, tuple[Any, dict[str, Any], str]] = {}
#: (settings key, a row's max_turns) -> those settings with it, and their pool key. SkyRL's generator
#: writes its max_turns into every row, so this is the common path, and a pool key is a JSON dump.
_WITH_TURNS: dict[tuple[str, int], tuple[dict[str, Any], str]] = {}


def _plain(config: Any) -> dict[str, Any]:
    """An OmegaConf config, a mapping or a config dataclass as a plain dict.

    SkyRL's trainer hands over its typed section (``environment.skyrl_gym.searchqa``, a dataclass:
    see :mod:`agents.integrations.skyrl`); its ``None`` fields leave the environment's defaults.
    """
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {key: value for key, value in dataclasses.asdict(config).items() if value is not None}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            return dict(OmegaConf.to_container(config, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - omegaconf comes with skyrl-gym
        pass
    if not isinstance(config, Mapping):
        raise TypeError(f"env_config must be a mapping, got {type(config).__name__}")
    return dict(config)


def _settings(env_config: Any) -> tuple[dict[str, Any], str]:
    """``env_config`` checked, as a plain dict and a pool key; cached per config object (SkyRL passes one)."""
    cached = _SETTINGS.get(id(env_config))
    if cached is not None and cached[0] is env_config:
        return cached[1], cached[2]
    config = _plain(env_config)
    unknown = set(config) - _CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown env_config key(s) {sorted(unknown)}; known: {sorted(_CONFIG_KEYS)}")
    key = IdleEnvs.key(config)
    with _lock:
        if len(_SETTINGS) >= 64:
            _SETTINGS.clear()
        _SETTINGS[id(env_config)] = (env_config, config, key)  # holding the object keeps its id unique
    return config, key


def _with_turns(config: dict[str, Any], key: str, max_turns: int) -> tuple[dict[str, Any], str]:
    """``config`` with a row's ``max_turns``, and its pool key; cached (SkyRL puts max_turns in every row)."""
    cached = _WITH_TURNS.get((key, max_turns))
    if cached is not None:
        return cached
    turned = {**config, "max_turns": max_turns}
    out = (turned, IdleEnvs.key(turned))
    with _lock:
        if len(_WITH_TURNS) >= 256:
            _WITH_TURNS.clear()
        _WITH_TURNS[(key, max_turns)] = out
    return out


class SearchQASkyRLEnv(BaseTextEnv):
    """One SearchQA-v0 episode behind SkyRL-gym's ``BaseTextEnv`` (see the module docstring).

    Args:
        env_config: Environment settings (``retriever``, ``corpus``, ``protocol``, ``reward``,
            ``top_k``, ``max_turns``, ``max_doc_chars``).
        extras: The dataset row: question, gold answers, optional evidence ids.

    Raises:
        ValueError: On an unknown setting, a row without question or answers, or a retriever
            that cannot be opened.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        config, key = _settings(env_config)
        row = extras or {}
        self.example = example_from_row(row)
        if "max_turns" in row:
            config, key = _with_turns(config, key, int(row["max_turns"]))
        self._key, env = _POOL.acquire(config, self.example, key)  # a closed env with these settings, if any
        self.env: SearchQAEnv | None = env
        self.max_turns = env.max_turns
        self.final_info: dict[str, Any] | None = None

    def init(self, prompt: Any = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start the episode; the protocol's system and user messages for the question.

        Args:
            prompt: The dataset's prompt (replaced: the instructions must match the protocol).

        Returns:
            The messages and ``{"example_id": ...}``.
        """
        env = self.env
        if env is None:
            raise RuntimeError("this environment was closed")
        _, info = env.reset(options={"example": self.example})
        self.turns = 0
        self.final_info = None
        return env.messages(), {"example_id": info["example_id"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One model turn: the environment's reply, the shaped reward, done, and what happened."""
        self.turns += 1
        env = self.env
        if env is None:
            raise RuntimeError("this environment was closed")
        before = len(env.messages()) if env.protocol.native_tools else 0
        _, reward, terminated, truncated, info = env.step(action)
        done = bool(terminated or truncated)
        if done:
            self.final_info = info
            observations = []
        elif env.protocol.native_tools:  # the tool message answering the call (SkyRL's template renders it)
            observations = env.messages()[before + 1 :]
        else:
            text = info["new_text"]
            observations = [{"role": "user", "content": text}] if text else []
        # The step's info is the metadata, less what derives from the answer until the episode ends.
        # BaseTextEnvStepOutput is a TypedDict, a plain dict at run time: a literal is the cheaper way to make one.
        out: BaseTextEnvStepOutput = {"observations": observations, "reward": float(reward), "done": done,
                                      "metadata": client_info(info, done=done), "postprocessed_action": None}
        return out

    def get_metrics(self) -> dict[str, Any]:
        """:func:`searchenv.metrics.episode_metrics` of the finished episode (empty before it ends)."""
        return episode_metrics(self.final_info) if self.final_info is not None else {}

    def close(self) -> None:
        """Hand the underlying environment back for the next trajectory (SkyRL calls this at the end)."""
        env, self.env = self.env, None
        if env is not None:
            _POOL.release(self._key, env)


def register(env_id: str = ENV_ID) -> None:
    """Register :class:`SearchQASkyRLEnv` with ``skyrl_gym`` under ``env_id`` (again is a no-op)."""
    import skyrl_gym

    if env_id in skyrl_gym.registry:
        return
    skyrl_gym.register(id=env_id, entry_point="searchenv.integrations.skyrl:SearchQASkyRLEnv")
