"""Protocols by name: :func:`get_protocol` (``protocol=`` in ``gymnasium.make``) and :func:`register_protocol`.

This is the one list of protocols. What a protocol can do is what its class declares
(:attr:`~searchenv.protocols.base.ActionProtocol.native_tools`, ``can_open``,
``episode_numbering``): a place that serves only some protocols asks :func:`protocol_names` for
them by those features (``protocol_names(native_tools=True)`` are the tool-call protocols), so a
protocol registered later is served wherever its features fit.
"""

from __future__ import annotations

from searchenv.protocols.base import ActionProtocol
from searchenv.protocols.tags import ArenaProtocol, BrowseProtocol, MultiQueryProtocol, SearchR1Protocol
from searchenv.protocols.tools import ToolsBrowseProtocol, ToolsProtocol
from searchenv.utils.registry import Registry

_PROTOCOLS: Registry[type[ActionProtocol]] = Registry("protocol", {
    p.name: p for p in (SearchR1Protocol, MultiQueryProtocol, ArenaProtocol, BrowseProtocol, ToolsProtocol,
                        ToolsBrowseProtocol)
})
# The features a protocol class declares: ActionProtocol's boolean class attributes.
_FEATURES: tuple[str, ...] = tuple(sorted(k for k, v in vars(ActionProtocol).items() if isinstance(v, bool)))


def register_protocol(cls: type[ActionProtocol]) -> None:
    """Make a protocol class selectable by its ``name``.

    Raises:
        ValueError: If the class has no ``name``.
    """
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty class attribute `name`")
    _PROTOCOLS.register(cls.name, cls)


def protocol_names(**features: bool) -> list[str]:
    """Registered protocol names, sorted; with ``features``, those whose class declares each as given.

    Args:
        **features: Class attributes of :class:`ActionProtocol` to match (``native_tools``,
            ``can_open``, ``episode_numbering``): ``native_tools=True`` gives the tool-call
            protocols, ``can_open=False`` those without an ``open`` action.

    Raises:
        ValueError: For a name that is not one of those features.
    """
    unknown = sorted(set(features) - set(_FEATURES))
    if unknown:
        raise ValueError(f"unknown protocol feature(s) {unknown}; the features are {', '.join(_FEATURES)}")
    return sorted(name for name, cls in _PROTOCOLS.items()
                  if all(getattr(cls, feature) == value for feature, value in features.items()))


def get_protocol(spec: str | ActionProtocol, **kwargs: int) -> ActionProtocol:
    """Return a protocol instance from a name (with options) or pass an instance through.

    Raises:
        ValueError: For an unknown name (:class:`~searchenv.errors.UnknownNameError`, naming the protocols).
    """
    if isinstance(spec, ActionProtocol):
        if kwargs:
            raise ValueError(
                f"protocol options {sorted(kwargs)} given with a protocol instance; set them on it"
            )
        return spec
    return _PROTOCOLS[spec](**kwargs)
