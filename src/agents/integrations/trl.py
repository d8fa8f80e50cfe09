"""TRL: train on SearchQA-v0 with ``trl.GRPOTrainer(rollout_func=...)``.

:class:`SearchQARollout` is a ``rollout_func``: TRL hands it the prompts of a batch (each
question repeated ``num_generations`` times, one GRPO group) and the trainer; it runs one
multi-turn SearchQA-v0 episode per prompt with the rollout engine (:func:`agents.rollout.rollout`)
and returns what TRL trains on::

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from agents.integrations.trl import SearchQARollout, reward_functions

    rollout = SearchQARollout("synthetic-2hop", retriever="bm25", reward="r3-rag", max_turns=4)
    funcs, weights = reward_functions()
    trainer = GRPOTrainer(model, reward_funcs=funcs, train_dataset=Dataset.from_list(rollout.dataset()),
                          args=GRPOConfig(..., reward_weights=weights), rollout_func=rollout)

For each episode:

- ``prompt_ids``: the chat prompt (protocol system prompt and question) as the policy encoded it;
- ``completion_ids``: every token after it, each turn's ids exactly as generated and each
  environment reply encoded once (never a re-tokenized transcript);
- ``env_mask``: 1 on generated tokens, 0 on environment tokens (TRL multiplies it into the loss
  mask), and all 0 for an episode the retriever failed in (``infra_error``: it teaches nothing);
- ``logprobs``: the sampling log-prob of each generated token (0.0 on environment tokens);
- an episode that answered ends with the tokenizer's EOS id appended (``env_mask`` 0): TRL counts
  a completion without EOS as truncated and ``mask_truncated_completions`` would drop it, but
  ``</answer>`` is a stop string, not EOS; episodes cut by the turn or token budget keep no EOS;
- extra fields for the reward functions: ``searchenv_return`` (the episode return under the
  environment's reward preset) and ``searchenv_metrics`` (:func:`searchenv.env.episode_metrics`).

:func:`reward_functions` gives the return as the one weighted reward and the episode metrics
(EM, F1, searches, evidence recall, each reward term) as weight-0 functions, so TRL logs them
all as ``rewards/searchenv_<name>/mean`` and the environment owns the reward.

Generation uses the model being trained, through TRL's own backend: without vLLM the trainer's
model (unwrapped for generation, no copy) drives :class:`~agents.policies.hf.HFPolicy`; with
``use_vllm=True, vllm_mode="colocate"`` TRL's colocated engine, through TRL's own generation entry
point (:class:`TRLColocatePolicy`: its tensor-parallel gather, sleep mode and sampling settings),
after TRL has synced the weights; with ``vllm_mode="server"`` (one
training process: TRL gives only the main process a client) TRL's ``VLLMClient`` drives
:class:`~agents.policies.vllm.VLLMServerPolicy` (token-id prompts, the protocol's stop strings,
sampled log-probs), again after TRL has synced the weights.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agents.policies.vllm import VLLMPolicy
from searchenv.env import SearchQAEnv
from searchenv.metrics import episode_metrics
from searchenv.tasks import QAExample

#: Episode metrics passed to TRL as weight-0 reward functions (logged, not optimised).
LOGGED_METRICS = ("em", "f1", "searches", "turns", "invalid_turns", "evidence_recall", "answered")


def _question(prompt: Any, position: int) -> str:
    """The question a dataset prompt carries: the prompt text, or the last user message's content."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, Sequence):  # typed content blocks
                    texts = [c.get("text") for c in content if isinstance(c, Mapping) and c.get("type") == "text"]
                    if texts and all(isinstance(t, str) for t in texts):
                        return "".join(str(t) for t in texts)
    raise ValueError(f"prompt {position}: expected the question as text or a user message, got {str(prompt)[:120]}")


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
        seed = (self.seed * 1_000_003 + step * 10_007 + process * 101 + self._calls) % (1 << 63)
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
                # a fresh policy per call: its key/value cache must not outlive a weight update
                yield HFPolicy(model, trainer.processing_class)
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


