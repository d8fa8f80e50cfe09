"""Question-answering examples and the registry of named tasks.

A *task* bundles example splits with the corpus they are asked against. Named tasks
(``synthetic-2hop`` and friends) are built on first use and cached on disk under
:func:`cache_dir`.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchenv.corpus import CorpusFormatError, atomic_write_lines
from searchenv.jsonsafe import iter_jsonl

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True, slots=True)
class SubQuestion:
    """One hop of a multi-hop question.

    Attributes:
        question: The sub-question, with earlier intermediate answers filled in.
        answer: Its answer (the bridge entity or the final answer).
        evidence_ids: Documents that state the fact.
    """

    question: str
    answer: str
    evidence_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("question", "answer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"sub-question {name} must be a non-empty string, got {value!r:.60}")


def blank_answer(answer: str) -> bool:
    """Whether a gold answer has no letter or digit (``""``, ``"  "``, ``"?"``).

    Such a gold answer normalizes to nothing, so any answer made of articles and punctuation
    (``"the"``) would match it; no reader accepts one. A lone article (``"A"``, a multiple-choice
    letter) is a word and is accepted, although it normalizes to nothing as well.
    """
    return not any(ch.isalnum() for ch in answer)


@dataclass(frozen=True, slots=True)
class QAExample:
    """A question with gold answers and, where known, gold evidence.

    Attributes:
        id: Unique id.
        question: The question text.
        answers: Gold answers with aliases; the first is the canonical one.
        evidence_ids: Gold evidence document ids in hop order.
        decomposition: Sub-questions with intermediate answers, in hop order.
        type: ``single-hop``, ``bridge``, ``comparison`` or a format's own label.
        hops: Number of hops.
        metadata: Anything else the source carries.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    evidence_ids: tuple[str, ...] = ()
    decomposition: tuple[SubQuestion, ...] = ()
    type: str = "single-hop"
    hops: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ValueError(f"example id must be a non-empty string, got {self.id!r:.60}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"example {self.id!r}: question must be a non-empty string")
        if isinstance(self.answers, str) or not self.answers:
            raise ValueError(f"example {self.id!r}: answers must be a non-empty sequence of strings")
        for i, a in enumerate(self.answers):  # a loop, not all(...): examples are built once per engine trajectory
            if not isinstance(a, str):
                raise ValueError(f"example {self.id!r}: every answer must be a string, got {self.answers!r:.80}")
            if blank_answer(a):
                raise ValueError(f"example {self.id!r}: answers[{i}] {a!r:.60} has no letter or digit: an answer "
                                 "made of articles and punctuation would match it")
        if isinstance(self.evidence_ids, str):
            raise ValueError(f"example {self.id!r}: evidence_ids must be a sequence of ids, not one string")
        if isinstance(self.hops, bool) or not isinstance(self.hops, int) or self.hops < 1:
            raise ValueError(f"example {self.id!r}: hops must be a positive integer, got {self.hops!r:.60}")

    def to_flashrag(self) -> dict[str, Any]:
        """Return the FlashRAG QA record ``{"id", "question", "golden_answers", "metadata"}``."""
        meta = dict(self.metadata)
        meta.update(
            type=self.type,
            hops=self.hops,
            evidence_ids=list(self.evidence_ids),
            decomposition=[
                {"question": s.question, "answer": s.answer, "evidence_ids": list(s.evidence_ids)}
                for s in self.decomposition
            ],
        )
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.answers),
            "metadata": meta,
        }


_SET_ID, _SET_QUESTION, _SET_ANSWERS, _SET_EVIDENCE, _SET_DECOMPOSITION, _SET_TYPE, _SET_HOPS, _SET_METADATA = (
    getattr(QAExample, name).__set__
    for name in ("id", "question", "answers", "evidence_ids", "decomposition", "type", "hops", "metadata"))


def checked_example(id: str, question: str, answers: tuple[str, ...], evidence_ids: tuple[str, ...]) -> QAExample:
    """A one-hop :class:`QAExample` from fields the caller has already checked, without checking them again.

    For readers that build one example per engine trajectory (:func:`searchenv.tasks.rows.example_from_row`)
    and have validated exactly what ``QAExample.__post_init__`` validates: ``question`` a
    non-empty string, ``answers`` a non-empty tuple of strings, ``evidence_ids`` a tuple of
    strings. The result equals ``QAExample(id, question, answers, evidence_ids)`` and is as
    frozen; it is built by setting the slots directly (the dataclass ``__init__`` sets each
    through ``object.__setattr__`` and checks again, about 0.7 µs more per example).
    """
    ex = object.__new__(QAExample)
    _SET_ID(ex, id)
    _SET_QUESTION(ex, question)
    _SET_ANSWERS(ex, answers)
    _SET_EVIDENCE(ex, evidence_ids)
    _SET_DECOMPOSITION(ex, ())  # the defaults of the fields below (a test compares with QAExample(...))
    _SET_TYPE(ex, "single-hop")
    _SET_HOPS(ex, 1)
    _SET_METADATA(ex, {})
    return ex


