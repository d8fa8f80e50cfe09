"""Trainer-side adapters for RL engines, one module per engine, each importing its engine lazily.

- :mod:`agents.integrations.trl`: a ``rollout_func`` for ``trl.GRPOTrainer``.
"""
