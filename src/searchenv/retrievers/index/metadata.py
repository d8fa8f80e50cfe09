"""How every saved index is written, swapped in, opened and checked.

An index folder holds one metadata file and one *generation* folder with the data::

    INDEX/searchenv_index.json     kind, counts, corpus fingerprint, and every data file's size and SHA-256
    INDEX/v-<16 hex>/              docs.jsonl, doc_offsets.npy, and the kind's own files

:func:`publish_index` builds a new generation in a fresh ``INDEX/.tmp-*`` folder, renames it to
``v-<hash of its files>`` and then replaces the metadata file with :func:`os.replace`; that
rename is the commit. Until then readers see the old index, whole; a failed or killed build
leaves nothing but a ``.tmp-*`` folder, which the next build removes. Old generations are deleted
after the commit, never overwritten: a process that memory-mapped their files keeps them until it
closes them. Files are never written in place, so a serving process cannot get SIGBUS. Builds of
one folder take turns through an exclusive ``flock`` on the folder.

Opening (:func:`load_index`) checks the metadata and every file's size, and the kind checks its
counts (documents, rows, vocabulary); ``verify=True`` also compares every file's SHA-256. A
mismatch raises :class:`IndexIntegrityError` naming the file and the command that rebuilds it.

A sharded index (:mod:`searchenv.retrievers.sharded`) is a folder of such index folders listed in
``INDEX/searchenv_shards.json`` (:func:`read_shards`); :func:`searchenv.retrievers.kinds.open_index`
opens either kind of folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from searchenv.errors import IndexIntegrityError, RetrieverError, StaleIndexError
from searchenv.utils.files import publishable
from searchenv.utils.jsonsafe import JSONInputError, loads

META_FILE = "searchenv_index.json"
#: A sharded index's list of its shard folders (written last by ``build_sharded``).
SHARDS_FILE = "searchenv_shards.json"
FORMAT_VERSION = 2
_GENERATION = re.compile(r"v-[0-9a-f]{16}")
_TMP_PREFIX = ".tmp-"
# What builds leave under _TMP_PREFIX: mkstemp/mkdtemp names (8 characters) and set-aside generations
# (a uuid4 hex). Only these are removed; a user's own ".tmp-notes" is not.
_OWN_TMP = re.compile(r"\.tmp-(?:[a-z0-9_]{8}|[0-9a-f]{32})")
# Names that format 1 wrote straight into the index folder; a rebuild of a format-1 index removes them.
_FORMAT_1_FILES = ("docs.jsonl", "doc_offsets.npy", "bm25", "dense.faiss")

T = TypeVar("T")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rebuild_command(folder: str | os.PathLike[str], meta: dict[str, Any]) -> str:
    """The ``searchenv index`` command that rebuilds the index in ``folder``."""
    corpus = meta.get("source_path") or "CORPUS"
    return f"searchenv index --corpus {corpus} --retriever {meta.get('kind', 'KIND')} --out {folder}"


def damaged(folder: str | os.PathLike[str], meta: dict[str, Any], problem: str) -> IndexIntegrityError:
    """An :class:`IndexIntegrityError` saying what is wrong and how to rebuild the index."""
    return IndexIntegrityError(
        f"index {folder} is damaged: {problem}; rebuild it with `{rebuild_command(folder, meta)}`"
    )


# ---------------------------------------------------------------------------------------- writing


_held = threading.local()  # folders whose lock this thread holds


@contextlib.contextmanager
def index_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive build lock of an existing index folder (re-entrant within a thread).

    The lock is an advisory ``flock`` on the folder itself: other builders wait, readers never
    do, and it is released when the process dies. On Windows (no ``flock``) this does nothing,
    and concurrent builds of one folder are not serialised.
    """
    key = str(Path(folder).resolve())
    held: set[str] = _held.__dict__.setdefault("folders", set())
    if key in held or os.name == "nt":
        yield
        return
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # releases the lock


