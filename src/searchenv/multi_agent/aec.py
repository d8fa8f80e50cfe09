"""MMOARAGEnv: the multi-agent view of a SearchQA-v0 episode in PettingZoo's AEC API (needs ``pettingzoo``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers

from searchenv.env import DEFAULT_MAX_DOC_CHARS, DEFAULT_TASK
from searchenv.make import check_evidence, resolve_task, shared_retriever
from searchenv.multi_agent.episode import RoleEpisode
from searchenv.multi_agent.roles import ROLES
from searchenv.retrievers.base import Retriever, search_or_error
from searchenv.rewards import Reward
from searchenv.spaces import UnicodeText
from searchenv.tasks.example import QAExample, choose_example

#: The one reset option that is ignored: PettingZoo's ``api_test`` calls ``reset(options={"options": 1})``.
_API_TEST_PROBE = "options"


class TextObservation(str):
    """An observation: a ``str`` that also carries the ``dtype`` of :class:`~searchenv.spaces.UnicodeText`.

    It is an ordinary string everywhere; the ``dtype`` is there because PettingZoo's ``api_test``
    compares each observation's ``dtype`` with its space's.
    """

    __slots__ = ()
    dtype: ClassVar[np.dtype[Any]] = np.dtype(str)


class MMOARAGEnv(AECEnv[str, str, str]):
    """A RAG pipeline as a cooperative multi-agent task (MMOA-RAG): rewriter, selector and generator act in turn.

    ## Description
    An episode poses one question of a task, as ``SearchQA-v0`` does, and the roles answer it
    together (Chen et al., 2025, "Improving Retrieval-Augmented Generation through Multi-Agent
    Reinforcement Learning"). The **rewriter** turns the question into sub-queries, one per line;
    the environment searches each (``top_k`` documents per query, one ``search_batch`` call) and
    numbers the distinct hits ``Document0, Document1, ...``: the candidates. The **selector**
    keeps candidates by their ids (``Document0,Document3``); the **generator** answers from the
    kept documents. Which roles exist is set by ``roles`` (the paper's ablations): without the
    rewriter the question itself is searched at reset; without the selector every candidate is kept.
    The generator is always there. Each role acts once, in order; the episode ends after the generator.

    ## Agents
    ``possible_agents`` are the roles given (a subsequence of ``("rewriter", "selector",
    "generator")``).

    ## Action spaces
    :class:`~searchenv.spaces.UnicodeText` up to ``max_action_chars`` characters: the role's output.
    A longer string is cut to that and costs its role the ``overlong`` penalty; a non-string raises
    ``TypeError``. Any string is accepted: malformed outputs cost penalties, never raise.

    ## Observation spaces
    :class:`~searchenv.spaces.UnicodeText`: the role's prompt, then ``Question: ...`` and, for the
    selector, every candidate and, for the generator, the kept documents, each as
    ``Document<i> (Title: ..): text`` (text cut to ``max_doc_chars``, protocol tags neutralised).
    :meth:`messages` gives the same as chat messages (system: the role prompt; user: the rest).
    Observations are :class:`TextObservation` (a ``str``). :meth:`state` is the whole episode as text.

    ## Rewards
    One shared reward for every role when the generator has answered: ``reward="f1"`` (the
    paper's: token F1 of the answer), ``"em"``, ``"contains"``, or any SearchQA-v0 reward (preset name,
    term weights, callable), scored on the episode as SearchQA-v0 sees it (one search turn with
    the searched queries, then the answer turn). Each role also pays its own penalties, at its
    own turn (defaults -0.5 each, ``penalties={"role/problem": value}`` to change):

    - rewriter: ``too_many_queries`` (more than ``max_sub_queries``; the rest are not searched),
      ``no_queries`` (no non-empty line; the question is searched instead);
    - selector: ``format`` (not ``Document<i>,Document<j>,..``, empty or ``None``), ``unknown_ids``
      (an id not among the candidates), ``duplicate_ids``;
    - generator: ``long_answer`` (more than ``max_answer_words`` normalised words);
    - every role: ``overlong`` (more than ``max_action_chars`` characters).

    A role's return is the shared reward plus its penalties; ``infos[role]["reward_terms"]``
    holds them as separate terms (``shared``, ``penalty/<problem>``), summing to that return.

    ## Episode end
    Every role is ``terminated`` after the generator's turn; nothing truncates.

    ## Info keys
    Every role, every step: ``role``, ``example_id``, ``turn`` (roles that acted), ``reward_terms``
    (its totals so far), ``penalties`` (its problems, after its turn), ``infra_error`` (the retriever
    failed: the message, else None; drop such episodes from training). When the episode ends, every
    role's info also has the outcome, computed exactly as SearchQA-v0 computes it: ``answer``
    (None if empty), ``gold_answers``, ``em``, ``f1``, ``contains``, ``evidence_recall`` (among the
    candidates), ``selected_recall`` (among the kept), ``shared_reward``, ``shared_terms`` and
    ``summary`` (sub-queries, searched queries, candidate and kept ids, every role's penalties, return).

    ## Arguments
    task, corpus, retriever, split, top_k, max_doc_chars, max_question_chars: as ``SearchQA-v0``.
    roles: The roles that act. reward: See Rewards. max_sub_queries: Sub-queries searched (4).
    max_answer_words: See Rewards (12). penalties: See Rewards. max_action_chars: See Action spaces.
    render_mode: ``"ansi"`` (:meth:`render` returns the state text) or ``"human"`` (prints it).

    ## Version history
    v0: first release.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "mmoa_rag_v0", "render_modes": ["ansi", "human"],
                                          "is_parallelizable": False}

    def __init__(
        self,
        task: str | os.PathLike[str] | Sequence[QAExample] = DEFAULT_TASK,
        *,
        corpus: str | os.PathLike[str] | None = None,
        retriever: str | os.PathLike[str] | Retriever = "bm25",
        roles: Sequence[str] = ROLES,
        top_k: int = 3,
        split: str = "train",
        reward: str | Reward | Mapping[str, Any] = "f1",
        max_sub_queries: int = 4,
        max_answer_words: int = 12,
        penalties: Mapping[str, float] | None = None,
        max_action_chars: int = 2000,
        max_doc_chars: int = DEFAULT_MAX_DOC_CHARS,
        max_question_chars: int = 2000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        self.episode = RoleEpisode(roles=roles, top_k=top_k, reward=reward, max_sub_queries=max_sub_queries,
                                   max_answer_words=max_answer_words, penalties=penalties,
                                   max_action_chars=max_action_chars, max_doc_chars=max_doc_chars,
                                   max_question_chars=max_question_chars)
        self.examples, corpus_path = resolve_task(task, split, corpus)
        self.retriever: Retriever = shared_retriever(retriever, corpus_path)
        if isinstance(task, str | os.PathLike):
            check_evidence(self.retriever, self.examples, task, retriever)
        self._by_id = {ex.id: i for i, ex in enumerate(self.examples)}
        self.possible_agents = list(self.episode.roles)
        self.agents: list[str] = []
        self.observation_spaces = {r: UnicodeText(self.episode.observation_bound) for r in self.possible_agents}
        self.action_spaces = {r: UnicodeText(max_action_chars) for r in self.possible_agents}
        self.state_space = UnicodeText(self.episode.state_bound)
        self._np_random = np.random.default_rng()

    def observation_space(self, agent: str) -> UnicodeText:
        """The role's observation space (the same object every call)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> UnicodeText:
        """The role's action space (the same object every call)."""
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode: a random example, or the one ``options`` names.

        Args:
            seed: Seeds the choice of example (and the spaces' samplers).
            options: Choose the question as SearchQA-v0's do (:func:`~searchenv.tasks.example.choose_example`:
                ``example_id``, ``index``, ``example`` or a custom ``question`` with ``answers``). Any other
                key is refused, but for ``"options"``: PettingZoo's ``api_test`` passes ``{"options": 1}``
                to check that ``reset`` takes the argument.

        Raises:
            ValueError: For an unknown option, naming it and the options.
        """
        if seed is not None:
            self._np_random = np.random.default_rng(seed)
            for i, agent in enumerate(self.possible_agents):
                self.action_spaces[agent].seed(seed + i)
                self.observation_spaces[agent].seed(seed + i)
        options = {k: v for k, v in (options or {}).items() if k != _API_TEST_PROBE}
        self.episode.reset(choose_example(self.examples, options, self._np_random, by_id=self._by_id))
        if self.episode.pending_queries:
            self.episode.retrieve(search_or_error(self.retriever, self.episode.pending_queries, self.episode.top_k))
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: self._info(a) for a in self.agents}
        self.agent_selection = self.agents[0]

    def observe(self, agent: str) -> TextObservation:
        """The role's observation (see Observation spaces)."""
        return TextObservation(self.episode.observation(agent))

    def messages(self, agent: str) -> list[dict[str, str]]:
        """The role's observation as chat messages: its role prompt (system), then what it reads (user)."""
        return self.episode.messages(agent)

    def state(self) -> TextObservation:
        """The whole episode so far as one text (every role's output and the candidates), in :attr:`state_space`."""
        return TextObservation(self.episode.state_text())

    def step(self, action: str | None) -> None:
        """The current role's output; after the rewriter the environment searches its sub-queries.

        Raises:
            TypeError: If a live role's action is not a string.
        """
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if not isinstance(action, str):
            raise TypeError(f"an action must be a str (the role's output), got {type(action).__name__}")
        self._cumulative_rewards[agent] = 0.0
        step_rewards = self.episode.act(action)
        if self.episode.pending_queries:
            self.episode.retrieve(search_or_error(self.retriever, self.episode.pending_queries, self.episode.top_k))
        self.rewards = {a: step_rewards[a] for a in self.agents}
        if self.episode.done:
            self.terminations = dict.fromkeys(self.agents, True)
        else:
            self.agent_selection = self.episode.roles[self.episode.turn]
        self.infos = {a: self._info(a) for a in self.agents}
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def _info(self, agent: str) -> dict[str, Any]:
        ep = self.episode
        info: dict[str, Any] = {
            "role": agent,
            "example_id": ep.example.id if ep.example is not None else None,
            "turn": ep.turn,
            "reward_terms": ep.role_terms(agent),
            "penalties": dict(ep.problems.get(agent, {})),
            "infra_error": ep.infra_error,
        }
        if ep.done:
            info.update(ep.final_info())
        return info

    def render(self) -> str | None:
        """``ansi``: the episode so far as text (:meth:`state`); ``human``: print it."""
        text = self.episode.state_text()
        if self.render_mode == "ansi":
            return text
        if self.render_mode == "human":
            print(text)
        return None

    def close(self) -> None:
        """Nothing to release (the retriever is shared per process)."""


def env(**kwargs: Any) -> AECEnv[str, str, str]:
    """:class:`MMOARAGEnv` in PettingZoo's order-enforcing wrapper, as PettingZoo's own ``env()`` factories build."""
    return wrappers.OrderEnforcingWrapper(MMOARAGEnv(**kwargs))


raw_env = MMOARAGEnv
