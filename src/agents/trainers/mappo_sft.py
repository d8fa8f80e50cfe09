"""The SFT warm start of MAPPO: one model learns every role from the oracle pipeline's turns (MMOA-RAG).

MMOA-RAG starts its joint RL from a model fine-tuned on each role's good outputs. Here the
demonstrations are the ``mmoa-oracle`` pipeline (:mod:`agents.baselines.pipelines`) run on the
training split through :class:`searchenv.multi_agent.RoleEpisode`, or a JSONL file of pipeline
episodes (``searchenv eval --agent mmoa-oracle`` writes them). Each role's turn is one chat sample,
laid out exactly as the ``mmoa-llm`` pipeline prompts the model: ``policy.chat_prompt_ids`` of the
role's system and user messages, then its output and the end-of-turn token, trained on; the prompt
is masked out. The loop is :func:`agents.trainers.sft.train_sft`'s (checkpoints of kind
``mappo-sft``); ``searchenv train mappo --set init_from=RUN`` then starts MAPPO from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agents.trainers.config import _help
from agents.trainers.samples import Sample
from agents.trainers.sft import SFTConfig, select_demos
from searchenv.multi_agent import ROLES, RoleEpisode, check_roles
from searchenv.utils.jsonsafe import iter_jsonl


@dataclass
class RoleEpisodeSettings:
    """The multi-agent episode's settings, shared by the warm start and MAPPO (fields of both configs)."""

    roles: list[str] = field(default_factory=lambda: list(ROLES),
                             metadata=_help("Roles that act, in order (drop rewriter or selector for ablations)."))
    max_sub_queries: int = field(default=4, metadata=_help("Sub-queries of the rewriter that are searched."))
    max_answer_words: int = field(default=12, metadata=_help("A longer answer costs the generator long_answer."))
    penalties: dict[str, float] | None = field(
        default=None, metadata=_help('Penalty overrides, {"role/problem": value} (default -0.5 each).'))

    def episode_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~searchenv.multi_agent.RoleEpisode` besides ``roles``, ``top_k``, ``reward``."""
        return {"max_sub_queries": self.max_sub_queries, "max_answer_words": self.max_answer_words,
                "penalties": self.penalties, "max_doc_chars": getattr(self, "max_doc_chars", 400)}

    def check_episode(self, reward: Any) -> None:
        """Build one episode with these settings, so a bad one is refused before anything loads.

        Raises:
            ValueError: Naming the setting.
        """
        try:
            self.roles = list(check_roles(self.roles))
            RoleEpisode(roles=self.roles, top_k=getattr(self, "top_k", 3), reward=reward, **self.episode_kwargs())
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"invalid multi-agent episode settings (roles, reward, max_sub_queries, "
                             f"max_answer_words, penalties): {exc}") from None


@dataclass
class MAPPOSFTConfig(SFTConfig, RoleEpisodeSettings):
    """The warm start: SFT on the oracle pipeline's role turns (see module docstring)."""

    output_dir: str = field(default="runs/mappo-sft", metadata=_help("Run folder: metrics.jsonl, checkpoint."))
    demos: str = field(default="oracle", metadata=_help(
        "'oracle' (run the mmoa-oracle pipeline) or a JSONL file of pipeline episodes (their messages)."))
    reward: str | dict[str, float] = field(
        default="f1", metadata=_help("Shared reward of the demonstration episodes: f1 | em | contains | a preset."))

    kind: ClassVar[str] = "mappo-sft"

    def __post_init__(self) -> None:
        """Validate (see :class:`~agents.trainers.sft.SFTConfig`)."""
        super().__post_init__()
        self.check_episode(self.reward)

    def demonstrations(self, policy: Any, retriever: Any = None) -> tuple[list[Sample], dict[str, float]]:
        """One sample per role turn of the kept demonstration episodes, and the counts."""
        if self.demos == "oracle":
            records = oracle_pipeline_episodes(self, self.num_demos, retriever)
        else:
            records = [record for _where, record in iter_jsonl(self.demos)]
        kept, counts = select_demos(self, records)
        samples = [s for r in kept for s in role_samples(policy, r["messages"])]
        return samples, {**counts, "role_samples": float(len(samples))}


def oracle_pipeline_episodes(cfg: MAPPOSFTConfig, num: int, retriever: Any = None) -> list[dict[str, Any]]:
    """Run the ``mmoa-oracle`` pipeline on the first ``num`` questions of the configured split.

    Returns:
        ``EpisodeResult.to_dict()`` per question (``messages``: each role's system, user and assistant message).
    """
    from agents.baselines.pipelines import make_pipeline, run_pipeline
    from agents.trainers.data import task_examples

    examples, retr = task_examples(cfg, retriever)
    records = run_pipeline(make_pipeline("mmoa-oracle", roles=cfg.roles), examples[:num], retr, top_k=cfg.top_k,
                           reward=cfg.reward, seed=cfg.seed, env_kwargs=cfg.episode_kwargs())
    return [r.to_dict() for r in records]


def role_samples(policy: Any, messages: Sequence[Mapping[str, Any]]) -> list[Sample]:
    """A pipeline episode's messages as one chat sample per role turn (mask 1 on the role's output).

    ``messages`` is (system, user, assistant) per role, as the pipelines record them. Each sample is
    ``policy.chat_prompt_ids([system, user])`` (what ``mmoa-llm`` prompts with), then the output's
    tokens and the tokenizer's end-of-turn token (so the model learns to stop where the role's
    output ends, as a generation does).

    Raises:
        ValueError: If the messages are not (system, user, assistant) triples.
    """
    shape = [m.get("role") if isinstance(m, Mapping) else None for m in messages]
    if not shape or len(shape) % 3 or shape != ["system", "user", "assistant"] * (len(shape) // 3):
        raise ValueError(f"a pipeline episode's messages are (system, user, assistant) per role, got roles {shape}")
    eos = getattr(policy.tokenizer, "eos_token_id", None)
    end = [int(eos)] if isinstance(eos, int) else []
    out = []
    for i in range(0, len(messages), 3):
        system, user, assistant = messages[i : i + 3]
        prompt = list(policy.chat_prompt_ids([dict(system), dict(user)]))
        output = list(policy.encode(str(assistant["content"]))) + end
        out.append(Sample(prompt + output, [0] * len(prompt) + [1] * len(output)))
    return out
