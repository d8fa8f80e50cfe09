"""JSON from untrusted places (input files, HTTP bodies) with errors that say where and why.

Python's ``json`` raises four different things on hostile input: ``JSONDecodeError`` on bad
syntax, ``UnicodeDecodeError`` on bytes that are not UTF-8, ``RecursionError`` on deeply nested
arrays, and a bare ``ValueError`` on integers longer than ``sys.get_int_max_str_digits()``. Every
reader of this package goes through :func:`loads` or :func:`iter_jsonl`, which turn all four into
one error class whose message names the place (file and line, or request) and the reason.

It also refuses what ``json`` accepts silently: a lone surrogate escape (``"\ud800"`` without its
pair), which makes a ``str`` that is not Unicode text and fails only when written as UTF-8, far
from the file and line it came from. The message names the field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from searchenv.errors import JSONInputError

#: Default limit on nesting for :func:`loads` callers that ask for a depth check. Every format
#: this package reads (FlashRAG, HotpotQA, MuSiQue, Search-R1 responses) nests fewer than 10 levels.
DEFAULT_MAX_DEPTH = 64


def _depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth`` containers (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _deep_place(text: str, max_depth: int) -> str:
    """Where in JSON ``text`` nesting first passes ``max_depth``: ``"line L column C, in field F"``.

    A scan of the text (strings and escapes skipped, no parsing, no recursion) for messages about a
    value too deep to parse; the field is the path of keys and indexes down to that point.
    """
    frames: list[list[Any]] = []  # per open container: [is_object, key or index]
    line, column, in_string, escaped, last_string, start = 1, 0, False, False, "", 0
    for i, char in enumerate(text):
        column += 1
        if char == "\n":
            line, column = line + 1, 0
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string, last_string = False, text[start:i]
            continue
        if char == '"':
            in_string, start = True, i + 1
        elif char in "[{":
            frames.append([char == "{", None if char == "{" else 0])
            if len(frames) > max_depth:
                path = "".join(f".{key}" if is_object else f"[{key}]" for is_object, key in frames[:-1]
                               if key is not None).lstrip(".")
                path = path if len(path) <= 60 else path[:60] + "..."
                place = f"column {column}" if line == 1 else f"line {line} column {column}"
                return place + (f", in field {path!r}" if path else "")
        elif char in "]}" and frames:
            frames.pop()
        elif char == ":" and frames and frames[-1][0]:
            frames[-1][1] = last_string
        elif char == "," and frames and not frames[-1][0]:
            frames[-1][1] += 1
    return "an unknown place"


#: A surrogate escape in JSON text (paired or not), or a surrogate code point itself.
_SURROGATE_HINT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> tuple[str, str] | None:
    """``(field, string)`` of the first string (key or value) holding a lone surrogate, else ``None``."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, field = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return field or "the value", item
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{field}.{key}" if field else str(key)
                if _SURROGATE.search(key):
                    return f"the key {name!r}", key
                stack.append((child, name))
        elif isinstance(item, list):
            stack.extend((child, f"{field}[{i}]") for i, child in enumerate(item))
    return None


def loads(
    data: str | bytes,
    where: str,
    *,
    max_depth: int | None = None,
    error: type[ValueError] = JSONInputError,
) -> Any:
    """Parse one JSON value, raising ``error`` with ``where`` and the reason on any bad input.

    Args:
        data: The JSON text, or UTF-8 bytes.
        where: The place to name in the message ("corpus.jsonl:12", "request body").
        max_depth: If given, refuse values nested deeper than this many arrays/objects.
        error: The exception class to raise (a ``ValueError`` subclass taking one message).

    Returns:
        The parsed value.

    Raises:
        ValueError: An instance of ``error`` for invalid syntax, invalid UTF-8, a lone
            surrogate in a string, nesting too deep, or an integer too long to convert.
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{where}: not valid UTF-8 (byte {exc.start}: {exc.reason})") from None
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        raise error(f"{where}: invalid JSON at {at} ({exc.msg})") from None
    except RecursionError:
        limit = DEFAULT_MAX_DEPTH if max_depth is None else max_depth
        raise error(f"{where}: JSON nested too deeply (deeper than {limit} levels at "
                    f"{_deep_place(data, limit)})") from None
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise error(f"{where}: unusable JSON value ({exc})") from None
    if max_depth is not None and _depth_exceeds(value, max_depth):
        raise error(f"{where}: JSON nested deeper than {max_depth} levels (at {_deep_place(data, max_depth)})")
    if _SURROGATE_HINT.search(data) and (bad := _lone_surrogate(value)) is not None:
        field, text = bad
        raise error(f"{where}: {field} is not Unicode text: {text[:80]!r} holds a lone surrogate "
                    "(a \\ud800-\\udfff escape without its pair)")
    return value


def iter_jsonl(
    path: str | os.PathLike[str],
    *,
    max_depth: int | None = DEFAULT_MAX_DEPTH,
    error: type[ValueError] = JSONInputError,
) -> Iterator[tuple[str, Any]]:
    """Stream ``(where, value)`` for every non-blank line of a JSON Lines file.

    The file is read as bytes and each line decoded on its own, so a line that is not UTF-8 is
    reported by its number instead of as a decode error somewhere in the file.

    Args:
        path: The file.
        max_depth: Refuse values nested deeper than this (``None``: only Python's own limit).
        error: The exception class to raise, e.g. ``CorpusFormatError``.

    Yields:
        ``("path:line", value)`` in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: An instance of ``error`` naming file and line for the first bad line.
    """
    path = Path(path)
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            yield where, loads(raw, where, max_depth=max_depth, error=error)
