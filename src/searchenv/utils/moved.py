"""Old import paths of moved modules keep working for one release.

A module that moved (``agents.reference`` -> ``agents.baselines``) stays importable under its old
name without a file there: :func:`register_moves` installs a finder that answers the old name with
the new module itself (the same object, so ``isinstance`` checks and monkeypatching agree), with a
``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(
            f"{self.old} moved to {self.new}; the old path will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        # importlib returns whatever sys.modules holds under the name once exec_module is done
        sys.modules[self.old] = importlib.import_module(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.moves: dict[str, str] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.moves.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(fullname, new))


_FINDER = _MovedFinder()


def register_moves(moves: Mapping[str, str]) -> None:
    """Make each old module name (key) import the module now at the new name (value).

    Raises:
        ValueError: If an old name is also a new name (a move onto itself or a chain).
    """
    loops = set(moves) & set(moves.values())
    if loops:
        raise ValueError(f"moved module names that are also targets: {sorted(loops)}")
    _FINDER.moves.update(moves)
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)  # last: a real module of that name, if any, still wins


def renamed_names(module: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves old names for one release, each with a ``DeprecationWarning``.

    As Gymnasium's ``wrappers/__init__.py`` serves renamed wrappers: the old name is out of the
    module's namespace and ``__all__``, and reading it imports and returns the new object.

    Args:
        module: The module's name (``__name__``), for the messages.
        names: Each old name's new home, ``old -> (module, attribute)``.

    Returns:
        The function to assign to the module's ``__getattr__``.
    """

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {target[0]}.{target[1]}; the old name will be removed in the next "
                      "release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(target[0]), target[1])

    return __getattr__
