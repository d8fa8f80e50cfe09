"""Named tasks: :func:`register_task`, :func:`load_task` and the cache folder they are built in.

The built-in tasks (the generated world's, :mod:`searchenv.tasks.synthetic`) are loaded on
first use; a later registration of a name replaces an earlier one (a built-in one too).
"""

from __future__ import annotations

import os
from pathlib import Path

from searchenv.tasks.example import Task, TaskSpec
from searchenv.utils.registry import Registry


def cache_dir() -> Path:
    """Where built tasks and indexes are cached: ``$SEARCHENV_CACHE`` or ``~/.cache/searchenv``."""
    root = os.environ.get("SEARCHENV_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "searchenv"


def _builtin_tasks() -> dict[str, TaskSpec]:
    """The built-in tasks (the generated world's named tasks), imported on first use."""
    from searchenv.tasks.synthetic import NAMED_TASK_SPECS

    return {spec.name: spec for spec in NAMED_TASK_SPECS}


_TASKS: Registry[TaskSpec] = Registry("task", load=_builtin_tasks)


def register_task(spec: TaskSpec) -> None:
    """Add a named task to the registry (later registrations of a name replace earlier ones, built-ins too)."""
    _TASKS.register(spec.name, spec)


def task_specs() -> list[TaskSpec]:
    """All registered tasks, by name."""
    return [_TASKS[name] for name in _TASKS.names()]


def load_task(name: str, root: Path | None = None) -> Task:
    """Build or load a named task.

    Args:
        name: A registered task name.
        root: Cache folder (default :func:`cache_dir`).

    Returns:
        The task.

    Raises:
        UnknownNameError: If no task has that name (a ``ValueError``), naming the tasks there are.
    """
    return _TASKS[name].build(root if root is not None else cache_dir())
