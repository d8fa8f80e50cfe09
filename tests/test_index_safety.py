"""Index builds are atomic, deterministic and checked on open (issue 16, items 4-8 and 20).

Everything here runs the real pieces: the ``searchenv`` command in subprocesses, a real
``searchenv serve --mmap`` on 127.0.0.1, real files that are edited, truncated or killed mid-write.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.corpus import Document, write_corpus
from searchenv.retrievers import (
    Hit,
    IndexIntegrityError,
    RetrieverError,
    build_index,
    open_index,
)
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.retrievers.index.metadata import file_sha256

from .conftest import DOCS

QUERIES = ["Quenn born", "country of Essaly", "copper mines", "Karsk mountain town"]
CLI = [sys.executable, "-c", "from searchenv.cli import main; main()"]


def _random_corpus(n: int, seed: int) -> list[Document]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(3000)]
    return [Document(f"r{seed}-{i}", f"Title {i}", " ".join(rng.choice(words, 40))) for i in range(n)]


def _ids(results: list[list[Hit]]) -> list[list[str]]:
    return [[h.doc_id for h in hits] for hits in results]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``folder``; files vanishing meanwhile are skipped."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = Path(root, name)
            try:
                st_ = p.stat()
            except FileNotFoundError:
                continue
            out[str(p.relative_to(folder))] = (st_.st_size, st_.st_mtime_ns)
    return out


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp" in p.name]


def _the(folder: Path, name: str) -> Path:
    """The one file called ``name`` inside an index folder, wherever the layout puts it."""
    (path,) = folder.rglob(name)
    return path


# --------------------------------------------------------------------------- item 4: failed rebuilds


def test_failed_rebuild_keeps_the_index_it_was_replacing(tmp_path: Path, corpus_file: Path) -> None:
    folder = tmp_path / "idx"
    before = build_index("bm25", corpus_file, folder).search_batch(QUERIES, 3)
    files_before = _contents(folder)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    res = CliRunner().invoke(get_app(), ["index", "--corpus", str(empty), "--out", str(folder)])
    assert res.exit_code == 2 and "empty corpus" in res.output

    def failing() -> Iterator[Document]:
        yield from DOCS[:3]
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        BM25Retriever.build(failing(), folder)
    assert open_index(folder).search_batch(QUERIES, 3) == before
    assert _contents(folder) == files_before  # not a byte changed, nothing left behind
    open_index(folder, verify=True)


# --------------------------------------------------------------------------- item 5: killed rebuilds


@pytest.mark.slow
def test_killed_rebuild_leaves_the_old_index_whole(tmp_path: Path, corpus_file: Path) -> None:
    folder = tmp_path / "idx"
    before = build_index("bm25", corpus_file, folder).search_batch(QUERIES, 3)
    big = tmp_path / "big.jsonl"
    write_corpus(big, _random_corpus(40_000, seed=1))
    snapshot = _snapshot(folder)
    proc = subprocess.Popen([*CLI, "index", "--corpus", str(big), "--out", str(folder)])
    try:
        deadline = time.monotonic() + 120
        while _snapshot(folder) == snapshot:  # kill as soon as the rebuild has written anything
            assert proc.poll() is None, "the rebuild ended before it wrote anything"
            assert time.monotonic() < deadline
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.wait()
    reopened = open_index(folder, corpus=corpus_file)  # still the index of the old corpus ...
    assert reopened.search_batch(QUERIES, 3) == before  # ... and it still answers from it
    open_index(folder, verify=True)
    assert _leftovers(folder)  # the kill landed mid-build
    # The next build clears what the killed one left behind.
    build_index("bm25", corpus_file, folder)
    assert _leftovers(folder) == []


# --------------------------------------------------------------------------- item 6: rebuild while serving


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _retrieve(port: int, queries: list[str]) -> list[list[str]]:
    import httpx

    r = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": queries, "topk": 3}, timeout=10,
                   trust_env=False)
    r.raise_for_status()
    return [[h["id"] for h in hits] for hits in r.json()["result"]]


@pytest.mark.slow
def test_rebuild_in_place_while_serving_with_mmap(tmp_path: Path, corpus_file: Path) -> None:
    httpx = pytest.importorskip("httpx")
    folder = tmp_path / "idx"
    BM25Retriever.build(_random_corpus(2000, seed=3) + DOCS, folder)
    port = _free_port()
    proc = subprocess.Popen([*CLI, "serve", "--index", str(folder), "--mmap", "--port", str(port),
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                before = _retrieve(port, QUERIES)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        BM25Retriever.build(DOCS[:2], folder)  # smaller files: in-place writes would truncate the maps
        assert _retrieve(port, QUERIES) == before  # the server keeps the files it mapped
        assert proc.poll() is None
        assert _ids(open_index(folder).search_batch(["Quenn"], 3)) == [["d0"]]  # a new reader sees the new one
    finally:
        proc.kill()
        out = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode != -7, f"the server died of SIGBUS:\n{out}"


# --------------------------------------------------------------------------- item 7: determinism, shared cache


def test_builds_are_byte_identical_whatever_the_hash_seed(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    write_corpus(corpus, _random_corpus(300, seed=2) + DOCS)
    for seed in ("1", "2"):
        subprocess.run([*CLI, "index", "--corpus", str(corpus), "--out", str(tmp_path / f"i{seed}")],
                       env={**os.environ, "PYTHONHASHSEED": seed}, check=True, capture_output=True)
    a, b = _contents(tmp_path / "i1"), _contents(tmp_path / "i2")
    assert a.keys() == b.keys()
    assert [name for name in a if a[name] != b[name]] == []


_CACHE_USER = """
import json, sys, time
from pathlib import Path
from searchenv.retrievers import retriever_for_corpus
corpus, root, me, rounds = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
queries = json.loads(sys.argv[5])
out = []
for i in range(rounds):  # each round: wait until all three are at the line, then open a fresh cache
    (root / f"ready-{i}-{me}").touch()
    deadline = time.monotonic() + 60
    while len(list(root.glob(f"ready-{i}-*"))) < 3:
        if time.monotonic() > deadline:
            sys.exit(f"round {i}: another process never came")
        time.sleep(0.0005)
    r = retriever_for_corpus("bm25", corpus, cache_root=root / f"cache-{i}")
    out.append([[h.doc_id for h in hits] for hits in r.search_batch(queries, 5)])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_three_processes_building_the_cache_at_once(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    docs = _random_corpus(500, seed=4) + DOCS
    write_corpus(corpus, docs)
    queries = QUERIES + [" ".join(d.text.split()[:3]) for d in docs[:40:4]]
    expected = _ids(BM25Retriever.build(docs, tmp_path / "reference").search_batch(queries, 5))
    rounds, root = 6, tmp_path / "shared"
    root.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", _CACHE_USER, str(corpus), str(root), str(seed), str(rounds),
                          json.dumps(queries)],
                         env={**os.environ, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for seed in (1, 2, 3)
    ]
    try:
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert json.loads(out) == [expected] * rounds
    for i in range(rounds):
        (entry,) = (root / f"cache-{i}").iterdir()
        assert _leftovers(entry) == []
        open_index(entry, verify=True)


