"""Readers for the public multi-hop QA formats users bring, mapped to :class:`QAExample`.

Supported formats (``FORMATS``; the record-level machinery is in :mod:`searchenv.tasks.records`,
BrowseComp-Plus in :mod:`searchenv.tasks.browsecomp`):

- ``flashrag``: FlashRAG QA files (``{"id", "question", "golden_answers", "metadata"}``),
  with evidence from ``metadata``: ours (``evidence_ids``, ``decomposition``; see
  :func:`searchenv.tasks.read_qa_jsonl`) or the dataset fields that FlashRAG's
  multi-hop sets keep there (HotpotQA's and 2WikiMultiHopQA's ``context`` and
  ``supporting_facts``, MuSiQue's ``question_decomposition``). Corpora in FlashRAG JSONL
  are read by :func:`searchenv.corpus.read_corpus`.
- ``hotpotqa``: HotpotQA JSON, either the original list of records with ``context`` as
  ``[title, [sentences]]`` pairs and ``supporting_facts`` as ``[title, sent_id]`` pairs, or
  the column layout of the Hugging Face release (``context: {"title": [...],
  "sentences": [[...]]}``, ``supporting_facts: {"title": [...], "sent_id": [...]}``).
- ``musique``: MuSiQue JSONL (``paragraphs`` with ``is_supporting``,
  ``question_decomposition`` with ``paragraph_support_idx``, ``answer_aliases``).
- ``2wiki``: 2WikiMultiHopQA JSON: HotpotQA-like ``context``/``supporting_facts`` plus
  ``evidences`` triples ``[subject, relation, object]`` and ``type``.
- ``qa``: question-only files (R1-Searcher's ``2wiki_500.jsonl`` and friends): ``question``
  and ``answer`` (a string or a list), an optional id, no context. The examples have no
  evidence; they are asked against a corpus of the user's choice.

The ``hotpotqa``, ``musique`` and ``2wiki`` readers also read their dataset in FlashRAG's
layout. Any file may be a JSON array or JSON lines. The context paragraphs of all records are
pooled into one corpus (identical paragraphs shared; ids ``<format>-<8 hex>-<n>``, the hex
digits from the file's SHA-256, so two files never share an id), and each record's gold
evidence is mapped to the ids of that corpus, with the corpus's fingerprint in its
``metadata["corpus_fingerprint"]`` (checked where the questions meet an index:
:func:`searchenv.retrieval_quality.evidence_warning`). A malformed record stops the read with a
:class:`~searchenv.corpus.CorpusFormatError` naming the file, the line (JSON lines) or the
record index (JSON arrays), and the field; nothing is returned from a partly bad file. JSON
is read with :mod:`searchenv.utils.jsonsafe`: invalid UTF-8, nesting deeper than 64 levels and
integers over 4,300 digits are such errors too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from searchenv.corpus import (
    CorpusFormatError,
    atomic_write_files,
    corpus_lines,
)
from searchenv.tasks.browsecomp import read_browsecomp_plus, read_trec_qrels
from searchenv.tasks.example import QAExample, SubQuestion, example_from_flashrag
from searchenv.tasks.qa_files import qa_lines
from searchenv.tasks.records import (
    FINGERPRINT_KEY,
    ID_FIELDS,
    Dataset,
    Parser,
    _contexts,
    _map_titles,
    _native,
    _Pool,
    _read_records,
    _str,
    _str_list,
    _supporting_facts,
    iter_records,
    numbered_id,
    passage_prefix,
)

__all__ = [
    "CONTEXT_FORMATS",
    "EVIDENCE_FIELDS",
    "FINGERPRINT_KEY",
    "FORMATS",
    "ID_FIELDS",
    "Dataset",
    "Parser",
    "check_outputs",
    "convert",
    "guess_format",
    "iter_records",
    "numbered_id",
    "passage_prefix",
    "read_2wiki",
    "read_browsecomp_plus",
    "read_flashrag",
    "read_format",
    "read_hotpotqa",
    "read_musique",
    "read_qa",
    "read_trec_qrels",
]

FORMATS = ("flashrag", "hotpotqa", "musique", "2wiki", "qa")
#: Formats whose records can carry context paragraphs (a corpus can be written from them).
CONTEXT_FORMATS = ("flashrag", "hotpotqa", "musique", "2wiki")


# ------------------------------------------------------------------ readers
def read_hotpotqa(path: str | os.PathLike[str]) -> Dataset:
    """Read HotpotQA (list or column layout; JSON array or JSON lines).

    Args:
        path: The question file (e.g. ``hotpot_dev_distractor_v1.json``).

    Returns:
        Examples (type ``bridge``/``comparison``, 2 hops, evidence = supporting-fact
        paragraphs) and the pooled context corpus.
    """
    return _read_hotpot_like(path, "hotpotqa", ("sentences",), _hotpot_extra)


def read_2wiki(path: str | os.PathLike[str]) -> Dataset:
    """Read 2WikiMultiHopQA (HotpotQA-like, plus ``evidences`` triples and ``type``).

    Each evidence triple becomes a sub-question ``"<relation> of <subject>"`` whose answer
    is the object, with the paragraph titled after the subject as its evidence.

    Args:
        path: The question file (e.g. ``dev.json``).

    Returns:
        Examples and the pooled context corpus.
    """
    return _read_hotpot_like(path, "2wiki", ("sentences", "content"), _twowiki_extra)


def _hotpot_extra(
    record: dict[str, Any], where: str, context_ids: list[tuple[str, str]]
) -> tuple[tuple[SubQuestion, ...], int, dict[str, Any]]:
    level = record.get("level")
    return (), 2, ({"level": level} if isinstance(level, str) else {})


def _twowiki_extra(
    record: dict[str, Any], where: str, context_ids: list[tuple[str, str]]
) -> tuple[tuple[SubQuestion, ...], int, dict[str, Any]]:
    if "evidences" not in record:  # every 2WikiMultiHopQA record has them; a HotpotQA record has none
        raise CorpusFormatError(f"{where}: missing field 'evidences'")
    triples = record["evidences"]
    if not isinstance(triples, list):
        raise CorpusFormatError(f"{where}: field 'evidences' must be a list of [subject, relation, object]")
    subs = []
    for i, t in enumerate(triples):
        if not (isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t)):
            raise CorpusFormatError(f"{where}: field 'evidences[{i}]' must be [subject, relation, object] strings")
        subject, relation, obj = t
        ids = [d for title, d in context_ids if title == subject or title.startswith(subject + " (")]
        subs.append(SubQuestion(f"{relation} of {subject}", obj, tuple(dict.fromkeys(ids))))
    meta: dict[str, Any] = {"evidences": [list(t) for t in triples]}
    if isinstance(record.get("entity_ids"), str):
        meta["entity_ids"] = record["entity_ids"]
    return tuple(subs), max(2, len(subs)), meta


def _read_hotpot_like(
    path: str | os.PathLike[str],
    prefix: str,
    sentences_keys: tuple[str, ...],
    extra: Callable[[dict[str, Any], str, list[tuple[str, str]]], tuple[tuple[SubQuestion, ...], int, dict[str, Any]]],
) -> Dataset:
    return _read_records(path, prefix, lambda r, w, pool: _hotpot_record(r, w, pool, prefix, sentences_keys, extra))


def _hotpot_record(
    record: dict[str, Any],
    where: str,
    pool: _Pool,
    source: str,
    sentences_keys: tuple[str, ...],
    extra: Callable[[dict[str, Any], str, list[tuple[str, str]]], tuple[tuple[SubQuestion, ...], int, dict[str, Any]]],
) -> QAExample:
    """One HotpotQA-like record (HotpotQA or 2WikiMultiHopQA) as an example; contexts go to ``pool``."""
    record, where = _native(record, where)
    qid = _str(record, "_id", where, "id")
    question = _str(record, "question", where)
    answer = _str(record, "answer", where)
    aliases = _str_list(record.get("answer_aliases", []), where, "answer_aliases")
    qtype = record.get("type", "multi-hop")
    if not isinstance(qtype, str) or not qtype:
        raise CorpusFormatError(f"{where}: field 'type' must be a string")
    context_ids = [(title, pool.add(title, text)) for title, text in _contexts(record, where, sentences_keys)]
    facts = _supporting_facts(record, where)
    evidence, titles, missing = _map_titles([t for t, _ in facts], context_ids)
    decomposition, hops, meta = extra(record, where, context_ids)
    meta.update(source=source, supporting_facts=[[t, i] for t, i in facts], evidence_titles=titles)
    if missing:
        meta["unmapped_supporting_titles"] = missing
    return QAExample(qid, question, (answer, *aliases), tuple(evidence), decomposition, qtype, hops, meta)


_HOP_REF = re.compile(r"#(\d+)")


def _fill_hop_refs(question: str, done: list[SubQuestion]) -> str:
    """Replace MuSiQue's ``#k`` by the answer of step ``k``."""

    def answer(m: re.Match[str]) -> str:
        k = int(m.group(1))
        return done[k - 1].answer if 1 <= k <= len(done) else m.group(0)

    return _HOP_REF.sub(answer, question)


