"""The ``info`` dict of a step: the episode summary under ``"summary"``, its old key readable for one release.

Gymnasium's ``RecordEpisodeStatistics`` (and stable-baselines3's ``Monitor``) write their own
``info["episode"]`` and refuse an environment that already has one, so the environment's end-of-episode
summary is ``info["summary"]``. Until the next release, reading ``info["episode"]`` on an info that has no
such key of its own still gives the summary, with a ``DeprecationWarning``; ``"episode" in info`` is False,
so the wrappers see a free key.
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


#: Info keys computed from the gold answers or the gold evidence. A client outside the process (a served
#: session, an engine's generator) sees them only on the step that ends its episode (:func:`client_info`).
ANSWER_DERIVED_KEYS = frozenset({"gold_answers", "em", "f1", "contains", "evidence_recall", SUMMARY_KEY,
                                 "reward_signals"})


def client_info(info: dict[str, Any], *, done: bool) -> dict[str, Any]:
    """What a client outside the process may see of a step's ``info``: the one place that decides it.

    While the episode runs, nothing derived from the answer leaves: the gold answers, EM/F1/contains,
    evidence recall, the summary (which repeats them) and the raw reward signals (relevance to the gold
    evidence, paid at the end under some presets) are dropped (:data:`ANSWER_DERIVED_KEYS`). The step's
    reward and its terms stay: they are the training signal. On the step that ends the episode the
    info is returned whole.

    Args:
        info: A step's info (:meth:`~searchenv.env.SearchQAEnv.step`).
        done: Whether this step ended the episode (terminated or truncated).

    Returns:
        A new plain dict.
    """
    if done:
        return dict(info)
    return {k: v for k, v in info.items() if k not in ANSWER_DERIVED_KEYS}