def _file_table(data: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file under ``data`` (by relative POSIX path), each fsynced."""
    table = {}
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        with path.open("rb") as f:
            os.fsync(f.fileno())
        table[path.relative_to(data).as_posix()] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    return table


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def publish_index(folder: str | os.PathLike[str], write: Callable[[Path], dict[str, Any]]) -> None:
    """Build an index into a fresh folder and swap it into ``folder`` atomically.

    Args:
        folder: The index folder (created if needed). Files in it that no index wrote are kept.
        write: Writes the data files into the empty folder it is given and returns the metadata
            fields (``kind``, ``num_docs``, ``fingerprint``, parameters). An exception from it
            leaves ``folder`` as it was.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with index_lock(folder):
        for stale in folder.iterdir():  # left by killed builds: we hold the lock
            if _OWN_TMP.fullmatch(stale.name):
                _remove(stale)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=folder))
        try:
            publishable(tmp)
            fields = write(tmp)
            files = _file_table(tmp)
            digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode("utf-8")).hexdigest()
            generation = folder / f"v-{digest[:16]}"
            if generation.exists():  # a byte-identical earlier build: put ours in its place
                os.rename(generation, folder / f"{_TMP_PREFIX}{uuid.uuid4().hex}")
            os.rename(tmp, generation)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        previous = _published_meta(folder)
        legacy = _FORMAT_1_FILES if previous.get("format_version") == 1 else ()
        _write_meta(folder, {**fields, "data": generation.name, "files": files})
        for old in folder.iterdir():
            if old != generation and (
                _OWN_TMP.fullmatch(old.name) or old.name == previous.get("data") or _orphan_generation(old)
                or old.name in legacy
            ):
                _remove(old)


