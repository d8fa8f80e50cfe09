"""QA files: FlashRAG JSONL read and written line by line, splits, and telling a file from a task name."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from searchenv.corpus import CorpusFormatError, atomic_write_lines
from searchenv.tasks.example import QAExample, example_from_flashrag
from searchenv.utils.jsonsafe import iter_jsonl


def read_qa_jsonl(path: str | os.PathLike[str]) -> list[QAExample]:
    """Read a FlashRAG QA JSONL file; any bad line aborts the whole read.

    Args:
        path: The file.

    Returns:
        The examples in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        CorpusFormatError: Naming the file and line of the first bad record (invalid JSON or
            UTF-8, nesting deeper than 64 levels, an integer over 4,300 digits, a bad field) or
            duplicate id.
    """
    out: list[QAExample] = []
    seen: set[str] = set()
    for where, record in iter_jsonl(path, error=CorpusFormatError):
        ex = example_from_flashrag(record, where)
        if ex.id in seen:
            raise CorpusFormatError(f"{where}: duplicate example id {ex.id!r}")
        seen.add(ex.id)
        out.append(ex)
    return out


def example_where(path: str | os.PathLike[str], example_id: str) -> str | None:
    """``"file:line"`` of the record whose id is ``example_id`` in QA file ``path``, or None if none is found.

    For error messages about an example already read: the file is read again, and any problem in it
    (gone, unreadable, malformed) gives None rather than a second error.
    """
    try:
        for where, record in iter_jsonl(path, error=CorpusFormatError):
            qid = record.get("id") if isinstance(record, dict) else None
            if qid == example_id or (isinstance(qid, int) and not isinstance(qid, bool) and str(qid) == example_id):
                return where
    except (OSError, ValueError):
        return None
    return None


def write_qa_jsonl(path: str | os.PathLike[str], examples: Iterable[QAExample]) -> None:
    """Write examples as FlashRAG QA JSONL, atomically.

    Args:
        path: Destination.
        examples: The examples.
    """
    atomic_write_lines(path, qa_lines(examples))


def qa_lines(examples: Iterable[QAExample]) -> Iterator[str]:
    """The lines of a FlashRAG QA JSONL file (:func:`write_qa_jsonl`)."""
    return (json.dumps(e.to_flashrag(), ensure_ascii=False) for e in examples)


def split_examples(
    examples: Sequence[QAExample], dev_fraction: float, seed: int
) -> tuple[list[QAExample], list[QAExample]]:
    """Split questions into training and held-out ones, at random but the same for the same seed.

    ``round(len(examples) * dev_fraction)`` questions, drawn by a generator seeded with ``seed``
    (never the global one), are held out; both parts keep the examples' order.

    Args:
        examples: The questions.
        dev_fraction: Share held out, in (0, 1).
        seed: Seed of the draw.

    Returns:
        ``(train, dev)``.

    Raises:
        ValueError: If ``dev_fraction`` is not in (0, 1), or either part would be empty.
    """
    if isinstance(dev_fraction, bool) or not isinstance(dev_fraction, int | float) or not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be between 0 and 1 (exclusive), got {dev_fraction!r}")
    n = len(examples)
    n_dev = round(n * dev_fraction)
    if not 1 <= n_dev <= n - 1:
        raise ValueError(
            f"{n} question(s) with dev_fraction {dev_fraction} leave no question on one side (held out: {n_dev})"
        )
    held = set(random.Random(seed).sample(range(n), n_dev))
    return [ex for i, ex in enumerate(examples) if i not in held], [ex for i, ex in enumerate(examples) if i in held]


def looks_like_file(task: str | os.PathLike[str]) -> bool:
    """Whether ``task`` names a QA file rather than a registered task.

    An existing file does, and so does a name that looks like a path (a folder part or a file
    suffix, ``my/qa.jsnl``): registered task names have neither, so a mistyped file name is
    reported as a missing file, not as an unknown task.
    """
    if isinstance(task, os.PathLike):
        return True
    path = Path(task)
    return path.is_file() or bool(path.suffix) or "/" in task or os.sep in task
