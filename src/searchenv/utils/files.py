"""Temporary files and folders that end up with the permissions a plain ``open`` would give.

Every output of this package is written to a temporary file or folder and renamed into place.
``tempfile.mkstemp`` and ``mkdtemp`` create them private (0600 and 0700) whatever the umask, which
is right for a temporary file but not for what it becomes: an index, a corpus or a run's config
that a teammate or a service account must read. :func:`publishable` gives a temporary path the
mode ``open`` or ``mkdir`` would have given it (0666 or 0777 less the umask) before the rename.

A command's output folder is its own: :func:`refuse_link` refuses a symbolic link where one of its
files or folders goes, so nothing is read or written outside it through one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_lock = threading.Lock()


def umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _lock:  # elsewhere the only way to read it is to set it, then put it back
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def publishable(path: str | os.PathLike[str]) -> None:
    """Give a temporary file or folder the mode ``open``/``mkdir`` would have (0666/0777 less the umask).

    Folders created inside a ``mkdtemp`` folder with ``mkdir`` already have that mode; only the
    temporary file or folder itself needs this, before it is renamed into place.

    Args:
        path: A file or folder made by ``tempfile.mkstemp`` or ``tempfile.mkdtemp``.
    """
    base = 0o777 if Path(path).is_dir() else 0o666
    os.chmod(path, base & ~umask())


def refuse_link(path: str | os.PathLike[str], option: str = "--out") -> None:
    """Refuse a symbolic link where a file or folder of a command's output goes (it would lead out of it).

    Args:
        path: Where the file or folder goes.
        option: The option that named the output folder, for the message.

    Raises:
        ValueError: Naming the link, if ``path`` is one (a dangling one included).
    """
    if Path(path).is_symlink():
        raise ValueError(f"{path} is a symbolic link; a run reads and writes only its own files under its output "
                         f"folder and follows no links: remove the link or use another {option}")
