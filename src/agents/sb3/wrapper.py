"""A macro-action, numeric view of SearchQA-v0 that stable-baselines3 can learn on.

The wrapped :class:`~searchenv.env.SearchQAEnv` still receives protocol text turns and still
scores them; the wrapper only chooses the text (one of four macro-actions) and summarises the
episode as a feature vector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from enum import IntEnum
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.baselines.rule_reader import (
    RELATION_GROUPS,
    Candidate,
    ExtractorWeights,
    analyse_question,
    closed_book_guess,
    extract_candidates,
    tokenize,
)
from agents.sb3.features import CLIP, QuestionEmbedder
from searchenv.metrics import normalize_answer
from searchenv.protocols import Search, sanitize
from searchenv.retrievers.base import Hit
from searchenv.rewards import Reward, WeightedReward
from searchenv.vector import search_round


class MacroAction(IntEnum):
    """The controller's actions; each becomes one protocol-valid text turn.

    Attributes:
        SEARCH_QUESTION: ``<search>`` the question as asked.
        SEARCH_REFORMULATED: ``<search>`` the next hop: the most salient new entity of the latest
            search (the best candidate not yet searched for) followed by the question's relation
            words; for a comparison question, the option not yet searched; before any search, the
            question's entities and relation words.
        ANSWER_EXTRACTED: ``<answer>`` the best candidate span extracted from the retrieved
            documents (see :mod:`agents.baselines.rule_reader`); the closed-book guess if there is none. With a
            ``reader`` (:class:`MacroActionEnv`), the reader's answer after the searches made.
        ANSWER_CLOSED_BOOK: ``<answer>`` without retrieval: a comparison question's first option,
            else ``unknown``; with a ``reader``, the reader's answer to the question alone.
    """

    SEARCH_QUESTION = 0
    SEARCH_REFORMULATED = 1
    ANSWER_EXTRACTED = 2
    ANSWER_CLOSED_BOOK = 3


_WH = ("who", "what", "where", "when", "which", "how")
_TYPES = (
    "number",
    "person",
    "city",
    "country",
    "university",
    "organization",
    "occupation",
    "industry",
    "yesno",
    "choice",
    "other",
)
_MAX_SEARCH_ONEHOT = 3

#: Names of the non-embedding features, in observation order (after the embedding).
FEATURE_NAMES: tuple[str, ...] = (
    "turn_frac",
    "searches_0",
    "searches_1",
    "searches_2",
    "searches_3plus",
    "searched_question",
    "last_top1",
    "last_top2",
    "last_top3",
    "best_top1_so_far",
    "last_new_frac",
    "docs_frac",
    "cand_count",
    "cand_score1",
    "cand_score2",
    "cand_margin",
    "cand_support",
    "cand_proximity",
    "cand_type_fit",
    "cand_recent",
    "cand_is_number",
    "cand_is_title",
    "cand_question_overlap",
    "reform_available",
    "reform_proximity",
    *(f"q_{w}" for w in _WH),
    "q_other_wh",
    *(f"type_{t}" for t in _TYPES),
    "q_entities",
    "q_length",
    "q_of_chain",
    "q_relations",
    "q_relation_groups",
)


def frugal_reward(search_cost: float) -> Reward:
    """FrugalRAG-style reward with a chosen cost: exact match minus ``search_cost`` per search.

    ``frugal_reward(0.1)`` equals the ``frugal`` preset.

    Raises:
        ValueError: If ``search_cost`` is negative or not finite.
    """
    if isinstance(search_cost, bool) or not isinstance(search_cost, int | float) or not math.isfinite(search_cost):
        raise ValueError(f"search_cost must be a finite number, got {search_cost!r}")
    if search_cost < 0:
        raise ValueError(f"search_cost must be >= 0, got {search_cost!r}")
    return WeightedReward({"outcome": (1.0, {"metric": "em"}), "cost": (float(search_cost), {"per_search": 1.0})})


def observation_box(embed_dim: int) -> spaces.Box:
    """The observation space of a :class:`MacroActionEnv` whose question embedder has ``embed_dim`` dimensions."""
    n = embed_dim + len(FEATURE_NAMES)
    low = np.full(n, -1.0, dtype=np.float32)
    high = np.full(n, 1.0, dtype=np.float32)
    low[:embed_dim], high[:embed_dim] = -CLIP, CLIP
    return spaces.Box(low, high, dtype=np.float32)


def _jaccard(a: str, b: str) -> float:
    ta, tb = set(normalize_answer(a).split()), set(normalize_answer(b).split())
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


class MacroActionEnv(gym.Wrapper[np.ndarray, int, str, str]):
    """SearchQA-v0 seen through four macro-actions and a feature vector.

    ## Action space
    ``Discrete(4)``: :class:`MacroAction`. Each is rendered to one protocol-valid turn
    (:meth:`action_text`) and passed to the wrapped environment, which parses and scores it as
    usual.

    ## Observation space
    ``Box(float32)`` of ``embedder.dim + len(FEATURE_NAMES)`` values: the reduced question
    embedding (standardised, within ``±5``), then :data:`FEATURE_NAMES` (all within ``[-1, 1]``):
    turn and search counts, tanh-squashed retrieval scores of the latest search and the best so
    far, whether the latest search brought new documents, how strongly the best extracted
    candidate is supported (score, margin over the runner-up, support, keyword proximity), its
    overlap with the question, whether a reformulation target exists, and question cues
    (wh-word, comparison, numeric answer, entity count, length, "of"-chains, relation words).

    ## Rewards
    The wrapped environment's reward, unchanged (e.g. ``frugal``: exact match minus a cost per
    search; see :func:`frugal_reward` for another cost).

    ## Info keys
    The wrapped environment's, plus ``macro_action`` (the action's name) and ``action_text``.

    Args:
        env: A :class:`~searchenv.env.SearchQAEnv` (or a wrapper around one).
        embedder: Question embedder; fitted here on the environment's questions if not fitted.
            Every question of the environment is encoded up front in one batch.
        score_scale: Retrieval scores enter as ``tanh(score / score_scale)``.
        weights: Candidate-extractor weights.
        reader: Who answers: ``reader(example_id, queries) -> answer`` given the queries searched
            so far in order (``()`` for a closed-book answer), e.g. an LLM's answers precomputed
            per reachable state (:class:`agents.sb3.reader.ReaderAnswers`). None: the rule-based
            extractor and closed-book guess.
    """

    def __init__(
        self,
        env: gym.Env[str, str],
        embedder: QuestionEmbedder,
        *,
        score_scale: float = 10.0,
        weights: ExtractorWeights | None = None,
        reader: Callable[[str, tuple[str, ...]], str] | None = None,
    ) -> None:
        from searchenv.env import SearchQAEnv

        super().__init__(env)  # type: ignore[arg-type]  # gymnasium types Wrapper.__init__ with the outer types
        base = env.unwrapped
        if not isinstance(base, SearchQAEnv):
            raise TypeError(f"env must be a SearchQAEnv or wrap one, got {type(base).__name__}")
        if not isinstance(embedder, QuestionEmbedder):
            raise TypeError(f"embedder must be a QuestionEmbedder, got {type(embedder).__name__}")
        if not (isinstance(score_scale, int | float) and math.isfinite(score_scale) and score_scale > 0):
            raise ValueError(f"score_scale must be a positive number, got {score_scale!r}")
        self.base: SearchQAEnv = base
        self.embedder = embedder
        self.score_scale = float(score_scale)
        self.weights = weights if weights is not None else ExtractorWeights()
        if reader is not None and not callable(reader):
            raise TypeError(f"reader must be callable (example_id, queries) -> answer, got {reader!r}")
        self.reader = reader
        questions = [ex.question for ex in base.examples]
        if not embedder.fitted:
            embedder.fit(questions)
        else:
            embedder.precompute(questions)
        self._box = observation_box(embedder.dim)
        self.observation_space = self._box
        self.action_space = spaces.Discrete(len(MacroAction))  # type: ignore[assignment]
        self._q_cache: dict[str, np.ndarray] = {}
        self._question = ""
        self._reset_state()

    # ---- episode state ---------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self._hits: list[Hit] = []
        self._hit_ids: set[str] = set()
        self._last_hits: list[Hit] = []
        self._last_new = 0
        self._best_score = 0.0
        self._searched_entities: list[str] = []
        self._searched_question = False
        self._queries: list[str] = []
        self._turn = 0
        self._searches = 0
        self._candidates: list[Candidate] = []
        self._reform: Candidate | None = None
        self.last_action_text: str | None = None

    @property
    def question(self) -> str:
        """The current question."""
        return self._question

    @property
    def candidates(self) -> list[Candidate]:
        """Ranked answer candidates from everything retrieved so far this episode."""
        return list(self._candidates)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode (same ``seed``/``options`` as :meth:`SearchQAEnv.reset`).

        Returns:
            The feature vector and the wrapped environment's info.
        """
        _, info = self.env.reset(seed=seed, options=options)
        self._question = self.base.example.question
        self._reset_state()
        return self._observation(), info

    # ---- actions ---------------------------------------------------------------------------------
    def _max_query_chars(self) -> int:
        return int(self.base.protocol.max_query_chars)

    def _query(self, text: str) -> str:
        q = " ".join(sanitize(text).split())[: self._max_query_chars()].strip()
        return q or "unknown"

    def _reformulation(self) -> tuple[str, str | None]:
        """(query, entity it targets) for :attr:`MacroAction.SEARCH_REFORMULATED` now."""
        qa = analyse_question(self._question)
        relations = " ".join(qa.relation_words)
        if qa.options:
            searched = self._searched_entities_norm()
            target = next((o for o in qa.options if normalize_answer(o) not in searched), qa.options[-1])
            return self._query(f"{target} {relations}"), target
        if self._reform is not None:
            return self._query(f"{self._reform.text} {relations}"), self._reform.text
        entities = " ".join(qa.entities)
        return self._query(f"{entities} {relations}" if entities or relations else self._question), None

    def reformulated_query(self) -> str:
        """The query :attr:`MacroAction.SEARCH_REFORMULATED` would search now.

        Comparison questions: the first option not yet searched, with the question's relation
        words. Otherwise: the best new entity of the latest search (the top ``mode="bridge"``
        candidate of its documents, not searched before) with the relation words; before any
        search, the question's entities with the relation words.
        """
        return self._reformulation()[0]

    def _searched_entities_norm(self) -> set[str]:
        return {normalize_answer(e) for e in self._searched_entities}

    @property
    def queries(self) -> tuple[str, ...]:
        """The queries searched so far this episode, in order."""
        return tuple(self._queries)

    def extracted_answer(self) -> str:
        """The answer :attr:`MacroAction.ANSWER_EXTRACTED` would give now."""
        if self.reader is not None:
            return self.reader(self.base.example.id, tuple(self._queries))
        return self._candidates[0].text if self._candidates else closed_book_guess(self._question)

    def closed_book_answer(self) -> str:
        """The answer :attr:`MacroAction.ANSWER_CLOSED_BOOK` would give."""
        if self.reader is not None:
            return self.reader(self.base.example.id, ())
        return closed_book_guess(self._question)

    def action_text(self, action: int | MacroAction) -> str:
        """The protocol text turn for a macro-action in the current state."""
        a = MacroAction(int(action))
        if a is MacroAction.SEARCH_QUESTION:
            return f"<search> {self._query(self._question)} </search>"
        if a is MacroAction.SEARCH_REFORMULATED:
            return f"<search> {self.reformulated_query()} </search>"
        answer = self.extracted_answer() if a is MacroAction.ANSWER_EXTRACTED else self.closed_book_answer()
        answer = " ".join(sanitize(answer).split()) or "unknown"
        return f"<answer> {answer} </answer>"

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Take one macro-action.

        Args:
            action: An int (or NumPy integer / one-element array) in ``[0, 4)``.

        Returns:
            features, reward, terminated, truncated, info.

        Raises:
            ValueError: If the action is not one of the macro-actions.
        """
        a = _as_action(action)
        text = self.action_text(a)
        self.last_action_text = text
        if a is MacroAction.SEARCH_REFORMULATED:
            target = self._reformulation()[1]
            if target is not None:
                self._searched_entities.append(target)
        elif a is MacroAction.SEARCH_QUESTION:
            self._searched_question = True
        request = self.base.prepare_step(text)
        hits = search_round({0: (self.base.retriever, self.base.top_k, request.queries)})[0]
        _, reward, terminated, truncated, info = self.base.finish_step(request, hits)
        self._turn += 1
        if isinstance(request.action, Search):
            self._searches += 1
            self._queries.extend(request.action.queries)
            self._absorb(hits if isinstance(hits, list) else [])
        info = dict(info)
        info["macro_action"] = a.name.lower()
        info["action_text"] = text
        return self._observation(), reward, terminated, truncated, info

    def _absorb(self, hits: Sequence[Sequence[Hit]]) -> None:
        limit = self.base.max_doc_chars
        latest: list[Hit] = []
        new = 0
        for per_q in hits:
            for h in per_q[: self.base.top_k]:
                if len(h.text) > limit:
                    h = replace(h, text=h.text[:limit])
                latest.append(h)
                if h.doc_id not in self._hit_ids:
                    self._hit_ids.add(h.doc_id)
                    self._hits.append(h)
                    new += 1
        self._last_hits = latest
        self._last_new = new
        if latest:
            self._best_score = max(self._best_score, max(h.score for h in latest))
        exclude = list(self._searched_entities)
        recent_ids = [h.doc_id for h in latest]
        self._candidates = extract_candidates(
            self._question, self._hits, recent_ids=recent_ids, exclude=exclude, weights=self.weights, limit=16
        )
        bridges = extract_candidates(
            self._question,
            self._hits,
            recent_ids=recent_ids,
            exclude=exclude,
            weights=self.weights,
            limit=16,
            mode="bridge",
            hop=len(self._searched_entities),
        )
        recent = [c for c in bridges if c.recent]
        self._reform = recent[0] if recent else None

    # ---- features --------------------------------------------------------------------------------
    def _question_features(self) -> np.ndarray:
        q = self._question
        cached = self._q_cache.get(q)
        if cached is not None:
            return cached
        qa = analyse_question(q)
        words = [w.lower() for w in tokenize(q)]
        first = next((w for w in words if w in _WH), None)
        wh = [1.0 if first == w else 0.0 for w in _WH] + [1.0 if first is None else 0.0]
        types = [1.0 if qa.answer_type == t else 0.0 for t in _TYPES]
        of_chain = len([w for w in words if w == "of"]) + q.count("'s") + q.count("\u2019s")
        stems = {w[:5] for w in qa.relation_words}
        groups = sum(1 for g in RELATION_GROUPS if stems & g)
        feats = np.array(
            [
                *wh,
                *types,
                math.tanh(len(qa.entities) / 3.0),
                math.tanh(len(words) / 20.0),
                min(of_chain, 3) / 3.0,
                min(len(qa.relation_words), 5) / 5.0,
                min(groups, 4) / 4.0,
            ],
            dtype=np.float32,
        )
        self._q_cache[q] = np.concatenate([self.embedder(q), feats]).astype(np.float32)
        return self._q_cache[q]

    def _observation(self) -> np.ndarray:
        t = self.score_scale
        top = sorted((h.score for h in self._last_hits), reverse=True)[:3]
        top += [0.0] * (3 - len(top))
        c = self._candidates
        c1 = c[0] if c else None
        s1 = c1.score if c1 else 0.0
        s2 = c[1].score if len(c) > 1 else 0.0
        n_docs_max = max(1, self.base.max_turns * self.base.top_k)
        onehot = [0.0] * (_MAX_SEARCH_ONEHOT + 1)
        onehot[min(self._searches, _MAX_SEARCH_ONEHOT)] = 1.0
        state = [
            min(1.0, self._turn / self.base.max_turns),
            *onehot,
            float(self._searched_question),
            *(math.tanh(s / t) for s in top),
            math.tanh(self._best_score / t),
            self._last_new / max(1, len(self._last_hits)) if self._last_hits else 0.0,
            min(1.0, len(self._hits) / n_docs_max),
            math.tanh(len(c) / 5.0),
            math.tanh(s1 / 2.0),
            math.tanh(s2 / 2.0),
            math.tanh((s1 - s2) / 2.0),
            min(c1.support, 3) / 3.0 if c1 else 0.0,
            c1.proximity if c1 else 0.0,
            c1.type_fit if c1 else 0.0,
            float(c1.recent) if c1 else 0.0,
            float(c1.is_number) if c1 else 0.0,
            float(c1.is_title) if c1 else 0.0,
            _jaccard(c1.text, self._question) if c1 else 0.0,
            1.0 if self._reform is not None else 0.0,
            self._reform.proximity if self._reform is not None else 0.0,
        ]
        obs = np.concatenate(
            [
                self._question_features()[: self.embedder.dim],
                np.array(state, np.float32),
                self._question_features()[self.embedder.dim :],
            ]
        )
        return np.clip(obs, self._box.low, self._box.high).astype(np.float32)


def _as_action(action: Any) -> MacroAction:
    arr = np.asarray(action)
    if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action must be one integer in [0, {len(MacroAction)}), got {action!r}")
    value = int(arr.reshape(()))
    if not 0 <= value < len(MacroAction):
        raise ValueError(f"action must be in [0, {len(MacroAction)}), got {value}")
    return MacroAction(value)


def make_macro_env(
    task: Any = "synthetic-mixed",
    *,
    embedder: QuestionEmbedder | None = None,
    split: str = "train",
    retriever: Any = "bm25",
    reward: str | Reward | Mapping[str, float] = "frugal",
    search_cost: float | None = None,
    max_turns: int = 4,
    top_k: int = 3,
    score_scale: float = 10.0,
    weights: ExtractorWeights | None = None,
    reader: Callable[[str, tuple[str, ...]], str] | None = None,
    **env_kwargs: Any,
) -> MacroActionEnv:
    """Build a :class:`~searchenv.env.SearchQAEnv` and wrap it in :class:`MacroActionEnv`.

    Args:
        task: Task name, QA file or list of examples (as for ``SearchQA-v0``).
        embedder: Shared question embedder (default: MiniLM, 16-d PCA fitted on this split).
        split: Split of a named task.
        retriever: Retriever name, index folder or instance.
        reward: Reward preset, weights or callable (default ``frugal``).
        search_cost: If given, use :func:`frugal_reward` with this cost (``reward`` must then be
            left at ``"frugal"``).
        max_turns: Turn budget.
        top_k: Documents per search.
        score_scale: See :class:`MacroActionEnv`.
        weights: Candidate-extractor weights.
        reader: See :class:`MacroActionEnv`.
        **env_kwargs: Other :class:`~searchenv.env.SearchQAEnv` arguments (``corpus``, ...).

    Returns:
        The wrapped environment.
    """
    from searchenv.env import SearchQAEnv

    if search_cost is not None:
        if reward != "frugal":
            raise ValueError(f"search_cost={search_cost!r} sets the frugal reward; do not also pass reward={reward!r}")
        reward = frugal_reward(search_cost)
    base = SearchQAEnv(
        task, split=split, retriever=retriever, reward=reward, max_turns=max_turns, top_k=top_k, **env_kwargs
    )
    emb = embedder if embedder is not None else QuestionEmbedder("minilm")
    return MacroActionEnv(base, emb, score_scale=score_scale, weights=weights, reader=reader)


__all__ = [
    "FEATURE_NAMES",
    "MacroAction",
    "MacroActionEnv",
    "frugal_reward",
    "make_macro_env",
]