# --------------------------------------------------------------------------- item 8: contents checked on open


def _tamper_cases() -> dict[str, tuple[bool, str]]:
    """Name -> (caught by the cheap checks on every open, the file the error must name)."""
    return {
        "edit a document, same size": (False, "docs.jsonl"),
        "append a document": (True, "docs.jsonl"),
        "shuffle the vocabulary": (False, "vocab.index.json"),
        "negate the scores": (False, "data.csc.index.npy"),
        "cut the offsets": (True, "doc_offsets.npy"),
    }


def _tamper(folder: Path, case: str) -> None:
    if case == "edit a document, same size":
        p = _the(folder, "docs.jsonl")
        p.write_bytes(p.read_bytes().replace(b"Karsk", b"Krask"))
    elif case == "append a document":
        with _the(folder, "docs.jsonl").open("ab") as f:
            f.write(b'{"id": "evil", "title": "", "text": "planted"}\n')
    elif case == "shuffle the vocabulary":
        p = _the(folder, "vocab.index.json")
        vocab = json.loads(p.read_text(encoding="utf-8"))
        ids = list(vocab.values())
        p.write_text(json.dumps(dict(zip(vocab, ids[1:] + ids[:1], strict=True))), encoding="utf-8")
    elif case == "negate the scores":
        p = _the(folder, "data.csc.index.npy")
        np.save(p, -np.load(p, allow_pickle=False), allow_pickle=False)
    elif case == "cut the offsets":
        p = _the(folder, "doc_offsets.npy")
        np.save(p, np.load(p, allow_pickle=False)[:-1], allow_pickle=False)


@pytest.mark.parametrize("case", list(_tamper_cases()))
def test_tampered_index_is_refused_naming_the_file(tmp_path: Path, corpus_file: Path, case: str) -> None:
    folder = tmp_path / "idx"
    build_index("bm25", corpus_file, folder)
    _tamper(folder, case)
    cheap, name = _tamper_cases()[case]
    rebuild = f"searchenv index --corpus {corpus_file} --retriever bm25 --out {folder}"
    if cheap:
        with pytest.raises(IndexIntegrityError, match=name) as caught:
            open_index(folder)
        assert rebuild in str(caught.value)
    else:
        open_index(folder)  # sizes and counts agree: the cheap checks pass
    with pytest.raises(IndexIntegrityError, match=name) as caught:
        open_index(folder, verify=True)
    assert rebuild in str(caught.value)
    res = CliRunner().invoke(get_app(), ["verify-index", str(folder)])
    assert res.exit_code == 2 and name in res.output


