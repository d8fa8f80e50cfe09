"""The ``rollout_func`` path: :class:`SearchQARollout` runs episodes for ``GRPOTrainer``; its reward functions."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agents.integrations.trl.colocate import TRLColocatePolicy
from agents.integrations.trl.prompts import _question
from agents.rollout.seeds import trl_call_seed
from searchenv.env import SearchQAEnv
from searchenv.metrics import episode_metrics
from searchenv.tasks import QAExample

#: Episode metrics passed to TRL as weight-0 reward functions (logged, not optimised).
LOGGED_METRICS = ("em", "f1", "searches", "turns", "invalid_turns", "evidence_recall", "answered")


class SearchQARollout:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that runs SearchQA-v0 episodes (module docstring).

    Args:
        task: Task name, QA JSONL file or ``QAExample`` list: the questions the dataset's prompts
            are looked up in (by their text).
        split: Split of a named task.
        corpus: Corpus file (default: the task's own).
        retriever: ``bm25``/``dense``, an index folder, a server URL or a retriever object.
        protocol: Action protocol.
        reward: Reward preset, ``{term: weight}`` or callable: what ``searchenv_return`` sums.
        top_k: Documents per search.
        max_turns: Turn budget per episode.
        max_new_tokens: Tokens per turn at most.
        max_total_tokens: Prompt plus completion tokens per episode at most.
        seed: Base seed; each call derives its own from the trainer's step and process index.
        env_kwargs: More :class:`~searchenv.env.SearchQAEnv` arguments (``max_doc_chars``, ...).

    Raises:
        ValueError: On a task without examples or a bad setting.
    """

    def __init__(
        self,
        task: str | os.PathLike[str] | Sequence[QAExample] = "synthetic-2hop",
        *,
        split: str = "train",
        corpus: str | os.PathLike[str] | None = None,
        retriever: Any = "bm25",
        protocol: str = "search-r1",
        reward: Any = "default",
        top_k: int = 3,
        max_turns: int = 4,
        max_new_tokens: int = 128,
        max_total_tokens: int = 2048,
        seed: int = 0,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value in (("max_new_tokens", max_new_tokens), ("max_total_tokens", max_total_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.env = SearchQAEnv(task, split=split, corpus=corpus, retriever=retriever, protocol=protocol,
                               reward=reward, top_k=top_k, max_turns=max_turns, **dict(env_kwargs or {}))
        self.max_new_tokens = max_new_tokens
        self.max_total_tokens = max_total_tokens
        self.seed = seed
        self._by_question: dict[str, QAExample] = {}
        for ex in self.env.examples:
            self._by_question.setdefault(ex.question, ex)
        self._calls = 0
        self._hf_policy: Any = None  # the HFPolicy on the trainer's model (see _policy)
        #: The rollout engine's statistics of the latest call (generation, environment and retrieval seconds).
        self.last_stats: Any = None

    def dataset(self, n: int | None = None) -> list[dict[str, Any]]:
        """Rows for ``datasets.Dataset.from_list``: ``prompt`` (the question) and ``example_id``."""
        examples = self.env.examples if n is None else self.env.examples[:n]
        return [{"prompt": ex.question, "example_id": ex.id} for ex in examples]

    def example(self, prompt: Any, position: int = 0) -> QAExample:
        """The task's example a dataset prompt asks.

        Raises:
            ValueError: If the prompt's question is not one of the task's (the message says how to build rows).
        """
        question = _question(prompt, position)
        found = self._by_question.get(question) or self._by_question.get(question.strip())
        if found is None:
            raise ValueError(f"prompt {position}: {question[:100]!r} is not a question of this task; build the "
                             "dataset with SearchQARollout.dataset() (the prompt is the question text)")
        return found

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """Run one episode per prompt with the trainer's model; TRL's rollout output (module docstring).

        TRL's sampling settings are honoured: ``temperature`` and ``top_p`` always; ``top_k``,
        ``min_p``, ``repetition_penalty`` and ``generation_kwargs`` through TRL's vLLM generation
        (with transformers generation they are refused unless left at their defaults: it samples
        with temperature and top-p only); ``max_completion_length`` caps each episode's completion,
        generated and environment tokens together, as TRL's own multi-turn tool loop does.
        """
        process = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0))
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0))
        seed = trl_call_seed(self.seed, step, process, self._calls)
        self._calls += 1
        eos_ids = getattr(trainer, "eos_token_ids", None) or [trainer.processing_class.eos_token_id]
        cap = getattr(trainer, "max_completion_length", None)
        with self._policy(trainer) as policy:
            try:
                return self.run(prompts, policy, seed=seed, temperature=float(getattr(trainer, "temperature", 1.0)),
                                top_p=float(getattr(trainer, "top_p", 1.0)), eos_token_id=int(eos_ids[0]),
                                max_completion_tokens=int(cap) if cap is not None else None)
            finally:
                drain = getattr(policy, "drain", None)
                if drain is not None:  # keep generating with the other ranks until every rank is done
                    drain()

    def run(self, prompts: Sequence[Any], policy: Any, *, seed: int = 0, temperature: float = 1.0,
            top_p: float = 1.0, eos_token_id: int | None = None,
            max_completion_tokens: int | None = None) -> dict[str, list[Any]]:
        """One episode per prompt with ``policy``, as TRL's rollout output (what ``__call__`` returns).

        Args:
            prompts: The dataset's prompts (question text or chat messages), in the batch's order.
            policy: Any :class:`~agents.policies.base.Policy`.
            seed: Seeds the episodes (episode ``i`` samples with seeds derived from ``(seed, i)``).
            temperature: Sampling temperature.
            top_p: Nucleus sampling threshold.
            eos_token_id: Appended to the completion of an episode that answered (default: the
                policy tokenizer's EOS, when it has a ``tokenizer``).
            max_completion_tokens: Cap on each episode's completion (generated and environment
                tokens, the appended EOS included); default only ``max_total_tokens``.

        Returns:
            ``prompt_ids``, ``completion_ids``, ``env_mask``, ``logprobs``, ``searchenv_return`` and
            ``searchenv_metrics``, one entry per prompt.
        """
        from agents.rollout import rollout

        examples = [self.example(p, i) for i, p in enumerate(prompts)]
        # one token of max_completion_tokens kept for the EOS appended after an answer
        cap = None if max_completion_tokens is None else max(1, max_completion_tokens - 1)
        batch = rollout(policy, examples, env=self.env, group_size=1, max_new_tokens=self.max_new_tokens,
                        max_total_tokens=self.max_total_tokens, temperature=temperature, top_p=top_p, seed=seed,
                        max_completion_tokens=cap)
        self.last_stats = batch.stats
        eos = eos_token_id
        if eos is None and hasattr(policy, "tokenizer"):
            eos = getattr(policy.tokenizer, "eos_token_id", None)
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "logprobs": [],
                                     "searchenv_return": [], "searchenv_metrics": []}
        for ep in batch:  # example-major with one sample each: the prompts' order (the record's lists, not copies)
            ids, mask, logprobs = ep.completion_ids, ep.loss_mask, ep.logprobs
            total = sum(logprobs)
            if total != total:  # a NaN: the policy reported no log-prob for some turn -> 0.0
                logprobs = [0.0 if lp != lp else lp for lp in logprobs]
            if ep.terminated and isinstance(eos, int):
                ids, mask, logprobs = ids + [eos], mask + [0], logprobs + [0.0]
            if ep.infra_error:
                mask = [0] * len(mask)
            out["prompt_ids"].append(ep.prompt_ids)
            out["completion_ids"].append(ids)
            out["env_mask"].append(mask)
            out["logprobs"].append(logprobs)
            out["searchenv_return"].append(ep.episode_return)
            out["searchenv_metrics"].append(episode_metrics(ep.info))
        return out

    @contextlib.contextmanager
    def _policy(self, trainer: Any) -> Iterator[Any]:
        """The policy on the trainer's model, through the generation backend TRL was configured with."""
        if getattr(trainer, "use_vllm", False):
            mode = getattr(trainer, "vllm_mode", None)
            if mode == "server":
                from agents.policies.vllm import VLLMServerPolicy

                processes = int(getattr(trainer.accelerator, "num_processes", 1))
                client = getattr(trainer.vllm_generation, "vllm_client", None)
                if processes != 1 or client is None:
                    raise ValueError(
                        f"SearchQARollout with vllm_mode='server' needs one training process (got {processes}): TRL "
                        "gives only the main process a vLLM client; use vllm_mode='colocate' with several processes"
                    )
                yield VLLMServerPolicy(client, trainer.processing_class)
                return
            if mode != "colocate":
                raise ValueError(f"SearchQARollout supports vllm_mode='colocate' or 'server', got {mode!r}")
            yield TRLColocatePolicy(trainer.vllm_generation, trainer.processing_class)
            return
        _refuse_unsupported_sampling(trainer)
        from trl.models.utils import unwrap_model_for_generation

        from agents.policies.hf import HFPolicy

        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            was_training = model.training
            model.eval()
            try:
                # One policy per model object, kept across calls: on CUDA its bfloat16 copy and captured decode
                # steps are refreshed in place after each update, and its key/value cache is dropped when the
                # weights' version counters moved (no cache outlives an update).
                kept = self._hf_policy
                if kept is None or kept.model is not model:
                    kept = self._hf_policy = HFPolicy(model, trainer.processing_class)
                yield kept
            finally:
                model.train(was_training)