def read_musique(path: str | os.PathLike[str]) -> Dataset:
    """Read MuSiQue JSON lines (answerable or full version).

    Sub-questions come from ``question_decomposition`` with ``#k`` replaced by the answer
    of step ``k``; each step's evidence is its ``paragraph_support_idx`` paragraph.

    Args:
        path: The question file (e.g. ``musique_ans_v1.0_dev.jsonl``).

    Returns:
        Examples (type = the id prefix such as ``2hop`` or ``3hop1``) and the pooled corpus.
    """
    return _read_records(path, "musique", _musique_record)


def _musique_record(record: dict[str, Any], where: str, pool: _Pool) -> QAExample:
    """One MuSiQue record as an example; its paragraphs go to ``pool``.

    In FlashRAG's layout a record has no ``paragraphs``: each step of its
    ``question_decomposition`` carries its ``support_paragraph``, and those are read instead.
    """
    record, where = _native(record, where)
    qid = _str(record, "id", where)
    question = _str(record, "question", where)
    answer = _str(record, "answer", where)
    aliases = _str_list(record.get("answer_aliases", []), where, "answer_aliases")
    steps = record.get("question_decomposition", [])
    if not isinstance(steps, list):
        raise CorpusFormatError(f"{where}: field 'question_decomposition' must be a list")
    support_only = "paragraphs" not in record and any(isinstance(s, dict) and "support_paragraph" in s for s in steps)
    if support_only:
        paragraphs = [
            (f"question_decomposition[{i}].support_paragraph", s["support_paragraph"])
            for i, s in enumerate(steps)
            if isinstance(s, dict) and s.get("support_paragraph") is not None
        ]
    elif isinstance(record.get("paragraphs"), list):
        paragraphs = [(f"paragraphs[{i}]", p) for i, p in enumerate(record["paragraphs"])]
    else:
        raise CorpusFormatError(f"{where}: field 'paragraphs' must be a list")
    by_idx: dict[int, str] = {}
    supporting: list[str] = []
    for i, (name, p) in enumerate(paragraphs):
        if not isinstance(p, dict):
            raise CorpusFormatError(f"{where}: field {name!r} must be an object")
        title = p.get("title", "")
        text = p.get("paragraph_text")
        if not isinstance(title, str) or not isinstance(text, str):
            raise CorpusFormatError(f"{where}: field {name!r} needs string 'title' and 'paragraph_text'")
        idx = p.get("idx", i)
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise CorpusFormatError(f"{where}: field '{name}.idx' must be an int")
        doc_id = pool.add(title, text.strip())
        by_idx[idx] = doc_id
        if p.get("is_supporting") is True and doc_id not in supporting:
            supporting.append(doc_id)
    subs: list[SubQuestion] = []
    for i, step in enumerate(steps):
        name = f"question_decomposition[{i}]"
        if not isinstance(step, dict):
            raise CorpusFormatError(f"{where}: field {name!r} must be an object")
        q = _str(step, "question", f"{where} ({name})")
        a = step.get("answer")
        if not isinstance(a, str):
            raise CorpusFormatError(f"{where}: field '{name}.answer' must be a string")
        support = step.get("paragraph_support_idx")
        if support is None and isinstance(step.get("support_paragraph"), dict):
            support = step["support_paragraph"].get("idx")
        if support is not None and (not isinstance(support, int) or support not in by_idx):
            raise CorpusFormatError(f"{where}: field '{name}.paragraph_support_idx' names no paragraph: {support!r}")
        evidence = (by_idx[support],) if support is not None else ()
        subs.append(SubQuestion(_fill_hop_refs(q, subs), a, evidence))
    evidence_ids = [s.evidence_ids[0] for s in subs if s.evidence_ids] or supporting
    qtype = qid.split("__", 1)[0] if "__" in qid else "multi-hop"
    meta: dict[str, Any] = {"source": "musique", "supporting_ids": supporting}
    if "answerable" in record:
        meta["answerable"] = bool(record["answerable"])
    return QAExample(
        qid, question, (answer, *aliases), tuple(dict.fromkeys(evidence_ids)), tuple(subs), qtype,
        max(1, len(subs)), meta,
    )  # fmt: skip


