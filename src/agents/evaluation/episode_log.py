"""Finished episodes saved as they complete, so an interrupted evaluation continues where it stopped.

An :class:`EpisodeLog` is one JSONL file: the first line holds the settings of the run
(``{"searchenv_episodes": 1, "settings": {...}}``), then one line per finished episode,
``{"position": i, "episode": {...}}`` (:meth:`agents.baselines.EpisodeResult.to_dict`), appended
and flushed to disk after every batch; the last line of a batch may carry ``"usage"``, the model
server's counters spent since the previous batch was saved, so a resumed run's ``model_usage`` adds
up over every process (what a process spent on a batch it was killed in is lost with that batch).
A run killed at any moment leaves whole lines and at most one torn last line, which the next run
drops; a failed episode is not saved, so the next run tries it again. Saved episodes of a run with
other settings are refused, never mixed in.

The file is never reached through a symbolic link (one at its path is refused, and it is opened
with ``O_NOFOLLOW``), and nothing in it is changed before its first line has proved it to be a
file of this class: a file that is not one is refused untouched.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.baselines import EpisodeResult
from searchenv.corpus import atomic_write_lines
from searchenv.utils.jsonsafe import loads

#: Version of the file layout, on the first line.
LOG_VERSION = 1


class EpisodeLog:
    """The saved episodes of one agent with one retriever (see the module docstring).

    Args:
        path: The JSONL file (created on the first :meth:`append`).
        settings: What makes two runs the same run (agent, task, questions, model, sampling,
            batch size, ...): JSON values, compared with the saved ones by :meth:`load`.
    """

    def __init__(self, path: str | os.PathLike[str], settings: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.settings = json.loads(json.dumps(dict(settings)))  # as it reads back: lists, not tuples
        self.lines: dict[int, int] = {}  # position -> its line in the file, as the last load read it
        #: The model usage the saved lines carry, summed (as the last load read it).
        self.usage: dict[str, float] = {}

    def load(self) -> dict[int, EpisodeResult]:
        """The episodes saved so far, by position (empty when there is no file).

        A torn last line (the run was killed while writing it) is dropped from the file, once
        its first line has shown it to be a file of this run.

        Raises:
            ValueError: If the file was written by a run with other settings (naming each
                setting that differs), a line is not what this class writes (naming the
                file, the line and the field), or the path is a symbolic link or not a regular file.
        """
        self.lines, self.usage = {}, {}
        data, identity = self._read()
        if data is None:
            return {}
        if not data.strip():
            return {}
        if b"\n" not in data:  # the settings line is written whole, with its newline, or not at all
            raise ValueError(f"{self.path}, line 1: expected the settings line of saved episodes, got no whole line; "
                             "delete the file or use another --out")
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty, or a line cut off when the run was killed
        lines = [x for x in lines if x.strip()]
        where = f"{self.path}, line 1"
        header = self._json(lines[0], where) if lines else None
        if not isinstance(header, dict) or header.get("searchenv_episodes") != LOG_VERSION or \
                not isinstance(header.get("settings"), dict):
            raise ValueError(f"{where}: expected the settings line of saved episodes "
                             f'({{"searchenv_episodes": {LOG_VERSION}, "settings": ...}}); delete the file or use '
                             "another --out")
        differ = [k for k in sorted(set(header["settings"]) | set(self.settings))
                  if header["settings"].get(k) != self.settings.get(k)]
        if differ:
            said = "; ".join(f"{k}: {_short(header['settings'].get(k))} there, {_short(self.settings.get(k))} now"
                             for k in differ)
            raise ValueError(f"{self.path} holds episodes of a run with other settings ({said}); rerun with the "
                             f"settings it was saved with to continue it, or use another --out (or delete the file) "
                             "to start again")
        if torn:  # killed mid-line, in a file this class wrote: keep the whole lines only
            self._truncate(len(data) - len(torn), identity)
        out: dict[int, EpisodeResult] = {}
        for number, line in enumerate(lines[1:], start=2):
            where = f"{self.path}, line {number}"
            item = self._json(line, where)
            if not isinstance(item, dict):
                raise ValueError(f"{where}: expected an object with 'position' and 'episode'")
            position = item.get("position")
            if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                raise ValueError(f"{where}, field 'position': expected a non-negative integer, got {position!r}")
            if position in out:
                raise ValueError(f"{where}, field 'position': {position} was saved before, on line "
                                 f"{self.lines[position]}")
            self.lines[position] = number
            usage = item.get("usage", {})
            if not isinstance(usage, dict) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                    for v in usage.values()):
                raise ValueError(f"{where}, field 'usage': expected an object of non-negative numbers, "
                                 f"got {_short(usage)}")
            for key, value in usage.items():
                self.usage[key] = self.usage.get(key, 0) + value
            try:
                out[position] = EpisodeResult.from_dict(item["episode"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{where}, field 'episode': not a saved episode ({type(exc).__name__}: {exc})") \
                    from None
        return out

    def append(self, items: Sequence[tuple[int, EpisodeResult]], usage: Mapping[str, float] | None = None) -> bool:
        """Save finished episodes (failed ones are left out, to be run again) and flush them to disk.

        Args:
            items: ``(position, episode)`` pairs.
            usage: The model server's counters spent since the last saved batch, written on this batch's
                last line (with its episodes, or not at all).

        Returns:
            Whether anything was written (False when every episode failed: ``usage`` is then not saved).
        """
        saved = [(pos, rec) for pos, rec in items if rec.error is None]
        if not saved:
            return False
        lines = [json.dumps({"position": pos, "episode": rec.to_dict()}
                            | ({"usage": dict(usage)} if usage and i == len(saved) - 1 else {}), ensure_ascii=False)
                 for i, (pos, rec) in enumerate(saved)]
        try:
            info: os.stat_result | None = os.lstat(self.path)
        except FileNotFoundError:
            info = None
        if info is None or (stat.S_ISREG(info.st_mode) and info.st_size == 0):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            header = {"searchenv_episodes": LOG_VERSION, "settings": self.settings}
            atomic_write_lines(self.path, [json.dumps(header, ensure_ascii=False)])
        fd = self._open(os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        return True

    def remove(self) -> None:
        """Delete the file (the run is complete and its results are written)."""
        self.path.unlink(missing_ok=True)

    def _open(self, flags: int) -> int:
        """Open the file itself, never a link's target (``O_NOFOLLOW``), refusing anything but a regular file."""
        try:
            fd = os.open(self.path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise ValueError(f"{self.path} is a symbolic link; saved episodes are read and written only in "
                                 "their own file, never through a link: remove it or use another --out") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"{self.path} is not a regular file; delete it or use another --out")
        return fd

    def _read(self) -> tuple[bytes | None, tuple[int, int]]:
        """The file's bytes (None when there is no file) and its (device, inode)."""
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:
            return None, (0, 0)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            return f.read(), (info.st_dev, info.st_ino)

    def _truncate(self, size: int, identity: tuple[int, int]) -> None:
        """Cut the file read as ``identity`` to ``size`` bytes (refused if another file took its place)."""
        fd = self._open(os.O_WRONLY)
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != identity:
                raise ValueError(f"{self.path} was replaced while it was read; run again")
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    @staticmethod
    def _json(line: bytes, where: str) -> Any:
        return loads(line, where)  # a JSONInputError (a ValueError) naming the file and line


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