def _refuse_unsupported_sampling(trainer: Any) -> None:
    """Raise when TRL sampling settings that transformers generation here cannot honour are set.

    :class:`~agents.policies.hf.HFPolicy` samples with temperature and top-p only, so ``top_k``,
    ``min_p``, ``repetition_penalty`` and ``generation_kwargs`` would otherwise be dropped.
    """
    args = getattr(trainer, "args", None)
    settings = {
        "top_k": getattr(trainer, "top_k", None),
        "min_p": getattr(trainer, "min_p", None),
        "repetition_penalty": getattr(trainer, "repetition_penalty", 1.0),
        "generation_kwargs": getattr(args, "generation_kwargs", None),
    }
    neutral: dict[str, tuple[Any, ...]] = {
        "top_k": (None, 0, -1), "min_p": (None, 0, 0.0), "repetition_penalty": (None, 1, 1.0),
        "generation_kwargs": (None, {}),
    }
    set_ = {k: v for k, v in settings.items() if v not in neutral[k]}
    if set_:
        given = ", ".join(f"{k}={v!r}" for k, v in set_.items())
        raise ValueError(
            f"GRPOConfig({given}): SearchQARollout generates with transformers here (use_vllm=False), which "
            "samples with temperature and top_p only; use use_vllm=True (TRL's vLLM generation honours them) or "
            "leave them at their defaults"
        )


