"""An on-disk document store that indexes share: JSONL plus a byte-offset table.

``docs.jsonl`` is itself a corpus file that ``searchenv index`` reads, one
``{"id", "title", "text"}`` object per line: title and text are kept apart, so every document
comes back exactly as it went in (a title-less document whose text has several lines keeps an
empty title). ``doc_offsets.npy`` holds the byte offset of each line, so document ``i`` is read
(optionally straight from the file) without loading the whole corpus into Python objects.

Read "memory-mapped" (``mmap_mode``), documents are read with ``os.pread`` from an open file
rather than through a memory map: a ``docs.jsonl`` truncated in place then gives a short read and
an error naming the file, where a memory map would kill the process with SIGBUS. Pages still come
from the page cache, so a large corpus costs the process no memory.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from searchenv.corpus import Document, document_from_record
from searchenv.utils.jsonsafe import loads

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "doc_offsets.npy"


class DocStore:
    """Random access to documents by row number, in memory or memory-mapped.

    Args:
        folder: A folder written by :meth:`write`.
        mmap_mode: Read each document from the file when asked for (offsets memory-mapped) instead of
            reading them all into memory.
    """

    def __init__(self, folder: str | os.PathLike[str], *, mmap_mode: bool = False) -> None:
        folder = Path(folder)
        self._offsets = np.load(
            folder / OFFSETS_FILE, allow_pickle=False, mmap_mode="r" if mmap_mode else None
        )
        self._path = folder / DOCS_FILE
        self._buf: bytes | mmap.mmap = b""  # the documents, unless read from ``_fd``
        self._fd: int | None = None
        if mmap_mode and hasattr(os, "pread"):
            self._fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            size = os.fstat(self._fd).st_size
        elif mmap_mode:  # no pread (Windows): a memory map
            with self._path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        else:
            self._buf = self._path.read_bytes()
            size = len(self._buf)
        offsets = self._offsets
        if offsets.ndim != 1 or offsets.dtype != np.int64 or not len(offsets) or offsets[0] != 0 or (
            offsets[-1] != size
        ):
            self.close()
            raise ValueError(f"{folder / OFFSETS_FILE} does not describe the {size} bytes of {self._path}")
        self._ids: list[str] | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row: int) -> Document:
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        where = f"{self._path}:row {row}"
        if self._fd is None:
            raw = self._buf[start:end]
        else:
            raw = os.pread(self._fd, end - start, start)
            if len(raw) != end - start:
                raise ValueError(f"{self._path} ends before row {row} (byte {start + len(raw)} of {end}): it was "
                                 "truncated or rewritten in place after the index was opened")
        return document_from_record(loads(raw, where), where)

    def close(self) -> None:
        """Release the open file (reading documents afterwards fails); safe to call twice."""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __iter__(self) -> Iterator[Document]:
        for i in range(len(self)):
            yield self[i]

    def ids(self) -> list[str]:
        """All document ids in row order (read once, then cached)."""
        if self._ids is None:
            self._ids = [d.id for d in self]
        return self._ids

    @staticmethod
    def write(folder: str | os.PathLike[str], documents: Iterable[Document]) -> tuple[int, str]:
        """Stream documents into ``folder`` and fingerprint them on the way.

        Args:
            folder: Destination folder (created).
            documents: The corpus, in order.

        Returns:
            (number of documents, corpus fingerprint as :func:`searchenv.corpus.corpus_fingerprint`).
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        offsets = [0]
        h = hashlib.sha256()
        with (folder / DOCS_FILE).open("wb") as f:
            for d in documents:
                for part in (d.id, d.title, d.text):
                    b = part.encode("utf-8")
                    h.update(len(b).to_bytes(8, "little"))
                    h.update(b)
                record = {"id": d.id, "title": d.title, "text": d.text}
                line = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
                f.write(line)
                offsets.append(offsets[-1] + len(line))
        np.save(folder / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64), allow_pickle=False)
        return len(offsets) - 1, h.hexdigest()[:32]