class TRLColocatePolicy(VLLMPolicy):
    """Generation through TRL's own colocated vLLM entry point, ``trainer.vllm_generation.generate``.

    TRL's entry point is what keeps a colocated engine correct across processes: with
    ``vllm_tensor_parallel_size > 1`` it gathers the prompts of the ranks sharing an engine (each
    must send the same batch) and hands each rank its share; with ``vllm_enable_sleep_mode`` it
    wakes the key/value cache before generating, re-syncs weights that sleep discarded, and puts
    the engine back to sleep. It also applies TRL's sampling settings (``top_k``, ``min_p``,
    ``repetition_penalty``, ``generation_kwargs``). Each call here sets the turn's own settings
    (stop strings kept in the output, ``max_new_tokens``, temperature, top-p) on TRL's generation
    object for that call only.

    Multi-turn episodes end after different numbers of turns on different ranks, while TRL's
    gather is a collective that expects the same batch size and request from every rank: each call
    first agrees with the other ranks sharing the engine on the round's width and settings
    (:meth:`_agree`), and :meth:`drain` keeps a finished rank taking part (with one-token filler
    prompts) until all are done. Seeds are TRL's (its engine is seeded per rank):
    samples repeat for a fixed world size, not per prompt.

    Args:
        generation: TRL's ``VLLMGeneration`` (``trainer.vllm_generation``) in colocate mode.
        tokenizer: The model's tokenizer (the trainer's ``processing_class``).
    """

    def __init__(self, generation: Any, tokenizer: Any) -> None:
        self.llm = None  # the engine is TRL's: reached only through ``generation``
        self.generation = generation
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(
            t for t in (getattr(tokenizer, "eos_token_id", None),) if isinstance(t, int)
        )
        size = int(getattr(generation, "tensor_parallel_size", 1) or 1)
        self.group = getattr(generation, "tp_group", None) if size > 1 else None
        self.group_size = size

    def _agree(self, n: int, settings: tuple[Any, ...]) -> tuple[int, tuple[Any, ...]]:
        """The round's batch width and sampling settings, agreed by the ranks sharing the engine.

        TRL's gather hands rank ``r`` the completions at ``[r * n, (r + 1) * n)``, and every rank
        of a tensor-parallel engine must run the same request: so each rank sends as many prompts
        as the busiest one (padded with one-token fillers) with the same settings (the busiest
        ``max_new_tokens``; a rank that asked for fewer is cut by the rollout engine, and a prefix
        of a sample is a sample with the smaller limit). A collective when the engine is shared.
        """
        if self.group is None:
            return n, settings
        import torch.distributed as dist

        items: list[Any] = [None] * self.group_size
        dist.all_gather_object(items, (n, settings), group=self.group)
        active = [tuple(st) for c, st in items if int(c) > 0]
        if not active:
            return 0, settings
        stop, _, temperature, top_p = active[0]
        return max(int(c) for c, _ in items), (stop, max(int(st[1]) for st in active), temperature, top_p)

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
    ) -> list[Any]:
        """Continue every prompt through TRL's generation (see :class:`~agents.policies.base.Policy`).

        ``seed`` is checked but not used: TRL's engine has its own per-rank seed.
        """
        ids, _ = self._prepare(prompts, stop, max_new_tokens, temperature, top_p, seed)
        width, settings = self._agree(len(ids), (tuple(stop), int(max_new_tokens), float(temperature), float(top_p)))
        if width == 0:
            return []
        padded = ids + [[self._filler_id()]] * (width - len(ids))
        return self._call(padded, *settings)[: len(ids)]

    def drain(self) -> None:
        """Take part in the other ranks' generation rounds until no rank sharing the engine generates."""
        while True:
            width, settings = self._agree(0, ((), 1, 0.0, 1.0))
            if width == 0:
                return
            self._call([[self._filler_id()]] * width, *settings)

    def _filler_id(self) -> int:
        return min(self.eos_token_ids) if self.eos_token_ids else 0

    def _call(self, ids: list[list[int]], stop: Sequence[str], max_new_tokens: int, temperature: float,
              top_p: float) -> list[Any]:
        from agents.policies.base import Generation
        from agents.policies.vllm import finish_reason

        gen = self.generation
        saved = {k: getattr(gen, k) for k in ("temperature", "top_p", "max_completion_length", "generation_kwargs")}
        gen.temperature = float(temperature)
        gen.top_p = float(top_p) if temperature > 0 else 1.0
        gen.max_completion_length = int(max_new_tokens)
        gen.generation_kwargs = {**dict(saved["generation_kwargs"] or {}), "stop": list(stop) or None,
                                 "include_stop_str_in_output": True}
        try:
            _, completions, logprobs, _ = gen.generate(ids, None, 1)
        finally:
            for k, v in saved.items():
                setattr(gen, k, v)
        if len(completions) != len(ids):
            raise RuntimeError(f"TRL's vLLM generation returned {len(completions)} completions for {len(ids)} prompts")
        per_seq = logprobs or [None] * len(completions)
        results = []
        for comp, lps in zip(completions, per_seq, strict=True):
            token_ids = tuple(int(t) for t in comp)
            lp = None
            if lps is not None:
                lp = tuple(float("nan") if not step or step[0] is None else float(step[0]) for step in lps)
            text = self.decode(token_ids)
            results.append(Generation(text, token_ids, lp,
                                      finish_reason(text, token_ids, stop, self.eos_token_ids, max_new_tokens)))
        return results


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
            :func:`searchenv.env.episode_metrics`; a metric an episode lacks, such as evidence
            recall without gold evidence, is None, which TRL leaves out of the mean).

    Returns:
        The functions (the return first, weight 1) and their weights.
    """
    funcs: list[Callable[..., Any]] = [searchenv_return, *(_metric_reward(m) for m in metrics)]
    return funcs, [1.0] + [0.0] * len(metrics)


class SearchQAToolEnv:
    """SearchQA-v0 as tools for ``GRPOTrainer(environment_factory=...)`` (tool-calling chat models).

    TRL builds one instance per rollout (then reuses it), calls :meth:`reset` with the dataset
    row, lets the model call :meth:`search` and :meth:`answer` as JSON tools, and scores the
    rollout with :meth:`get_reward`. Each tool call is one environment turn (``<search> query
    </search>`` or ``<answer> text </answer>``), so the turn budget, the reward preset and its
    terms are SearchQA-v0's; the answer is only what the model passed to ``answer``::

        make_env = SearchQAToolEnv.factory("synthetic-2hop", retriever="bm25", reward="default")
        trainer = GRPOTrainer(model, train_dataset=Dataset.from_list(make_env.dataset()),
                              environment_factory=make_env, args=GRPOConfig(...))

    The chat model's template must render tool calls (TRL checks), e.g. Qwen2.5/Qwen3.

    Args:
        env: The environment the episodes run in (shared settings; one instance per tool env).
    """

    def __init__(self, env: SearchQAEnv) -> None:
        self._env = env
        self._return = 0.0
        self._done = True
        self._final: dict[str, Any] | None = None
        self._info: dict[str, Any] | None = None  # the last step's info (for demonstrations replayed through the tools)

    @classmethod
    def factory(cls, task: str | os.PathLike[str] | Sequence[QAExample] = "synthetic-2hop", *,
                split: str = "train", **env_kwargs: Any) -> _ToolEnvFactory:
        """A zero-argument factory for ``environment_factory`` (instances share the task and the index).

        With ``protocol="browse"`` the instances are :class:`SearchQABrowseToolEnv` (an ``open``
        tool besides ``search`` and ``answer``), with ``protocol="arena"``
        :class:`SearchQAArenaToolEnv` (``answer`` also takes the cited documents and an analysis).

        Args:
            task: Task name, QA JSONL file or examples.
            split: Split of a named task.
            **env_kwargs: :class:`~searchenv.env.SearchQAEnv` arguments (``retriever``, ``corpus``,
                ``reward``, ``protocol``, ``top_k``, ``max_turns``, ...).
        """
        template = SearchQAEnv(task, split=split, **env_kwargs)
        shared = {k: v for k, v in env_kwargs.items() if k != "corpus"}
        shared["retriever"] = template.retriever  # opened once; every instance searches it
        if cls is SearchQAToolEnv:  # the tools follow the protocol (TRL offers a class's public methods)
            cls = {"browse": SearchQABrowseToolEnv, "tools-browse": SearchQABrowseToolEnv,
                   "arena": SearchQAArenaToolEnv}.get(template.protocol.name, cls)
        return _ToolEnvFactory(cls, template.examples, shared)

    def reset(self, **row: Any) -> str | None:
        """Start the episode of the row's ``example_id`` (or ``question`` text); nothing is added to the prompt.

        Raises:
            ValueError: If the row names no question of the task.
        """
        if "example_id" in row:
            self._env.reset(options={"example_id": str(row["example_id"])})
        else:
            question = _question(row.get("prompt"), 0)
            index = next((i for i, ex in enumerate(self._env.examples) if ex.question == question), None)
            if index is None:
                raise ValueError(f"row names no question of the task: {question[:100]!r}")
            self._env.reset(options={"index": index})
        self._return, self._done, self._final, self._info = 0.0, False, None, None
        return None

    def _turn(self, text: str) -> dict[str, Any]:
        # a tag turn, said in the environment's protocol (under ``tools`` the same call as TRL's)
        _, reward, terminated, truncated, info = self._env.step(self._env.protocol.from_tags(text))
        self._return += float(reward)
        self._info = info
        if terminated or truncated:
            self._done, self._final = True, info
        return info

    def search(self, query: str) -> str:
        """Search the document collection.

        Args:
            query: What to look for, in a few words.

        Returns:
            The top documents, numbered, each with its title.
        """
        if self._done:
            return "The episode is over; no more searches."
        info = self._turn(f"<search> {query} </search>")
        text = _reply(info)
        return text if not self._done else text + "\nThe turn budget is spent; the episode is over."

    def answer(self, answer: str) -> str:
        """Give the final answer to the question (ends the episode).

        Args:
            answer: The answer, as short as possible (a name, a place, a year).

        Returns:
            A confirmation.
        """
        if self._done:
            return "The episode is over; the answer was not recorded."
        self._turn(f"<answer> {answer} </answer>")
        return "Answer recorded."

    def get_reward(self) -> float:
        """The episode's return under the reward preset (an episode never answered is ended first)."""
        if not self._done:
            self._final = self._env.end_episode("rollout_ended")
            self._done = True
        return self._return

    @property
    def final_metrics(self) -> dict[str, float]:
        """:func:`searchenv.env.episode_metrics` of the finished episode (empty before it ends).

        A property, not a method: TRL offers every public method of the class as a tool.
        """
        return episode_metrics(self._final) if self._final is not None else {}


