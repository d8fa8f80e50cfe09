"""The reference agents by name (:func:`make_agent`), as the ``eval`` and ``bench`` commands name them.

Each name is a factory in one :class:`~searchenv.utils.registry.Registry`; :func:`register_agent` adds one
(``module:Class`` needs no registration: :func:`make_agent` loads it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.baselines.episode import Agent
from agents.baselines.llm import DIRECT_PROMPT, FEW_SHOT_EXAMPLE, RAG_PROMPT, LLMAgent
from agents.devices import GenerationSettings, native_bfloat16, resolve_device
from agents.policies.base import ChatPolicy, Policy
from searchenv.utils.loading import is_module_attr, load_attribute
from searchenv.utils.registry import Registry

if TYPE_CHECKING:
    import torch

#: The built-in agents, in the order the commands list them.
AGENT_NAMES = ("oracle", "oracle-plan", "heuristic", "random", "direct", "rag", "iterative", "llm", "searcher")
#: The built-in agents that need a policy (a language model).
LLM_AGENTS = frozenset({"direct", "rag", "iterative", "llm"})


@dataclass(frozen=True)
class AgentSettings:
    """What :func:`make_agent` was asked for, handed to the agent's factory (see its arguments)."""

    name: str
    policy: Policy | ChatPolicy | None = None
    max_new_tokens: int = 96
    temperature: float = 0.0
    seed: int = 0
    device: str | None = None
    generation_dtype: str = "auto"


#: ``factory(settings) -> Agent``.
AgentFactory = Callable[[AgentSettings], Agent]


def _oracle(settings: AgentSettings) -> Agent:
    from agents.baselines.scripted import OracleAgent

    return OracleAgent(plan=settings.name == "oracle-plan")


def _heuristic(settings: AgentSettings) -> Agent:
    from agents.baselines.scripted import HeuristicAgent

    return HeuristicAgent()


def _random(settings: AgentSettings) -> Agent:
    from agents.baselines.scripted import RandomAgent

    return RandomAgent(seed=settings.seed)


def _searcher(settings: AgentSettings) -> Agent:
    from agents.baselines.searcher import load_searcher

    where = resolve_device(settings.device)
    generation = searcher_generation(settings.generation_dtype, where)  # checked before the model loads
    searcher = load_searcher(device=where)
    searcher.generation = generation
    return LLMAgent(settings.name, searcher, max_new_tokens=settings.max_new_tokens,
                    temperature=settings.temperature)


def _llm_agent(**options: Any) -> AgentFactory:
    """A factory of an :class:`LLMAgent` over the given policy, with ``options`` (prompt, turns)."""

    def make(settings: AgentSettings) -> Agent:
        if settings.policy is None:
            raise ValueError(f"agent {settings.name!r} needs a policy (a language model)")
        return LLMAgent(settings.name, settings.policy, max_new_tokens=settings.max_new_tokens,
                        temperature=settings.temperature, **options)

    return make


_AGENTS: Registry[AgentFactory] = Registry("agent", {
    "oracle": _oracle,
    "oracle-plan": _oracle,
    "heuristic": _heuristic,
    "random": _random,
    "direct": _llm_agent(system_prompt=lambda p: DIRECT_PROMPT, answer_slot=True, max_turns=1),
    "rag": _llm_agent(system_prompt=lambda p: RAG_PROMPT, first_search=True, answer_slot=True, max_turns=2),
    "iterative": _llm_agent(system_prompt=lambda p: f"{p.system_prompt()}\n\nExample:\n{FEW_SHOT_EXAMPLE}"),
    "llm": _llm_agent(),
    "searcher": _searcher,
}, callables=True)


def register_agent(name: str, factory: AgentFactory) -> None:
    """Make an agent selectable by name in :func:`make_agent`: ``factory(settings)`` builds it.

    Args:
        name: The agent's name (no ``:``, which names ``module:Class``).
        factory: Called with the :class:`AgentSettings` of each :func:`make_agent` call.

    Raises:
        TypeError: If ``factory`` is not callable.
        ValueError: If ``name`` is empty or holds a ``:``.
    """
    if isinstance(name, str) and ":" in name:
        raise ValueError(f"an agent name cannot hold ':' (module:Class is loaded, not registered), got {name!r}")
    _AGENTS.register(name, factory)


def agent_names() -> list[str]:
    """Every name :func:`make_agent` takes (the built-ins and those registered), sorted."""
    return _AGENTS.names()


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
        name: One of :data:`AGENT_NAMES`, a name given to :func:`register_agent`, or ``module:Class``
            (the current folder importable): a class or factory called with no arguments, or with
            ``policy=`` when it takes one and a policy is given; what it returns must be an agent
            (``name``, ``max_turns``, ``adapt_protocol``, ``act``).
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
        ValueError: For an unknown name (:class:`~searchenv.errors.UnknownNameError`, naming the agents),
            an LLM agent without a policy, or a ``module:Class`` that cannot be loaded or does not make an agent.
    """
    if is_module_attr(name):
        return _load_agent(name, policy)
    factory = _AGENTS[name]
    return factory(AgentSettings(name, policy, max_new_tokens, temperature, seed, device, generation_dtype))


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
