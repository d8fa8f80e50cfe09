"""A tool-call protocol of the tests' own, and a registry that is as it was after each test.

Shared by the main suite and the OpenEnv and verifiers checks (which run in their own virtual
environments): each registers :class:`PlainTools` to show that a newly registered protocol is
served without editing the adapter.
"""

from __future__ import annotations

import pytest

from searchenv.protocols import ToolsProtocol, register_protocol
from searchenv.protocols import registry as protocol_registry


class PlainTools(ToolsProtocol):
    """A tool-call protocol whose results are ``title: text`` lines (no document numbers)."""

    name = "test-plain-tools"

    def render_hits(self, queries, hits, numbers=None):  # type: ignore[no-untyped-def]
        return "\n<tool_response>\n" + "\n".join(f"{h.title}: {h.text}" for h in hits[0]) + "\n</tool_response>\n"


def isolate_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the protocol registry this test's own copy: what it registers is gone afterwards."""
    monkeypatch.setattr(protocol_registry, "_PROTOCOLS", protocol_registry._PROTOCOLS.copy())


def register_plain_tools(monkeypatch: pytest.MonkeyPatch) -> str:
    """Register :class:`PlainTools` for this test only; its name."""
    isolate_registry(monkeypatch)
    register_protocol(PlainTools)
    return PlainTools.name
