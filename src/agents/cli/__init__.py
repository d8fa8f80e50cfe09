"""Commands the agents package adds to ``searchenv`` (entry point ``searchenv.commands``: agents).

Keep this file tiny: each feature's commands live in their own ``agents.cli`` submodule, and a
module that is not written yet is skipped (only a ``ModuleNotFoundError`` for that exact module;
any other import error propagates).
"""

from __future__ import annotations

import importlib
from types import ModuleType

import typer


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def register(app: typer.Typer) -> None:
    """Add the agents commands (``train ...``) to the ``searchenv`` app."""
    train_app = typer.Typer(help="Train agents: RL and supervised trainers, SB3 controllers.", no_args_is_help=True)
    app.add_typer(train_app, name="train")
    if (sb3 := _optional("agents.cli.sb3")) is not None:
        sb3.register_train(train_app)
    if (trainers := _optional("agents.cli.train")) is not None:
        trainers.register_train(train_app)
        trainers.register_plot(app)
    if (ev := _optional("agents.cli.eval")) is not None:
        ev.register(app)
    if (bench := _optional("agents.cli.bench")) is not None:
        bench.register(app)
    if (report := _optional("agents.cli.report")) is not None:
        report.register(app)
