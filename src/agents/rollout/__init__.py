"""The rollout engine: many SearchQA episodes at once, recorded as token ids for training.

Each round, every live episode gets its next turn from ONE batched ``policy.generate`` call (its
prompt is the chat prompt plus every token of the episode so far, exactly as generated or
inserted, never re-tokenized), each turn is parsed with ``env.prepare_step``, the queries of all
episodes go to ONE ``retriever.search_batch`` call, and the hits are handed back with
``env.finish_step``. A free slot takes the next waiting episode at the start of a round
(continuous batching), so the batch stays full when episodes end at different turns::

    from agents.policies.hf import HFPolicy
    from agents.rollout import rollout

    policy = HFPolicy.smollm2()
    batch = rollout(policy, examples, retriever, group_size=8, temperature=1.0, seed=0)
    for ep in batch:                      # an TokenEpisode per (example, sample)
        ep.prompt_ids, ep.completion_ids, ep.loss_mask, ep.logprobs, ep.turn_spans, ep.rewards
    batch.stats.tokens_per_second, batch.stats.outside_generation_share

Episode layout (``completion_ids`` is everything after the prompt)::

    prompt_ids | turn 1 (policy) | env text 1 | turn 2 (policy) | env text 2 | ...
    loss_mask:    1 1 1 1 1          0 0 0 0      1 1 1 1           0 0 ...

The prompt is ``policy.chat_prompt_ids(env.messages()[:2])`` (system + user with the generation
prompt). Environment text is ``policy.encode(info["new_text"])``; under a protocol of native tool
calls (``tools``) it is the chat template's own text between the turns instead (the end of the
assistant message, the ``tool`` reply as the template lays it out, the next generation prompt:
:func:`agents.policies.chat.reply_text`), so ``prompt_ids + completion_ids`` is the template's rendering of
``env.messages()`` token for token when the turns are written as the template writes calls.
Rewards and reward terms are per turn; ``rewards[i]`` belongs to ``turn_spans[i]`` (put it on the
token ``end - 1``).

Determinism: episode ``k`` samples turn ``t`` with its own seed derived from ``(seed, k, t)``,
passed per prompt to ``generate``, so an episode's trajectory does not depend on which other
episodes share its batch (up to floating-point differences of batched arithmetic).
"""

from agents.rollout.engine import Example, RolloutEngine, rollout
from agents.rollout.records import (
    STOP_REASONS,
    ProbeStart,
    RolloutBatch,
    RolloutStats,
    TokenEpisode,
)
from agents.rollout.seeds import episode_seed
from searchenv.utils.moved import renamed_names

__all__ = [
    "STOP_REASONS",
    "Example",
    "ProbeStart",
    "RolloutBatch",
    "RolloutEngine",
    "RolloutStats",
    "TokenEpisode",
    "episode_seed",
    "rollout",
]

__getattr__ = renamed_names(__name__, {"EpisodeRecord": ("agents.rollout.records", "TokenEpisode")})
