"""Answer normalisation and outcome metrics, as in the SQuAD / HotpotQA evaluation scripts.

Also the episode's numbers for metric loggers (:func:`episode_metrics`) and parse telemetry
(:func:`invalid_share`).

:func:`normalize_answer` lower-cases, removes ASCII punctuation (``string.punctuation``,
without inserting spaces: ``well-known`` becomes ``wellknown``), removes the articles
*a*, *an*, *the* and collapses whitespace, in that order, exactly as the SQuAD v1.1
script does. Accents are kept (``café`` differs from ``cafe``) and numbers are not
rewritten (``1,000`` becomes ``1000``, not ``one thousand``).

Every metric takes the maximum over the gold answers (aliases).

Semantics shared with the official scripts:

- :func:`exact_match`: normalised strings are equal.
- :func:`f1_score`: token-bag F1 between normalised prediction and gold. As in the HotpotQA
  script, when either side normalises to ``yes``, ``no`` or ``noanswer`` only an exact match
  scores.

One deliberate difference: when prediction and gold both normalise to the empty string
(``"the"`` against ``"a"``) F1 is 1.0 as in the SQuAD 2.0 script, where the SQuAD 1.1 script
says 0.0. With that, exact match always implies F1 = 1. The environment's answer guard
(:func:`searchenv.rewards.answer_admissible`) gives no credit to answers that normalise to
nothing anyway.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from searchenv.actions import INVALID_CODES

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_SPECIAL = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Normalise an answer for comparison (SQuAD v1.1 semantics).

    Args:
        text: A predicted or gold answer.

    Returns:
        Lower-case text without ASCII punctuation or articles, single-spaced.

    Raises:
        TypeError: If ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"answer must be a str, got {type(text).__name__}")
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(golds: Sequence[str]) -> Sequence[str]:
    if isinstance(golds, str):
        raise TypeError("golds must be a sequence of strings, not a single string")
    return golds


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0.

    Args:
        prediction: The predicted answer.
        golds: Gold answers (aliases).

    Returns:
        1.0 or 0.0.
    """
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(golds)))


def token_f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """F1 between two token bags (multisets), as in the SQuAD script.

    Two empty bags score 1.0 (SQuAD 2.0); one empty bag scores 0.0.

    Args:
        pred_tokens: Predicted tokens.
        gold_tokens: Gold tokens.

    Returns:
        F1 in [0, 1].
    """
    if not pred_tokens or not gold_tokens:
        return float(len(pred_tokens) == len(gold_tokens))
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Token-level F1 between the normalised prediction and the best gold answer.

    As in the HotpotQA script, when the prediction or a gold answer normalises to
    ``yes``/``no``/``noanswer``, only an exact match scores.

    Args:
        prediction: The predicted answer.
        golds: Gold answers (aliases).

    Returns:
        The best F1 over the gold answers, in [0, 1].
    """
    pred = normalize_answer(prediction)
    best = 0.0
    for g in _golds(golds):
        gold = normalize_answer(g)
        if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
            continue
        best = max(best, token_f1(pred.split(), gold.split()))
    return best


def gold_in_prediction(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if some normalised gold answer occurs in the normalised prediction as whole words.

    This is the "cover exact match" / "accuracy" metric of several search-agent papers, but
    on word boundaries: gold ``Karsk`` is in ``born in Karsk`` and not in ``Karskov``.
    Gold answers that normalise to nothing never match.

    Args:
        prediction: The predicted answer (or any text).
        golds: Gold answers (aliases).

    Returns:
        1.0 or 0.0.
    """
    pred = f" {normalize_answer(prediction)} "
    return float(any(f" {g} " in pred for g in (normalize_answer(x) for x in _golds(golds)) if g))


def answer_in_text(text: str, answers: Sequence[str]) -> bool:
    """Whether any normalised answer occurs as whole words in the normalised ``text``."""
    return gold_in_prediction(text, answers) > 0.0


def answer_substring_in_text(text: str, answers: Sequence[str]) -> bool:
    """Whether any normalised answer is a substring of the normalised ``text``.

    This is Search-R1's ``is_retrieval_correct`` test (plain substring, no word boundaries),
    kept for the ``search-r1-format`` preset so it reproduces the published reward.
    """
    norm = normalize_answer(text)
    return any(a and a in norm for a in (normalize_answer(x) for x in _golds(answers)))


def invalid_share(reasons: Iterable[str | None]) -> dict[str, float]:
    """Parse telemetry: the share of turns that were invalid, by code.

    Args:
        reasons: Each turn's invalid code (``info["invalid_reason"]``), None for a well-formed turn.

    Returns:
        ``{code: turns with it / all turns}`` for each code that occurred, codes in the order of
        :data:`INVALID_CODES` (unknown codes after them); empty when no turn was invalid.
    """
    counts: dict[str, int] = {}
    total = 0
    for reason in reasons:
        total += 1
        if reason is not None:
            counts[str(reason)] = counts.get(str(reason), 0) + 1
    order = {code: i for i, code in enumerate(INVALID_CODES)}
    return {code: counts[code] / total for code in sorted(counts, key=lambda c: (order.get(c, len(order)), c))}


def episode_metrics(final_info: Mapping[str, Any]) -> dict[str, float]:
    """An episode's numbers, flat, for an engine's metric logger (SkyRL, verl, TRL all take these).

    Args:
        final_info: The ``info`` of the step that ended the episode (or of
            :meth:`~searchenv.env.SearchQAEnv.end_episode`).

    Returns:
        ``em``, ``f1``, ``contains``, ``searches``, ``queries``, ``duplicate_queries``, ``turns``,
        ``invalid_turns``, ``infra_errors``, ``answered`` and ``answer_admissible`` (0/1),
        ``return``, ``evidence_recall`` (only when the example has gold evidence),
        ``reward/<term>`` per reward term, and parse telemetry ``invalid/<code>`` for every code
        of :data:`~searchenv.protocols.INVALID_CODES` (the share of the episode's turns with that
        code, 0 for most): every value a float.

    Raises:
        KeyError: If ``final_info`` is not a final info (it has no ``summary``).
    """
    ep = final_info["summary"]
    out = {"em": float(ep["em"]), "f1": float(ep["f1"]), "contains": float(ep["contains"]),
           "searches": float(ep["searches"]), "queries": float(ep["queries"]),
           "duplicate_queries": float(ep["duplicate_queries"]), "turns": float(ep["turns"]),
           "invalid_turns": float(ep["invalid_turns"]), "infra_errors": float(ep["infra_errors"]),
           "answered": float(ep["answered"]), "answer_admissible": float(ep["answer_admissible"]),
           "return": float(ep["return"]), "opens": float(ep["opens"])}
    if ep["evidence_recall"] is not None:
        out["evidence_recall"] = float(ep["evidence_recall"])
    for term, value in ep["reward_totals"].items():
        out[f"reward/{term}"] = float(value)
    reasons = ep.get("invalid_reasons") or {}
    turns = max(1, int(ep["turns"]))
    for code in INVALID_CODES:
        out[f"invalid/{code}"] = float(reasons.get(code, 0)) / turns
    return out
