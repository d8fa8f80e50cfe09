"""What the rollout engine returns, per episode and per run.

One :class:`TokenEpisode` per episode (token ids, masks, spans, rewards), the run's
:class:`RolloutStats`, and :class:`ProbeStart` (a REX-RAG probe's replay point).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

#: ``stop_reason`` values of an :class:`TokenEpisode`.
STOP_REASONS = ("answered", "max_turns", "max_total_tokens")


@dataclass
class TokenEpisode:
    """One episode as token ids, masks, spans and rewards.

    Attributes:
        index: Position of the episode in the run (example-major:
            ``first_index + group * group_size + sample``).
        group: Index of the example in the input list (episodes of one group share a question).
        sample: Index of the sample within its group.
        example_id: The example's id.
        seed: The episode's seed (its turns sample with seeds derived from it).
        prompt_ids: Chat prompt (system + user + generation prompt) token ids.
        completion_ids: Every token after the prompt: policy turns and environment insertions.
        loss_mask: 1 on policy tokens, 0 on environment tokens; aligned with ``completion_ids``.
        logprobs: Sampling log-probs of policy tokens (0.0 on environment tokens; NaN where the
            policy reports none); aligned with ``completion_ids``.
        turn_spans: ``(start, end)`` of each policy turn in ``completion_ids`` (end exclusive).
        env_spans: ``(start, end)`` of each environment insertion (empty spans are omitted).
        generated_ids: Each turn's token ids exactly as generated (cut only at the token budget).
        env_ids: Each step's environment token ids (empty after an answer).
        turn_texts: The text of each turn as handed to the environment.
        finish_reasons: Each turn's generation finish reason (``stop``/``eos``/``length``).
        rewards: Reward of each turn (aligned with ``turn_spans``; 0.0 for a turn cut by the
            token budget, which the environment never saw).
        reward_terms: Per-term contributions of each turn (empty for a cut turn).
        step_infos: The environment's info dict of each step.
        info: Final info: ``em``, ``f1``, ``evidence_recall``, ``answer``, ``episode`` summary, ...
        terminated: The agent answered.
        truncated: The turn budget or the token budget ran out first.
        stop_reason: ``answered``, ``max_turns`` or ``max_total_tokens``.
        infra_error: The retriever failed during the episode (drop it from training).
        probe_span: ``(start, end)`` in ``completion_ids`` of a REX-RAG probe inserted after replayed
            turns (loss mask 0, never trained on), or ``None`` for an ordinary episode.
        replayed_turns: Turns copied from an earlier episode before the probe (see :class:`ProbeStart`).
        generation_seconds: Wall seconds of the ``generate`` calls this episode took part in.
        environment_seconds: Wall seconds of the environment and retrieval work of its rounds.
    """

    index: int
    group: int
    sample: int
    example_id: str
    seed: int
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    env_spans: list[tuple[int, int]] = field(default_factory=list)
    generated_ids: list[list[int]] = field(default_factory=list)
    env_ids: list[list[int]] = field(default_factory=list)
    turn_texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    reward_terms: list[dict[str, float]] = field(default_factory=list)
    step_infos: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    stop_reason: str = ""
    infra_error: bool = False
    probe_span: tuple[int, int] | None = None
    replayed_turns: int = 0
    generation_seconds: float = 0.0
    environment_seconds: float = 0.0

    @property
    def input_ids(self) -> list[int]:
        """``prompt_ids + completion_ids``: the whole episode as the model saw it."""
        return self.prompt_ids + self.completion_ids

    @property
    def num_generated_tokens(self) -> int:
        """Tokens the policy generated in this episode."""
        return sum(self.loss_mask)

    @property
    def episode_return(self) -> float:
        """Sum of the per-turn rewards."""
        return float(sum(self.rewards))

    @property
    def em(self) -> float:
        """Exact match of the final answer (0 when unanswered)."""
        return float(self.info.get("em") or 0.0)

    @property
    def f1(self) -> float:
        """Token F1 of the final answer (0 when unanswered)."""
        return float(self.info.get("f1") or 0.0)


@dataclass
class RolloutStats:
    """Totals of one run.

    Attributes:
        episodes: Episodes run.
        rounds: Rounds (one ``generate`` call each, one ``search_batch`` per retriever).
        generated_tokens: Policy tokens over all episodes.
        env_tokens: Environment tokens over all episodes.
        search_calls: ``search_batch`` calls.
        queries: Queries searched.
        wall_seconds: Whole run.
        generation_seconds: Inside ``policy.generate``.
        environment_seconds: Resets, prompts, parsing, scoring and encoding environment text.
        retrieval_seconds: Inside ``search_batch``.
    """

    episodes: int = 0
    rounds: int = 0
    generated_tokens: int = 0
    env_tokens: int = 0
    search_calls: int = 0
    queries: int = 0
    wall_seconds: float = 0.0
    generation_seconds: float = 0.0
    environment_seconds: float = 0.0
    retrieval_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per wall second."""
        return self.generated_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def outside_generation_share(self) -> float:
        """Share of wall time spent outside ``generate`` (environment, retrieval, bookkeeping)."""
        if self.wall_seconds <= 0:
            return 0.0
        return max(0.0, self.wall_seconds - self.generation_seconds) / self.wall_seconds

    def to_dict(self) -> dict[str, float]:
        """Fields plus the derived rates, JSON-ready."""
        out: dict[str, float] = {k: float(v) for k, v in self.__dict__.items()}
        out["tokens_per_second"] = self.tokens_per_second
        out["outside_generation_share"] = self.outside_generation_share
        return out