#: Fields that carry evidence (context paragraphs, supporting facts, decompositions).
EVIDENCE_FIELDS = ("context", "supporting_facts", "paragraphs", "question_decomposition", "evidences")


def _evidence_fields(record: dict[str, Any]) -> list[str]:
    """The evidence fields of a record, at the top or (FlashRAG layout) under ``metadata``."""
    meta = record.get("metadata")
    nested = [f"metadata.{k}" for k in EVIDENCE_FIELDS if k in meta] if isinstance(meta, dict) else []
    return [k for k in EVIDENCE_FIELDS if k in record] + nested


def read_qa(path: str | os.PathLike[str]) -> Dataset:
    """Read a question-only file: a question and its answers per record, no context.

    This is the layout of R1-Searcher's evaluation sets (``2wiki_500.jsonl``,
    ``musique_500.jsonl``: ``question``, ``answer``, ``idx``). The answers are read from
    ``golden_answers``, ``answers`` or ``answer`` (a string or a list of strings) and the id
    from ``id``, ``_id`` or ``idx``; a record with none is numbered (:func:`numbered_id`).
    Other fields are not kept. The examples have no evidence, type ``unknown`` (or the
    record's ``type``) and 1 hop; there is no corpus: they are asked against a corpus of the
    user's choice.

    Args:
        path: The question file (JSON lines or a JSON array).

    Returns:
        The examples; ``documents`` is empty.

    Raises:
        CorpusFormatError: On a malformed record, or one that carries evidence (``context``,
            ``paragraphs``...): such a file is read with its dataset's format, not dropped
            silently.
    """
    return _read_records(path, "qa", _qa_record, (*ID_FIELDS, "idx"))


