"""Your own retriever by name: ``module:ClassOrFactory`` or an entry point of the ``searchenv.retrievers`` group.

Every place that takes a retriever by name (``gymnasium.make(retriever=...)``, ``searchenv eval``,
``bench``, ``eval-retrieval``, ``serve``) resolves a custom one here::

    searchenv eval --agent oracle --retriever mypkg.search:TfidfRetriever --retriever-option min_df=2

A package registers a name for it in its ``pyproject.toml``::

    [project.entry-points."searchenv.retrievers"]
    tfidf = "mypkg.search:TfidfRetriever"

The target is a class or a factory (called with the options, plus ``corpus=PATH`` when it takes a
``corpus`` argument and the caller knows the corpus file) or a ready instance (no options). What
comes out must be an instance with a callable ``search_batch``: a class is refused.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from searchenv.retrievers.base import Retriever
from searchenv.utils.loading import is_module_attr, load_attribute

#: The entry-point group that names retrievers.
ENTRY_POINT_GROUP = "searchenv.retrievers"


def entry_point_names() -> list[str]:
    """Retriever names registered by installed packages (the ``searchenv.retrievers`` group)."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def is_custom_spec(spec: object) -> bool:
    """Whether ``spec`` names a custom retriever: ``module:attr`` (not a URL or a path) or an entry-point name."""
    if not isinstance(spec, str) or not spec or "://" in spec:
        return False
    if is_module_attr(spec) and not Path(spec).exists():
        return True
    return ":" not in spec and spec in entry_point_names()


def parse_options(items: Sequence[str], *, flag: str = "--retriever-option") -> dict[str, Any]:
    """``key=value`` strings as keyword arguments: values read as JSON (``3``, ``true``, ``[1, 2]``), else text.

    Raises:
        ValueError: For an item without ``=`` or with a key that is not a Python identifier.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"{flag} {item!r}: expected key=value with a Python identifier as key")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _target(spec: str) -> Any:
    if ":" not in spec:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
        if not found:
            raise ValueError(f"no retriever named {spec!r} in the {ENTRY_POINT_GROUP!r} entry points "
                             f"(installed: {', '.join(entry_point_names()) or 'none'})")
        try:
            return found[0].load()
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"retriever {spec!r} ({found[0].value}) cannot be loaded: {exc}") from exc
    return load_attribute(spec, "retriever")


def check_retriever(obj: object, what: str) -> Retriever:
    """``obj`` if it is a retriever instance, else a ``TypeError`` naming ``what`` and what was wrong.

    A class is refused (its ``search_batch`` would be called unbound and fail on every search).
    """
    if isinstance(obj, type):
        raise TypeError(f"{what} is the class {obj.__module__}.{obj.__qualname__}, not an instance: "
                        f"pass {obj.__qualname__}(...) (or give it by name, module:Class, to have it built)")
    if not callable(getattr(obj, "search_batch", None)):
        raise TypeError(f"{what} has no search_batch(queries, k) method (got {type(obj).__name__})")
    return obj  # type: ignore[return-value]


def takes_corpus(spec: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether :func:`load_retriever` builds ``spec`` over the corpus file it is given (its ``corpus=``).

    True for a class or factory with a ``corpus`` parameter that ``options`` does not set.

    Raises:
        ValueError: If the module, attribute or entry point cannot be found.
    """
    target = _target(spec)
    if not (isinstance(target, type) or (callable(target) and not hasattr(target, "search_batch"))):
        return False
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return "corpus" in params and "corpus" not in (options or {})


def load_retriever(spec: str, options: Mapping[str, Any] | None = None, *,
                   corpus: str | os.PathLike[str] | None = None) -> Retriever:
    """Build the retriever that ``spec`` names.

    Args:
        spec: ``module:ClassOrFactory`` (dotted attributes allowed; the current folder is importable)
            or an entry-point name of the ``searchenv.retrievers`` group.
        options: Keyword arguments for the class or factory.
        corpus: The corpus file, passed as ``corpus=`` to a class or factory that takes one.

    Returns:
        The retriever instance.

    Raises:
        ValueError: If the module, attribute or entry point cannot be found, or the options do
            not fit (naming the spec).
        TypeError: If the result is not a retriever instance.
    """
    opts = dict(options or {})
    target = _target(spec)
    if isinstance(target, type) or (callable(target) and not hasattr(target, "search_batch")):
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            params = {}  # type: ignore[assignment]
        if corpus is not None and "corpus" in params and "corpus" not in opts:
            opts["corpus"] = str(corpus)
        try:
            inspect.signature(target).bind(**opts)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"retriever {spec!r}: options {sorted(opts)} do not fit: {exc}") from None
        made = target(**opts)
    elif opts:
        raise ValueError(f"retriever {spec!r} is an instance; options {sorted(opts)} apply to a class or factory")
    else:
        made = target
    return check_retriever(made, f"retriever {spec!r}")
