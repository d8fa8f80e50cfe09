"""What a client outside the process sees of a step: the one place that decides it.

A served session (OpenEnv) or an engine's generator (SkyRL) shows its client a step's info and
reward. Nothing derived from the answer leaves before the episode ends (:func:`client_info`), and a
server in ``evaluation`` mode shows no reward before then either (:func:`client_reward`).
"""

from __future__ import annotations

from typing import Any

from searchenv.step_info import SUMMARY_KEY

#: Info keys computed from the gold answers or the gold evidence. A client outside the process (a served
#: session, an engine's generator) sees them only on the step that ends its episode (:func:`client_info`).
ANSWER_DERIVED_KEYS = frozenset({"gold_answers", "em", "f1", "contains", "evidence_recall", SUMMARY_KEY,
                                 "reward_signals"})


#: How a served environment shows rewards. ``training``: every step's reward and its terms, the training
#: signal. ``evaluation``: no reward, reward term or metric before the episode ends; the step that ends it
#: carries the episode's return (its terms summed over the episode). A benchmark must use ``evaluation``:
#: under presets that pay for relevance (``process``, ``shaped``) a step's reward tells which documents are
#: gold evidence.
MODES = ("training", "evaluation")
#: Info keys that carry the reward, hidden before the episode ends in evaluation mode.
REWARD_KEYS = frozenset({"reward_terms"})


def check_mode(mode: object) -> str:
    """``mode`` if it is one of :data:`MODES`.

    Raises:
        ValueError: Naming the modes and the value.
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def client_info(info: dict[str, Any], *, done: bool, mode: str = "training") -> dict[str, Any]:
    """What a client outside the process may see of a step's ``info``: the one place that decides it.

    While the episode runs, nothing derived from the answer leaves: the gold answers, EM/F1/contains,
    evidence recall, the summary (which repeats them) and the raw reward signals (relevance to the gold
    evidence, paid at the end under some presets) are dropped (:data:`ANSWER_DERIVED_KEYS`). In
    ``training`` mode the step's reward terms stay: they are the training signal; in ``evaluation`` mode
    they are dropped too (:data:`REWARD_KEYS`). On the step that ends the episode the info is returned
    whole, except that in ``evaluation`` mode ``reward_terms`` are the episode's (:func:`client_reward`).

    Args:
        info: A step's info (:meth:`~searchenv.env.SearchQAEnv.step`).
        done: Whether this step ended the episode (terminated or truncated).
        mode: One of :data:`MODES`.

    Returns:
        A new plain dict.

    Raises:
        ValueError: On an unknown mode.
    """
    check_mode(mode)
    if done:
        out = dict(info)
        if mode == "evaluation":
            out["reward_terms"] = client_reward(0.0, info, done=True, mode=mode)[1]
        return out
    hidden = ANSWER_DERIVED_KEYS | (REWARD_KEYS if mode == "evaluation" else frozenset())
    return {k: v for k, v in info.items() if k not in hidden}


def client_reward(reward: float, info: dict[str, Any], *, done: bool,
                  mode: str = "training") -> tuple[float | None, dict[str, float]]:
    """The reward and reward terms a client outside the process sees for a step.

    ``training``: the step's reward and terms. ``evaluation``: None and no terms before the episode
    ends; on the step that ends it, the episode's return and each term summed over the episode (from
    the info's summary), so a client that adds up its rewards gets the same return in either mode.

    Raises:
        ValueError: On an unknown mode.
    """
    check_mode(mode)
    if mode == "training":
        return float(reward), dict(info.get("reward_terms") or {})
    if not done:
        return None, {}
    summary = info[SUMMARY_KEY]
    return float(summary["return"]), dict(summary["reward_totals"])
