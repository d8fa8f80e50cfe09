"""Deprecated: ``searchenv.info`` held two things, now each in a module named for it.

What a client outside the process sees of a step (``client_info``, ``client_reward``, ``MODES``,
``check_mode``, ``ANSWER_DERIVED_KEYS``, ``REWARD_KEYS``) is :mod:`searchenv.client_view`; the step
info's type and summary key (``StepInfo``, ``SUMMARY_KEY``) are :mod:`searchenv.step_info`. Importing
this module warns; it is removed in the next release.
"""

from __future__ import annotations

import warnings

from searchenv.client_view import (
    ANSWER_DERIVED_KEYS,
    MODES,
    REWARD_KEYS,
    check_mode,
    client_info,
    client_reward,
)
from searchenv.step_info import SUMMARY_KEY, StepInfo

__all__ = ["ANSWER_DERIVED_KEYS", "MODES", "REWARD_KEYS", "SUMMARY_KEY", "StepInfo", "check_mode", "client_info",
           "client_reward"]

warnings.warn("searchenv.info is now searchenv.client_view (what a client sees) and searchenv.step_info (StepInfo, "
              "SUMMARY_KEY); the old path will be removed in the next release", DeprecationWarning, stacklevel=2)