def _reply(info: Mapping[str, Any]) -> str:
    """A step's reply as a tool's return value (without the ``<tool_response>`` tags of ``tools``: TRL adds its own)."""
    text = str(info["new_text"]).strip()
    return text.removeprefix("<tool_response>").removesuffix("</tool_response>").strip()


class SearchQABrowseToolEnv(SearchQAToolEnv):
    """:class:`SearchQAToolEnv` for ``protocol="browse"``: ``search`` shows snippets, ``open`` reads a document."""

    def open(self, number: int, page: int = 1) -> str:
        """Read in full a document that an earlier search showed.

        Args:
            number: The document's number as the search showed it (Doc 3 is 3).
            page: The page of a long document, 1 for the first.

        Returns:
            The page's text, or what was wrong with the request.
        """
        if self._done:
            return "The episode is over; nothing more can be opened."
        info = self._turn(f"<open> {number} page {page} </open>")
        text = _reply(info)
        return text if not self._done else text + "\nThe turn budget is spent; the episode is over."


class SearchQAArenaToolEnv(SearchQAToolEnv):
    """:class:`SearchQAToolEnv` for ``protocol="arena"``: the answer cites the documents it relies on."""

    def answer(self, answer: str, documents: list[int], analysis: str) -> str:  # type: ignore[override]
        """Give the final answer with the documents it rests on (ends the episode).

        Args:
            answer: The answer, as short as possible (a name, a place, a year).
            documents: The numbers of the documents the answer relies on, as the searches showed them.
            analysis: How those documents lead to the answer, in a sentence or two.

        Returns:
            A confirmation.
        """
        if self._done:
            return "The episode is over; the answer was not recorded."
        cited = ", ".join(str(d) for d in documents) if isinstance(documents, list | tuple) else str(documents)
        self._turn(f"<relevance> {cited} </relevance>\n<analysis> {analysis} </analysis>\n<answer> {answer} </answer>")
        return "Answer recorded."


