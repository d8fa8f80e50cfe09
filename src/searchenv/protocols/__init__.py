"""Action protocols: how a model turn is parsed into an action and how results are shown.

Each published format is one :class:`ActionProtocol` subclass, selectable by name with
:func:`get_protocol`. A protocol never raises on model text: anything malformed
becomes an :class:`Invalid` action with a code and a message that tells the
model how to fix the turn. Only the agent's own turn is parsed; retrieved text
is never read for answers.

The parsed actions and invalid codes live in :mod:`searchenv.actions` (a leaf: the metrics count
them without importing a parser) and are re-exported here. Modules: :mod:`~searchenv.protocols.base`
(the tag parser and :class:`ActionProtocol`), :mod:`~searchenv.protocols.tags` (tag formats),
:mod:`~searchenv.protocols.tools` (native tool calls), :mod:`~searchenv.protocols.registry`
(protocols by name).

Formats:
    ``search-r1``: ``<think>..</think>``, one ``<search>query</search>`` or one
    ``<answer>..</answer>`` per turn; results come back as
    ``<information>Doc 1(Title: ...) text ...</information>`` (Search-R1, ReSearch).
    ``multi-query``: as ``search-r1`` but one ``<search>`` block may hold several
    queries, one per line, searched together, up to ``max_queries`` (RAG-R1).
    ``arena``: as ``search-r1``, with documents numbered across the episode (the first search
    shows Doc 1-3, the next Doc 4-6; a document shown again keeps its number), and a final turn
    that cites the documents it relies on: ``<relevance>1, 4</relevance><analysis>..</analysis>
    <answer>..</answer>`` (ARENA). A citation of a number never shown earns nothing.
    ``browse``: a search returns each hit's title and the first ``snippet_chars`` characters;
    ``<open>3</open>`` reads shown document 3 in full, ``page_chars`` characters a page
    (``<open>3 page 2</open>`` for the next), as web agents do (DeepResearcher).
    ``tools``: native tool calls, the function-calling format instruct models are trained on:
    ``search`` and ``answer`` declared as JSON-schema tools, a turn is one
    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes/Qwen) or that JSON
    object alone, and results come back as ``tool`` messages with the call's id
    (:class:`ToolsProtocol`). ``tools-browse`` adds ``open`` with ``browse``'s snippets and pages.

``Protocol`` (the former name of :class:`ActionProtocol`, which shadowed :class:`typing.Protocol`) and
``invalid_share`` (now :func:`searchenv.metrics.invalid_share`) still read, with a
``DeprecationWarning``, for one release.
"""

from __future__ import annotations

from searchenv.actions import INVALID_CODES, Action, Answer, Invalid, Open, Search, ToolCall
from searchenv.protocols.base import ALL_TAGS, ActionProtocol, sanitize
from searchenv.protocols.registry import get_protocol, protocol_names, register_protocol
from searchenv.protocols.tags import ArenaProtocol, BrowseProtocol, MultiQueryProtocol, SearchR1Protocol
from searchenv.protocols.tools import ToolsBrowseProtocol, ToolsProtocol, tool_turn_text
from searchenv.utils.moved import renamed_names

__all__ = [
    "ALL_TAGS",
    "INVALID_CODES",
    "Action",
    "ActionProtocol",
    "Answer",
    "ArenaProtocol",
    "BrowseProtocol",
    "Invalid",
    "MultiQueryProtocol",
    "Open",
    "Search",
    "SearchR1Protocol",
    "ToolCall",
    "ToolsBrowseProtocol",
    "ToolsProtocol",
    "get_protocol",
    "protocol_names",
    "register_protocol",
    "sanitize",
    "tool_turn_text",
]

__getattr__ = renamed_names(__name__, {"Protocol": ("searchenv.protocols.base", "ActionProtocol"),
                                       "invalid_share": ("searchenv.metrics", "invalid_share")})
