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
  environment's reward preset) and ``searchenv_metrics`` (:func:`searchenv.metrics.episode_metrics`).

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

from agents.integrations.trl.colocate import TRLColocatePolicy
from agents.integrations.trl.rollout_func import LOGGED_METRICS, SearchQARollout, reward_functions, searchenv_return
from agents.integrations.trl.sft_data import tool_sft_dataset
from agents.integrations.trl.tool_env import (
    SearchQAArenaToolEnv,
    SearchQABrowseToolEnv,
    SearchQAToolEnv,
    tool_schemas,
)

__all__ = [
    "LOGGED_METRICS",
    "SearchQAArenaToolEnv",
    "SearchQABrowseToolEnv",
    "SearchQARollout",
    "SearchQAToolEnv",
    "TRLColocatePolicy",
    "reward_functions",
    "searchenv_return",
    "tool_schemas",
    "tool_sft_dataset",
]
