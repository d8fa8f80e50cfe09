"""The ``info`` dict of a step: the episode summary under ``"summary"``, its old key readable for one release.

Gymnasium's ``RecordEpisodeStatistics`` (and stable-baselines3's ``Monitor``) write their own
``info["episode"]`` and refuse an environment that already has one, so the environment's end-of-episode
summary is ``info["summary"]``. Until the next release, reading ``info["episode"]`` on an info that has no
such key of its own still gives the summary, with a ``DeprecationWarning``; ``"episode" in info`` is False,
so the wrappers see a free key. With the old key, :class:`StepInfo` goes (a plain ``dict`` then).
"""

from __future__ import annotations

import warnings
from typing import Any

#: The key of the end-of-episode summary in a step's info (and, with ``"_summary"``, in a vector info).
SUMMARY_KEY = "summary"
_OLD_KEYS = {"episode": SUMMARY_KEY, "_episode": "_" + SUMMARY_KEY}


class StepInfo(dict[str, Any]):
    """A plain ``dict`` whose missing ``"episode"`` reads ``"summary"`` (deprecated; removed in the next release)."""

    def __missing__(self, key: str) -> Any:
        new = _OLD_KEYS.get(key)
        if new is None or not dict.__contains__(self, new):
            raise KeyError(key)
        warnings.warn(
            f'info["{key}"] is now info["{new}"] (Gymnasium\'s RecordEpisodeStatistics writes info["episode"]); '
            f"the old key is removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self[new]
