"""Readers for the public multi-hop QA formats users bring, mapped to :class:`QAExample`.

Supported formats (``FORMATS``):

- ``flashrag``: FlashRAG QA files (``{"id", "question", "golden_answers", "metadata"}``),
  with evidence from ``metadata``: ours (``evidence_ids``, ``decomposition``; see
  :func:`searchenv.tasks.base.read_qa_jsonl`) or the dataset fields that FlashRAG's
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
:func:`searchenv.retrievers.quality.evidence_warning`). A malformed record stops the read with a
:class:`~searchenv.corpus.CorpusFormatError` naming the file, the line (JSON lines) or the
record index (JSON arrays), and the field; nothing is returned from a partly bad file. JSON
is read with :mod:`searchenv.jsonsafe`: invalid UTF-8, nesting deeper than 64 levels and
integers over 4,300 digits are such errors too.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from searchenv.corpus import (
    CorpusFormatError,
    Document,
    atomic_write_files,
    corpus_fingerprint,
    corpus_lines,
)
from searchenv.jsonsafe import DEFAULT_MAX_DEPTH, iter_jsonl, loads
from searchenv.tasks.base import QAExample, SubQuestion, example_from_flashrag, qa_lines

FORMATS = ("flashrag", "hotpotqa", "musique", "2wiki", "qa")
#: Formats whose records can carry context paragraphs (a corpus can be written from them).
CONTEXT_FORMATS = ("flashrag", "hotpotqa", "musique", "2wiki")


@dataclass
class Dataset:
    """Examples read from a QA file, with the corpus pooled from its contexts.

    Attributes:
        examples: The examples in file order.
        documents: Pooled context paragraphs (empty for formats without contexts).
        numbered: How many records had no id and were given one by position
            (see :func:`numbered_id`).
    """

    examples: list[QAExample] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    numbered: int = 0


class _Pool:
    """Context paragraphs pooled into a corpus; identical (title, text) pairs share an id.

    ``used`` says whether :meth:`add` was called since it was last set to False (whether a
    record's evidence points into this pool).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.ids: dict[tuple[str, str], str] = {}
        self.documents: list[Document] = []
        self.used = False

    def add(self, title: str, text: str) -> str:
        self.used = True
        key = (title, text)
        if key not in self.ids:
            doc_id = f"{self.prefix}-{len(self.documents)}"
            self.ids[key] = doc_id
            self.documents.append(Document(doc_id, title, text))
        return self.ids[key]


# ------------------------------------------------------------------ records
def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, record)`` from a JSON array file or a JSON lines file.

    Args:
        path: The file.

    Yields:
        ``where`` is ``"file:line"`` for JSON lines and ``"file[record i]"`` for arrays.

    Raises:
        CorpusFormatError: On invalid JSON (with line and column), invalid UTF-8, nesting
            deeper than 64 levels or an integer over 4,300 digits.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        data = loads(path.read_bytes(), str(path), max_depth=DEFAULT_MAX_DEPTH, error=CorpusFormatError)
        for i, record in enumerate(data):
            yield f"{path}[record {i}]", record
        return
    yield from iter_jsonl(path, error=CorpusFormatError)


