"""What ``SearchQAEnv(task=..., corpus=..., retriever=...)`` names, resolved: examples, corpus file, retriever.

A task is a QA file, a registered name or a list of examples; a retriever is an index kind over a
corpus, an index folder, a server URL or any object with ``search_batch``. Retrievers are opened
once per process and shared by every environment over the same index, since engines build one
environment per trajectory.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from searchenv.corpus import DataWarning
from searchenv.retrievers.base import Retriever
from searchenv.tasks.example import QAExample


def resolve_task(
    task: str | os.PathLike[str] | Sequence[QAExample], split: str, corpus: str | os.PathLike[str] | None
) -> tuple[list[QAExample], Path | None]:
    """The examples of ``task`` in ``split``, and the corpus file: ``corpus`` if given, else the named task's.

    Raises:
        FileNotFoundError: If a task or corpus file does not exist.
        ValueError: If the task has no examples in ``split``.
        TypeError: If a list of examples holds something other than :class:`QAExample`.
    """
    from searchenv.tasks.qa_files import looks_like_file, read_qa_jsonl
    from searchenv.tasks.registry import load_task

    corpus_path: Path | None = None
    if corpus is not None:
        corpus_path = corpus_file(corpus)
    if isinstance(task, str | os.PathLike) and Path(task).is_file():
        examples = read_qa_jsonl(task)
    elif isinstance(task, os.PathLike) or (isinstance(task, str) and looks_like_file(task)):
        raise FileNotFoundError(f"task file {task} not found")
    elif isinstance(task, str):
        t = load_task(task)
        examples = list(t.examples(split))
        if corpus_path is None:
            corpus_path = t.corpus_path
    else:
        examples = list(task)
        bad = [type(e).__name__ for e in examples if not isinstance(e, QAExample)]
        if bad:
            raise TypeError(f"task must hold QAExample objects, got {bad[0]}")
    if not examples:
        raise ValueError(f"task {task!r} has no examples in split {split!r}")
    return examples, corpus_path


_EVIDENCE_CHECKED: set[tuple[object, ...]] = set()


def check_evidence(retriever: Retriever, examples: Sequence[QAExample], task: str | os.PathLike[str],
                    spec: object) -> None:
    """Warn once per process (a :class:`~searchenv.corpus.DataWarning`) if a QA file's evidence is not in the index.

    See :func:`searchenv.retrieval_quality.evidence_warning`; named tasks bring their own corpus.
    """
    if not Path(task).is_file():
        return
    key = (os.path.abspath(task), os.stat(task).st_mtime_ns, type(retriever).__name__,
           getattr(retriever, "fingerprint", None) or id(retriever))
    if key in _EVIDENCE_CHECKED:
        return
    _EVIDENCE_CHECKED.add(key)
    from searchenv.retrieval_quality import evidence_warning

    label = str(spec) if isinstance(spec, str | os.PathLike) else type(retriever).__name__
    message = evidence_warning(retriever, examples, index=label, questions=str(task))
    if message is not None:
        warnings.warn(message, DataWarning, stacklevel=3)


def corpus_file(corpus: str | os.PathLike[str]) -> Path:
    """The corpus file ``corpus`` names: a file, or a task name (built into the cache if need be) for its corpus.

    Raises:
        FileNotFoundError: If ``corpus`` is neither a file nor, without a suffix, a task name.
        ValueError: If it looks like a task name but no task has it.
    """
    path = Path(corpus)
    if path.is_file():
        return path
    if isinstance(corpus, str) and not path.suffix:
        from searchenv.tasks.registry import load_task

        return load_task(corpus).corpus_path
    raise FileNotFoundError(f"corpus file {corpus} does not exist")


def resolve_retriever(retriever: str | os.PathLike[str] | Retriever,
                      corpus: str | os.PathLike[str] | None = None) -> Retriever:
    """A retriever as ``SearchQAEnv(retriever=...)`` resolves it, shared per process.

    Args:
        retriever: ``bm25``/``dense`` (with ``corpus``), an index folder, a server URL,
            ``module:ClassOrFactory`` or a ``searchenv.retrievers`` entry-point name
            (:mod:`searchenv.retrievers.custom`), ``closed-book`` (every search finds nothing: the
            closed-book control, :class:`~searchenv.retrievers.base.NoDocuments`), or an object
            with ``search_batch`` (returned as is).
        corpus: Corpus file (or a task name whose corpus to use) for a named index kind.

    Raises:
        ValueError: If ``retriever`` is none of those, or a named kind has no corpus.
        TypeError: If ``retriever`` is a class, or an object without ``search_batch``.
        FileNotFoundError: If ``corpus`` does not exist.
    """
    return shared_retriever(retriever, corpus_file(corpus) if corpus is not None else None)


_SHARED: dict[tuple[object, ...], Retriever] = {}


def shared_retriever(retriever: str | os.PathLike[str] | Retriever, corpus_path: Path | None) -> Retriever:
    """:func:`resolve_retriever` with the corpus already resolved to a file (or None)."""
    from searchenv.retrievers import index_kinds, open_index, retriever_for_corpus
    from searchenv.retrievers.base import CLOSED_BOOK, NoDocuments
    from searchenv.retrievers.remote import is_server_url

    if not isinstance(retriever, str | os.PathLike):
        from searchenv.retrievers.custom import check_retriever

        return check_retriever(retriever, "retriever")
    if retriever == CLOSED_BOOK:
        return NoDocuments()
    if is_server_url(retriever):
        from searchenv.retrievers.remote import remote_from_url

        key_url = ("remote", str(retriever))
        if key_url not in _SHARED:  # one client (and connection pool) per server and process
            _SHARED[key_url] = remote_from_url(str(retriever))
        return _SHARED[key_url]
    from searchenv.retrievers.index.metadata import META_FILE

    folder = os.path.abspath(retriever)  # no syscalls: engines build an env per trajectory
    try:
        stamp = os.stat(os.path.join(folder, META_FILE)).st_mtime_ns  # a rebuild renames a new one in
    except OSError:
        stamp = None
    if stamp is not None:
        key_dir = ("folder", folder, stamp, str(corpus_path) if corpus_path else None)
        if key_dir not in _SHARED:  # one open index per folder and process
            if isinstance(retriever, str) and retriever in index_kinds():
                warnings.warn(f"retriever {retriever!r} names both an index kind and the index folder "
                              f"{folder}: the folder is opened (write ./{retriever} to say so, or rename the "
                              "folder to build the kind)", DataWarning, stacklevel=3)
            _SHARED[key_dir] = open_index(retriever, corpus=corpus_path)
        return _SHARED[key_dir]
    if Path(retriever).is_dir():  # not an index: open_index says what is wrong
        return open_index(retriever, corpus=corpus_path)
    if not isinstance(retriever, str) or retriever not in index_kinds():
        key_custom = ("custom", str(retriever), str(corpus_path) if corpus_path else None)
        if key_custom in _SHARED:  # engines build an env per trajectory: no entry-point scan each time
            return _SHARED[key_custom]
        from searchenv.retrievers.custom import ENTRY_POINT_GROUP, is_custom_spec, load_retriever

        if is_custom_spec(retriever):
            _SHARED[key_custom] = load_retriever(str(retriever), corpus=corpus_path)  # one per process
            return _SHARED[key_custom]
        raise ValueError(
            f"retriever {retriever!r} is neither a known kind ({', '.join(index_kinds())}), an index folder, "
            f"a server URL (http://HOST:PORT), module:Class, {CLOSED_BOOK!r}, nor a name in the "
            f"{ENTRY_POINT_GROUP!r} entry points"
        )
    if corpus_path is None:
        raise ValueError(f"retriever={retriever!r} needs a corpus: pass corpus=PATH (or a named task)")
    st = corpus_path.stat()
    key = (retriever, str(corpus_path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _SHARED:  # one index per process, shared by every env over the same corpus
        _SHARED[key] = retriever_for_corpus(retriever, corpus_path)
    return _SHARED[key]