class RolloutBatch(Sequence[TokenEpisode]):
    """The episodes of a run, in input order (a sequence), plus :class:`RolloutStats`.

    Attributes:
        episodes: The records.
        stats: Totals and timings.
    """

    def __init__(self, episodes: list[TokenEpisode], stats: RolloutStats) -> None:
        self.episodes = episodes
        self.stats = stats

    @overload
    def __getitem__(self, i: int) -> TokenEpisode: ...

    @overload
    def __getitem__(self, i: slice) -> list[TokenEpisode]: ...

    def __getitem__(self, i: int | slice) -> TokenEpisode | list[TokenEpisode]:
        return self.episodes[i]

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[TokenEpisode]:
        return iter(self.episodes)

    def groups(self) -> list[list[TokenEpisode]]:
        """Episodes grouped by example (for group-relative advantages)."""
        out: dict[int, list[TokenEpisode]] = {}
        for ep in self.episodes:
            out.setdefault(ep.group, []).append(ep)
        return [out[g] for g in sorted(out)]


@dataclass(frozen=True)
class ProbeStart:
    """Start an episode from the first turns of an earlier one, then a probe (REX-RAG).

    The episode replays ``turns`` policy turns of ``source`` (the same token ids and sampling
    log-probs; the environment steps through them again, so its state and documents are the
    same), then ``probe_text`` is inserted as environment text (loss mask 0) and the policy
    continues from there. REX-RAG uses it to leave a dead end: the earlier episode failed, and the
    probe (for example a remark that the last search may have been wrong) steers the continuation
    elsewhere.

    Attributes:
        source: The earlier episode (same example).
        turns: Policy turns of ``source`` to replay, fewer than it has (its last turn is not replayed).
        probe_text: Text inserted after them.
    """

    source: TokenEpisode
    turns: int
    probe_text: str

    def __post_init__(self) -> None:
        """Validate."""
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or not (
                0 <= self.turns < max(1, len(self.source.turn_texts))):
            raise ValueError(f"turns must be in [0, {len(self.source.turn_texts)}) for an episode of "
                             f"{len(self.source.turn_texts)} turns, got {self.turns!r}")
        if not isinstance(self.probe_text, str) or not self.probe_text:
            raise ValueError("probe_text must be a non-empty string")