def test_verify_index_command_on_a_sound_index(tmp_path: Path, corpus_file: Path) -> None:
    folder = tmp_path / "idx"
    build_index("bm25", corpus_file, folder)
    res = CliRunner().invoke(get_app(), ["verify-index", str(folder)])
    assert res.exit_code == 0, res.output
    assert f"{folder}: bm25 index of {len(DOCS)} documents" in res.output
    res = CliRunner().invoke(get_app(), ["verify-index", str(tmp_path)])
    assert res.exit_code == 2 and "not a searchenv index" in res.output


def test_old_format_is_refused_with_the_rebuild_command(tmp_path: Path, corpus_file: Path) -> None:
    folder = tmp_path / "idx"
    build_index("bm25", corpus_file, folder)
    meta_file = folder / "searchenv_index.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta_file.write_text(json.dumps({**meta, "format_version": 1}), encoding="utf-8")
    with pytest.raises(RetrieverError, match="format 1.*searchenv index --corpus"):
        open_index(folder)


def test_rebuild_removes_only_what_an_index_wrote(tmp_path: Path, corpus_file: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "searchenv_index.json").write_text('{"format_version": 1, "kind": "bm25"}', encoding="utf-8")
    (folder / "docs.jsonl").write_text("{}\n", encoding="utf-8")
    (folder / "bm25").mkdir()
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    build_index("bm25", corpus_file, folder)  # a format-1 index: its files go, the user's stay
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("v-")) == [
        "notes.txt", "searchenv_index.json"]
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "docs.jsonl").write_text("a user's file that happens to share the name\n", encoding="utf-8")
    build_index("bm25", corpus_file, mixed)
    assert (mixed / "docs.jsonl").read_text(encoding="utf-8").startswith("a user's file")


# --------------------------------------------------------------------------- item 20: titles round-trip


def test_title_less_multiline_document_round_trips_through_an_index(tmp_path: Path) -> None:
    docs = [
        Document("a", "", "first line about zebras\nsecond line"),
        Document("b", '"Quoted" ', "text about giraffes\nmore"),
        Document("c", "Plain", "okapis"),
    ]
    r = BM25Retriever.build(docs, tmp_path / "idx")
    for reopened in (r, open_index(tmp_path / "idx", mmap=True)):
        hits = reopened.search_batch(["zebras", "giraffes", "okapis"], 1)
        assert [(h[0].doc_id, h[0].title, h[0].text) for h in hits] == [(d.id, d.title, d.text) for d in docs]


# ------------------------------------------------------------------ issue 31: 4
@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_written_files_and_folders_honour_the_umask(tmp_path: Path, mask: int) -> None:
    # before: mkstemp/mkdtemp left every published file 0600 and the data folder 0700, whatever the umask
    from searchenv.corpus import atomic_write_lines
    from searchenv.retrievers.index.metadata import META_FILE, data_folder

    old = os.umask(mask)
    try:
        BM25Retriever.build(DOCS, tmp_path / "idx")
        atomic_write_lines(tmp_path / "out" / "qa.jsonl", ["{}"])
    finally:
        os.umask(old)
    file_mode, folder_mode = 0o666 & ~mask, 0o777 & ~mask
    data = data_folder(tmp_path / "idx")
    assert (tmp_path / "idx" / META_FILE).stat().st_mode & 0o777 == file_mode
    assert data.stat().st_mode & 0o777 == folder_mode
    modes = {p.relative_to(data): p.stat().st_mode & 0o777 for p in data.rglob("*")}
    assert modes == {p.relative_to(data): folder_mode if p.is_dir() else file_mode for p in data.rglob("*")}
    assert (tmp_path / "out" / "qa.jsonl").stat().st_mode & 0o777 == file_mode


