"""SearchQAEnv: answer a question by interleaving reasoning, search and a final answer."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, SupportsFloat

import gymnasium as gym

from searchenv.make import check_evidence, resolve_retriever, resolve_task, shared_retriever
from searchenv.metrics import episode_metrics, exact_match, f1_score, gold_in_prediction, normalize_answer
from searchenv.protocols import Action, ActionProtocol, Answer, Invalid, Open, Search, get_protocol
from searchenv.refiners import Refiner, get_refiner
from searchenv.retrievers.base import Hit, Retriever, RetrieverError, search_or_error
from searchenv.rewards import Reward, RewardResult, StepContext, answer_admissible, get_reward, score_step
from searchenv.spaces import UnicodeText
from searchenv.step_info import SUMMARY_KEY, StepInfo
from searchenv.tasks.example import QAExample, choose_example
from searchenv.utils.text import writable

__all__ = [
    "DEFAULT_MAX_DOC_CHARS",
    "DEFAULT_TASK",
    "SearchQAEnv",
    "StepRequest",
    "episode_metrics",
    "resolve_retriever",
    "search_or_error",
]

DEFAULT_TASK = "synthetic-mixed"
#: Retrieved document text is cut to this many characters unless ``max_doc_chars`` says otherwise.
DEFAULT_MAX_DOC_CHARS = 1500
_MAX_TITLE_CHARS = 200
_MAX_ERROR_CHARS = 500
_RENDER_SLACK = 200  # tags, "Doc i(Title: ) " prefixes, query labels
_CUT_MARK = "[...cut]"  # ends a turn or appended text that was cut to its bound


@dataclass(frozen=True)
class StepRequest:
    """The first half of a step: the parsed turn and the queries it needs searched.

    Produced by :meth:`SearchQAEnv.prepare_step`; the caller searches ``queries`` (possibly
    batched with other episodes' queries) and hands the hits to :meth:`SearchQAEnv.finish_step`.

    Attributes:
        text: The turn as given.
        action: The parsed action.
        queries: Queries to search (empty unless ``action`` is a :class:`Search`).
    """

    text: str
    action: Action
    queries: tuple[str, ...]


@dataclass
class _Turn:
    """What one action's helper in :meth:`SearchQAEnv.finish_step` made of the turn."""

    new_text: str = ""
    hits: tuple[tuple[Hit, ...], ...] = ()  # as the reward sees them: cut to max_doc_chars, refined
    shown: tuple[tuple[Hit, ...], ...] = ()  # as the protocol shows them (browse: snippets; open: the page)
    refined: list[list[dict[str, Any]]] | None = None
    numbers: list[list[int]] | None = None  # each hit's episode-wide number
    opened: dict[str, Any] | None = None
    cited: tuple[str, ...] | None = None
    repeated: int = 0  # queries asked before in the episode


class SearchQAEnv(gym.Env[str, str]):
    """Answer a question by reasoning, searching a corpus and answering, one model turn per step.

    ## Description
    An episode poses one question (from a named task such as ``synthetic-2hop``, a QA file, or
    a list of :class:`~searchenv.tasks.QAExample`). Each step the agent sends one model turn.
    Under the default ``search-r1`` protocol a turn holds optional ``<think>..</think>``
    reasoning and then either ``<search>query</search>`` (the environment searches the corpus and
    appends ``<information>Doc 1(Title: ..) ..</information>``) or ``<answer>..</answer>`` (the
    episode ends and the answer is scored). Malformed turns never raise: they cost a turn, are
    answered with an ``<information>Invalid turn (code): ..</information>`` message and may earn a
    format penalty. The answer is read only from the agent's own latest turn.

    ## Action space
    :class:`~searchenv.spaces.UnicodeText` up to ``max_turn_chars`` characters: one model turn.
    Longer strings are accepted and answered as a ``too_long`` invalid turn, and stored in the
    transcript cut to ``max_turn_chars`` characters ending in ``[...cut]``; a non-string raises
    ``TypeError``.

    ## Observation space
    :class:`~searchenv.spaces.UnicodeText`: the whole transcript so far (instructions and
    question, then every agent turn followed by what the environment appended), so the
    observation is a Markov state for generic RL code. :meth:`messages` gives the same
    transcript as chat messages (system / user / assistant / tool). Its ``max_length`` bounds
    every observation: the prompt with a question of ``max_question_chars``, plus ``max_turns``
    times a turn of ``max_turn_chars`` and the longest text a step can append (``top_k``
    documents of ``max_doc_chars`` and a 200-character title per query, or an error message of
    at most 500 characters; a custom protocol's longer rendering is cut to that bound).

    ## Rewards
    Chosen by ``reward``: a preset name (``default``, ``search-r1``, ``frugal``, ... see
    :data:`searchenv.rewards.PRESETS`), a dict of term weights, or a callable
    ``reward(StepContext) -> (float, {term: value})``. Each term's contribution is reported every
    step in ``info["reward_terms"]``; they sum to the step reward. Raw per-step measurements
    (e.g. this step's relevance under a preset that pays it at the end) are in
    ``info["reward_signals"]``. Formulas and sources: ``docs/reference/rewards.md``.

    ## Episode end
    ``terminated`` when the agent answers; ``truncated`` when ``max_turns`` turns pass unanswered.
    ``gymnasium.make(..., max_episode_steps=N)`` (Gymnasium's ``TimeLimit``) may truncate earlier:
    every step's info holds the episode so far, so that step's info has the outcome and summary too.
    A caller with a budget of its own (tokens, time) ends an episode with :meth:`end_episode`,
    which returns the final info a last step would have carried.

    ## Info keys
    Every step: ``new_text`` (what the environment appended), ``turn``, ``action_type``
    (``search``/``open``/``answer``/``invalid``), ``invalid_reason`` (a code or None), ``num_searches``,
    ``queries`` (this step's), ``doc_ids`` (retrieved this step), ``reward_terms``, ``reward_signals``,
    ``infra_error`` (the retriever failed: drop such trajectories from training),
    ``infra_error_type`` (the exception's class name, e.g. ``RetrieverError`` or ``RecursionError``;
    None without a failure), ``example_id``. Under protocols that number documents across the
    episode (``arena``, ``browse``) a search step also has ``doc_numbers`` (each hit's number, per
    query); an open step has ``opened`` (``doc_id``, ``number``, ``page``, ``pages``); an answer that
    cites documents has ``cited_doc_ids`` (numbers never shown dropped). Any ``Exception`` from
    the retriever, or an answer that is not one list of hits per query, is an infrastructure
    failure (``infra_error``), never a crash of :meth:`step`.
    The episode so far, final when it ends: ``answer`` (None while unanswered), ``gold_answers``, ``em``, ``f1``,
    ``contains``, ``evidence_recall`` (None when the example has no gold evidence) and
    ``summary`` (totals per term, return, searches, queries, duplicate queries, invalid turns,
    invalid turns by code (``invalid_reasons``), em, f1, contains, evidence recall, answered,
    answer_admissible: whether the answer passed the
    reward's guard against over-long and multi-candidate answers; ``opens``, ``opened_doc_ids``,
    and ``cited_doc_ids``, None unless the answer had a citation block).

    ## Arguments
    task: Task name, path to a FlashRAG QA JSONL file, or a sequence of ``QAExample``.
    corpus: FlashRAG JSONL corpus path, or a task name whose corpus to use; defaults to the
        task's own corpus (required with a file or a list of examples unless ``retriever`` is an
        instance, an index folder or a server URL).
    retriever: ``"bm25"``, ``"dense"`` (built on first use and cached on disk), a saved index
        folder, the URL of a retrieval server (``"http://127.0.0.1:8000"``: ``searchenv serve``
        or any server speaking Search-R1's ``/retrieve``; a :class:`RemoteRetriever` with the token
        from ``$SEARCHENV_TOKEN`` if set), your own class as ``"module:Class"`` or by its name in
        the ``searchenv.retrievers`` entry points (``docs/guides/your-retriever.md``), or any object with
        ``search_batch(queries, k)`` (an instance: a class is refused).
    protocol: ``"search-r1"``, ``"multi-query"`` (RAG-R1: several queries a turn), ``"arena"``
        (ARENA: documents numbered across the episode; the answer turn cites them in
        ``<relevance>`` and reasons in ``<analysis>``; pair it with ``reward="arena"``),
        ``"browse"`` (a search shows titles and snippets; ``<open>N</open>`` reads shown document
        N in full, page by page; opens cost a turn and can be priced with ``cost``'s
        ``per_open``), ``"tools"`` (native tool calls: ``search`` and ``answer`` as JSON-schema
        tools, a turn is one Hermes/Qwen ``<tool_call>{...}</tool_call>`` or the JSON object
        alone, results come back as ``tool`` messages with the call's id; :meth:`messages` is what
        a tool-calling chat template renders), ``"tools-browse"`` (``tools`` with ``open``), or a
        :class:`~searchenv.protocols.ActionProtocol`.
    top_k: Documents returned per query.
    max_turns: Turn budget per episode.
    reward: See Rewards.
    split: Which split of a named task to draw questions from.
    max_turn_chars: Longest well-formed turn.
    max_doc_chars: Retrieved document text is cut to this many characters.
    max_queries: Queries per turn for ``multi-query`` (default 3).
    max_question_chars: Longest question admitted.
    refiner: What the agent reads of each hit (IM-RAG): ``"sentences"`` (the two sentences of
        each hit sharing most content words with its query), ``"sentences-embedding"``, or any
        object with ``refine(queries, hits)`` (see :mod:`searchenv.refiners`); ``None`` shows the
        hits whole. Its choices are in ``info["refined"]`` on search steps; document ids, and so
        evidence recall, are unchanged.
    render_mode: ``"ansi"`` (render returns the transcript) or ``"human"`` (prints it).

    ## Version history
    v0: first release; ``refiner`` and the ``arena``, ``browse``, ``tools`` and ``tools-browse``
    protocols added later (the
    defaults are unchanged, so v0 behaviour is too; the episode summary gained ``opens``,
    ``opened_doc_ids`` and ``cited_doc_ids``). The summary moved from ``info["episode"]`` to
    ``info["summary"]``, which Gymnasium's ``RecordEpisodeStatistics`` and SB3's ``Monitor`` leave
    free; ``info["episode"]`` still reads it, with a ``DeprecationWarning``, until the next release.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        task: str | os.PathLike[str] | Sequence[QAExample] = DEFAULT_TASK,
        *,
        corpus: str | os.PathLike[str] | None = None,
        retriever: str | os.PathLike[str] | Retriever = "bm25",
        protocol: str | ActionProtocol = "search-r1",
        top_k: int = 3,
        max_turns: int = 4,
        reward: str | Reward | Mapping[str, float] = "default",
        split: str = "train",
        max_turn_chars: int = 4096,
        max_doc_chars: int = DEFAULT_MAX_DOC_CHARS,
        max_queries: int | None = None,
        max_question_chars: int = 2000,
        refiner: str | Refiner | None = None,
        render_mode: str | None = None,
    ) -> None:
        for name, value in (
            ("top_k", top_k),
            ("max_turns", max_turns),
            ("max_turn_chars", max_turn_chars),
            ("max_doc_chars", max_doc_chars),
            ("max_question_chars", max_question_chars),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.top_k = top_k
        self.max_turns = max_turns
        self.max_doc_chars = max_doc_chars
        self.max_question_chars = max_question_chars
        self.refiner = get_refiner(refiner)

        proto_opts: dict[str, int] = {"max_turn_chars": max_turn_chars}
        if max_queries is not None:
            proto_opts["max_queries"] = max_queries
        self.protocol = (
            get_protocol(protocol, **proto_opts) if isinstance(protocol, str) else get_protocol(protocol)
        )
        self.reward_fn: Reward = get_reward(reward)
        self.examples, corpus_path = resolve_task(task, split, corpus)
        #: The QA file the examples came from, to name its line in errors (None for a named task or examples).
        self._source_file = task if isinstance(task, str | os.PathLike) and os.path.isfile(task) else None
        self.retriever: Retriever = shared_retriever(retriever, corpus_path)
        if isinstance(task, str | os.PathLike):  # a QA file or a named task; engines hand over examples
            check_evidence(self.retriever, self.examples, task, retriever)
        self._by_id = {ex.id: i for i, ex in enumerate(self.examples)}

        per_query = top_k * (max_doc_chars + _MAX_TITLE_CHARS + 24) + self.protocol.max_query_chars + 32
        info_bound = max(self.protocol.max_queries * per_query, _MAX_ERROR_CHARS) + _RENDER_SLACK
        page_chars = getattr(self.protocol, "page_chars", None)
        if self.protocol.can_open and isinstance(page_chars, int):
            info_bound = max(info_bound, page_chars + _MAX_TITLE_CHARS + _RENDER_SLACK)
        prompt_bound = len(self.protocol.prompt("")) + max_question_chars
        self._turn_bound = self.protocol.max_turn_chars
        self._info_bound = info_bound
        self._prompt_bound = prompt_bound
        self.action_space = UnicodeText(self.protocol.max_turn_chars)
        self.observation_space = UnicodeText(
            prompt_bound + max_turns * (self.protocol.max_turn_chars + info_bound)
        )

        #: A turn limit below ``max_turns`` set from outside (what ``gymnasium.make_vec(...,
        #: max_episode_steps=N)`` passes to the vector environment); its truncating step has
        #: ``truncated_by="max_episode_steps"``. None for none.
        self.step_limit: int | None = None
        self._example: QAExample | None = None
        self._pending: StepRequest | None = None
        self._done = True
        #: The hits the latest step showed the agent, per query: cut to ``max_doc_chars``, through
        #: the refiner, as the protocol shows them (``browse``: snippets); after an open, the page.
        self.shown_hits: tuple[tuple[Hit, ...], ...] = ()

    # ---- episode ---------------------------------------------------------------------------------
    def check_question(self, example: QAExample) -> None:
        """Refuse an example whose question is longer than ``max_question_chars`` (``reset`` refuses it too).

        Raises:
            ValueError: Naming the QA file and line the example came from (when the environment was made
                from a QA file), the example and the field.
        """
        if len(example.question) <= self.max_question_chars:
            return
        where = None
        if self._source_file is not None:
            from searchenv.tasks.qa_files import example_where

            where = example_where(self._source_file, example.id)
        raise ValueError(f"{where or self._source_file or 'examples'}: example {example.id!r}: field 'question' "
                         f"has {len(example.question)} characters, over max_question_chars={self.max_question_chars}")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode.

        Args:
            seed: Seeds ``self.np_random``; the same seed gives the same question.
            options: ``{"example_id": id}``, ``{"index": i}``, ``{"example": QAExample}``, or a
                custom ``{"question": str, "answers": [str, ...]}`` (optionally ``evidence_ids``: a
                list of document ids, or one id alone, and ``id``); see
                :func:`~searchenv.tasks.example.choose_example`. Any other key is refused.

        Returns:
            The prompt as the first observation, and info with ``example_id``.
        """
        super().reset(seed=seed)
        self._example = choose_example(self.examples, options, self.np_random, by_id=self._by_id)
        self._prompt = self.protocol.prompt(self._example.question)
        if len(self._example.question) > self.max_question_chars or len(self._prompt) > self._prompt_bound:
            self.check_question(self._example)
            raise ValueError(f"example {self._example.id!r}: the prompt has {len(self._prompt)} characters, over "
                             f"{self._prompt_bound} (max_question_chars={self.max_question_chars})")
        self._parts: list[str] = [self._prompt]
        self._messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.protocol.system_prompt()},
            {"role": "user", "content": self.protocol.user_prompt(self._example.question)},
        ]
        self._turn = 0
        self._num_searches = 0
        self._num_queries = 0
        self._duplicate_queries = 0
        self._invalid_turns = 0
        self._invalid_reasons: dict[str, int] = {}
        self._infra_errors = 0
        self._queries_seen: set[str] = set()
        self._retrieved: list[str] = []
        self._retrieved_set: set[str] = set()
        self._numbers: dict[str, int] = {}  # doc id -> its episode-wide number
        self._numbered: list[Hit] = []  # number - 1 -> the hit as retrieved (whole text, for open)
        self._num_opens = 0
        self._opened: list[str] = []
        self._cited: list[str] | None = None
        self._history: list[dict[str, float]] = []
        self._signal_history: list[dict[str, float]] = []
        self._totals: dict[str, float] = {}
        self._return = 0.0
        self._pending = None
        self._done = False
        return self._prompt, {"example_id": self._example.id, "turn": 0}

    def prepare_step(self, action: str) -> StepRequest:
        """Parse a turn and say which queries it needs searched (first half of :meth:`step`).

        Raises:
            TypeError: If ``action`` is not a string.
            RuntimeError: If the episode is over or a prepared step is still pending.
        """
        if not isinstance(action, str):
            raise TypeError(f"an action must be a str (one model turn), got {type(action).__name__}")
        if self._done or self._example is None:
            raise RuntimeError("the episode is over (or was never started); call reset()")
        if self._pending is not None:
            raise RuntimeError("a prepared step is pending; call finish_step() first")
        action = writable(action)
        parsed = self.protocol.parse(action)
        if isinstance(parsed, Open):
            parsed = self._check_open(parsed)
        if parsed.call is not None and not parsed.call.id:  # a call without an id of its own is named by its turn
            parsed = replace(parsed, call=replace(parsed.call, id=f"call_{self._turn + 1}"))
        queries = parsed.queries if isinstance(parsed, Search) else ()
        self._pending = StepRequest(action, parsed, queries)
        return self._pending

    def _check_open(self, action: Open) -> Open | Invalid:
        """An open of a number this episode never showed, or past the last page, is invalid."""
        shown = len(self._numbered)
        if not 1 <= action.number <= shown:
            where = f"open one of Doc 1-{shown}" if shown else "nothing was shown yet; search first"
            return Invalid(Invalid.UNKNOWN_DOCUMENT, f"Doc {action.number} was not shown in this episode; {where}.",
                           action.call)
        pages = len(self.protocol.paginate(self._numbered[action.number - 1].text))
        if action.page > pages:
            return Invalid(
                Invalid.PAGE_OUT_OF_RANGE, f"Doc {action.number} has {pages} page{'s' if pages > 1 else ''}.",
                action.call,
            )
        return action

    def finish_step(
        self, request: StepRequest, hits: Sequence[Sequence[Hit]] | Exception | None = None
    ) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Complete a prepared step with the hits for its queries (or the retriever's error).

        Args:
            request: What :meth:`prepare_step` returned.
            hits: One hit list per query in ``request.queries``; the exception the retriever
                raised (any ``Exception``: the step becomes an infrastructure error, see
                :func:`search_or_error`); or None when there were no queries.

        Returns:
            The Gymnasium step tuple.
        """
        if request is not self._pending or self._example is None:
            raise RuntimeError("finish_step() needs the request from the latest prepare_step()")
        self._pending = None
        action = request.action
        self._turn += 1
        if isinstance(action, Search):
            out = self._finish_search(action, hits)
        elif isinstance(action, Open):
            out = self._finish_open(action)
        elif isinstance(action, Invalid):
            out = self._finish_invalid(action)
        else:
            out = self._finish_answer(action)
        self.shown_hits = out.shown
        seen_before = frozenset(self._retrieved_set)
        step_ids, new_ids = self._record_retrieved(out.hits)

        terminated = isinstance(action, Answer)
        truncated = not terminated and self._turn >= self.turn_limit
        ctx = StepContext(
            example=self._example,
            action=action,
            turn=self._turn,
            terminated=terminated,
            truncated=truncated,
            text=request.text,
            queries=request.queries,
            hits=out.hits,
            new_doc_ids=tuple(new_ids),
            seen_doc_ids=seen_before,
            num_searches=self._num_searches,
            num_queries=self._num_queries,
            repeated_queries=out.repeated,
            invalid_turns=self._invalid_turns,
            infra_error=isinstance(hits, Exception),
            num_opens=self._num_opens,
            opened_doc_id=out.opened["doc_id"] if out.opened else None,
            cited_doc_ids=out.cited,
            history=tuple(self._history),
            signal_history=tuple(self._signal_history),
        )
        scored = score_step(self.reward_fn, ctx)
        reward, terms = scored.reward, scored.terms
        self._history.append(dict(terms))
        self._signal_history.append(dict(scored.signals))
        for k, v in terms.items():
            self._totals[k] = self._totals.get(k, 0.0) + v
        self._return += reward

        # A too-long turn is stored cut to the action space, so the transcript stays in the
        # observation space; a custom protocol's over-long rendering is cut the same way.
        turn_text = _bounded(request.text, self._turn_bound)
        new_text = _bounded(out.new_text, self._info_bound)
        self._parts.append(turn_text + new_text)
        self._messages.extend(self.protocol.turn_messages(turn_text, action, new_text))
        self._done = terminated or truncated

        info = self._step_info(self._example.id, request, out, new_text, step_ids, scored, hits)
        obs = "".join(self._parts)
        if self.render_mode == "human":
            self.render()
        return obs, reward, terminated, truncated, info

    def _finish_search(self, action: Search, hits: Sequence[Sequence[Hit]] | Exception | None) -> _Turn:
        """Count the queries, then render the hits (cut, refined, numbered) or the retriever's error."""
        out = _Turn()
        self._num_searches += 1
        self._num_queries += len(action.queries)
        for q in action.queries:
            key = normalize_answer(q)
            if key in self._queries_seen:
                out.repeated += 1
            self._queries_seen.add(key)
        self._duplicate_queries += out.repeated
        if isinstance(hits, Exception):
            self._infra_errors += 1
            message = str(hits) if isinstance(hits, RetrieverError) else f"{type(hits).__name__}: {hits}"
            out.new_text = self.protocol.render_error(message[:_MAX_ERROR_CHARS])
            return out
        if hits is None or len(hits) != len(action.queries):
            raise ValueError(
                f"finish_step() got {0 if hits is None else len(hits)} hit lists for "
                f"{len(action.queries)} queries"
            )
        raw = tuple(tuple(per_q[: self.top_k]) for per_q in hits)
        out.hits = tuple(tuple(self._clip(h) for h in per_q) for per_q in raw)
        if self.refiner is not None:
            out.hits, out.refined = self.refiner.refine(action.queries, out.hits)
        whole = {h.doc_id: h for per_q in raw for h in per_q}  # as retrieved: what open reads
        out.numbers = [[self._number(whole.get(h.doc_id, h)) for h in per_q] for per_q in out.hits]
        out.shown = tuple(self.protocol.as_shown(per_q) for per_q in out.hits)
        if self.protocol.episode_numbering:
            out.new_text = self.protocol.render_hits(action.queries, out.shown, numbers=out.numbers)
        else:
            out.new_text = self.protocol.render_hits(action.queries, out.shown)
        return out

    def _finish_open(self, action: Open) -> _Turn:
        """Show one page of a document this episode showed (checked by :meth:`_check_open`)."""
        out = _Turn()
        self._num_opens += 1
        doc = self._numbered[action.number - 1]
        pages = self.protocol.paginate(doc.text)
        page = replace(doc, title=doc.title[:_MAX_TITLE_CHARS], text=pages[action.page - 1])
        out.new_text = self.protocol.render_page(action.number, page, action.page, len(pages), page.text)
        out.shown = ((page,),)
        self._opened.append(doc.doc_id)
        out.opened = {"doc_id": doc.doc_id, "number": action.number, "page": action.page, "pages": len(pages)}
        return out

    def _finish_invalid(self, action: Invalid) -> _Turn:
        """Count the malformed turn by its code and tell the model how to fix it."""
        self._invalid_turns += 1
        self._invalid_reasons[action.code] = self._invalid_reasons.get(action.code, 0) + 1
        return _Turn(new_text=self.protocol.render_invalid(action))

    def _finish_answer(self, action: Answer) -> _Turn:
        """An answer shows nothing; its citations (``arena``) become the doc ids they name."""
        out = _Turn()
        if action.cited is not None:  # numbers never shown in this episode name nothing
            out.cited = tuple(dict.fromkeys(
                self._numbered[n - 1].doc_id for n in action.cited if 1 <= n <= len(self._numbered)
            ))
            self._cited = list(out.cited)
        return out

    def _record_retrieved(self, step_hits: tuple[tuple[Hit, ...], ...]) -> tuple[list[str], list[str]]:
        """This step's doc ids in order, and those never retrieved before in the episode (now recorded)."""
        step_ids: list[str] = []
        new_ids: list[str] = []
        for per_q in step_hits:
            for h in per_q:
                if h.doc_id not in step_ids:
                    step_ids.append(h.doc_id)
                if h.doc_id not in self._retrieved_set:
                    self._retrieved_set.add(h.doc_id)
                    self._retrieved.append(h.doc_id)
                    new_ids.append(h.doc_id)
        return step_ids, new_ids

    def _step_info(
        self,
        example_id: str,
        request: StepRequest,
        out: _Turn,
        new_text: str,
        step_ids: list[str],
        scored: RewardResult,
        hits: Sequence[Sequence[Hit]] | Exception | None,
    ) -> dict[str, Any]:
        """The step's ``info`` (see the class docstring), with the episode's totals when it ended."""
        action = request.action
        info: dict[str, Any] = StepInfo({
            "example_id": example_id,
            "new_text": new_text,
            "turn": self._turn,
            "action_type": _action_type(action),
            "invalid_reason": action.code if isinstance(action, Invalid) else None,
            "num_searches": self._num_searches,
            "queries": list(request.queries),
            "doc_ids": step_ids,
            "reward_terms": dict(scored.terms),
            "reward_signals": dict(scored.signals),
            "infra_error": isinstance(hits, Exception),
            "infra_error_type": type(hits).__name__ if isinstance(hits, Exception) else None,
        })
        if out.refined is not None:
            info["refined"] = out.refined
        if out.numbers is not None and self.protocol.episode_numbering:
            info["doc_numbers"] = out.numbers
        if out.opened is not None:
            info["opened"] = out.opened
        if out.cited is not None:
            info["cited_doc_ids"] = list(out.cited)
        # Every step carries the episode so far, so a wrapper that ends the episode from outside
        # (Gymnasium's TimeLimit) still hands over its outcome and summary.
        info.update(self._final_info(action.text if isinstance(action, Answer) else None))
        if self._done and not isinstance(action, Answer) and self._turn < self.max_turns:
            info["truncated_by"] = "max_episode_steps"
        return info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Take one model turn (parse, search if asked, score).

        Args:
            action: The model's turn as text.

        Returns:
            observation (transcript so far), reward, terminated, truncated, info.

        Raises:
            TypeError: If ``action`` is not a string.
        """
        request = self.prepare_step(action)
        hits = search_or_error(self.retriever, request.queries, self.top_k) if request.queries else None
        return self.finish_step(request, hits)

    def end_episode(self, reason: str) -> dict[str, Any]:
        """End the current episode from outside, unanswered (a caller's token or time budget ran out).

        Args:
            reason: Why, reported as ``truncated_by`` (e.g. ``"max_total_tokens"``).

        Returns:
            The final info a truncating step would have carried: ``example_id``, ``turn``,
            ``answer`` (None), ``gold_answers``, ``em``/``f1``/``contains`` (0), ``evidence_recall``
            of what was retrieved, the ``summary``, and ``truncated_by``. Further steps
            raise until :meth:`reset`.

        Raises:
            RuntimeError: If no episode is running or a prepared step is pending.
        """
        if self._done or self._example is None:
            raise RuntimeError("the episode is over (or was never started); call reset()")
        if self._pending is not None:
            raise RuntimeError("a prepared step is pending; call finish_step() first")
        self._done = True
        return StepInfo({"example_id": self._example.id, "turn": self._turn, **self._final_info(None),
                         "truncated_by": reason})

    def _number(self, hit: Hit) -> int:
        """The episode-wide number of a retrieved document (a new one gets the next number)."""
        n = self._numbers.get(hit.doc_id)
        if n is None:
            self._numbered.append(hit)
            n = self._numbers[hit.doc_id] = len(self._numbered)
        return n

    def _clip(self, hit: Hit) -> Hit:
        if len(hit.text) <= self.max_doc_chars and len(hit.title) <= _MAX_TITLE_CHARS:
            return hit
        return replace(hit, title=hit.title[:_MAX_TITLE_CHARS], text=hit.text[: self.max_doc_chars])

    def _final_info(self, answer: str | None) -> dict[str, Any]:
        ex = self._example
        if ex is None:  # pragma: no cover - guarded by callers
            raise RuntimeError("no episode")
        golds = ex.answers
        em = exact_match(answer, golds) if answer is not None else 0.0
        f1 = f1_score(answer, golds) if answer is not None else 0.0
        contains = gold_in_prediction(answer, golds) if answer is not None else 0.0
        gold_ev = set(ex.evidence_ids)
        recall = len(gold_ev & self._retrieved_set) / len(gold_ev) if gold_ev else None
        return {
            "answer": answer,
            "gold_answers": list(golds),
            "em": em,
            "f1": f1,
            "contains": contains,
            "evidence_recall": recall,
            SUMMARY_KEY: {
                "return": self._return,
                "reward_totals": dict(self._totals),
                "turns": self._turn,
                "searches": self._num_searches,
                "queries": self._num_queries,
                "duplicate_queries": self._duplicate_queries,
                "invalid_turns": self._invalid_turns,
                "invalid_reasons": dict(self._invalid_reasons),
                "infra_errors": self._infra_errors,
                "retrieved_doc_ids": list(self._retrieved),
                "opens": self._num_opens,
                "opened_doc_ids": list(self._opened),
                "cited_doc_ids": None if self._cited is None else list(self._cited),
                "em": em,
                "f1": f1,
                "contains": contains,
                "evidence_recall": recall,
                "answered": answer is not None,
                "answer_admissible": answer is not None and answer_admissible(answer, golds),
            },
        }

    # ---- views -----------------------------------------------------------------------------------
    @property
    def turn_limit(self) -> int:
        """Turns before truncation: ``max_turns``, or a lower :attr:`step_limit`."""
        return self.max_turns if self.step_limit is None else min(self.max_turns, self.step_limit)

    @property
    def example(self) -> QAExample:
        """The current episode's example."""
        if self._example is None:
            raise RuntimeError("call reset() first")
        return self._example

    @property
    def transcript(self) -> str:
        """The transcript so far (the observation)."""
        return "".join(self._parts) if self._example is not None else ""

    def messages(self) -> list[dict[str, Any]]:
        """The transcript as chat messages: system, user, then assistant / tool turns.

        Under the ``tools`` protocols these are what a tool-calling chat template renders: an
        ``assistant`` message has its reasoning as ``content`` and its call in ``tool_calls``, and
        the result is a ``tool`` message with ``tool_call_id`` and ``name``
        (:meth:`~searchenv.protocols.ToolsProtocol.turn_messages`).
        """
        return [copy.deepcopy(m) for m in self._messages] if self._example is not None else []

    def render(self) -> str | None:
        """``ansi``: return the transcript; ``human``: print it with role labels."""
        if self.render_mode == "ansi":
            return self.transcript
        if self.render_mode == "human":
            for m in self.messages():
                calls = "".join(f"\n-> {c['function']['name']}({c['function']['arguments']})"
                                for c in m.get("tool_calls") or ())
                print(f"[{m['role']}]\n{m['content']}{calls}\n")
        return None


def _action_type(action: Action) -> str:
    if isinstance(action, Search):
        return "search"
    if isinstance(action, Open):
        return "open"
    return "answer" if isinstance(action, Answer) else "invalid"


def _bounded(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else cut to ``limit`` ending in ``[...cut]``."""
    if len(text) <= limit:
        return text
    if limit <= len(_CUT_MARK):
        return text[:limit]
    return text[: limit - len(_CUT_MARK)] + _CUT_MARK
