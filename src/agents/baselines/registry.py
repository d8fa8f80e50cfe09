"""The reference agents by name (:func:`make_agent`), as the ``eval`` and ``bench`` commands name them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from agents.baselines.episode import Agent
from agents.baselines.llm import DIRECT_PROMPT, FEW_SHOT_EXAMPLE, RAG_PROMPT, LLMAgent
from agents.devices import GenerationSettings, native_bfloat16, resolve_device
from agents.policies.base import ChatPolicy, Policy
from searchenv.utils.loading import is_module_attr, load_attribute

if TYPE_CHECKING:
    import torch

AGENT_NAMES = ("oracle", "heuristic", "random", "direct", "rag", "iterative", "llm", "searcher")
LLM_AGENTS = frozenset({"direct", "rag", "iterative", "llm"})


def make_agent(
    name: str,
    *,
    policy: Policy | ChatPolicy | None = None,
    max_new_tokens: int = 96,
    temperature: float = 0.0,
    seed: int = 0,
    device: str | None = None,
    generation_dtype: str = "auto",
) -> Agent:
    """Build a reference agent by name, or your own as ``module:Class``.

    Args:
        name: One of :data:`AGENT_NAMES`, or ``module:Class`` (the current folder importable): a class
            or factory called with no arguments, or with ``policy=`` when it takes one and a policy
            is given; what it returns must be an agent (``name``, ``max_turns``, ``adapt_protocol``, ``act``).
        policy: The model for ``direct``, ``rag``, ``iterative`` and ``llm`` (``searcher`` loads its own).
        max_new_tokens: Generation cap per turn (LLM agents).
        temperature: Sampling temperature (LLM agents; 0 is greedy).
        seed: Seed of the ``random`` agent.
        device: Where ``searcher`` loads its model (a device name, see :mod:`agents.devices`; None: auto).
        generation_dtype: What ``searcher`` generates from (:func:`searcher_generation`): ``auto`` (a
            bfloat16 copy of the weights on CUDA and where a CPU multiplies bfloat16 natively, else
            the weights), ``float32``, ``bfloat16`` or ``float16``. A policy handed in is left as it is.

    Returns:
        The agent.

    Raises:
        ValueError: For an unknown name, an LLM agent without a policy, or a ``module:Class`` that
            cannot be loaded or does not make an agent.
    """
    from agents.baselines.scripted import HeuristicAgent, OracleAgent, RandomAgent

    if is_module_attr(name):
        return _load_agent(name, policy)
    if name == "oracle":
        return OracleAgent()
    if name == "heuristic":
        return HeuristicAgent()
    if name == "searcher":
        from agents.baselines.searcher import load_searcher

        where = resolve_device(device)
        generation = searcher_generation(generation_dtype, where)  # checked before the model loads
        searcher = load_searcher(device=where)
        searcher.generation = generation
        return LLMAgent(name, searcher, max_new_tokens=max_new_tokens, temperature=temperature)
    if name == "random":
        return RandomAgent(seed=seed)
    if name not in LLM_AGENTS:
        raise ValueError(f"unknown agent {name!r}; known: {', '.join(AGENT_NAMES)}")
    if policy is None:
        raise ValueError(f"agent {name!r} needs a policy (a language model)")
    common: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
    }
    if name == "direct":
        return LLMAgent(name, policy, system_prompt=lambda p: DIRECT_PROMPT, answer_slot=True, max_turns=1, **common)
    if name == "rag":
        return LLMAgent(
            name,
            policy,
            system_prompt=lambda p: RAG_PROMPT,
            first_search=True,
            answer_slot=True,
            max_turns=2,
            **common,
        )
    if name == "iterative":
        return LLMAgent(
            name,
            policy,
            system_prompt=lambda p: f"{p.system_prompt()}\n\nExample:\n{FEW_SHOT_EXAMPLE}",
            **common,
        )
    return LLMAgent(name, policy, **common)


def searcher_generation(generation_dtype: str, device: torch.device | str) -> GenerationSettings:
    """How the packaged searcher generates on ``device``, from the ``generation_dtype`` asked for.

    ``auto`` means what it means for any model (a bfloat16 copy of float32 weights on CUDA, the
    weights elsewhere), except on a CPU that multiplies bfloat16 natively
    (:func:`agents.devices.native_bfloat16`): there the searcher asks for a bfloat16 copy, since its
    answers in bfloat16 were measured on such CPUs (``benchmarks/searcher_cpu.py``).

    Raises:
        ValueError: For a dtype outside ``auto``, ``float32``, ``bfloat16``, ``float16``.
    """
    settings = GenerationSettings(dtype=generation_dtype)
    if settings.dtype == "auto" and native_bfloat16(device):
        return dataclasses.replace(settings, dtype="bfloat16")
    return settings


def _load_agent(spec: str, policy: Policy | ChatPolicy | None) -> Agent:
    """The agent ``module:Class`` makes (see :func:`make_agent`)."""
    import inspect

    target = load_attribute(spec, "agent")
    if not callable(target):
        raise ValueError(f"agent {spec!r} is a {type(target).__name__}, not a class or factory")
    try:
        takes_policy = "policy" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        takes_policy = False
    made = target(policy=policy) if takes_policy and policy is not None else target()
    missing = [a for a in ("name", "max_turns", "adapt_protocol", "act") if not hasattr(made, a)]
    if missing:
        raise ValueError(f"agent {spec!r} made a {type(made).__name__} without {', '.join(missing)} "
                         "(an agent has name, max_turns, adapt_protocol and act: docs/guides/extending.md)")
    return made