# ------------------------------------------------------------------ issue 31: 9
def test_an_index_build_keeps_files_it_did_not_write(tmp_path: Path) -> None:
    # before: any .tmp-* or v-<16 hex> entry was deleted (and .encode-* by dense builds), whoever made it
    from searchenv.retrievers.index.metadata import read_meta

    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, DOCS)
    out = tmp_path / "out"
    (out / "v-fedcba9876543210").mkdir(parents=True)
    (out / "shard-notes-of-x").mkdir()
    user = ["notes.txt", ".tmp-notes", "v-0123456789abcdef", ".encode-mine", "v-fedcba9876543210/keep.txt"]
    for name in user:
        (out / name).write_text("mine\n")
    orphan = out / "v-00000000000000aa"  # what a build killed after its rename, before the commit, leaves
    orphan.mkdir()
    (orphan / "docs.jsonl").write_text("")
    (orphan / "doc_offsets.npy").write_bytes(b"")
    runner = CliRunner()
    for options in ([], ["--option", "k1=1.1"]):
        res = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--out", str(out), *options])
        assert res.exit_code == 0, res.output
    assert all((out / name).read_text() == "mine\n" for name in user)
    assert (out / "shard-notes-of-x").is_dir()
    generations = sorted(p.name for p in out.glob("v-*") if (p / "docs.jsonl").is_file())
    assert generations == [read_meta(out)["data"]]  # the first build's and the orphan are gone


# ------------------------------------------------------------------ issue 31: 7
def _edit_meta(folder: Path, change: str, redigest: bool) -> None:
    """Apply ``change`` (a statement on ``m``) to the metadata; with ``redigest``, as a careful forger would."""
    from searchenv.retrievers.index.metadata import META_FILE, meta_digest

    path = folder / META_FILE
    m = json.loads(path.read_text())
    exec(change, {"m": m})
    if redigest:
        m["meta_sha256"] = meta_digest(m)
    path.write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("change", "redigest", "message"),
    [
        ('m["params"]["stemmer"] = "english"', False, "changed after the build"),  # changes rankings
        ('m["files"] = {}', False, "changed after the build"),
        ('m["files"] = {}', True, "does not list the data files"),
        ('del m["meta_sha256"]', False, "carries no checksum of its own fields"),
        ('m["params"]["stemmer"] = "klingon"', True, "stemmer must be one of"),
        ('m["params"] = [1]', True, "garbles 'data', 'files', 'num_docs' or 'params'"),
        ('m["kind"] = "os:system"', True, "names the index kind 'os:system'"),
        ("", False, "cannot read it"),  # a broken .npy header (numpy raises TokenError or SyntaxError)
    ],
)
def test_index_metadata_is_verified_and_bad_metadata_is_one_error_line(
    tmp_path: Path, corpus_file: Path, change: str, redigest: bool, message: str
) -> None:
    # before: "files": {} and a changed stemmer passed verify-index, a bad stemmer failed at search,
    # and params as a list, an unknown kind or a broken .npy header gave tracebacks
    folder = tmp_path / "idx"
    build_index("bm25", corpus_file, folder)
    if change:
        _edit_meta(folder, change, redigest)
    else:
        from searchenv.retrievers.index.metadata import data_folder, meta_digest, read_meta

        offsets = data_folder(folder) / "doc_offsets.npy"
        raw = bytearray(offsets.read_bytes())
        raw[10:20] = b"XXXXXXXXXX"
        offsets.write_bytes(bytes(raw))
        meta = read_meta(folder)  # the forger records the new file, so only reading it can tell
        meta["files"]["doc_offsets.npy"]["sha256"] = file_sha256(offsets)
        meta["meta_sha256"] = meta_digest(meta)
        (folder / "searchenv_index.json").write_text(json.dumps(meta))
    runner = CliRunner()
    for args in (["verify-index", str(folder)], ["search", "--index", str(folder), "Karsk", "--json"]):
        res = runner.invoke(get_app(), args)
        if args[0] == "search" and message == "carries no checksum of its own fields":
            assert res.exit_code == 0  # an index built before the checksum still opens; verify-index says why not
            continue
        if args[0] == "search" and message == "does not list the data files":
            continue  # only verify-index lists the folder
        assert res.exit_code == 2, (args, res.output, res.exception)
        assert "error:" in res.output and message in res.output and "Traceback" not in res.output, res.output


def test_docs_truncated_in_place_under_mmap_is_an_error_not_sigbus(tmp_path: Path) -> None:
    # before: the documents were memory-mapped, and reading past the new end killed the process (SIGBUS)
    folder = tmp_path / "idx"  # 200 kB of documents: pages wholly past the new end, not just a partial one
    BM25Retriever.build([Document(f"p{i}", f"Passage {i}", f"word{i} " + "filler " * 150) for i in range(200)],
                        folder)
    script = f"""
import os, sys
from searchenv.retrievers import RetrieverError, open_index
from searchenv.retrievers.index.metadata import data_folder
r = open_index({str(folder)!r}, mmap=True)
docs = data_folder({str(folder)!r}) / "docs.jsonl"
os.truncate(docs, docs.stat().st_size // 3)  # in place: the open file shrinks
try:
    r.search_batch(["word199", "word150"], 1)
except RetrieverError as exc:
    print("error:", exc)
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])  # -7: SIGBUS
    assert "docs.jsonl ends before row" in res.stdout and "truncated or rewritten in place" in res.stdout
