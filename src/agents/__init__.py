"""Policies, rollouts, reference agents and trainers for searchenv.

One folder per concern: ``baselines`` (the reference agents and the driver that runs any agent),
``policies`` (language models behind one interface), ``rollout`` (many episodes as token ids, and
every seed scheme), ``evaluation`` (evaluate, bench cards, judges, episode logs), ``trainers``
(SFT, GRPO, PPO and their math), ``sb3`` (the macro-action controller), ``integrations``
(trainer-side adapters) and ``cli`` (the commands); ``devices`` is the one place that knows about
devices.
"""

from searchenv.utils.moved import register_moves

#: Old module paths (before the one-concern-per-folder layout) -> where each module lives now.
#: The old paths import, with a ``DeprecationWarning``, for one release.
MOVED_MODULES = {
    "agents.reference": "agents.baselines",
    "agents.policies.scripted": "agents.baselines.scripted",
    "agents.reader": "agents.baselines.rule_reader",
    "agents.searcher": "agents.baselines.searcher",
    "agents.chat": "agents.policies.chat",
    "agents.evaluate": "agents.evaluation.evaluate",
    "agents.bench": "agents.evaluation.bench",
    "agents.judges": "agents.evaluation.judges",
    "agents.episode_log": "agents.evaluation.episode_log",
    "agents.advantages": "agents.trainers.advantages",
    "agents.losses": "agents.trainers.losses",
    "agents.plot": "agents.trainers.plot",
    "agents.cli_eval": "agents.cli.eval",
    "agents.cli_train": "agents.cli.train",
    "agents.cli_bench": "agents.cli.bench",
    "agents.cli_sb3": "agents.cli.sb3",
    "agents.policies.hf.gguf": "agents.policies.hf.loading",
}

register_moves(MOVED_MODULES)
