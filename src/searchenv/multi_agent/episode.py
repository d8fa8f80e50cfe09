"""One cooperative RAG episode played by roles in turn: the state machine behind the PettingZoo view.

:class:`RoleEpisode` knows nothing of PettingZoo: :class:`~searchenv.multi_agent.aec.MMOARAGEnv`
wraps one, and batched runners (``agents.baselines.pipelines``) drive many and search all of
their queries in one ``search_batch`` call, as the single-agent driver does.

The flow: :meth:`RoleEpisode.reset` with an example; :meth:`RoleEpisode.act` with the acting
role's output; whenever :attr:`RoleEpisode.pending_queries` is not empty (after the rewriter, or
at reset without one) the caller searches them and hands the hits to :meth:`RoleEpisode.retrieve`
before the next role acts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from searchenv.actions import Answer, Invalid, Search
from searchenv.metrics import exact_match, f1_score, gold_in_prediction
from searchenv.multi_agent.roles import (
    DEFAULT_PENALTIES,
    MAX_QUERY_CHARS,
    ROLE_PROMPTS,
    ROLES,
    answer_words,
    document_chars,
    parse_answer,
    parse_selection,
    parse_sub_queries,
    role_content,
)
from searchenv.retrievers.base import Hit, RetrieverError
from searchenv.rewards import Reward, RewardResult, StepContext, get_reward, score_step
from searchenv.tasks.example import QAExample
from searchenv.utils.text import writable

#: Shared rewards given by a metric name: the final answer's score, as the paper's reward (F1).
METRIC_REWARDS = {"f1": f1_score, "em": exact_match, "contains": gold_in_prediction}


def check_roles(roles: Sequence[str]) -> tuple[str, ...]:
    """``roles`` as a tuple, checked: known, in :data:`ROLES` order, each once, ``generator`` among them.

    Raises:
        ValueError: Otherwise.
    """
    if isinstance(roles, str):
        raise ValueError(f"roles must be a sequence of role names, not one string: {roles!r}")
    out = tuple(roles)
    unknown = [r for r in out if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown roles {unknown}; known: {', '.join(ROLES)}")
    if "generator" not in out:
        raise ValueError(f"roles must include 'generator' (it gives the answer), got {list(out)}")
    if list(out) != sorted(set(out), key=ROLES.index):
        raise ValueError(f"roles must be given once each in the order {', '.join(ROLES)}, got {list(out)}")
    return out


def check_penalties(penalties: Mapping[str, float] | None) -> dict[str, dict[str, float]]:
    """:data:`DEFAULT_PENALTIES` with ``penalties`` (``{"role/problem": value}``) applied.

    Raises:
        ValueError: For an unknown key or a value that is not a finite number.
    """
    out = {role: dict(terms) for role, terms in DEFAULT_PENALTIES.items()}
    for key, value in (penalties or {}).items():
        role, _, term = str(key).partition("/")
        if term not in out.get(role, {}):
            known = ", ".join(f"{r}/{t}" for r, ts in DEFAULT_PENALTIES.items() for t in ts)
            raise ValueError(f"unknown penalty {key!r}; known: {known}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"penalty {key!r} must be a finite number, got {value!r}")
        out[role][term] = float(value)
    return out


class RoleEpisode:
    """A question answered by the roles in turn, with the shared reward and each role's penalties.

    Args:
        roles: The roles that act (a subsequence of :data:`ROLES` with ``generator``). Without
            ``rewriter`` the question itself is searched; without ``selector`` every candidate is kept.
        top_k: Documents retrieved per query.
        reward: The shared reward: ``"f1"`` (the paper's), ``"em"`` or ``"contains"`` of the final
            answer; or a SearchQA-v0 reward (preset name, term weights or callable), scored on the
            episode as SearchQA-v0 would see it: one search turn with the searched queries and their
            hits, then the answer turn.
        max_sub_queries: Sub-queries searched; more cost the rewriter ``too_many_queries`` and are dropped.
        max_answer_words: A longer answer (normalised words) costs the generator ``long_answer``.
        penalties: ``{"role/problem": value}`` overriding :data:`DEFAULT_PENALTIES`.
        max_action_chars: A longer output is cut to this and costs its role ``overlong``.
        max_doc_chars: Document text is cut to this many characters.
        max_question_chars: Longest question admitted.
    """

    def __init__(
        self,
        *,
        roles: Sequence[str] = ROLES,
        top_k: int = 3,
        reward: str | Reward | Mapping[str, Any] = "f1",
        max_sub_queries: int = 4,
        max_answer_words: int = 12,
        penalties: Mapping[str, float] | None = None,
        max_action_chars: int = 2000,
        max_doc_chars: int = 1500,
        max_question_chars: int = 2000,
    ) -> None:
        for name, value in (("top_k", top_k), ("max_sub_queries", max_sub_queries),
                            ("max_answer_words", max_answer_words), ("max_action_chars", max_action_chars),
                            ("max_doc_chars", max_doc_chars), ("max_question_chars", max_question_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.roles = check_roles(roles)
        self.top_k = top_k
        self.max_sub_queries = max_sub_queries
        self.max_answer_words = max_answer_words
        self.penalties = check_penalties(penalties)
        self.max_action_chars = max_action_chars
        self.max_doc_chars = max_doc_chars
        self.max_question_chars = max_question_chars
        self.reward_name = reward if isinstance(reward, str) else None
        metric = isinstance(reward, str) and reward in METRIC_REWARDS
        self.reward_fn: Reward | None = None if metric else get_reward(reward)
        self.prompts = {r: ROLE_PROMPTS[r].format(max_queries=max_sub_queries) for r in ROLES}
        self.max_candidates = (max_sub_queries if "rewriter" in self.roles else 1) * top_k
        docs = document_chars(max_doc_chars, self.max_candidates)
        self.observation_bound = max(len(p) for p in self.prompts.values()) + max_question_chars + docs + 200
        self.example: QAExample | None = None
        self._clear()

    def _clear(self) -> None:
        """No episode: every per-episode field at its start value."""
        self.example = None
        self.turn = 0
        self.outputs: dict[str, str] = {}
        self.problems: dict[str, dict[str, float]] = {}
        self.asked: list[str] = []  # the rewriter's sub-queries, all of them
        self.queries: tuple[str, ...] = ()  # what was searched
        self.hits: tuple[tuple[Hit, ...], ...] = ()  # per searched query, as retrieved (cut to top_k)
        self.candidates: list[Hit] | None = None  # Document i = candidates[i]; None until retrieved
        self.kept: list[int] | None = None
        self.answer: str | None = None
        self.infra_error: str | None = None
        self.shared = 0.0
        self.shared_terms: dict[str, float] = {}
        self.done = False
        self.pending_queries: tuple[str, ...] = ()

    # ---- the flow -------------------------------------------------------------------------------
    def reset(self, example: QAExample) -> None:
        """Start an episode on ``example``; without a rewriter, the question is the query to search.

        Raises:
            ValueError: If the question is longer than ``max_question_chars``.
        """
        if len(example.question) > self.max_question_chars:
            raise ValueError(f"example {example.id!r}: question has {len(example.question)} characters, over "
                             f"max_question_chars={self.max_question_chars}")
        self._clear()
        self.example = example
        if "rewriter" not in self.roles:
            self.pending_queries = self.queries = (example.question[:MAX_QUERY_CHARS],)

    @property
    def current_role(self) -> str | None:
        """The role whose turn it is (None when the episode is over)."""
        return None if self.done else self.roles[self.turn]

    def act(self, text: str) -> dict[str, float]:
        """The acting role's output: read it, price its problems, end the episode after the generator.

        Args:
            text: The role's output.

        Returns:
            This turn's reward per role: the acting role's penalties, and after the generator the
            shared reward for every role.

        Raises:
            TypeError: If ``text`` is not a string.
            RuntimeError: If the episode is over, never started, or waits for :meth:`retrieve`.
        """
        if not isinstance(text, str):
            raise TypeError(f"an action must be a str (the role's output), got {type(text).__name__}")
        if self.example is None or self.done:
            raise RuntimeError("the episode is over (or was never started); call reset()")
        if self.pending_queries:
            raise RuntimeError("the episode waits for retrieve() with the hits of pending_queries")
        role = self.roles[self.turn]
        text = writable(text)
        problems = ["overlong"] if len(text) > self.max_action_chars else []
        text = text[: self.max_action_chars]
        self.outputs[role] = text
        if role == "rewriter":
            self.asked = parse_sub_queries(text)
            problems += ["no_queries"] if not self.asked else []
            problems += ["too_many_queries"] if len(self.asked) > self.max_sub_queries else []
            self.pending_queries = self.queries = tuple(self.asked[: self.max_sub_queries]) or (
                self.example.question[:MAX_QUERY_CHARS],)  # nothing usable: the question itself
        elif role == "selector":
            selection = parse_selection(text, len(self.candidates or ()))
            self.kept = list(selection.ids)
            problems += list(selection.problems)
        else:
            self.answer = parse_answer(text)
            if self.answer is not None and answer_words(self.answer) > self.max_answer_words:
                problems.append("long_answer")
        self.problems[role] = {p: self.penalties[role][p] for p in dict.fromkeys(problems)}
        rewards = dict.fromkeys(self.roles, 0.0)
        rewards[role] = sum(self.problems[role].values())
        self.turn += 1
        if role == "generator":
            self.shared, self.shared_terms = self._shared_reward()
            self.done = True
            for r in self.roles:
                rewards[r] += self.shared
        return rewards

    def retrieve(self, hits: Sequence[Sequence[Hit]] | Exception) -> None:
        """Complete the pending search with one hit list per query (or the retriever's failure).

        The candidates are the hits of every query, query by query, each document once; a failure
        (see :func:`searchenv.retrievers.base.search_or_error`) leaves none and is reported as ``infra_error``.

        Raises:
            RuntimeError: If no search is pending.
            ValueError: If ``hits`` has not one list per pending query.
        """
        if not self.pending_queries:
            raise RuntimeError("no search is pending")
        if isinstance(hits, Exception):
            self.infra_error = f"{type(hits).__name__}: {hits}" if not isinstance(hits, RetrieverError) else str(hits)
            self.hits = ()
        else:
            if len(hits) != len(self.pending_queries):
                raise ValueError(f"retrieve() got {len(hits)} hit lists for {len(self.pending_queries)} queries")
            self.hits = tuple(tuple(self._clip(h) for h in per_query[: self.top_k]) for per_query in hits)
        self.candidates = list({h.doc_id: h for per_query in self.hits for h in per_query}.values())
        if "selector" not in self.roles:
            self.kept = list(range(len(self.candidates)))
        self.pending_queries = ()

    # ---- what the roles see -----------------------------------------------------------------------
    def documents(self, role: str) -> list[tuple[int, Hit]] | None:
        """The ``(id, document)`` pairs ``role`` reads: all candidates (selector), the kept ones (generator)."""
        if role == "rewriter" or self.candidates is None:
            return None
        if role == "selector":
            return list(enumerate(self.candidates))
        if self.kept is None:
            return None
        return [(i, self.candidates[i]) for i in self.kept]

    def messages(self, role: str) -> list[dict[str, str]]:
        """``role``'s chat: its role prompt (system) and what it reads (user)."""
        if self.example is None:
            raise RuntimeError("call reset() first")
        content = role_content(role, self.example.question, self.documents(role), self.max_doc_chars)
        return [{"role": "system", "content": self.prompts[role]}, {"role": "user", "content": content}]

    def observation(self, role: str) -> str:
        """``role``'s observation: its role prompt and what it reads, as one text."""
        system, user = self.messages(role)
        return f"{system['content']}\n\n{user['content']}"

    def state_text(self) -> str:
        """The whole episode so far as one text (a centralised critic's view): every role's output and the documents."""
        if self.example is None:
            return ""
        lines = [f"Question: {self.example.question}"]
        retrieved = "" if self.candidates is None else f"[retriever] {len(self.candidates)} candidates: " + ", ".join(
            f"Document{i} ({h.title[:80]})" for i, h in enumerate(self.candidates))
        if "rewriter" not in self.roles and retrieved:
            lines.append(retrieved)
        for role in self.roles:
            if role in self.outputs:
                lines.append(f"[{role}] {self.outputs[role]}")
            if role == "rewriter" and retrieved:
                lines.append(retrieved)
        return "\n".join(lines)

    @property
    def state_bound(self) -> int:
        """An upper bound on the length of :meth:`state_text`."""
        return self.max_question_chars + len(self.roles) * (self.max_action_chars + 16) + 64 + self.max_candidates * 100

    # ---- scores --------------------------------------------------------------------------------------
    def role_terms(self, role: str) -> dict[str, float]:
        """``role``'s reward so far by term: ``shared`` and each of its penalties (they sum to its return)."""
        terms = {"shared": self.shared if self.done else 0.0}
        terms.update({f"penalty/{p}": v for p, v in self.problems.get(role, {}).items()})
        return terms

    def final_info(self) -> dict[str, Any]:
        """The episode's outcome, scored as SearchQA-v0 scores an answer, and its summary.

        Keys: ``answer`` (None if none), ``gold_answers``, ``em``, ``f1``, ``contains``,
        ``evidence_recall`` (gold evidence among the candidates; None without gold evidence),
        ``selected_recall`` (among the kept documents), ``shared_reward``, ``shared_terms``, and
        ``summary`` (queries, candidates and kept ids, each role's penalties, infra error, return).
        """
        ex = self.example
        if ex is None:
            raise RuntimeError("call reset() first")
        answer, golds = self.answer, ex.answers
        candidate_ids = [h.doc_id for h in self.candidates or ()]
        kept_ids = [candidate_ids[i] for i in self.kept or ()]
        gold = set(ex.evidence_ids)
        penalties = {r: dict(self.problems.get(r, {})) for r in self.roles}
        return {
            "answer": answer,
            "gold_answers": list(golds),
            "em": exact_match(answer, golds) if answer is not None else 0.0,
            "f1": f1_score(answer, golds) if answer is not None else 0.0,
            "contains": gold_in_prediction(answer, golds) if answer is not None else 0.0,
            "evidence_recall": len(gold & set(candidate_ids)) / len(gold) if gold else None,
            "selected_recall": len(gold & set(kept_ids)) / len(gold) if gold else None,
            "shared_reward": self.shared,
            "shared_terms": dict(self.shared_terms),
            "summary": {
                "roles": list(self.roles),
                "sub_queries": list(self.asked),
                "queries": list(self.queries),
                "candidate_doc_ids": candidate_ids,
                "kept_doc_ids": kept_ids,
                "penalties": penalties,
                "infra_error": self.infra_error,
                "answered": answer is not None,
                "return": self.shared + sum(sum(p.values()) for p in penalties.values()),
            },
        }

    def _shared_reward(self) -> tuple[float, dict[str, float]]:
        ex = self.example
        if ex is None:  # pragma: no cover - act() checks
            raise RuntimeError("no episode")
        if self.reward_fn is None:
            value = METRIC_REWARDS[str(self.reward_name)](self.answer, ex.answers) if self.answer is not None else 0.0
            return value, {str(self.reward_name): value}
        # The episode as SearchQA-v0 sees it: one search turn with the searched queries, then the answer.
        queries = self.queries
        search_text = "<search>\n" + "\n".join(queries) + "\n</search>"
        new_ids = tuple(h.doc_id for h in self.candidates or ())
        first = score_step(self.reward_fn, StepContext(
            example=ex, action=Search(queries), turn=1, terminated=False, truncated=False, text=search_text,
            queries=queries, hits=self.hits, new_doc_ids=new_ids, num_searches=1, num_queries=len(queries),
            infra_error=self.infra_error is not None))
        action: Answer | Invalid = (Answer(self.answer) if self.answer is not None
                                    else Invalid(Invalid.EMPTY_ANSWER, "The answer is empty."))
        second = score_step(self.reward_fn, StepContext(
            example=ex, action=action, turn=2, terminated=self.answer is not None, truncated=self.answer is None,
            text=f"<answer> {self.answer or ''} </answer>", seen_doc_ids=frozenset(new_ids), num_searches=1,
            num_queries=len(queries), invalid_turns=int(self.answer is None), history=(dict(first.terms),),
            signal_history=(dict(first.signals),)))
        return first.reward + second.reward, _sum_terms(first, second)

    def _clip(self, hit: Hit) -> Hit:
        if len(hit.text) <= self.max_doc_chars and len(hit.title) <= 200:
            return hit
        return replace(hit, title=hit.title[:200], text=hit.text[: self.max_doc_chars])


def _sum_terms(*results: RewardResult) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        for k, v in r.terms.items():
            out[k] = out.get(k, 0.0) + v
    return out