def _published_meta(folder: Path) -> dict[str, Any]:
    """The metadata published in ``folder``, or ``{}`` if there is none to read."""
    try:
        meta = loads((folder / META_FILE).read_bytes(), str(folder / META_FILE))
    except (OSError, JSONInputError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _orphan_generation(path: Path) -> bool:
    """A data folder a killed build renamed into place but never published (it holds a document store)."""
    return (_GENERATION.fullmatch(path.name) is not None and path.is_dir() and not path.is_symlink()
            and (path / "docs.jsonl").is_file() and (path / "doc_offsets.npy").is_file())


def meta_digest(meta: dict[str, Any]) -> str:
    """SHA-256 of the metadata's fields (all but ``meta_sha256`` itself), as JSON with sorted keys."""
    fields = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _write_meta(folder: Path, fields: dict[str, Any]) -> None:
    """Replace ``searchenv_index.json`` atomically (write a temporary file, fsync, rename)."""
    meta = {"format_version": FORMAT_VERSION, **fields}
    meta["meta_sha256"] = meta_digest(meta)  # parameters change rankings: an edit must not pass as the build
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        publishable(tmp)
        os.replace(tmp, folder / META_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------- reading


def read_meta(folder: str | os.PathLike[str], expected_kind: str | None = None) -> dict[str, Any]:
    """Read and check an index's metadata.

    Args:
        folder: The index folder.
        expected_kind: Refuse an index of another kind.

    Returns:
        The metadata dict.

    Raises:
        RetrieverError: If the folder holds no searchenv index, or one of another kind or format.
        IndexIntegrityError: If the metadata is malformed.
    """
    path = Path(folder) / META_FILE
    if not path.is_file():
        raise RetrieverError(
            f"{folder}: not a searchenv index (no {META_FILE}); build one with `searchenv index`"
        )
    try:
        meta = loads(path.read_bytes(), str(path), max_depth=8)
    except JSONInputError as exc:
        raise damaged(folder, {}, f"unreadable metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise damaged(folder, {}, f"{path} is not a JSON object")
    if meta.get("format_version") != FORMAT_VERSION:
        raise RetrieverError(
            f"{path}: index format {meta.get('format_version')!r}, this searchenv reads {FORMAT_VERSION}; "
            f"rebuild it with `{rebuild_command(folder, meta)}`"
        )
    if expected_kind is not None and meta.get("kind") != expected_kind:
        raise RetrieverError(f"{path}: index kind is {meta.get('kind')!r}, expected {expected_kind!r}")
    files = meta.get("files")
    if (
        not isinstance(meta.get("data"), str)
        or not _GENERATION.fullmatch(meta["data"])
        or not isinstance(files, dict)
        or not all(_sound_entry(name, entry) for name, entry in files.items())
        or not isinstance(meta.get("num_docs"), int)
        or not isinstance(meta.get("params", {}), dict)
    ):
        raise damaged(folder, meta, f"{path} lacks or garbles 'data', 'files', 'num_docs' or 'params'")
    if "meta_sha256" in meta and meta["meta_sha256"] != meta_digest(meta):
        raise damaged(folder, meta, f"{path} was changed after the build (its fields do not match their "
                                    "checksum meta_sha256)")
    return dict(meta)


def _sound_entry(name: str, entry: Any) -> bool:
    parts = name.split("/")
    return (
        all(p not in ("", ".", "..") for p in parts)
        and isinstance(entry, dict)
        and isinstance(entry.get("size"), int)
        and isinstance(entry.get("sha256"), str)
    )


def check_files(folder: str | os.PathLike[str], meta: dict[str, Any], *, verify: bool = False) -> None:
    """Compare every data file with its recorded size, and with ``verify`` its SHA-256.

    ``verify`` also requires the metadata's own checksum (indexes built before it was recorded
    are refused with the rebuild command) and that the data folder holds exactly the files listed.

    Raises:
        FileNotFoundError: If a file is missing (the caller decides whether it was replaced).
        IndexIntegrityError: Naming the first file that differs.
    """
    data = Path(folder) / meta["data"]
    if verify:
        if "meta_sha256" not in meta:
            raise damaged(folder, meta, f"{META_FILE} carries no checksum of its own fields (built by an older "
                                        "searchenv), so its parameters cannot be verified")
        present = {p.relative_to(data).as_posix() for p in data.rglob("*") if not p.is_dir()}
        unlisted, missing = sorted(present - meta["files"].keys()), sorted(meta["files"].keys() - present)
        if unlisted or missing:
            raise damaged(folder, meta, f"{META_FILE} does not list the data files as they are (not listed: "
                                        f"{unlisted[:3]}, listed but absent: {missing[:3]})")
    for name, entry in meta["files"].items():
        path = data / name
        size = path.stat().st_size
        if size != entry["size"]:
            raise damaged(folder, meta, f"{path} has {size} bytes, the metadata records {entry['size']}")
    if verify:
        for name, entry in meta["files"].items():
            path = data / name
            if file_sha256(path) != entry["sha256"]:
                raise damaged(folder, meta, f"{path} does not match its SHA-256 checksum in {META_FILE}")


def load_index(
    folder: str | os.PathLike[str],
    kind: str,
    open_data: Callable[[dict[str, Any], Path], T],
    *,
    verify: bool = False,
) -> T:
    """Open an index of ``kind``: check the metadata and files, then ``open_data(meta, data_folder)``.

    A rebuild may delete the generation this reader is opening; then the metadata is read again
    (three tries). ``open_data`` checks the kind's counts and raises :func:`damaged` errors; any
    other exception from it (an unreadable array header, a document or a parameter) becomes one too.

    Raises:
        RetrieverError: If the folder is not an index of ``kind``.
        IndexIntegrityError: If a file is missing, has the wrong size or checksum, or the counts differ.
    """
    tries = 3
    while True:
        meta = read_meta(folder, expected_kind=kind)
        try:
            check_files(folder, meta, verify=verify)
            return open_data(meta, Path(folder) / meta["data"])
        except FileNotFoundError as exc:
            tries -= 1
            if not tries:
                raise damaged(folder, meta, f"{exc.filename or exc} is missing") from None
            time.sleep(0.05)
        except RetrieverError:
            raise
        except Exception as exc:  # numpy's header parser alone raises ValueError, SyntaxError or TokenError
            raise damaged(folder, meta, f"cannot read it ({type(exc).__name__}: {exc})") from exc


def check_count(folder: str | os.PathLike[str], meta: dict[str, Any], what: str, actual: int, expected: object) -> None:
    """Raise :func:`damaged` unless ``actual == expected`` (``what`` names the files compared)."""
    if actual != expected:
        raise damaged(folder, meta, f"{what}: {actual} != {expected}")


def data_folder(folder: str | os.PathLike[str]) -> Path:
    """The generation folder holding an index's data files (e.g. to open its :class:`DocStore`)."""
    return Path(folder) / read_meta(folder)["data"]


def is_sharded(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` is a sharded index (holds ``searchenv_shards.json``)."""
    return (Path(folder) / SHARDS_FILE).is_file()


def read_shards(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check ``searchenv_shards.json``.

    Raises:
        RetrieverError: If it is missing, not JSON, or lacks the expected fields.
    """
    path = Path(folder) / SHARDS_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RetrieverError(f"{folder} is not a sharded index (no {SHARDS_FILE})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RetrieverError(f"{path}: unreadable shard list ({exc})") from None
    shards = meta.get("shards") if isinstance(meta, dict) else None
    if not isinstance(shards, list) or not shards or not all(
            isinstance(s, dict) and isinstance(s.get("folder"), str) and isinstance(s.get("num_docs"), int)
            and isinstance(s.get("fingerprint"), str) and "/" not in s["folder"] and s["folder"] not in ("", ".", "..")
            for s in shards) or not isinstance(meta.get("fingerprint"), str):
        raise RetrieverError(f"{path}: malformed shard list (expected 'fingerprint' and 'shards': "
                             "[{'folder', 'num_docs', 'fingerprint'}, ...])")
    return dict(meta)


def another_corpus(folder: str | os.PathLike[str], kind: object, source: str, held: object,
                   corpus_path: str | os.PathLike[str], actual: str | None = None, options: str = "") -> str:
    """The message for an index used with a corpus other than the one it was built from.

    It names the index's corpus and says to use the index with it, or to build an index of
    ``corpus_path`` in a new folder: rebuilding this folder from ``corpus_path`` would replace a
    sound index of another corpus. ``options`` end the suggested command (``--shards N``).
    """
    this = f"{corpus_path} (fingerprint {actual})" if actual else str(corpus_path)
    return (
        f"index {folder} belongs to another corpus: it was built from {source} (fingerprint {held}), "
        f"not from {this}; use it with that corpus, or build an index of {corpus_path} in a new folder: "
        f"`searchenv index --corpus {corpus_path} --retriever {kind or 'KIND'} --out NEW_FOLDER{options}`"
    )


def check_fresh(folder: str | os.PathLike[str], corpus_path: str | os.PathLike[str]) -> None:
    """Refuse an index that was not built from ``corpus_path``'s documents.

    The file hash is compared first (cheap); if it differs, the documents are
    fingerprinted, so a reformatted file with the same documents is accepted.

    Raises:
        StaleIndexError: Naming both fingerprints and what to do: an index built from another
            corpus file belongs to that corpus (the message names it, and says to use it with that
            corpus or to build an index of ``corpus_path`` in a new folder, never over this one);
            an index built from this file before it changed is stale (the message gives the
            rebuild command).
    """
    from searchenv.corpus import corpus_fingerprint, iter_corpus

    meta = read_meta(folder)
    if meta.get("source_sha256") and meta["source_sha256"] == file_sha256(corpus_path):
        return
    actual = corpus_fingerprint(iter_corpus(corpus_path))
    if actual == meta.get("fingerprint"):
        return
    source = meta.get("source_path")
    if isinstance(source, str) and source and Path(source).resolve() != Path(corpus_path).resolve():
        raise StaleIndexError(another_corpus(folder, meta.get("kind"), source, meta.get("fingerprint"),
                                             corpus_path, actual))
    raise StaleIndexError(
        f"index {folder} is stale: it was built from a corpus with fingerprint "
        f"{meta.get('fingerprint')}, "
        f"but {corpus_path} has fingerprint {actual}; rebuild it with "
        f"`searchenv index --corpus {corpus_path} --retriever {meta.get('kind')} --out {folder}`"
    )
