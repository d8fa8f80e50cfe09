"""Protocols by name: :func:`get_protocol` (``protocol=`` in ``gymnasium.make``) and :func:`register_protocol`."""

from __future__ import annotations

from searchenv.protocols.base import ActionProtocol
from searchenv.protocols.tags import ArenaProtocol, BrowseProtocol, MultiQueryProtocol, SearchR1Protocol
from searchenv.protocols.tools import ToolsBrowseProtocol, ToolsProtocol

_PROTOCOLS: dict[str, type[ActionProtocol]] = {
    p.name: p for p in (SearchR1Protocol, MultiQueryProtocol, ArenaProtocol, BrowseProtocol, ToolsProtocol,
                        ToolsBrowseProtocol)
}


def register_protocol(cls: type[ActionProtocol]) -> None:
    """Make a protocol class selectable by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty class attribute `name`")
    _PROTOCOLS[cls.name] = cls


def protocol_names() -> list[str]:
    """Registered protocol names."""
    return sorted(_PROTOCOLS)


def get_protocol(spec: str | ActionProtocol, **kwargs: int) -> ActionProtocol:
    """Return a protocol instance from a name (with options) or pass an instance through.

    Raises:
        ValueError: For an unknown name.
    """
    if isinstance(spec, ActionProtocol):
        if kwargs:
            raise ValueError(
                f"protocol options {sorted(kwargs)} given with a protocol instance; set them on it"
            )
        return spec
    if spec not in _PROTOCOLS:
        raise ValueError(f"unknown protocol {spec!r}; known: {', '.join(protocol_names())}")
    return _PROTOCOLS[spec](**kwargs)
