"""Weighted sums of terms (:class:`WeightedReward`, :func:`custom`) and the named presets of ``reward=``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from searchenv.rewards.context import Reward, RewardResult, ScoredReward, StepContext
from searchenv.rewards.published import ArenaReward, R3RAGReward, ReSearchReward, SearchR1FormatReward
from searchenv.rewards.terms import (
    TERMS,
)
from searchenv.utils.registry import Registry


@dataclass(frozen=True)
class WeightedReward(ScoredReward):
    """A weighted sum of named terms, paid as they occur: ``r = sum_i w_i * term_i(ctx, **params_i)``.

    Signals are the unweighted term values.

    Args:
        terms: Term name -> (weight, keyword parameters). Names are keys of :data:`TERMS`.
    """

    terms: Mapping[str, tuple[float, Mapping[str, Any]]]

    def __post_init__(self) -> None:
        for name, spec in self.terms.items():
            if name not in TERMS:
                raise ValueError(f"unknown reward term {name!r}; known terms: {', '.join(sorted(TERMS))}")
            if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping)):
                raise ValueError(f"term {name!r}: expected (weight, params dict), got {spec!r}")
            weight = spec[0]
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise ValueError(f"term {name!r}: weight must be a finite number, got {weight!r}")

    def score(self, ctx: StepContext) -> RewardResult:
        """Score one step with contributions and raw signals."""
        raw = {name: float(TERMS[name](ctx, **params)) for name, (_, params) in self.terms.items()}
        parts = {name: float(w) * raw[name] for name, (w, _) in self.terms.items()}
        return RewardResult(sum(parts.values()), parts, raw)


def custom(weights: Mapping[str, float | Mapping[str, Any]], **params: Mapping[str, Any]) -> WeightedReward:
    """A weighted sum from a plain dict.

    Examples: ``custom({"outcome": 1, "cost": 0.05})``;
    ``custom({"outcome": {"weight": 1, "metric": "f1"}, "relevance": {"weight": 0.2,
    "verifier": "answer-in-doc"}})``; or ``custom({"outcome": 1}, outcome={"metric": "f1"})``.

    Args:
        weights: Term name -> weight, or term name -> ``{"weight": w, **term parameters}``.
        **params: Term name -> keyword parameters for that term.

    Returns:
        The reward.

    Raises:
        ValueError: For unknown terms, parameters without a weight, or a missing weight.
    """
    unknown = set(params) - set(weights)
    if unknown:
        raise ValueError(f"parameters given for terms without a weight: {sorted(unknown)}")
    spec: dict[str, tuple[float, Mapping[str, Any]]] = {}
    for name, w in weights.items():
        if isinstance(w, Mapping):
            if "weight" not in w:
                raise ValueError(f"term {name!r}: a dict spec needs a 'weight' key, got {dict(w)!r}")
            opts = {k: v for k, v in w.items() if k != "weight"}
            clash = set(opts) & set(params.get(name, {}))
            if clash:
                raise ValueError(f"term {name!r}: parameters {sorted(clash)} given twice")
            opts.update(params.get(name, {}))
            spec[name] = (_weight(name, w["weight"]), opts)
        else:
            spec[name] = (_weight(name, w), dict(params.get(name, {})))
    return WeightedReward(spec)


def _weight(name: str, w: object) -> float:
    if isinstance(w, bool) or not isinstance(w, int | float):
        raise ValueError(f"term {name!r}: weight must be a number, got {w!r}")
    return float(w)


def _default(**options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options}), "format": (0.1, {})})


def _search_r1(**options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options})})


def _frugal(search_cost: float = 0.1, **options: Any) -> Reward:
    return WeightedReward(
        {"outcome": (1.0, {"metric": "em", **options}), "cost": (float(search_cost), {"per_search": 1.0})}
    )


def _process(weight: float = 0.5, verifier: str | Callable[[StepContext], float] = "gold-evidence") -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em"}), "relevance": (float(weight), {"verifier": verifier})})


def _shaped(gamma: float = 1.0, **options: Any) -> Reward:
    return WeightedReward({"outcome": (1.0, {"metric": "em", **options}), "shaping": (1.0, {"gamma": gamma})})


def _r3_rag_normalized(**options: Any) -> Reward:
    return R3RAGReward(normalize=True, **options)


#: The named rewards of ``reward="name"``, each a class or factory taking the preset's options;
#: :func:`register_preset` adds one.
PRESETS: Registry[Callable[..., Reward]] = Registry("reward preset", {
    # EM at the answering step, -0.1 per malformed turn.
    "default": _default,
    # Search-R1 (Jin et al., 2025): exact match of the final answer, nothing else.
    "search-r1": _search_r1,
    # Search-R1 v0.3: EM with format credit (qa_em_format.py table).
    "search-r1-format": SearchR1FormatReward,
    # ReSearch (Chen et al., 2025): F1, 0.1 for a well-formed wrong answer, 0 if malformed.
    "research": ReSearchReward,
    # R3-RAG (Li et al., 2025): relevance scaled by outcome, published per-step sum.
    "r3-rag": R3RAGReward,
    # R3-RAG with mean relevance: a correct answer always out-earns a wrong one.
    "r3-rag-normalized": _r3_rag_normalized,
    # FrugalRAG-style (Java et al., 2025): EM minus 0.1 per search.
    "frugal": _frugal,
    # EM plus 0.5 x share of gold evidence newly retrieved (sums to at most 0.5 per episode).
    "process": _process,
    # EM plus potential-based shaping on evidence recall (sums to 0 over an episode).
    "shaped": _shaped,
    # ARENA (Ren et al., 2025): format + EM + citation F1 + a bonus when all hold (protocol="arena").
    "arena": ArenaReward,
}, callables=True)


def register_preset(name: str, factory: Callable[..., Reward]) -> None:
    """Make a reward selectable as ``reward="name"``: ``factory(**options)`` builds it.

    Raises:
        TypeError: If ``factory`` is not callable.
        ValueError: If ``name`` is not a non-empty string.
    """
    PRESETS.register(name, factory)


def preset_names() -> list[str]:
    """Names accepted by ``reward="name"``."""
    return PRESETS.names()


def preset(name: str, **options: Any) -> Reward:
    """Build a preset with options, e.g. ``preset("r3-rag", verifier=JudgeVerifier(judge))``.

    Args:
        name: A preset name (see :func:`preset_names`).
        **options: Keyword arguments of that preset's reward class or factory.

    Returns:
        The reward.

    Raises:
        ValueError: For an unknown name.
        TypeError: For an option the preset does not take.
    """
    return PRESETS[name](**options)  # an unknown name: UnknownNameError (a ValueError) naming the presets


def get_reward(spec: str | Reward | Mapping[str, float | Mapping[str, Any]]) -> Reward:
    """Resolve ``reward=`` from ``gymnasium.make``: a preset name, a weights dict, or a Reward callable.

    Raises:
        ValueError: For an unknown preset name or bad weights.
        TypeError: For anything else.
    """
    if isinstance(spec, str):
        return preset(spec)
    if isinstance(spec, Mapping):
        return custom(spec)
    if callable(spec):
        return spec
    raise TypeError(f"reward must be a preset name, a dict of term weights or a callable, got {type(spec).__name__}")