def _metric_reward(name: str) -> Callable[..., list[float | None]]:
    def reward(completions: Sequence[Any], searchenv_metrics: Sequence[Mapping[str, float]],
               **kwargs: Any) -> list[float | None]:
        return [m.get(name) for m in searchenv_metrics]

    reward.__name__ = f"searchenv_{name}"
    return reward


def searchenv_return(completions: Sequence[Any], searchenv_return: Sequence[float], **kwargs: Any) -> list[float]:
    """TRL reward function: each episode's return under the environment's reward preset."""
    return [float(r) for r in searchenv_return]


def reward_functions(metrics: Sequence[str] = LOGGED_METRICS) -> tuple[list[Callable[..., Any]], list[float]]:
    """``reward_funcs`` and ``reward_weights`` for ``GRPOTrainer``/``GRPOConfig``.

    Args:
        metrics: Episode metrics to log as weight-0 reward functions (names of
            :func:`searchenv.metrics.episode_metrics`; a metric an episode lacks, such as evidence
            recall without gold evidence, is None, which TRL leaves out of the mean).

    Returns:
        The functions (the return first, weight 1) and their weights.
    """
    funcs: list[Callable[..., Any]] = [searchenv_return, *(_metric_reward(m) for m in metrics)]
    return funcs, [1.0] + [0.0] * len(metrics)