def example_from_flashrag(record: object, where: str) -> QAExample:
    """Parse one FlashRAG QA record.

    Args:
        record: The decoded JSON value.
        where: ``"file:line"`` for error messages.

    Returns:
        The example; evidence and decomposition are read from ``metadata`` when present.
        ``evidence_ids`` (of the example or of a decomposition step) is a list of document ids;
        one id given alone (``"d1"``) is read as the list ``["d1"]``, as ``golden_answers`` is.
        Integer ids become strings, as document ids do.

    Raises:
        CorpusFormatError: On missing or mistyped fields, naming ``where`` and the field.
    """
    if not isinstance(record, dict):
        raise CorpusFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    qid = record.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid.strip():
        raise CorpusFormatError(f"{where}: field 'id' must be a non-empty string, got {qid!r:.60}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise CorpusFormatError(f"{where}: field 'question' must be a non-empty string, got {question!r:.60}")
    answers = record.get("golden_answers", record.get("answers"))
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise CorpusFormatError(f"{where}: field 'golden_answers' must be a non-empty list of strings")
    meta = record.get("metadata") or {}
    if not isinstance(meta, dict):
        raise CorpusFormatError(f"{where}: field 'metadata' must be an object")
    meta = dict(meta)
    evidence = _id_list(meta.pop("evidence_ids", []), where, "metadata.evidence_ids")
    steps = meta.pop("decomposition", [])
    if not isinstance(steps, list):
        raise CorpusFormatError(f"{where}: field 'metadata.decomposition' must be a list, got {steps!r:.60}")
    decomposition = []
    for i, step in enumerate(steps):
        name = f"metadata.decomposition[{i}]"
        if not isinstance(step, dict) or not {"question", "answer"} <= step.keys():
            raise CorpusFormatError(f"{where}: field {name!r} must be an object with 'question' and 'answer'")
        for key in ("question", "answer"):
            if not isinstance(step[key], str) or not step[key].strip():
                raise CorpusFormatError(f"{where}: field '{name}.{key}' must be a non-empty string, "
                                        f"got {step[key]!r:.60}")
        step_evidence = _id_list(step.get("evidence_ids", []), where, f"{name}.evidence_ids")
        decomposition.append(SubQuestion(step["question"], step["answer"], step_evidence))
    qtype = meta.pop("type", "single-hop")
    hops = meta.pop("hops", max(1, len(decomposition)))
    if not isinstance(qtype, str):
        raise CorpusFormatError(f"{where}: field 'metadata.type' must be a string, got {qtype!r:.60}")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise CorpusFormatError(f"{where}: field 'metadata.hops' must be a positive integer, got {hops!r:.60}")
    try:
        return QAExample(qid, question, tuple(answers), evidence, tuple(decomposition), qtype, hops, meta)
    except ValueError as exc:  # e.g. an answer that normalizes to nothing
        raise CorpusFormatError(f"{where}: field 'golden_answers': {exc}") from None


def _id_list(value: object, where: str, name: str) -> tuple[str, ...]:
    """Document ids from a list of ids or one id alone (a string or an integer)."""
    items = value if isinstance(value, list) else [value]
    ids = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str) or not item:
            raise CorpusFormatError(
                f"{where}: field {name!r} must be a document id or a list of them, got {value!r:.60}"
            )
        ids.append(item)
    return tuple(ids)


def read_qa_jsonl(path: str | os.PathLike[str]) -> list[QAExample]:
    """Read a FlashRAG QA JSONL file; any bad line aborts the whole read.

    Args:
        path: The file.

    Returns:
        The examples in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        CorpusFormatError: Naming the file and line of the first bad record (invalid JSON or
            UTF-8, nesting deeper than 64 levels, an integer over 4,300 digits, a bad field) or
            duplicate id.
    """
    out: list[QAExample] = []
    seen: set[str] = set()
    for where, record in iter_jsonl(path, error=CorpusFormatError):
        ex = example_from_flashrag(record, where)
        if ex.id in seen:
            raise CorpusFormatError(f"{where}: duplicate example id {ex.id!r}")
        seen.add(ex.id)
        out.append(ex)
    return out


