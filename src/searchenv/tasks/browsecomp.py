"""BrowseComp-Plus: its queries with TREC qrels as evidence (``searchenv tasks convert --format browsecomp-plus``)."""

from __future__ import annotations

import os
from pathlib import Path

from searchenv.corpus import (
    CorpusFormatError,
)
from searchenv.tasks.example import QAExample
from searchenv.utils.jsonsafe import iter_jsonl


def read_trec_qrels(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Read relevance judgements in TREC's qrels layout (``QID ITER DOCID REL`` per line).

    This is the layout of BrowseComp-Plus's ``qrel_evidence.txt`` and ``qrel_golds.txt``.
    Blank lines are skipped; a judgement with relevance 0 or less is not relevant.

    Args:
        path: The qrels file.

    Returns:
        Relevant document ids per query id, in file order, without repeats.

    Raises:
        FileNotFoundError: If the file does not exist.
        CorpusFormatError: On a line that is not four whitespace-separated fields with an
            integer relevance, naming the file, line, field and value.
    """
    out: dict[str, list[str]] = {}
    with Path(path).open("rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CorpusFormatError(f"{where}: not UTF-8 text") from None
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 4:
                raise CorpusFormatError(f"{where}: expected 4 fields 'QID ITER DOCID REL', got {len(parts)}: "
                                        f"{line.strip()!r:.80}")
            qid, _, docid, rel = parts
            try:
                relevance = int(rel)
            except ValueError:
                raise CorpusFormatError(f"{where}: field 'REL' (4th) must be an integer, got {rel!r:.40}") from None
            if relevance > 0:
                ids = out.setdefault(qid, [])
                if docid not in ids:
                    ids.append(docid)
    return out


def read_browsecomp_plus(
    queries: str | os.PathLike[str], qrels: str | os.PathLike[str] | None = None
) -> list[QAExample]:
    """Read BrowseComp-Plus's queries (decrypted) with their evidence judgements.

    Each line of ``queries`` is one JSON object with ``query_id`` (a string or an integer),
    ``query`` and ``answer`` (a string), as the benchmark's decryption script writes them;
    other fields (``evidence_docs``, ``gold_docs``, ...) are ignored. ``qrels`` (TREC layout,
    :func:`read_trec_qrels`) gives each query's evidence document ids.

    Args:
        queries: The decrypted queries JSONL file.
        qrels: The evidence qrels file (None: no evidence).

    Returns:
        One example per query, in file order (type ``browsecomp-plus``).

    Raises:
        FileNotFoundError: If a file does not exist.
        CorpusFormatError: Naming the file, line, field and value of the first bad record, a
            duplicate query id, or a qrels query id that no query has.
    """
    evidence = read_trec_qrels(qrels) if qrels is not None else {}
    out: list[QAExample] = []
    seen: set[str] = set()
    for where, record in iter_jsonl(queries, error=CorpusFormatError):
        if not isinstance(record, dict):
            raise CorpusFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
        qid = record.get("query_id")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid.strip():
            raise CorpusFormatError(f"{where}: field 'query_id' must be a non-empty string or integer, got {qid!r:.60}")
        if qid in seen:
            raise CorpusFormatError(f"{where}: field 'query_id': duplicate query id {qid!r}")
        seen.add(qid)
        for key in ("query", "answer"):
            value = record.get(key)
            if not isinstance(value, str) or not value.strip():
                raise CorpusFormatError(f"{where}: field {key!r} must be a non-empty string, got {value!r:.60}")
        try:
            out.append(QAExample(qid, record["query"], (record["answer"],), tuple(evidence.get(qid, ())),
                                 type="browsecomp-plus", metadata={"source": "browsecomp-plus"}))
        except ValueError as exc:  # an answer with no letter or digit
            raise CorpusFormatError(f"{where}: field 'answer': {exc}") from None
    unknown = sorted(set(evidence) - seen)
    if unknown:
        raise CorpusFormatError(f"{qrels}: query id {unknown[0]!r} (field 'QID') is in no record of {queries} "
                                f"({len(unknown)} such ids): are these the qrels of these queries?")
    return out
