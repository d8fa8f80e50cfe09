"""A text space for language-model turns and transcripts.

Gymnasium's ``spaces.Text`` only admits characters from a fixed charset (by
default alphanumerics), so it rejects ``<search>`` tags and non-ASCII text.
:class:`UnicodeText` admits any Python string within a length range, and has Gymnasium's shared
memory and padding functions, so ``AsyncVectorEnv`` (with its default ``shared_memory=True``),
``DelayObservation`` and ``FrameStackObservation`` work on it.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import (
    create_empty_array,
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)
from gymnasium.wrappers.utils import create_zero_array

# What sample() draws from: printable ASCII (tags included), whitespace, and some non-ASCII letters.
_SAMPLE_CHARS = (
    [chr(c) for c in range(32, 127)] + ["\n", "\t"] + list("éüßçñøåæœλπΩжЯ中文字日本語한국어ابت—–…“”‘’€£")
)


class UnicodeText(spaces.Space[str]):
    """Any Unicode string with ``min_length <= len(s) <= max_length`` (in code points).

    Args:
        max_length: Longest admitted string.
        min_length: Shortest admitted string.
        seed: Seed for :meth:`sample`.
    """

    def __init__(
        self, max_length: int, *, min_length: int = 0, seed: int | np.random.Generator | None = None
    ):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
            raise ValueError(f"max_length must be a non-negative integer, got {max_length!r}")
        if (
            isinstance(min_length, bool)
            or not isinstance(min_length, int)
            or not 0 <= min_length <= max_length
        ):
            raise ValueError(
                f"min_length must be an integer in [0, max_length={max_length}], got {min_length!r}"
            )
        self.max_length = max_length
        self.min_length = min_length
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Strings cannot be flattened into a numeric array."""
        return False

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a string of admitted length."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Draw a random string (tags, whitespace and non-ASCII characters included).

        Lengths are drawn uniformly up to ``min(max_length, 512)`` so samples stay cheap.

        Args:
            mask: Unsupported; must be None.
            probability: Unsupported; must be None.

        Returns:
            A string in the space.
        """
        if mask is not None or probability is not None:
            raise ValueError("UnicodeText.sample does not support mask or probability")
        hi = max(self.min_length, min(self.max_length, 512))
        length = int(self.np_random.integers(self.min_length, hi + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_CHARS), size=length)
        return "".join(_SAMPLE_CHARS[i] for i in idx)

    def __repr__(self) -> str:
        return f"UnicodeText(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash((UnicodeText, self.min_length, self.max_length))


# ---- Gymnasium's shared memory (AsyncVectorEnv's default) for UnicodeText -----------------------------
# Each sub-environment's slot holds max_length + 1 int32: the string's length, then its code points
# (lone surrogates included, so any Python string round-trips).


@create_shared_memory.register(UnicodeText)
def _create_unicode_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence[str]):
    """The strings in shared memory, read when indexed: a live view, as a ``Box``'s array is.

    ``AsyncVectorEnv`` reads its observations from shared memory once and hands out a deep copy
    of them after each step (``copy=True``, its default): a deep copy of this view is a plain
    tuple of the strings at that moment.
    """

    def __init__(self, space: UnicodeText, shared_memory: Any, n: int) -> None:
        self._rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1))

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...

    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        row = self._rows[i]
        return row[1 : 1 + int(row[0])].tobytes().decode("utf-32-le", "surrogatepass")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_from_shared_memory(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_to_shared_memory(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    if not space.contains(value):
        raise ValueError(f"{value!r:.80} is not in {space}")
    size = space.max_length + 1
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=np.int32)
    row[0] = len(codes)
    row[1 : 1 + len(codes)] = codes


@create_zero_array.register(UnicodeText)
def _create_unicode_zero_array(space: UnicodeText) -> str:  # type: ignore[misc]
    # What DelayObservation and FrameStackObservation pad with: the shortest string in the space.
    return " " * space.min_length


@create_empty_array.register(UnicodeText)
def _create_unicode_empty_array(space: UnicodeText, n: int = 1, fn: Any = np.zeros) -> tuple[str, ...]:
    return tuple(" " * space.min_length for _ in range(n))
