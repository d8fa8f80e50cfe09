"""Every seed scheme of the agents package, in one place.

Three schemes derive per-episode, per-turn and per-step seeds from a run seed. They differ
because each was published with its own numbers (evaluation tables, training curves): changing
any of them would change those numbers, so each keeps its exact formula here.

- :func:`episode_seed`: the rollout engine (training rollouts): a ``numpy`` ``SeedSequence`` of
  ``(seed, index[, turn])``, independent streams for any index.
- :func:`agent_seed`: the reference-agent driver (:func:`agents.baselines.run_agent`, evaluation):
  a linear congruence of ``(seed, position)``, also used for its round and per-turn sampling seeds.
- :func:`step_seed`: a trainer's per-step seed (question choice and that step's rollouts), one
  ``salt`` per trainer (GRPO 1, PPO 2, MAPPO 3); :func:`round_seed` and :func:`phase_seed` derive
  the seeds of a step's further sampling rounds and phases (probes, closed-book episodes) from it.
- :func:`trl_call_seed`: the TRL ``rollout_func``'s seed of one call (trainer step, process, call).
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


#: Each trainer's salt in :func:`step_seed`.
STEP_SALTS = {"grpo": 1, "ppo": 2, "mappo": 3}


def step_seed(seed: int, step: int, salt: int = STEP_SALTS["grpo"]) -> int:
    """A trainer's seed of training step ``step`` (``salt``: :data:`STEP_SALTS`, GRPO's by default)."""
    return (seed * 1_000_003 + step * 7_919 + salt) % _MODULUS


#: The distance between the seeds of a step's sampling rounds (:func:`round_seed`).
ROUND_STRIDE = 1_000_003

#: What :func:`phase_seed` adds to the seed of a run, a step or a sampling round for each of its phases.
PHASE_OFFSETS = {
    "corpus": 1,  # SFT's order of corpus passages (from the run's seed)
    "probes": 7_777_777,  # GRPO's REX-RAG probes (from the step's seed)
    "closed_book_estimate": 5_000_011,  # UR2's closed-book difficulty estimates (from the round's seed)
    "closed_book": 7_919,  # UR2's closed-book groups (from the round's seed; the others use it as is)
}


def round_seed(seed: int, step: int, round_: int, salt: int = STEP_SALTS["grpo"]) -> int:
    """The seed of sampling round ``round_`` (0 first: :func:`step_seed` itself) of training step ``step``."""
    return step_seed(seed, step, salt) + round_ * ROUND_STRIDE


def phase_seed(base: int, phase: str) -> int:
    """The seed of ``phase`` (a key of :data:`PHASE_OFFSETS`) of the run, step or round seeded with ``base``.

    Raises:
        KeyError: If ``phase`` is not one of :data:`PHASE_OFFSETS`.
    """
    return base + PHASE_OFFSETS[phase]


def trl_call_seed(seed: int, step: int, process: int, call: int) -> int:
    """The TRL ``rollout_func``'s seed of its ``call``-th call in trainer step ``step`` on process ``process``."""
    return (seed * 1_000_003 + step * 10_007 + process * 101 + call) % (1 << 63)
