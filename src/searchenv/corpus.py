"""Documents, corpus files in the FlashRAG JSONL format, and corpus fingerprints.

A corpus file has one JSON object per line, either ``{"id", "contents"}`` with the
title on the first line of ``contents`` (FlashRAG / Search-R1), or
``{"id", "title", "text"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from searchenv.errors import CorpusFormatError
from searchenv.errors import DataWarning as DataWarning  # its old path
from searchenv.utils.files import publishable
from searchenv.utils.jsonsafe import iter_jsonl


@dataclass(frozen=True, slots=True)
class Document:
    """A passage of the corpus.

    Attributes:
        id: Unique id within the corpus.
        title: Title (the first line of FlashRAG ``contents``).
        text: Body text.
    """

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The FlashRAG ``contents`` field: title, newline, text.

        A document without a title is its text alone, unless the text holds a newline: then
        the contents start with an empty title line, so the text's first line never becomes a
        title when the contents are split again (:func:`split_contents`).
        """
        return f"{self.title}\n{self.text}" if self.title or "\n" in self.text else self.text

    def to_json(self) -> dict[str, str]:
        """Return the FlashRAG JSONL record ``{"id", "contents"}``."""
        return {"id": self.id, "contents": self.contents}


def split_contents(contents: str) -> tuple[str, str]:
    """Split FlashRAG ``contents`` into (title, text) at the first newline.

    Args:
        contents: The ``contents`` string.

    Returns:
        The title as stored, surrounding whitespace removed (FlashRAG's wiki dumps quote their
        titles, ``"Evan Morris"``, and keep the quotes: Search-R1's server and prompt show them,
        so a model trained there sees the same text here) and the text.
    """
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents
    return title.strip(), text


def document_from_record(record: object, where: str) -> Document:
    """Build a :class:`Document` from one parsed JSON record.

    Args:
        record: The decoded JSON value.
        where: ``"file:line"`` used in error messages.

    Returns:
        The document.

    Raises:
        CorpusFormatError: If fields are missing or have the wrong type.
    """
    if not isinstance(record, dict):
        raise CorpusFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    doc_id = record.get("id", record.get("_id", record.get("docid")))  # docid: BrowseComp-Plus's corpus
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id:
        raise CorpusFormatError(f"{where}: field 'id' must be a non-empty string, got {doc_id!r}")
    if "contents" in record:
        contents = record["contents"]
        if not isinstance(contents, str):
            raise CorpusFormatError(f"{where}: field 'contents' must be a string, got {contents!r:.60}")
        return Document(doc_id, *split_contents(contents))
    raw_title: object = record.get("title", "")
    raw_text: object = record.get("text")
    if not isinstance(raw_text, str):
        raise CorpusFormatError(f"{where}: needs 'contents' or 'text' (a string); got keys {sorted(record)}")
    if not isinstance(raw_title, str):
        raise CorpusFormatError(f"{where}: field 'title' must be a string, got {raw_title!r:.60}")
    return Document(doc_id, raw_title, raw_text)


def iter_corpus(path: str | os.PathLike[str]) -> Iterator[Document]:
    """Stream documents from a JSONL corpus file.

    Args:
        path: The corpus file.

    Yields:
        Documents in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        CorpusFormatError: On a malformed line (invalid JSON or UTF-8, nesting deeper than 64
            levels, an integer over 4,300 digits, a bad field), naming file and line, or on a
            duplicate id.
    """
    seen: set[str] = set()
    for where, record in iter_jsonl(path, error=CorpusFormatError):
        doc = document_from_record(record, where)
        if doc.id in seen:
            raise CorpusFormatError(f"{where}: duplicate document id {doc.id!r}")
        seen.add(doc.id)
        yield doc


def read_corpus(path: str | os.PathLike[str]) -> list[Document]:
    """Read a whole JSONL corpus; nothing is returned unless every line is valid.

    Args:
        path: The corpus file.

    Returns:
        The documents in file order.
    """
    return list(iter_corpus(path))


def atomic_write_lines(path: str | os.PathLike[str], lines: Iterable[str]) -> None:
    """Write lines to ``path`` through a temporary file and an atomic rename.

    A failure part-way leaves any previous file at ``path`` untouched. The file gets the mode
    ``open`` would give it (0666 less the umask).

    Args:
        path: Destination file.
        lines: Lines without trailing newlines.
    """
    atomic_write_files([(path, lines)])


def atomic_write_files(files: Sequence[tuple[str | os.PathLike[str], Iterable[str]]]) -> None:
    """Write several files as :func:`atomic_write_lines` does, renaming none until all are written.

    A failure while writing any of them (a full disk, text that cannot be encoded) leaves every
    previous file in place, so files that belong together are not left mismatched. The renames
    themselves are one per file: a process killed between two of them leaves a new file beside an
    old one (each whole); questions written by ``searchenv convert`` carry their corpus's
    fingerprint, so such a pair is reported where it is used, not read silently.

    Args:
        files: ``(destination, lines without trailing newlines)`` pairs.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, lines in files:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for line in lines:
                    f.write(line)
                    f.write("\n")
            publishable(tmp)
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def write_corpus(path: str | os.PathLike[str], documents: Iterable[Document]) -> None:
    """Write documents as FlashRAG JSONL (``{"id", "contents"}``), atomically.

    Args:
        path: Destination file.
        documents: Documents to write (may be a generator: memory stays bounded).
    """
    atomic_write_lines(path, corpus_lines(documents))


def corpus_lines(documents: Iterable[Document]) -> Iterator[str]:
    """The lines of a FlashRAG JSONL corpus file (:func:`write_corpus`)."""
    return (json.dumps(d.to_json(), ensure_ascii=False) for d in documents)


def corpus_fingerprint(documents: Iterable[Document]) -> str:
    """Hash ids, titles and texts in order, so a stale index can be detected.

    Args:
        documents: The corpus.

    Returns:
        A hex SHA-256 digest (first 32 characters).
    """
    h = hashlib.sha256()
    for d in documents:
        for part in (d.id, d.title, d.text):
            b = part.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()[:32]
