"""A multi-agent view of SearchQA-v0 episodes (MMOA-RAG): rewriter, selector and generator as cooperating agents.

:class:`MMOARAGEnv` is a PettingZoo AEC environment (``pip install "searchenv[multiagent]"``); it
is imported on first use, so ``import searchenv.multi_agent`` needs no PettingZoo. The episode
logic it wraps, :class:`RoleEpisode`, and the role readers (:mod:`~searchenv.multi_agent.roles`)
need nothing beyond searchenv: batched runners drive them directly. ``docs/reference/multi-agent.md`` is the guide.

Modules: ``roles`` (prompts, output readers, penalties), ``episode`` (:class:`RoleEpisode`),
``aec`` (:class:`MMOARAGEnv`, ``env()``, ``raw_env``; imports PettingZoo).
"""

from __future__ import annotations

from typing import Any

from searchenv.multi_agent.episode import METRIC_REWARDS, RoleEpisode, check_penalties, check_roles
from searchenv.multi_agent.roles import (
    DEFAULT_PENALTIES,
    ROLE_PROMPTS,
    ROLES,
    Selection,
    parse_answer,
    parse_selection,
    parse_sub_queries,
)

__all__ = [
    "DEFAULT_PENALTIES",
    "METRIC_REWARDS",
    "ROLES",
    "ROLE_PROMPTS",
    "MMOARAGEnv",
    "RoleEpisode",
    "Selection",
    "TextObservation",
    "check_penalties",
    "check_roles",
    "env",
    "parse_answer",
    "parse_selection",
    "parse_sub_queries",
    "raw_env",
]

_AEC = ("MMOARAGEnv", "TextObservation", "env", "raw_env")


def __getattr__(name: str) -> Any:
    """The PettingZoo environment (:mod:`searchenv.multi_agent.aec`), imported on first use."""
    if name in _AEC:
        from searchenv.multi_agent import aec

        return getattr(aec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
