"""SkyRL: SearchQA-v0 in SkyRL's trainer (``skyrl.train``), with a ``searchqa`` section in its config.

SkyRL's config is typed: ``SkyRLTrainConfig.from_cli_overrides`` builds nested dataclasses and
rejects a key that none of them declares (``environment.skyrl_gym.searchqa.retriever=...`` gives
``Invalid fields {'searchqa'} for SkyRLGymConfig``), and it refuses Hydra's ``+`` prefix ("To add
custom config fields, subclass the relevant config dataclass"). This module does that, as SkyRL's
own integrations do:

- :class:`SearchQAEnvConfig`, the ``environment.skyrl_gym.searchqa`` section: the keys
  :class:`searchenv.integrations.skyrl.SearchQASkyRLEnv` reads (``retriever``, ``corpus``,
  ``protocol``, ``reward``, ``top_k``, ``max_turns``, ``max_doc_chars``); ``None`` leaves the
  environment's default;
- ``SearchQASkyRLGymConfig`` (``SkyRLGymConfig`` with ``searchqa``), ``SearchQAEnvironmentConfig``
  (``EnvironmentConfig`` with it, ``env_class`` ``searchqa``) and ``SearchQATrainConfig``
  (``SkyRLTrainConfig`` with that environment): SkyRL's generator hands
  ``getattr(cfg.environment.skyrl_gym, env_class)``, the section, to ``skyrl_gym.make`` as
  ``env_config``;
- :func:`main`, the training entry point: it parses the command line with ``SearchQATrainConfig``,
  runs SkyRL's ``validate_cfg``, starts Ray and runs SkyRL's ``BasePPOExp`` in a Ray task that first
  registers the environment (``searchenv.integrations.skyrl.register``), as SkyRL's examples do
  with theirs. ``python -m agents.integrations.skyrl key=value ...`` (see docs/engines/skyrl.md).

The classes are built on first use (:func:`config_classes`), so importing this module does not
import SkyRL. Needs SkyRL's trainer package (``skyrl``, Python 3.12+) and ``skyrl-gym``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any

#: SkyRL's ``main_base`` dispatches to the module named by this key before it parses its config.
OVERRIDE_ENTRYPOINT = "trainer.override_entrypoint"
#: The keys of the ``searchqa`` section, and of SearchQASkyRLEnv's ``env_config``.
SECTION_KEYS = ("retriever", "corpus", "protocol", "reward", "top_k", "max_turns", "max_doc_chars")


@dataclasses.dataclass
class SearchQAEnvConfig:
    """``environment.skyrl_gym.searchqa``: the environment's settings (``None``: its default).

    Attributes:
        retriever: An index folder, a ``searchenv serve`` URL, or ``bm25``/``dense`` with ``corpus``.
        corpus: A corpus file, for a retriever built at start-up.
        protocol: The action format (``search-r1`` by default).
        reward: A reward preset name, or ``{term: weight}``.
        top_k: Passages per query.
        max_turns: Turn budget (SkyRL's generator writes ``generator.max_turns`` into every row,
            which then overrides this).
        max_doc_chars: Characters kept of each passage.
    """

    retriever: str | None = None
    corpus: str | None = None
    protocol: str | None = None
    reward: Any = None
    top_k: int | None = None
    max_turns: int | None = None
    max_doc_chars: int | None = None

    def to_env_config(self) -> dict[str, Any]:
        """The settings that are set, as the plain ``env_config`` dict the environment takes."""
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@functools.cache
def config_classes() -> dict[str, Any]:
    """SkyRL's config dataclasses extended with the ``searchqa`` section (built once, on first use).

    Returns:
        ``{"section": SearchQAEnvConfig-on-SkyRL's-BaseConfig, "skyrl_gym": ..., "environment": ...,
        "train": SearchQATrainConfig}``.

    Raises:
        ImportError: If SkyRL's trainer package is not installed.
    """
    from skyrl.train.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig
    from skyrl.train.config.config import BaseConfig

    section: Any = dataclasses.dataclass(type("SearchQAEnvConfig", (SearchQAEnvConfig, BaseConfig), {
        "__doc__": SearchQAEnvConfig.__doc__, "__module__": __name__}))
    gym: Any = dataclasses.dataclass(type("SearchQASkyRLGymConfig", (SkyRLGymConfig,), {
        "__annotations__": {"searchqa": section}, "searchqa": dataclasses.field(default_factory=section),
        "__doc__": "SkyRL's ``SkyRLGymConfig`` with the ``searchqa`` section.", "__module__": __name__}))
    environment: Any = dataclasses.dataclass(type("SearchQAEnvironmentConfig", (EnvironmentConfig,), {
        "__annotations__": {"env_class": str, "skyrl_gym": gym},
        "env_class": "searchqa", "skyrl_gym": dataclasses.field(default_factory=gym),
        "__doc__": "SkyRL's ``EnvironmentConfig``, ``env_class`` ``searchqa`` and the extended ``skyrl_gym``.",
        "__module__": __name__}))
    train: Any = dataclasses.dataclass(type("SearchQATrainConfig", (SkyRLTrainConfig,), {
        "__annotations__": {"environment": environment}, "environment": dataclasses.field(default_factory=environment),
        "__doc__": "SkyRL's ``SkyRLTrainConfig`` with the SearchQA environment section.", "__module__": __name__}))
    return {"section": section, "skyrl_gym": gym, "environment": environment, "train": train}


def parse(args: list[str]) -> Any:
    """A ``SearchQATrainConfig`` from command-line overrides (``key.path=value``), as SkyRL parses its own.

    Args:
        args: Overrides such as ``environment.skyrl_gym.searchqa.retriever=http://127.0.0.1:8000``.

    Returns:
        The typed config.

    Raises:
        ValueError: On an unknown key (SkyRL's message) or a ``+`` prefix.
    """
    return config_classes()["train"].from_cli_overrides(list(args))


def parse_command_line(argv: list[str]) -> Any:
    """:func:`parse` of the entry point's arguments, less SkyRL's dispatch key (``trainer.override_entrypoint``).

    Args:
        argv: The command line's overrides.

    Returns:
        The typed config.
    """
    return parse([a for a in argv if not a.startswith(f"{OVERRIDE_ENTRYPOINT}=")])


def _run(cfg: Any) -> None:
    """Register the environment in this (Ray) process, then run SkyRL's experiment."""
    from skyrl.train.entrypoints.main_base import BasePPOExp

    from searchenv.integrations.skyrl import register

    register()
    BasePPOExp(cfg).run()


def main(argv: list[str] | None = None) -> None:
    """SkyRL training on SearchQA-v0: parse, validate, start Ray, run the experiment in a Ray task.

    Run as ``python -m agents.integrations.skyrl key=value ...``, or through SkyRL's own entry
    point where it dispatches (SkyRL after 0.4.0): ``python -m skyrl.train.entrypoints.main_base
    trainer.override_entrypoint=agents.integrations.skyrl key=value ...``; the dispatch key is
    SkyRL's, not a config field, and is dropped here as SkyRL's own integrations drop it.

    Args:
        argv: Overrides (default: ``sys.argv[1:]``).
    """
    import ray
    from skyrl.train.utils import initialize_ray, validate_cfg

    cfg = parse_command_line(sys.argv[1:] if argv is None else argv)
    validate_cfg(cfg)
    initialize_ray(cfg)
    # the training loop runs in a Ray task, not on the head node, as in SkyRL's main_base
    ray.get(ray.remote(num_cpus=1)(_run).remote(cfg))


if __name__ == "__main__":
    main()
