"""A macro-action view of SearchQA-v0 and a stable-baselines3 PPO controller that learns when to search.

Public API:

- :class:`MacroActionEnv` / :func:`make_macro_env`: Box observations, ``Discrete(4)`` macro-actions
  (search the question, search a next-hop reformulation, answer with the extracted span, answer
  closed-book), the wrapped environment's reward; :func:`frugal_reward` sets the search cost.
- :class:`QuestionEmbedder`, :class:`HashingEncoder`: cached, reduced question embeddings.
- :func:`extract_candidates`, :class:`Candidate`: the answer-span extractor.
- :class:`ControllerConfig`, :func:`train_controller`, :class:`Controller`, :data:`FIXED_POLICIES`,
  :class:`FixedPolicy`, :func:`evaluate_policy`, :func:`compare_with_fixed`: training and evaluation
  (imports stable-baselines3 and torch only when called).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.baselines.rule_reader import (
    Candidate,
    ExtractorWeights,
    capitalized_spans,
    closed_book_guess,
    extract_candidates,
)
from agents.sb3.features import HashingEncoder, QuestionEmbedder
from agents.sb3.wrapper import FEATURE_NAMES, MacroAction, MacroActionEnv, frugal_reward, make_macro_env

if TYPE_CHECKING:
    from agents.sb3.controller import (
        FIXED_POLICIES,
        Controller,
        ControllerConfig,
        FixedPolicy,
        PolicyEval,
        compare_with_fixed,
        evaluate_policy,
        train_controller,
    )

_CONTROLLER = {
    "FIXED_POLICIES",
    "Controller",
    "ControllerConfig",
    "FixedPolicy",
    "PolicyEval",
    "compare_with_fixed",
    "evaluate_policy",
    "train_controller",
}

__all__ = [
    "FEATURE_NAMES",
    "FIXED_POLICIES",
    "Candidate",
    "Controller",
    "ControllerConfig",
    "ExtractorWeights",
    "FixedPolicy",
    "HashingEncoder",
    "MacroAction",
    "MacroActionEnv",
    "PolicyEval",
    "QuestionEmbedder",
    "capitalized_spans",
    "closed_book_guess",
    "compare_with_fixed",
    "evaluate_policy",
    "extract_candidates",
    "frugal_reward",
    "make_macro_env",
    "train_controller",
]


def __getattr__(name: str) -> Any:
    if name in _CONTROLLER:
        from agents.sb3 import controller

        return getattr(controller, name)
    raise AttributeError(f"module 'agents.sb3' has no attribute {name!r}")
