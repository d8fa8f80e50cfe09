"""Your own classes by name: ``module:Class`` (dotted attributes allowed), for retrievers and agents alike."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def is_module_attr(spec: object) -> bool:
    """Whether ``spec`` reads as ``module:attr`` (identifiers only: not a URL, a path or a plain name)."""
    if not isinstance(spec, str) or "://" in spec:
        return False
    module, sep, attr = spec.partition(":")
    if not (sep and module and attr) or "/" in module or "\\" in module:
        return False
    return all(part.isidentifier() for part in module.split(".") + attr.split("."))


def load_attribute(spec: str, what: str) -> Any:
    """The object ``module:attr`` names; the current folder is importable (as under ``python -m``).

    Args:
        spec: ``module:attr``, ``attr`` dotted for a nested attribute.
        what: What it is, for messages (``"retriever"``, ``"agent"``).

    Raises:
        ValueError: Naming the spec, if the module cannot be imported or has no such attribute.
    """
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:  # `python -m` and uvicorn find modules in the folder
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