def _obj(record: Any, where: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise CorpusFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    return record


def _str(record: dict[str, Any], key: str, where: str, *alts: str) -> str:
    for k in (key, *alts):
        if k in record:
            value = record[k]
            if isinstance(value, int) and not isinstance(value, bool) and k in ("id", "_id", "idx"):
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise CorpusFormatError(f"{where}: field {k!r} must be a non-empty string, got {value!r:.80}")
            return value
    raise CorpusFormatError(f"{where}: missing field {key!r}")


def _str_list(value: Any, where: str, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CorpusFormatError(f"{where}: field {name!r} must be a list of strings, got {value!r:.80}")
    return value


def _join_sentences(sentences: list[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


def _contexts(record: dict[str, Any], where: str, sentences_keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """``context`` as (title, text) pairs from the list or the column layout."""
    ctx = record.get("context")
    if ctx is None:
        raise CorpusFormatError(f"{where}: missing field 'context'")
    out: list[tuple[str, str]] = []
    if isinstance(ctx, dict):
        titles = _str_list(ctx.get("title"), where, "context.title")
        key = next((k for k in sentences_keys if k in ctx), None)
        if key is None:
            raise CorpusFormatError(f"{where}: field 'context' needs one of {list(sentences_keys)}")
        paras = ctx[key]
        if not isinstance(paras, list) or len(paras) != len(titles):
            raise CorpusFormatError(f"{where}: field 'context.{key}' must be a list as long as 'context.title'")
        for i, (title, sents) in enumerate(zip(titles, paras, strict=True)):
            out.append((title, _join_sentences(_str_list(sents, where, f"context.{key}[{i}]"))))
        return out
    if not isinstance(ctx, list):
        raise CorpusFormatError(f"{where}: field 'context' must be a list or an object, got {type(ctx).__name__}")
    for i, pair in enumerate(ctx):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise CorpusFormatError(f"{where}: field 'context[{i}]' must be [title, [sentences]]")
        out.append((pair[0], _join_sentences(_str_list(pair[1], where, f"context[{i}][1]"))))
    return out


def _supporting_facts(record: dict[str, Any], where: str) -> list[tuple[str, int]]:
    sf = record.get("supporting_facts", [])
    if isinstance(sf, dict):
        titles = _str_list(sf.get("title"), where, "supporting_facts.title")
        ids = sf.get("sent_id")
        if not isinstance(ids, list) or len(ids) != len(titles) or not all(isinstance(i, int) for i in ids):
            raise CorpusFormatError(f"{where}: field 'supporting_facts.sent_id' must be ints, one per title")
        return list(zip(titles, ids, strict=True))
    if not isinstance(sf, list):
        raise CorpusFormatError(f"{where}: field 'supporting_facts' must be a list or an object")
    out = []
    for i, pair in enumerate(sf):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], int)):
            raise CorpusFormatError(f"{where}: field 'supporting_facts[{i}]' must be [title, sentence index]")
        out.append((pair[0], pair[1]))
    return out


def _check_unique(examples: list[QAExample], ex: QAExample, where: str, seen: set[str]) -> None:
    if ex.id in seen:
        raise CorpusFormatError(f"{where}: duplicate example id {ex.id!r}")
    seen.add(ex.id)
    examples.append(ex)


def _map_titles(
    titles: list[str], context_ids: list[tuple[str, str]]
) -> tuple[list[str], list[str], list[str]]:
    """Doc ids of the context paragraphs with these titles (first appearance order), their titles, unmapped titles."""
    by_title: dict[str, str] = {}
    for title, doc_id in context_ids:
        by_title.setdefault(title, doc_id)
    ids: list[str] = []
    mapped: list[str] = []
    missing: list[str] = []
    for t in titles:
        if t in by_title:
            if by_title[t] not in ids:
                ids.append(by_title[t])
                mapped.append(t)
        elif t not in missing:
            missing.append(t)
    return ids, mapped, missing


def _native(record: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """A record in FlashRAG's layout as its dataset's own layout; other records unchanged.

    FlashRAG keeps a dataset's own fields under ``metadata`` and its answers (with aliases)
    in ``golden_answers``: they become the fields ``answer`` and ``answer_aliases`` next to
    the metadata. The returned ``where`` then says that fields are read from ``metadata``.
    """
    meta = record.get("metadata")
    if "golden_answers" not in record or not isinstance(meta, dict):
        return record, where
    top = {"id": _str(record, "id", where, "_id"), "question": _str(record, "question", where)}
    answers = record["golden_answers"]
    answers = [answers] if isinstance(answers, str) else answers
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise CorpusFormatError(f"{where}: field 'golden_answers' must be a non-empty list of strings")
    return {**meta, **top, "answer": answers[0], "answer_aliases": answers[1:]}, f"{where} (in 'metadata')"


#: Fields a record's id is read from; a record with none of them is numbered.
ID_FIELDS = ("_id", "id")


def numbered_id(fmt: str, index: int) -> str:
    """The id given to the record at ``index`` (0-based position in the file) that has none.

    ``hotpotqa-q0``, ``hotpotqa-q1``, ...: the same file gives the same ids on every read.
    """
    return f"{fmt}-q{index}"


def passage_prefix(fmt: str, path: str | os.PathLike[str]) -> str:
    """The prefix of the passage ids pooled from the file ``path``: ``<format>-<8 hex>``.

    The hex digits begin the SHA-256 of the file's bytes, so passages of different files never
    share an id (an index of one file cannot answer with ids that name another file's passages)
    and the same file gives the same ids on every read.
    """
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{fmt}-{h.hexdigest()[:8]}"


#: ``metadata`` key of a converted example: the fingerprint of the corpus its evidence ids name.
FINGERPRINT_KEY = "corpus_fingerprint"

Parser = Callable[[dict[str, Any], str, _Pool], QAExample]


def _read_records(
    path: str | os.PathLike[str], fmt: str, parse: Parser, id_fields: tuple[str, ...] = ID_FIELDS
) -> Dataset:
    """Parse every record of ``path`` with ``parse``, numbering records with none of ``id_fields``.

    Examples whose evidence points into the pooled paragraphs get the pool's
    :func:`~searchenv.corpus.corpus_fingerprint` as ``metadata["corpus_fingerprint"]``.
    """
    pool = _Pool(passage_prefix(fmt, path))
    data = Dataset()
    seen: set[str] = set()
    pooled: list[bool] = []
    for index, (where, raw) in enumerate(iter_records(path)):
        record = _obj(raw, where)
        if not any(k in record for k in id_fields):
            record = {**record, "id": numbered_id(fmt, index)}
            data.numbered += 1
        pool.used = False
        try:
            example = parse(record, where, pool)
        except CorpusFormatError:
            raise
        except ValueError as exc:  # QAExample's own checks (e.g. an answer that normalizes to nothing)
            raise CorpusFormatError(f"{where}: {exc}") from None
        _check_unique(data.examples, example, where, seen)
        pooled.append(pool.used)
    data.documents = pool.documents
    if data.documents:
        fingerprint = corpus_fingerprint(data.documents)
        data.examples = [
            replace(ex, metadata={**ex.metadata, FINGERPRINT_KEY: fingerprint}) if from_pool else ex
            for ex, from_pool in zip(data.examples, pooled, strict=True)
        ]
    return data


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
    user has; see :func:`searchenv.tasks.base.example_from_flashrag`) or, as in FlashRAG's
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


# ------------------------------------------------------------------ BrowseComp-Plus
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
