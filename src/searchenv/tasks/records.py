"""Reading the QA records of public formats, and pooling their contexts into one corpus.

A file is a JSON array or JSON lines; every field is checked where it sits, so an error names the
file, the line or record, and the field.

:class:`Dataset` is what every reader of :mod:`searchenv.tasks.formats` returns.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from searchenv.corpus import (
    CorpusFormatError,
    Document,
    corpus_fingerprint,
)
from searchenv.tasks.example import QAExample
from searchenv.utils.jsonsafe import DEFAULT_MAX_DEPTH, iter_jsonl, loads


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
