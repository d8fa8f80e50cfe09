"""The data types of tasks: :class:`QAExample` (a question, its answers, evidence and decomposition) and :class:`Task`.

:class:`TaskSpec` is what the registry (:mod:`searchenv.tasks.registry`) holds for a named task;
:func:`choose_example` is how every environment's ``reset(options=...)`` picks an episode's example.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchenv.corpus import CorpusFormatError

if TYPE_CHECKING:
    import numpy as np

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
    through ``object.__setattr__`` and checks again, a cost paid per example).
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


#: The keys of ``reset(options=...)``, in the order they choose: an example object, a custom
#: question (with its ``answers`` and optional ``evidence_ids`` and ``id``), an example id, an index.
RESET_OPTIONS = ("example", "question", "answers", "evidence_ids", "id", "example_id", "index")
_CUSTOM_FIELDS = ("answers", "evidence_ids", "id")


def choose_example(
    examples: Sequence[QAExample],
    options: Mapping[str, Any] | None,
    rng: np.random.Generator,
    *,
    by_id: Mapping[str, int] | None = None,
) -> QAExample:
    """The example an episode asks about, as ``reset(options=...)`` names it (every environment's reset).

    Args:
        examples: The environment's examples.
        options: ``{"example": QAExample}``, a custom ``{"question": str, "answers": [str, ...]}``
            (optionally ``evidence_ids``: a list of document ids or one id alone, and ``id``),
            ``{"example_id": id}``, ``{"index": i}`` (an int or a NumPy integer), or nothing: a random example.
        rng: Draws the random example (the environment's own generator).
        by_id: Example id -> index in ``examples``, when the caller keeps one (else it is built here).

    Returns:
        The example.

    Raises:
        ValueError: For an option not in :data:`RESET_OPTIONS` (naming it and the options), ``answers``,
            ``evidence_ids`` or ``id`` without ``question``, a custom question without answers, an unknown
            ``example_id``, or an ``index`` that is not an integer in range.
        TypeError: If ``options["example"]`` is not a :class:`QAExample`.
    """
    options = {} if options is None else options
    unknown = sorted(set(options) - set(RESET_OPTIONS), key=str)
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; the options are {', '.join(RESET_OPTIONS)}")
    if "example" in options:
        if not isinstance(options["example"], QAExample):
            raise TypeError(f"options['example'] must be a QAExample, got {type(options['example']).__name__}")
        return options["example"]
    if "question" in options:
        answers = options.get("answers")
        if isinstance(answers, str):
            answers = [answers]
        if not answers:
            raise ValueError("a custom question needs options['answers'] (a non-empty list of strings)")
        evidence = options.get("evidence_ids", ())
        if isinstance(evidence, str):  # one id alone, as in QA files
            evidence = [evidence]
        return QAExample(str(options.get("id", "custom")), str(options["question"]), tuple(answers), tuple(evidence))
    stray = [key for key in _CUSTOM_FIELDS if key in options]
    if stray:
        raise ValueError(f"reset option(s) {stray} describe a custom question and need options['question']")
    if "example_id" in options:
        ids = by_id if by_id is not None else {ex.id: i for i, ex in enumerate(examples)}
        if options["example_id"] not in ids:
            raise ValueError(f"no example with id {options['example_id']!r}")
        return examples[ids[options["example_id"]]]
    if "index" in options:
        i = options["index"]
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= int(i) < len(examples):
            raise ValueError(f"options['index'] must be an int in [0, {len(examples)}), got {i!r}")
        return examples[int(i)]
    return examples[int(rng.integers(len(examples)))]
