"""Every seed scheme of the agents package, in one place.

Three schemes derive per-episode, per-turn and per-step seeds from a run seed. They differ
because each was published with its own numbers (evaluation tables, training curves): changing
any of them would change those numbers, so each keeps its exact formula here.

- :func:`episode_seed`: the rollout engine (training rollouts): a ``numpy`` ``SeedSequence`` of
  ``(seed, index[, turn])``, independent streams for any index.
- :func:`agent_seed`: the reference-agent driver (:func:`agents.baselines.run_agent`, evaluation):
  a linear congruence of ``(seed, position)``, also used for its round and per-turn sampling seeds.
- :func:`step_seed`: the GRPO trainer's per-step seed (question choice and that step's rollouts).
"""

from __future__ import annotations

import numpy as np

#: The modulus of the linear schemes: seeds stay valid 31-bit non-negative integers.
_MODULUS = 2**31 - 1


def episode_seed(seed: int, index: int, turn: int | None = None) -> int:
    """The seed of episode ``index`` (and of its turn ``turn``) in a run seeded with ``seed``."""
    key = [seed % (1 << 63), index] if turn is None else [seed % (1 << 63), index, turn]
    return int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0] >> 1)


def agent_seed(seed: int, position: int) -> int:
    """The reference-agent driver's seed for ``position`` (an episode, or a round or turn key) in a run."""
    return (seed * 1_000_003 + position * 7919 + 17) % _MODULUS


def step_seed(seed: int, step: int) -> int:
    """The GRPO trainer's seed of training step ``step``."""
    return (seed * 1_000_003 + step * 7_919 + 1) % _MODULUS
