"""Reference agents and the batched driver that runs any agent through :class:`SearchQAEnv`.

An :class:`Agent` sees a batch of running episodes (:class:`EpisodeState`) and returns one
turn of text for each. :func:`run_agent` drives many episodes at once through ordinary
``SearchQAEnv`` instances: each round it asks the agent for the turns of every active episode
in one call (one batched ``policy.generate`` for the LLM agents), parses them with
``env.prepare_step``, gathers every query of every episode into one
``retriever.search_batch`` call and completes the steps with ``env.finish_step``. Scores,
rewards and transcripts therefore come from the environment itself, exactly as for a
trained policy.

Agents (see :func:`make_agent`):

``oracle``, ``heuristic`` and ``random``
    Scripted, no model (:mod:`agents.baselines.scripted`). ``heuristic`` is the strongest
    non-learned baseline: question search, the rule-based reader (:mod:`agents.baselines.rule_reader`), a
    rule-built follow-up search per bridge, and an extracted answer.
``direct``
    An LLM answers at once, no search. Its turn is ``<answer>`` followed by the model's
    continuation up to ``</answer>`` (or, if the model never closes it, its first line).
``rag``
    One search with the question itself, then the LLM answers from the information in the
    same answer-slot way as ``direct``.
``iterative``
    A prompted search-and-reason loop (IRCoT / ReAct style): the protocol's own instructions
    plus one worked example of the format, written by us, then free generation up to the
    protocol's stop strings, for up to ``max_turns`` turns.
``llm``
    Any policy with only the protocol's own system prompt (no few-shot), free generation.
``searcher``
    The trained searcher shipped with the package (:mod:`agents.baselines.searcher`: SmolLM2-135M-Instruct
    with the LoRA adapters of ``benchmarks/learning.py``), driven like ``llm``; it brings its
    own model, so the ``policy`` argument does not apply to it.

LLM contexts are kept as token ids: the chat prompt (system + user) from
``policy.chat_prompt_ids``, then each turn's generated ids exactly as generated, and between two
generated turns the text written there (the environment's replies, scripted turns, the answer
slot's ``<answer>``) encoded as one string; nothing generated is retokenized.

Modules: ``episode`` (the types: :class:`Turn`, :class:`EpisodeState`, :class:`Agent`,
:class:`EpisodeResult`), ``driver`` (:func:`run_agent`), ``llm`` (:class:`LLMAgent` and its chat
helpers), ``registry`` (:func:`make_agent`), ``scripted``, ``rule_reader`` and ``searcher``.
"""

from agents.baselines.driver import run_agent
from agents.baselines.episode import (
    Agent,
    EpisodeResult,
    EpisodeState,
    StepRecord,
    Turn,
    with_system_prompt,
)
from agents.baselines.llm import (
    DIRECT_PROMPT,
    FEW_SHOT_EXAMPLE,
    RAG_PROMPT,
    LLMAgent,
    chat_messages,
    close_answer,
)
from agents.baselines.registry import AGENT_NAMES, LLM_AGENTS, AgentSettings, agent_names, make_agent, register_agent
from searchenv.utils.moved import renamed_names

__all__ = [
    "AGENT_NAMES",
    "DIRECT_PROMPT",
    "FEW_SHOT_EXAMPLE",
    "LLM_AGENTS",
    "RAG_PROMPT",
    "Agent",
    "AgentSettings",
    "EpisodeResult",
    "EpisodeState",
    "LLMAgent",
    "StepRecord",
    "Turn",
    "agent_names",
    "chat_messages",
    "close_answer",
    "make_agent",
    "register_agent",
    "run_agent",
    "with_system_prompt",
]

__getattr__ = renamed_names(__name__, {"EpisodeRecord": ("agents.baselines.episode", "EpisodeResult")})