def _qa_record(record: dict[str, Any], where: str, pool: _Pool) -> QAExample:
    carried = _evidence_fields(record)
    if carried:
        raise CorpusFormatError(
            f"{where}: field {carried[0]!r}: a question-only (qa) record carries no evidence; "
            "read this file with its dataset's format to keep it"
        )
    qid = _str(record, "id", where, "_id", "idx")
    question = _str(record, "question", where)
    key = next((k for k in ("golden_answers", "answers", "answer") if k in record), "answer")
    answers = record.get(key)
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise CorpusFormatError(
            f"{where}: field {key!r} must be a non-empty string or list of them, got {answers!r:.80}"
        )
    qtype = record.get("type")
    qtype = qtype if isinstance(qtype, str) and qtype else "unknown"
    return QAExample(qid, question, tuple(answers), type=qtype, metadata={"source": "qa"})


def guess_format(record: Any) -> str | None:
    """The format a decoded record looks like, or ``None`` if it is not recognised.

    ``golden_answers``: ``flashrag``; ``evidences``: ``2wiki``; ``paragraphs`` or
    ``question_decomposition``: ``musique``; ``context`` or ``supporting_facts``:
    ``hotpotqa``; a question with none of these: ``qa``.
    """
    if not isinstance(record, dict):
        return None
    for fmt, fields in _LOOKS:
        if any(f in record for f in fields):
            return fmt
    return "qa" if "question" in record else None


_LOOKS = (
    ("flashrag", ("golden_answers",)),
    ("2wiki", ("evidences",)),
    ("musique", ("paragraphs", "question_decomposition")),
    ("hotpotqa", ("context", "supporting_facts")),
)


def _first_record(path: str | os.PathLike[str]) -> Any:
    """The first record of a file, or ``None`` if there is none or it cannot be read."""
    try:
        for _, record in iter_records(path):
            return record
    except CorpusFormatError:
        pass
    return None


def read_flashrag(path: str | os.PathLike[str]) -> Dataset:
    """Read a FlashRAG QA file (JSON lines or a JSON array), with the evidence in ``metadata``.

    ``metadata`` may hold our ``evidence_ids`` and ``decomposition`` (ids into a corpus the
    user has; see :func:`searchenv.tasks.example_from_flashrag`) or, as in FlashRAG's
    multi-hop sets, the dataset's own fields: HotpotQA's ``context`` and
    ``supporting_facts`` (with ``evidences``: 2WikiMultiHopQA) or MuSiQue's
    ``question_decomposition``, read as the ``hotpotqa``, ``2wiki`` and ``musique`` readers
    do, their paragraphs pooled into ``documents`` (ids ``flashrag-<8 hex>-<n>``).

    Args:
        path: The QA file.

    Returns:
        The examples, and the paragraphs pooled from the records that carry them.
    """
    return _read_records(path, "flashrag", _flashrag_record)


