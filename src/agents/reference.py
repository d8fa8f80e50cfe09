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
    Scripted, no model (:mod:`agents.policies.scripted`). ``heuristic`` is the strongest
    non-learned baseline: question search, the rule-based reader (:mod:`agents.reader`), a
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
    The trained searcher shipped with the package (:mod:`agents.searcher`: SmolLM2-135M-Instruct
    with the LoRA adapters of ``benchmarks/learning.py``), driven like ``llm``; it brings its
    own model, so the ``policy`` argument does not apply to it.

LLM contexts are kept as token ids: the chat prompt (system + user) from
``policy.chat_prompt_ids``, then each turn's generated ids exactly as generated, and between two
generated turns the text written there (the environment's replies, scripted turns, the answer
slot's ``<answer>``) encoded as one string; nothing generated is retokenized.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agents.chat import chat_renderer, reply_text
from agents.policies.base import ChatPolicy, Generation, GenerationError, Policy
from searchenv.env import SearchQAEnv, search_or_error
from searchenv.protocols import ActionProtocol, get_protocol
from searchenv.retrievers.base import Hit, Retriever
from searchenv.tasks import QAExample

AGENT_NAMES = ("oracle", "heuristic", "random", "direct", "rag", "iterative", "llm", "searcher")
LLM_AGENTS = frozenset({"direct", "rag", "iterative", "llm"})


@dataclass(frozen=True)
class Turn:
    """One agent turn.

    Attributes:
        text: The turn as sent to the environment.
        generated_tokens: Tokens a model generated for it (0 for scripted text).
        error: Why the model gave no turn (its request failed after retries); the driver then ends
            the episode as failed instead of sending ``text``.
    """

    text: str
    generated_tokens: int = 0
    error: str | None = None


@dataclass
class StepRecord:
    """One finished step of an episode, as the agent may look back on it.

    Attributes:
        text: The agent's turn.
        info: The environment's step info.
        hits: The hits shown for each query of the turn (empty unless a search).
    """

    text: str
    info: dict[str, Any]
    hits: tuple[tuple[Hit, ...], ...] = ()


@dataclass
class EpisodeState:
    """What an agent sees of one running episode.

    Attributes:
        position: Index of the episode in the run (stable across batch sizes).
        example: The question with its gold data (scripted agents such as the oracle read it;
            model agents must not).
        protocol: The environment's action protocol.
        max_turns: The episode's turn budget.
        seed: A per-episode seed derived from the run seed and ``position``.
        messages: The transcript as chat messages (system, user, then assistant/tool turns).
        steps: Finished steps, oldest first.
        memory: Scratch space owned by the agent (e.g. token ids of an LLM context).
    """

    position: int
    example: QAExample
    protocol: ActionProtocol
    max_turns: int
    seed: int
    messages: list[dict[str, str]]
    steps: list[StepRecord] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)

    @property
    def turn(self) -> int:
        """Turns taken so far."""
        return len(self.steps)

    @property
    def turns_left(self) -> int:
        """Turns left in the budget, this one included."""
        return self.max_turns - len(self.steps)

    def doc_number(self, doc_id: str) -> int | None:
        """The number the environment gave a shown document, or None if not shown or not numbered.

        Only protocols that number documents across the episode (``arena``, ``browse``) number them.
        """
        for step in self.steps:
            for per_query, nums in zip(step.hits, step.info.get("doc_numbers") or (), strict=False):
                for h, n in zip(per_query, nums, strict=False):
                    if h.doc_id == doc_id:
                        return int(n)
        return None

    def opened_ids(self) -> list[str]:
        """Documents opened so far (``browse``), in order, each once."""
        out: list[str] = []
        for step in self.steps:
            opened = step.info.get("opened")
            if opened and opened["doc_id"] not in out:
                out.append(opened["doc_id"])
        return out

    def read_hits(self) -> list[Hit]:
        """Every document shown so far with the most of it the agent has read.

        A document opened (``browse``) has the text of its opened pages in page order instead
        of its search snippet; otherwise as :meth:`retrieved_hits`.
        """
        pages: dict[str, dict[int, str]] = {}
        for step in self.steps:
            opened = step.info.get("opened")
            if opened and step.hits:
                pages.setdefault(opened["doc_id"], {})[int(opened["page"])] = step.hits[0][0].text
        out = []
        for h in self.retrieved_hits():
            if h.doc_id in pages:
                h = replace(h, text=" ".join(t for _, t in sorted(pages[h.doc_id].items())))
            out.append(h)
        return out

    def retrieved_hits(self) -> list[Hit]:
        """Every distinct document retrieved so far, in order of first retrieval."""
        seen: set[str] = set()
        out: list[Hit] = []
        for step in self.steps:
            for per_query in step.hits:
                for h in per_query:
                    if h.doc_id not in seen:
                        seen.add(h.doc_id)
                        out.append(h)
        return out