class _ToolEnvFactory:
    """Builds :class:`SearchQAToolEnv` instances over one task (the index is opened once per process)."""

    def __init__(self, cls: type[SearchQAToolEnv], examples: Sequence[QAExample],
                 env_kwargs: Mapping[str, Any]) -> None:
        self._cls = cls
        self.examples = list(examples)
        self._env_kwargs = dict(env_kwargs)

    def __call__(self) -> SearchQAToolEnv:
        return self._cls(SearchQAEnv(self.examples, **self._env_kwargs))

    def dataset(self, n: int | None = None) -> list[dict[str, Any]]:
        """Rows for ``datasets.Dataset.from_list``: a chat ``prompt`` with the question, and ``example_id``."""
        examples = self.examples if n is None else self.examples[:n]
        return [{"prompt": [{"role": "user", "content": ex.question}], "example_id": ex.id} for ex in examples]


def tool_schemas(env: SearchQAToolEnv) -> list[dict[str, Any]]:
    """The JSON schemas of ``env``'s tools, as ``GRPOTrainer(environment_factory=...)`` offers them.

    TRL offers every public function of the instance's class except ``reset`` and ``get_reward``,
    in name order, and renders the prompt with them as ``tools=``; these are the same tools, as
    the schemas ``transformers`` derives from them (what a ``tools`` column of an SFT dataset holds).
    """
    import inspect

    from transformers.utils import get_json_schema

    return [get_json_schema(getattr(env, name)) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def tool_sft_dataset(make_env: _ToolEnvFactory, n: int | None = None, *, reasoning: bool = False,
                     successful_only: bool = True) -> list[dict[str, Any]]:
    """Oracle demonstrations of the tools, laid out as TRL's ``environment_factory`` loop lays out a rollout.

    A cold start for a model that never called these tools (``GRPOTrainer(environment_factory=...)``
    scores 0 until it does): for each question the oracle agent
    (:class:`~agents.policies.scripted.OracleAgent`: the gold decomposition, one hop a search) plays
    an episode *through the tools* of an instance of ``make_env``, so every tool result is the text
    TRL would get from the same call. A row is a conversation for ``trl.SFTTrainer``:

    - ``messages``: the question as ``make_env.dataset()`` asks it (one ``user`` message), then per
      turn an ``assistant`` message with one ``tool_calls`` entry and the ``tool`` message with its
      result (``name`` and ``content``, as TRL appends it), and a last ``assistant`` message with
      the answer in words, after the ``answer`` tool's confirmation (TRL generates once more after
      every tool result; the model learns to stop there);
    - ``tools``: :func:`tool_schemas` as a JSON string (Arrow would merge the schemas' parameter
      structs into one, adding every tool's parameters to every tool);
    - ``example_id``.

    Build the dataset with ``datasets.Dataset.from_list(rows, on_mixed_types="use_json")``
    (datasets >= 5): a plain ``from_list`` merges the calls' ``arguments`` into one struct, so
    every ``search`` call would carry ``"answer": null`` and the model would learn to write it
    (TRL then fails every such call: ``search()`` takes no ``answer``).

    Rendered with the chat template TRL generates with (and its training twin for
    ``assistant_only_loss``), a row is token for token the prompt, completions and tool suffixes
    of TRL's tool-calling loop for the same calls. Supported protocols: the tag protocols with one
    query a turn (``search-r1``), ``browse`` (``open`` calls) and ``tools``/``tools-browse``.

    Args:
        make_env: A factory from :meth:`SearchQAToolEnv.factory` (its task, retriever and settings).
        n: Demonstrate the first ``n`` questions (default all).
        reasoning: Put the oracle's ``<think>`` text before each call as the message's content
            (default: calls only, the shortest completions).
        successful_only: Keep only episodes whose answer scored EM 1.

    Returns:
        The rows, in question order.

    Raises:
        ValueError: For ``n`` < 1, an unsupported protocol, or when no demonstration is left.
    """
    import json
    import re

    from agents.policies.scripted import OracleAgent
    from agents.reference import EpisodeState, StepRecord
    from searchenv.protocols import Answer, Open, Search

    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    tool_env = make_env()
    if isinstance(tool_env, SearchQAArenaToolEnv):
        raise ValueError("tool_sft_dataset does not support protocol='arena' (its answer cites documents)")
    env = tool_env._env
    tools = json.dumps(tool_schemas(tool_env))
    agent = OracleAgent()
    rows = []
    for position, (ex, row) in enumerate(zip(make_env.examples, make_env.dataset(n), strict=False)):
        tool_env.reset(**row)
        state = EpisodeState(position, ex, env.protocol, env.max_turns, 0, env.messages())
        messages: list[dict[str, Any]] = list(row["prompt"])
        while not tool_env._done:
            arguments: dict[str, Any]
            tags = agent.turn(state)
            action = env.protocol.parse(env.protocol.from_tags(tags))
            if isinstance(action, Search) and len(action.queries) == 1:
                name, arguments = "search", {"query": action.queries[0]}
            elif isinstance(action, Answer):
                name, arguments = "answer", {"answer": action.text}
            elif isinstance(action, Open):
                name, arguments = "open", {"number": action.number, "page": action.page}
            else:
                raise ValueError(f"protocol {env.protocol.name!r}: the oracle's turn is not one tool call: "
                                 f"{tags[:200]!r}")
            thought = re.search(r"<think>(.*?)</think>", tags, re.S)
            content = " ".join(thought.group(1).split()) if reasoning and thought else ""
            result = getattr(tool_env, name)(**arguments)
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]})
            messages.append({"role": "tool", "name": name, "content": result})
            info = dict(tool_env._info or {})
            state.steps.append(StepRecord(tags, info, env.shown_hits))
            state.messages = env.messages()
            if name == "answer":
                messages.append({"role": "assistant", "content": arguments["answer"]})
        tool_env.get_reward()
        if successful_only and tool_env.final_metrics.get("em", 0.0) < 1.0:
            continue
        rows.append({"messages": messages, "tools": tools, "example_id": ex.id})
    if not rows:
        raise ValueError(f"no demonstration left of {len(make_env.dataset(n))} (successful_only={successful_only}): "
                         "check that the index holds the questions' evidence and max_turns covers their hops")
    return rows
