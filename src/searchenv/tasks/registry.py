"""Named tasks: :func:`register_task`, :func:`load_task` and the cache folder they are built in.

The built-in tasks (the generated world's, :mod:`searchenv.tasks.synthetic`) are registered on
first use; a later registration of a name replaces an earlier one.
"""

from __future__ import annotations

import os
from pathlib import Path

from searchenv.tasks.example import Task, TaskSpec


def cache_dir() -> Path:
    """Where built tasks and indexes are cached: ``$SEARCHENV_CACHE`` or ``~/.cache/searchenv``."""
    root = os.environ.get("SEARCHENV_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "searchenv"


_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> None:
    """Add a named task to the registry (later registrations of a name replace earlier ones)."""
    _REGISTRY[spec.name] = spec


def task_specs() -> list[TaskSpec]:
    """All registered tasks, by name."""
    _load_builtin()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def load_task(name: str, root: Path | None = None) -> Task:
    """Build or load a named task.

    Args:
        name: A registered task name.
        root: Cache folder (default :func:`cache_dir`).

    Returns:
        The task.

    Raises:
        ValueError: If no task has that name.
    """
    _load_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name].build(root if root is not None else cache_dir())


_BUILTIN_LOADED = False


def _load_builtin() -> None:
    """Register the built-in tasks once, on first use (the generated world's named tasks)."""
    global _BUILTIN_LOADED
    if _BUILTIN_LOADED:
        return
    from searchenv.tasks.synthetic import NAMED_TASK_SPECS

    for spec in NAMED_TASK_SPECS:
        register_task(spec)
    _BUILTIN_LOADED = True