class Agent(Protocol):
    """Anything that produces one turn per running episode, batched.

    Attributes:
        name: Short name used in tables and file names.
        max_turns: The agent's own turn budget (None: the environment's).
    """

    name: str
    max_turns: int | None

    def adapt_protocol(self, protocol: ActionProtocol) -> ActionProtocol:
        """The protocol the environment should use for this agent (e.g. with its own prompt)."""
        ...

    def act(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """Return one turn for each episode, in order.

        Args:
            episodes: The active episodes of this round.
            seed: Seed for any sampling in this round.
        """
        ...


@dataclass
class EpisodeRecord:
    """A finished episode: the transcript plus the environment's scores.

    Attributes:
        example_id: The example's id.
        question: The question.
        gold: Gold answers.
        answer: The agent's final answer (None if it never answered).
        messages: The transcript as chat messages.
        steps: Per step: ``turn``, ``action_type``, ``invalid_reason``, ``queries``, ``doc_ids``,
            ``reward``, ``reward_terms``, ``generated_tokens``; ``opened`` after an open and
            ``cited_doc_ids`` after a citing answer.
        metrics: ``em``, ``f1``, ``contains``, ``evidence_recall`` (None without gold evidence),
            ``searches``, ``queries``, ``turns``, ``invalid_turns``, ``opens``, ``answered``, ``return``,
            ``generated_tokens``, ``infra_errors``; empty for a failed episode.
        error: Why the episode failed (the model gave no turn: its request failed after retries),
            or None for a finished episode. A failed episode is not scored.
    """

    example_id: str
    question: str
    gold: list[str]
    answer: str | None
    messages: list[dict[str, str]]
    steps: list[dict[str, Any]]
    metrics: dict[str, Any]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (one transcript line; ``error`` only for a failed episode)."""
        out = {
            "example_id": self.example_id,
            "question": self.question,
            "gold": self.gold,
            "answer": self.answer,
            "messages": self.messages,
            "steps": self.steps,
            "metrics": self.metrics,
        }
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """The record :meth:`to_dict` wrote.

        Raises:
            KeyError, TypeError: If a field is missing or not of its type's shape.
        """
        error = data.get("error")
        return cls(str(data["example_id"]), str(data["question"]), [str(g) for g in data["gold"]],
                   None if data["answer"] is None else str(data["answer"]), list(data["messages"]),
                   list(data["steps"]), dict(data["metrics"]), None if error is None else str(error))


def with_system_prompt(protocol: ActionProtocol, text: str) -> ActionProtocol:
    """A copy of ``protocol`` (same parsing and rendering) whose system prompt is ``text``.

    Args:
        protocol: The protocol to copy.
        text: The new system prompt.

    Returns:
        A new protocol instance; ``protocol`` is unchanged.
    """
    base = type(protocol)
    cls = type(f"{base.__name__}WithPrompt", (base,), {"system_prompt": lambda self: text})
    new = copy.copy(protocol)
    new.__class__ = cls
    return new


def run_agent(
    agent: Agent,
    examples: Sequence[QAExample],
    retriever: Retriever,
    *,
    protocol: str | ActionProtocol = "search-r1",
    top_k: int = 3,
    max_turns: int = 4,
    reward: str | Mapping[str, float] = "default",
    batch_size: int = 32,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    positions: Sequence[int] | None = None,
    on_records: Callable[[list[tuple[int, EpisodeRecord]]], None] | None = None,
) -> list[EpisodeRecord]:
    """Run one episode per example through ``SearchQAEnv``, ``batch_size`` episodes at a time.

    An episode whose model request fails after its retries (an agent returns a :class:`Turn`
    with ``error``) ends as a failed :class:`EpisodeRecord` (``error`` set, not scored); the
    other episodes go on.

    Args:
        agent: The agent.
        examples: The questions, in order; episode ``i`` gets per-episode seed from
            ``(seed, positions[i])``, so results do not depend on ``batch_size`` for scripted agents.
        retriever: Shared by all episodes; every round searches all queries in one call.
        protocol: Protocol name or instance (the agent may adapt it, e.g. its prompt).
        top_k: Documents per query.
        max_turns: Turn budget (capped by the agent's own ``max_turns``).
        reward: Reward preset name or term weights.
        batch_size: Episodes in flight at once.
        seed: Run seed.
        env_kwargs: Further ``SearchQAEnv`` keyword arguments.
        on_batch: Called with the number of episodes finished after each batch.
        positions: Each example's position in the whole run (default ``0, 1, ...``): a run that
            continues an interrupted one passes the positions of the examples it still has to
            run, so they get the seeds, and batches, they had.
        on_records: Called after each batch with its ``(position, record)`` pairs (to save
            finished episodes as they complete).

    Returns:
        One :class:`EpisodeRecord` per example, in order.

    Raises:
        ValueError: For a non-positive ``batch_size``, an empty example list, or ``positions`` of
            another length.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not examples:
        raise ValueError("examples must not be empty")
    places = list(range(len(examples))) if positions is None else [int(p) for p in positions]
    if len(places) != len(examples):
        raise ValueError(f"positions has {len(places)} entries for {len(examples)} examples")
    proto = agent.adapt_protocol(get_protocol(protocol) if isinstance(protocol, str) else protocol)
    turns_cap = max_turns if agent.max_turns is None else min(max_turns, agent.max_turns)
    kwargs = dict(env_kwargs or {})
    n_envs = min(batch_size, len(examples))
    envs = [
        SearchQAEnv(
            list(examples),
            retriever=retriever,
            protocol=proto,
            top_k=top_k,
            max_turns=turns_cap,
            reward=reward,
            **kwargs,
        )
        for _ in range(n_envs)
    ]
    records: list[EpisodeRecord] = []
    for start in range(0, len(examples), n_envs):
        batch = list(zip(places[start : start + n_envs], examples[start : start + n_envs], strict=True))
        done = _run_batch(agent, envs[: len(batch)], batch, retriever, top_k, seed)
        records.extend(done)
        if on_records is not None:
            on_records([(pos, rec) for (pos, _), rec in zip(batch, done, strict=True)])
        if on_batch is not None:
            on_batch(len(records))
    return records


def _episode_seed(seed: int, position: int) -> int:
    return (seed * 1_000_003 + position * 7919 + 17) % (2**31 - 1)


def _run_batch(
    agent: Agent,
    envs: Sequence[SearchQAEnv],
    batch: Sequence[tuple[int, QAExample]],
    retriever: Retriever,
    top_k: int,
    seed: int,
) -> list[EpisodeRecord]:
    states: list[EpisodeState] = []
    step_logs: list[list[dict[str, Any]]] = []
    finals: list[dict[str, Any] | None] = [None] * len(batch)
    for env, (pos, ex) in zip(envs, batch, strict=True):
        env.reset(seed=_episode_seed(seed, pos), options={"example_id": ex.id})
        states.append(EpisodeState(pos, ex, env.protocol, env.max_turns, _episode_seed(seed, pos), env.messages()))
        step_logs.append([])
    errors: list[str | None] = [None] * len(batch)
    active = list(range(len(batch)))
    round_no = 0
    while active:
        round_seed = _episode_seed(seed, batch[0][0] * 131 + round_no)
        turns = agent.act([states[i] for i in active], seed=round_seed)
        if len(turns) != len(active):
            raise RuntimeError(f"agent {agent.name!r} returned {len(turns)} turns for {len(active)} episodes")
        for i, t in zip(active, turns, strict=True):
            errors[i] = t.error
        turns = [t for t in turns if t.error is None]
        active = [i for i in active if errors[i] is None]  # a failed episode ends here, unscored
        requests = [envs[i].prepare_step(t.text) for i, t in zip(active, turns, strict=True)]
        queries = [q for r in requests for q in r.queries]
        all_hits = search_or_error(retriever, queries, top_k) if queries else None
        offset = 0
        still: list[int] = []
        for i, turn, req in zip(active, turns, requests, strict=True):
            hits: list[list[Hit]] | Exception | None = None
            if req.queries:
                if isinstance(all_hits, Exception):
                    hits = all_hits
                elif all_hits is not None:
                    hits = all_hits[offset : offset + len(req.queries)]
                offset += len(req.queries)
            _, reward, terminated, truncated, info = envs[i].finish_step(req, hits)
            shown = envs[i].shown_hits  # what the agent was shown: cut to max_doc_chars, refined
            states[i].steps.append(StepRecord(turn.text, info, shown))
            states[i].messages = envs[i].messages()
            step_logs[i].append(
                {
                    "turn": info["turn"],
                    "action_type": info["action_type"],
                    "invalid_reason": info["invalid_reason"],
                    "queries": info["queries"],
                    "doc_ids": info["doc_ids"],
                    "reward": float(reward),
                    "reward_terms": info["reward_terms"],
                    "generated_tokens": turn.generated_tokens,
                    "infra_error": info["infra_error"],
                    **{k: info[k] for k in ("opened", "cited_doc_ids") if k in info},
                }
            )
            if terminated or truncated:
                finals[i] = info
            else:
                still.append(i)
        active = still
        round_no += 1
    out = []
    for i, (_, ex) in enumerate(batch):
        final = finals[i]
        if errors[i] is not None:
            out.append(EpisodeRecord(ex.id, ex.question, list(ex.answers), None, states[i].messages, step_logs[i], {},
                                     errors[i]))
            continue
        if final is None:  # pragma: no cover - every episode ends by answer or budget
            raise RuntimeError("episode did not finish")
        ep = final["episode"]
        gen = sum(s["generated_tokens"] for s in step_logs[i])
        metrics = {
            "em": final["em"],
            "f1": final["f1"],
            "contains": final["contains"],
            "evidence_recall": final["evidence_recall"],
            "searches": ep["searches"],
            "queries": ep["queries"],
            "turns": ep["turns"],
            "invalid_turns": ep["invalid_turns"],
            "opens": ep["opens"],
            "answered": ep["answered"],
            "return": ep["return"],
            "generated_tokens": gen,
            "infra_errors": ep["infra_errors"],
            "retrieved_doc_ids": ep["retrieved_doc_ids"],
        }
        out.append(
            EpisodeRecord(
                ex.id, ex.question, list(ex.answers), final["answer"], states[i].messages, step_logs[i], metrics
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# LLM-prompted agents
# ---------------------------------------------------------------------------------------------

DIRECT_PROMPT = (
    "Answer the question with a short answer (a name, place, year or a few words) and no "
    "explanation, written inside <answer> and </answer>, for example <answer> Ostrava </answer>."
)

RAG_PROMPT = (
    "Answer the question using the information retrieved for it. Give a short answer (a name, "
    "place, year or a few words) and no explanation, written inside <answer> and </answer>, for "
    "example <answer> Ostrava </answer>."
)

#: The worked example the ``iterative`` agent is shown: a made-up world, not from any task.
FEW_SHOT_EXAMPLE = (
    "Question: In which country was the author of The Amber Gate born?\n"
    "<think> I need the author of The Amber Gate first. </think>\n"
    "<search> Who wrote The Amber Gate? </search>\n\n"
    "<information>Doc 1(Title: The Amber Gate) The Amber Gate is a novel written by Irena Voss."
    "</information>\n\n"
    "<think> The author is Irena Voss. Now I need where Irena Voss was born. </think>\n"
    "<search> Where was Irena Voss born? </search>\n\n"
    "<information>Doc 1(Title: Irena Voss) Irena Voss is a writer born in Halden, a town in "
    "Norway.</information>\n\n"
    "<think> Irena Voss was born in Halden, which is in Norway. </think>\n"
    "<answer> Norway </answer>"
)


class LLMAgent:
    """An agent whose turns a :class:`~agents.policies.base.Policy` generates, batched.

    Args:
        name: Short name.
        policy: The model: a :class:`~agents.policies.base.Policy` (the context is kept as token
            ids) or a :class:`~agents.policies.base.ChatPolicy` (the context is sent as messages,
            see :meth:`_act_chat`).
        system_prompt: ``f(protocol) -> str`` giving the system prompt (None: the protocol's own).
        first_search: Make the first turn a scripted search for the question itself (``rag``).
        script: ``script(episode) -> text or None``: a scripted turn for this episode now (sent as
            is, nothing generated), or None to let the model write it. ``first_search`` is the
            script that searches the question at turn 0.
        answer_slot: Answer-only turns: the turn starts with ``<answer>`` and the model writes
            the answer; if it never closes the tag, its first line is the answer.
        max_turns: The agent's own turn budget (None: the environment's).
        max_new_tokens: Generation cap per turn.
        temperature: 0 is greedy.
        top_p: Nucleus sampling threshold.
    """

    def __init__(
        self,
        name: str,
        policy: Policy | ChatPolicy,
        *,
        system_prompt: Callable[[ActionProtocol], str] | None = None,
        first_search: bool = False,
        script: Callable[[EpisodeState], str | None] | None = None,
        answer_slot: bool = False,
        max_turns: int | None = None,
        max_new_tokens: int = 96,
        temperature: float = 0.0,
        top_p: float = 1.0,
    ) -> None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"max_turns must be a positive integer or None, got {max_turns!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        self.name = name
        self.policy = policy
        self.system_prompt = system_prompt
        self.first_search = first_search
        self.script = script
        self.answer_slot = answer_slot
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p

    def adapt_protocol(self, protocol: ActionProtocol) -> ActionProtocol:
        """Install this agent's system prompt (if any) on a copy of ``protocol``."""
        if self.system_prompt is None:
            return protocol
        return with_system_prompt(protocol, self.system_prompt(protocol))

    def _context(self, ep: EpisodeState) -> tuple[list[int], list[str]]:
        """The episode's context: ids up to the end of the last generated turn, and the text written since.

        The text (the environment's replies, scripted turns) is not encoded yet.
        """
        policy = self.policy
        if isinstance(policy, ChatPolicy):
            raise TypeError("a chat policy keeps no token-id context")
        ids: list[int] | None = ep.memory.get("ids")
        if ids is None:
            ids = list(policy.chat_prompt_ids(ep.messages[:2]))
            ep.memory["ids"] = ids
            ep.memory["text"] = []
            ep.memory["synced"] = 0
        text: list[str] = ep.memory["text"]
        # Add what the environment said after turns we have not yet added (under ``tools``: the
        # chat template's text around the tool message, as the rollout engine inserts it).
        synced = ep.memory["synced"]
        render = chat_renderer(policy) if ep.protocol.native_tools and len(ep.steps) > synced else None
        for k, step in enumerate(ep.steps[synced:], start=synced):
            if not step.info["new_text"]:
                continue
            if render is None:
                text.append(step.info["new_text"])
                continue
            turn = _assistant_index(ep.messages, len(ep.steps) - k)
            after = next((i for i in range(turn + 1, len(ep.messages)) if ep.messages[i]["role"] == "assistant"),
                         len(ep.messages))
            end, reply = reply_text(render, ep.messages[:after], turn, done=False)
            tokenizer = getattr(policy, "tokenizer", None)
            eos, eos_id = getattr(tokenizer, "eos_token", None), getattr(tokenizer, "eos_token_id", None)
            if not text and ids and ids[-1] == eos_id and isinstance(eos, str) and end.startswith(eos):
                end = end[len(eos):]  # the turn ended at the end-of-turn token, which its ids already hold
            text.append(end + reply)
        ep.memory["synced"] = len(ep.steps)
        return ids, text

    def _scripted(self, ep: EpisodeState) -> str | None:
        if self.first_search and ep.turn == 0:
            return ep.protocol.from_tags(f"<search> {ep.example.question} </search>")
        return self.script(ep) if self.script is not None else None

    def _stop(self, episodes: Sequence[EpisodeState]) -> tuple[str, ...]:
        return ("</answer>",) if self.answer_slot else tuple(episodes[0].protocol.stop) if episodes else ()

    def _seeds(self, episodes: Sequence[EpisodeState], todo: Sequence[int], seed: int) -> list[int]:
        # Per-episode seeds make sampling independent of which other episodes share the batch.
        return [_episode_seed(seed, episodes[j].seed * 64 + episodes[j].turn) for j in todo]

    def act(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """Generate one turn per episode with one batched ``generate`` (or ``generate_chat``) call."""
        if isinstance(self.policy, ChatPolicy):
            return self._act_chat(episodes, seed=seed)
        policy = self.policy
        out: list[Turn | None] = [None] * len(episodes)
        todo: list[int] = []
        prompts: list[list[int]] = []
        prefixes: list[str] = []
        for i, ep in enumerate(episodes):
            ids, written = self._context(ep)
            scripted = self._scripted(ep)
            if scripted is not None:
                written.append(scripted)
                out[i] = Turn(scripted, 0)
                continue
            prefix = "<answer>" if self.answer_slot else ""
            # Text written since the last generated turn is encoded as one string (with the
            # answer slot's "<answer>"), so those ids are the tokenizer's own encoding of that
            # text, as a server that takes only text would make them; generated ids stay as
            # generated.
            written.append(prefix)
            tail = "".join(written)
            todo.append(i)
            prompts.append(ids + (self.policy.encode(tail) if tail else []))
            prefixes.append(prefix)
        if todo:
            # One generate call for the whole round (the policy chunks it by its max_batch_size and
            # reuses the key/values of the previous round's prompts).
            gens, failures = _generations_or_failures(lambda: policy.generate(
                prompts,
                stop=self._stop(episodes),
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                seed=self._seeds(episodes, todo, seed),
            ))
            if len(gens) != len(prompts):
                raise RuntimeError(f"policy returned {len(gens)} generations for {len(prompts)} prompts")
            for j, prompt, prefix, gen, failure in zip(todo, prompts, prefixes, gens, failures, strict=True):
                if gen is None:
                    out[j] = Turn("", 0, failure or "the model gave no generation")
                    continue
                memory = episodes[j].memory
                memory["ids"] = prompt + list(gen.token_ids)
                memory["text"] = []
                text = prefix + gen.text
                if self.answer_slot:
                    text = episodes[j].protocol.from_tags(close_answer(text))  # a call under tools
                out[j] = Turn(text, gen.num_tokens)
        return [t if t is not None else Turn("", 0) for t in out]

    def _act_chat(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        """One turn per episode from a chat policy: the transcript as messages, no token ids.

        A chat API cannot continue a prefix, so an answer-slot turn is the reply from its
        ``<answer>`` on (the whole reply as the answer if it has none).
        """
        policy: ChatPolicy = self.policy  # type: ignore[assignment]
        out: list[Turn | None] = [None] * len(episodes)
        todo: list[int] = []
        conversations: list[list[dict[str, str]]] = []
        for i, ep in enumerate(episodes):
            scripted = self._scripted(ep)
            if scripted is not None:
                out[i] = Turn(scripted, 0)
                continue
            todo.append(i)
            conversations.append(chat_messages(ep.messages, tools=ep.protocol.native_tools,
                                               text_turns=ep.memory.get("text_turns", ()),
                                               turn_texts=[s.text for s in ep.steps]))
        if todo:
            protocol = episodes[todo[0]].protocol
            # native tool calls: the protocol's tools, and no stop strings (a server's tool-call
            # parser needs the call's closing markup; the server ends the turn after the call)
            native = {"tools": protocol.tools} if protocol.native_tools else {}
            gens, failures = _generations_or_failures(lambda: policy.generate_chat(
                conversations,
                stop=() if native else self._stop(episodes),
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                seed=self._seeds(episodes, todo, seed),
                **native,
            ))
            if len(gens) != len(conversations):
                raise RuntimeError(f"policy returned {len(gens)} replies for {len(conversations)} conversations")
            for j, gen, failure in zip(todo, gens, failures, strict=True):
                if gen is None:
                    out[j] = Turn("", 0, failure or "the model gave no reply")
                    continue
                text = gen.text
                if self.answer_slot:
                    start = text.find("<answer>")
                    text = close_answer(text[start:] if start >= 0 else "<answer>" + text)
                    text = episodes[j].protocol.from_tags(text)  # the scaffold's answer as a call under tools
                if protocol.native_tools and not gen.tool_calls:  # the server did not parse a call: a text turn
                    episodes[j].memory.setdefault("text_turns", set()).add(episodes[j].turn)
                out[j] = Turn(text, gen.num_tokens)
        return [t if t is not None else Turn("", 0) for t in out]


def chat_messages(messages: Sequence[Mapping[str, Any]], *, tools: bool = False, text_turns: Collection[int] = (),
                  turn_texts: Sequence[str] = ()) -> list[dict[str, Any]]:
    """An episode's transcript as chat-API messages.

    Chat APIs take a ``tool`` message only as the answer to a structured tool call: under the tag
    protocols the environment's ``tool`` replies become ``user`` turns (the environment speaks as
    the user); with ``tools`` (native tool calls) the messages are kept as the environment has
    them (``tool_calls``, ``tool`` messages with ``tool_call_id``), except the turns in
    ``text_turns``: the server gave those as text, not as parsed calls (it has no tool-call parser
    for the model), so they go back as that text (``turn_texts[k]``) and their replies as ``user``
    messages, as under the tag protocols. A chat template without tool markup would otherwise
    render an assistant message of only ``tool_calls`` as an empty turn.

    Args:
        messages: The environment's messages.
        tools: The protocol speaks native tool calls.
        text_turns: Turn numbers (0-based) written as text by a server that parses no calls.
        turn_texts: Each turn's text as sent to the environment.
    """
    if not tools:
        return [{"role": "user" if m["role"] == "tool" else m["role"], "content": m["content"]} for m in messages]
    out: list[dict[str, Any]] = []
    turn = -1
    as_text = False
    for m in messages:
        if m["role"] == "assistant":
            turn += 1
            as_text = turn in text_turns and turn < len(turn_texts)
            out.append({"role": "assistant", "content": turn_texts[turn]} if as_text else dict(m))
        elif m["role"] == "tool" and as_text:
            out.append({"role": "user", "content": m["content"]})
        else:
            out.append(dict(m))
    return out


def _assistant_index(messages: Sequence[Mapping[str, Any]], back: int) -> int:
    """Index of the ``back``-th last ``assistant`` message (1: the last)."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            seen += 1
            if seen == back:
                return i
    raise ValueError(f"the transcript has fewer than {back} assistant messages")


def close_answer(text: str) -> str:
    """Close an answer-slot turn ``<answer> ...`` the model left open.

    A turn that already holds ``</answer>`` is cut just after it; otherwise the first
    non-empty line of the continuation becomes the answer, or the turn is returned as it is
    when there is none (the environment then marks it invalid).

    Args:
        text: ``"<answer>"`` followed by the model's continuation.

    Returns:
        The turn to send.
    """
    end = text.find("</answer>")
    if end >= 0:
        return text[: end + len("</answer>")]
    body = text[len("<answer>") :] if text.startswith("<answer>") else text
    for line in body.splitlines():
        line = line.strip()
        if line:
            return f"<answer> {line} </answer>"
    return text


def _generations_or_failures(
    call: Callable[[], Sequence[Generation]],
) -> tuple[list[Generation | None], list[str | None]]:
    """A batched generate call's results, and per prompt why it failed (None where it did not).

    When some requests fail (:class:`~agents.policies.base.GenerationError`), the others'
    generations are kept: their episodes go on and only the failed ones fail.
    """
    try:
        gens: list[Generation | None] = list(call())
    except GenerationError as exc:
        return list(exc.results), list(exc.errors)
    return gens, [None] * len(gens)


def make_agent(
    name: str,
    *,
    policy: Policy | ChatPolicy | None = None,
    max_new_tokens: int = 96,
    temperature: float = 0.0,
    seed: int = 0,
    device: str | None = None,
) -> Agent:
    """Build a reference agent by name.

    Args:
        name: One of :data:`AGENT_NAMES`.
        policy: The model for ``direct``, ``rag``, ``iterative`` and ``llm`` (``searcher`` loads its own).
        max_new_tokens: Generation cap per turn (LLM agents).
        temperature: Sampling temperature (LLM agents; 0 is greedy).
        seed: Seed of the ``random`` agent.
        device: Where ``searcher`` loads its model (a device name, see :mod:`agents.devices`; None: auto).

    Returns:
        The agent.

    Raises:
        ValueError: For an unknown name, or an LLM agent without a policy.
    """
    from agents.policies.scripted import HeuristicAgent, OracleAgent, RandomAgent

    if name == "oracle":
        return OracleAgent()
    if name == "heuristic":
        return HeuristicAgent()
    if name == "searcher":
        from agents.devices import resolve_device
        from agents.searcher import load_searcher

        return LLMAgent(name, load_searcher(device=resolve_device(device)), max_new_tokens=max_new_tokens,
                        temperature=temperature)
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
