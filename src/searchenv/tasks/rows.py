"""Questions as the dataset rows RL engines read (verl and Search-R1 parquet, SkyRL), and back.

verl's trainer (and Search-R1, and SkyRL's search example) reads parquet rows shaped like::

    {"data_source": "searchenv/synthetic-2hop", "agent_name": "searchqa_agent",
     "prompt": [{"role": "user", "content": "Who directed ...?"}],
     "ability": "fact-reasoning",
     "reward_model": {"style": "rule", "ground_truth": {"target": ["Velora Quenn"]}},
     "extra_info": {"split": "train", "index": 0, "id": "q17", "question": "Who directed ...?",
                    "evidence_ids": ["d3", "d8"]}}

:func:`task_rows` writes a task's questions so; :func:`example_from_row` reads a question back
from such a row (or from a flat ``{"question", "answers", "evidence_ids", "id"}`` row), which is
what the engine adapters do with the row an engine hands them. :func:`write_parquet` writes rows
atomically (a temporary file, then a rename); it needs ``pyarrow``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from searchenv.tasks.example import QAExample, blank_answer, checked_example
from searchenv.utils.files import publishable

#: The agent loop name rows select in verl (``agent_name``).
VERL_AGENT_NAME = "searchqa_agent"
_NO_INFO: Mapping[str, Any] = MappingProxyType({})


def task_rows(examples: Iterable[QAExample], *, data_source: str, split: str,
              agent_name: str = VERL_AGENT_NAME) -> list[dict[str, Any]]:
    """Rows in verl's / Search-R1's layout (see the module docstring), one per question.

    Args:
        examples: The questions.
        data_source: The rows' ``data_source`` (e.g. ``searchenv/synthetic-2hop``).
        split: Recorded in ``extra_info.split``.
        agent_name: The verl agent loop the rows select.
    """
    return [
        {
            "data_source": data_source,
            "agent_name": agent_name,
            "prompt": [{"role": "user", "content": ex.question}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": list(ex.answers)}},
            "extra_info": {"split": split, "index": i, "id": ex.id, "question": ex.question,
                           "evidence_ids": list(ex.evidence_ids)},
        }
        for i, ex in enumerate(examples)
    ]


def example_from_row(row: Mapping[str, Any]) -> QAExample:
    """The question of an engine's dataset row.

    Reads ``question`` (else ``extra_info.question``, else the last user message of ``prompt``),
    gold answers from ``answers`` or ``reward_spec`` / ``reward_model`` ``.ground_truth.target``
    (a list, or one string), and optionally ``evidence_ids`` and ``id`` (flat or in ``extra_info``).

    Raises:
        ValueError: If the row has no question or no gold answers (the message names the fields).
    """
    raw_info = row.get("extra_info")
    # `None` and plain dicts skip the (slower) abstract-class check: engines call this once per trajectory
    info: Mapping[str, Any] = raw_info if type(raw_info) is dict or (
        raw_info is not None and isinstance(raw_info, Mapping)) else _NO_INFO
    question = row.get("question")
    if question is None:
        question = info.get("question")
    if question is None:
        prompt = row.get("prompt", row.get("raw_prompt"))
        if isinstance(prompt, Sequence) and not isinstance(prompt, str):
            users = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
            question = users[-1] if users else None
    answers = row.get("answers")
    if answers is None:
        answers = info.get("answers")
    if answers is None:
        for key in ("reward_spec", "reward_model"):
            spec = row.get(key)
            truth = spec.get("ground_truth") if isinstance(spec, Mapping) else None
            answers = truth.get("target") if isinstance(truth, Mapping) else truth
            if answers is not None:
                break
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(question, str) or not question.strip():
        raise ValueError("dataset row has no question: give 'question' (or extra_info.question, or a user prompt)")
    if answers is None or not len(answers):
        raise ValueError("dataset row has no gold answers: give 'answers' or reward_model.ground_truth.target")
    evidence = row.get("evidence_ids")
    if evidence is None:
        evidence = info.get("evidence_ids") or ()
    ident = row.get("id")
    if ident is None:
        ident = info.get("id", info.get("index", "row"))
    golds = tuple(map(str, answers))
    for i, gold in enumerate(golds):
        if blank_answer(gold):
            raise ValueError(f"dataset row {ident!r}: gold answer {i} ({gold!r:.60}) has no letter or digit: an "
                             "answer made of articles and punctuation would match it")
    # checked above as QAExample checks (question a non-empty str; answers and evidence made tuples of str)
    return checked_example(str(ident), question, golds,
                           (evidence,) if isinstance(evidence, str) else tuple(map(str, evidence)))


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows as one parquet file, atomically (a temporary file in the same folder, then a rename).

    Raises:
        ImportError: If ``pyarrow`` is not installed (the message says how to get it).
        ValueError: If there are no rows.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("writing parquet needs pyarrow (pip install pyarrow; verl and TRL bring it)") from None
    if not rows:
        raise ValueError("no rows to write")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), tmp)
        publishable(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
