"""The one registry type: names -> entries of one kind, each registry with its ``register_*`` function.

Tasks, index kinds, protocols, reward terms and presets, relevance verifiers, refiners and agents
are each a :class:`Registry`. It is a read-only mapping (``name in REGISTRY``, ``REGISTRY[name]``,
``sorted(REGISTRY)``, ``REGISTRY.get(name)``) plus :meth:`Registry.register`; looking up a name it
does not hold raises :class:`~searchenv.errors.UnknownNameError` naming the kind, the name and the
names there are. Entry points (custom retrievers, CLI verbs) are read where they are used, not here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from searchenv.errors import UnknownNameError

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Entries of one kind by name; a later registration of a name replaces the earlier one.

    Args:
        kind: What an entry is, as errors name it (``"protocol"``, ``"reward preset"``).
        entries: The built-in entries.
        load: Returns more built-in entries, called once before the first lookup or registration
            (a registry whose built-ins need an import the registry's module should not pay for).
        callables: Whether every entry must be callable (a function, class or factory): registering
            anything else raises ``TypeError``.
    """

    def __init__(self, kind: str, entries: Mapping[str, T] | None = None, *,
                 load: Callable[[], Mapping[str, T]] | None = None, callables: bool = False) -> None:
        self.kind = kind
        self.callables = callables
        self._entries: dict[str, T] = dict(entries or {})
        self._load = load
        self._lock = threading.Lock()

    def _all(self) -> dict[str, T]:
        if self._load is not None:
            with self._lock:
                if self._load is not None:
                    self._entries = {**self._load(), **self._entries}
                    self._load = None
        return self._entries

    def register(self, name: str, entry: T) -> None:
        """Make ``entry`` selectable as ``name`` (replacing an entry of that name).

        Raises:
            ValueError: If ``name`` is not a non-empty string.
            TypeError: If the registry holds callables and ``entry`` is not one.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r:.60}")
        if self.callables and not callable(entry):
            raise TypeError(f"a {self.kind} must be callable, got {entry!r:.60}")
        self._all()[name] = entry

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._all())

    def __getitem__(self, name: str) -> T:
        entries = self._all()
        try:
            return entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable "name"
            raise UnknownNameError(f"unknown {self.kind} {name!r:.80}; known: {', '.join(self.names())}") from None

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._all()
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._all()))

    def __len__(self) -> int:
        return len(self._all())

    def copy(self) -> Registry[T]:
        """A registry of the same kind holding the same entries (registering in one leaves the other alone)."""
        return Registry(self.kind, self._all(), callables=self.callables)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