def _flashrag_record(record: dict[str, Any], where: str, pool: _Pool) -> QAExample:
    meta = record.get("metadata")
    if isinstance(meta, dict) and "evidence_ids" not in meta and "decomposition" not in meta:
        if "context" in meta:
            two_wiki = "evidences" in meta
            extra = _twowiki_extra if two_wiki else _hotpot_extra
            source = "2wiki" if two_wiki else "hotpotqa"
            return _hotpot_record(record, where, pool, source, ("sentences", "content"), extra)
        if "paragraphs" in meta or "question_decomposition" in meta:
            return _musique_record(record, where, pool)
    return example_from_flashrag(record, where)


_READERS: dict[str, Callable[[str | os.PathLike[str]], Dataset]] = {
    "flashrag": read_flashrag,
    "hotpotqa": read_hotpotqa,
    "musique": read_musique,
    "2wiki": read_2wiki,
    "qa": read_qa,
}


def read_format(fmt: str, path: str | os.PathLike[str]) -> Dataset:
    """Read ``path`` with the reader of ``fmt`` (one of :data:`FORMATS`).

    Raises:
        ValueError: If the format is unknown.
        FileNotFoundError: If the file does not exist.
        CorpusFormatError: On a malformed record; if the file's first record looks like
            another format (:func:`guess_format`), the message says which.
    """
    if fmt not in _READERS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    try:
        return _READERS[fmt](path)
    except CorpusFormatError as exc:
        first = _first_record(path)
        guess = guess_format(first)
        if guess is None or guess == fmt:
            raise
        if guess == "flashrag" and guess_format(first.get("metadata")) == fmt:
            raise  # the dataset's own reader reads its FlashRAG layout too
        raise CorpusFormatError(f"{exc} (this file looks like format {guess!r}, not {fmt!r})") from None


def check_outputs(fmt: str, out_qa: str | os.PathLike[str], out_corpus: str | os.PathLike[str] | None,
                  src: str | os.PathLike[str] | None = None) -> None:
    """Check the options of :func:`convert` before any input is read.

    Raises:
        ValueError: If the format is unknown, a corpus is requested from a format without
            contexts, both outputs are the same file, or an output is the input ``src``.
    """
    if fmt not in _READERS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if src is not None:
        for option, out in (("--out-qa", out_qa), ("--out-corpus", out_corpus)):
            if out is not None and _same_file(out, src):
                raise ValueError(f"{option} {out} is the input file: converting would overwrite it; "
                                 "write the output elsewhere")
    if out_corpus is None:
        return
    if fmt not in CONTEXT_FORMATS:
        raise ValueError(
            f"{fmt} files carry no context paragraphs: there is no corpus to write; "
            "use the questions with a corpus of your choice"
        )
    if Path(out_corpus).resolve() == Path(out_qa).resolve():
        raise ValueError(f"the corpus and the questions would be written to the same file {out_qa}")


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (through links too), or would once ``a`` is written."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return Path(a).resolve() == Path(b).resolve()


def convert(
    fmt: str,
    src: str | os.PathLike[str],
    out_qa: str | os.PathLike[str],
    out_corpus: str | os.PathLike[str] | None = None,
) -> dict[str, int]:
    """Convert a QA file to FlashRAG JSONL (questions, and the pooled corpus if asked).

    The whole input is read and checked before anything is written, so a bad or empty input
    leaves existing outputs untouched; both outputs are written to temporary files before
    either replaces an old file, and an output that is the input is refused.

    Args:
        fmt: Input format.
        src: Input file.
        out_qa: Destination of the FlashRAG QA JSONL.
        out_corpus: Destination of the FlashRAG corpus JSONL (``None``: not written).

    Returns:
        ``{"examples": n, "documents": m, "numbered": k}``, ``k`` the records that had no id
        and were numbered (:func:`numbered_id`).

    Raises:
        ValueError: On bad options (see :func:`check_outputs`).
        CorpusFormatError: If the input has a malformed record or no records, or a corpus is
            requested and the records have no context paragraphs.
    """
    check_outputs(fmt, out_qa, out_corpus, src)
    data = read_format(fmt, src)
    if not data.examples:
        raise CorpusFormatError(f"{src}: no records; there is nothing to convert")
    if out_corpus is not None and not data.documents:
        raise CorpusFormatError(
            f"{src}: the records have no context paragraphs; there is no corpus to write: "
            "use the questions with a corpus of your choice"
        )
    outputs: list[tuple[str | os.PathLike[str], Iterable[str]]] = [(out_qa, qa_lines(data.examples))]
    if out_corpus is not None:
        outputs.append((out_corpus, corpus_lines(data.documents)))
    atomic_write_files(outputs)  # both written before either replaces an old file: never a mismatched pair
    return {"examples": len(data.examples), "documents": len(data.documents), "numbered": data.numbered}
