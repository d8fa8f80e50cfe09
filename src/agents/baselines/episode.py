"""What an agent sees and returns: turns, episode state, the ``Agent`` protocol, a finished episode.

Types, and the batching loop both batched runners share (:func:`batch_positions`,
:func:`run_batches`), in a leaf module: the driver, the pipelines, the scripted agents and the
LLM agents all import them from here, so none of them needs another.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from searchenv.protocols import ActionProtocol
from searchenv.retrievers.base import Hit
from searchenv.tasks import QAExample


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
class EpisodeResult:
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
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeResult:
        """The record :meth:`to_dict` wrote.

        Raises:
            KeyError, TypeError: If a field is missing or not of its type's shape.
        """
        error = data.get("error")
        return cls(str(data["example_id"]), str(data["question"]), [str(g) for g in data["gold"]],
                   None if data["answer"] is None else str(data["answer"]), list(data["messages"]),
                   list(data["steps"]), dict(data["metrics"]), None if error is None else str(error))


def batch_positions(examples: Sequence[QAExample], batch_size: int, positions: Sequence[int] | None) -> list[int]:
    """Check the arguments of a batched run and give each example's position in the whole run.

    Shared by :func:`~agents.baselines.driver.run_agent` and
    :func:`~agents.baselines.pipelines.run_pipeline`.

    Args:
        examples: The questions, in order.
        batch_size: Episodes in flight at once.
        positions: Each example's position in the whole run (None: ``0, 1, ...``).

    Returns:
        One position per example, in order.

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
    return places


def run_batches(
    examples: Sequence[QAExample],
    places: Sequence[int],
    size: int,
    run_batch: Callable[[list[tuple[int, QAExample]]], list[EpisodeResult]],
    *,
    on_records: Callable[[list[tuple[int, EpisodeResult]]], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[EpisodeResult]:
    """Run the examples ``size`` at a time, in order, and collect their records.

    Args:
        examples: The questions, in order.
        places: Each example's position in the whole run (:func:`batch_positions`).
        size: Examples per batch (a positive integer).
        run_batch: Runs one batch of ``(position, example)`` pairs and returns one record per pair,
            in order.
        on_records: Called after each batch with its ``(position, record)`` pairs.
        on_batch: Called after each batch (after ``on_records``) with the number of episodes
            finished so far.

    Returns:
        One record per example, in order.
    """
    records: list[EpisodeResult] = []
    for start in range(0, len(examples), size):
        batch = list(zip(places[start : start + size], examples[start : start + size], strict=True))
        done = run_batch(batch)
        records.extend(done)
        if on_records is not None:
            on_records([(pos, rec) for (pos, _), rec in zip(batch, done, strict=True)])
        if on_batch is not None:
            on_batch(len(records))
    return records


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
