"""Text that can always be written: the one helper for strings that may hold a lone surrogate."""

from __future__ import annotations


def writable(text: str) -> str:
    r"""``text`` with any lone surrogate written as its escape (backslash, u, four hex digits): writable as UTF-8.

    A model's decoded text never holds one; a caller's string can (a ``\ud800`` escape decoded from
    JSON without its pair), and it would make every log, transcript or reply that carries it
    unwritable, far from where it came in.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