def write_qa_jsonl(path: str | os.PathLike[str], examples: Iterable[QAExample]) -> None:
    """Write examples as FlashRAG QA JSONL, atomically.

    Args:
        path: Destination.
        examples: The examples.
    """
    atomic_write_lines(path, qa_lines(examples))


def qa_lines(examples: Iterable[QAExample]) -> Iterator[str]:
    """The lines of a FlashRAG QA JSONL file (:func:`write_qa_jsonl`)."""
    return (json.dumps(e.to_flashrag(), ensure_ascii=False) for e in examples)


def split_examples(
    examples: Sequence[QAExample], dev_fraction: float, seed: int
) -> tuple[list[QAExample], list[QAExample]]:
    """Split questions into training and held-out ones, at random but the same for the same seed.

    ``round(len(examples) * dev_fraction)`` questions, drawn by a generator seeded with ``seed``
    (never the global one), are held out; both parts keep the examples' order.

    Args:
        examples: The questions.
        dev_fraction: Share held out, in (0, 1).
        seed: Seed of the draw.

    Returns:
        ``(train, dev)``.

    Raises:
        ValueError: If ``dev_fraction`` is not in (0, 1), or either part would be empty.
    """
    if isinstance(dev_fraction, bool) or not isinstance(dev_fraction, int | float) or not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be between 0 and 1 (exclusive), got {dev_fraction!r}")
    n = len(examples)
    n_dev = round(n * dev_fraction)
    if not 1 <= n_dev <= n - 1:
        raise ValueError(
            f"{n} question(s) with dev_fraction {dev_fraction} leave no question on one side (held out: {n_dev})"
        )
    held = set(random.Random(seed).sample(range(n), n_dev))
    return [ex for i, ex in enumerate(examples) if i not in held], [ex for i, ex in enumerate(examples) if i in held]


def looks_like_file(task: str | os.PathLike[str]) -> bool:
    """Whether ``task`` names a QA file rather than a registered task.

    An existing file does, and so does a name that looks like a path (a folder part or a file
    suffix, ``my/qa.jsnl``): registered task names have neither, so a mistyped file name is
    reported as a missing file, not as an unknown task.
    """
    if isinstance(task, os.PathLike):
        return True
    path = Path(task)
    return path.is_file() or bool(path.suffix) or "/" in task or os.sep in task


def cache_dir() -> Path:
    """Where built tasks and indexes are cached: ``$SEARCHENV_CACHE`` or ``~/.cache/searchenv``."""
    root = os.environ.get("SEARCHENV_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "searchenv"


@dataclass(frozen=True)
class Task:
    """Example splits plus the corpus they are asked against.

    Attributes:
        name: Task name.
        corpus_path: The FlashRAG JSONL corpus file.
        splits: Split name -> examples.
        description: One line for ``searchenv tasks``.
    """

    name: str
    corpus_path: Path
    splits: Mapping[str, Sequence[QAExample]]
    description: str = ""

    def examples(self, split: str) -> Sequence[QAExample]:
        """Return the examples of ``split``.

        Raises:
            ValueError: If the split does not exist.
        """
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {split!r}; it has {sorted(self.splits)}")
        return self.splits[split]


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: a builder that makes (or loads from cache) the :class:`Task`.

    Attributes:
        name: Registered name.
        build: ``build(cache_root) -> Task``.
        description: One line for listings.
        info: Sizes and dials for ``searchenv tasks``.
    """

    name: str
    build: Callable[[Path], Task]
    description: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> None:
    """Add a named task to the registry (later registrations of a name replace earlier ones)."""
    _REGISTRY[spec.name] = spec


def task_specs() -> list[TaskSpec]:
    """All registered tasks, by name."""
    _load_builtin()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def load_task(name: str, root: Path | None = None) -> Task:
    """Build or load a named task.

    Args:
        name: A registered task name.
        root: Cache folder (default :func:`cache_dir`).

    Returns:
        The task.

    Raises:
        ValueError: If no task has that name.
    """
    _load_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name].build(root if root is not None else cache_dir())


def _load_builtin() -> None:
    # Importing the module registers its tasks.
    import searchenv.tasks.synthetic  # noqa: F401
