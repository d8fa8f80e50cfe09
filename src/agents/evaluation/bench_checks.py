"""What a benchmark run reads back from its output folder, checked before it is used (``searchenv bench``).

A rerun of :func:`agents.evaluation.bench.run_bench` continues from saved episodes and verdicts. These
files are data a user (or anything else) can edit, so nothing in them is taken as written:

- saved episodes are checked by :func:`agents.evaluation.evaluate.evaluate` (their scores recomputed
  from the saved answer and the gold answers; see :mod:`agents.evaluation.resume`);
- a saved verdict must have its fields, agree with its method, and agree with what can be
  recomputed (an ``exact`` verdict is an answer equal to a gold answer, ...): :func:`judge_set`,
  which names the file, line and field of one that does not;
- a file or folder of the run that is a symbolic link is refused
  (:func:`searchenv.utils.files.refuse_link`, as every command that writes under ``--out`` does), so
  nothing outside the output folder is read or written through one;
- a set too small to give each question the judge's decoys is refused before anything runs
  (:func:`check_decoys`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from searchenv.corpus import atomic_write_lines
from searchenv.utils.files import refuse_link


def judge_pool(examples: Sequence[Any]) -> list[str]:
    """The answers decoys are drawn from: the first gold answer of each question, once each."""
    return list(dict.fromkeys(e.answers[0] for e in examples))


def check_decoys(judge: Any, name: str, examples: Sequence[Any], pool: Sequence[str]) -> None:
    """Refuse a set whose answers cannot give every question the judge's decoys (before any episode runs)."""
    from searchenv.metrics import normalize_answer

    need = getattr(judge, "decoys", None)
    if not isinstance(need, int):
        return
    forms = {normalize_answer(a) for a in pool} - {""}  # as agents.evaluation.judges.decoy_candidates counts them
    for ex in examples:
        have = len(forms - {normalize_answer(str(g)) for g in ex.answers})
        if have < need:
            raise ValueError(f"set {name}: question {ex.id!r} has {have} answer(s) of other questions of the set to "
                             f"offer the judge as decoys, the judge needs {need} (--judge-decoys, at least 2): judge a "
                             "larger set, or run without --judge-url")


class _JudgementLog:
    """Verdicts saved as they are made, keyed by question id and answer (a rerun asks only for new ones).

    The first line names the judge (a hash of :meth:`ChoiceAnswerJudge.describe`); verdicts of
    another judge are set aside. Each record's shape is checked on reading (file, line, field);
    :func:`judge_set` checks what can be recomputed. Failed judgements are never saved.
    """

    def __init__(self, path: Path, judge: Mapping[str, Any]) -> None:
        from searchenv.utils.jsonsafe import loads

        self.path = path
        self.key = hashlib.sha256(json.dumps(dict(judge), sort_keys=True).encode()).hexdigest()[:16]
        self.saved: dict[tuple[str, str], dict[str, Any]] = {}
        self.lines: dict[tuple[str, str], int] = {}
        refuse_link(path)
        if not path.is_file():
            return
        lines = path.read_bytes().splitlines()
        head = loads(lines[0], f"{path}:1") if lines else None
        if not (isinstance(head, dict) and head.get("judge") == self.key):
            return
        for number, line in enumerate(lines[1:], start=2):
            where = f"{path}, line {number}"
            item = loads(line, where)
            if not isinstance(item, dict):
                raise ValueError(f"{where}: expected an object with 'id', 'answer' and 'verdict'")
            for field in ("id", "answer"):
                if not isinstance(item.get(field), str):
                    raise ValueError(f"{where}, field {field!r}: expected a string, got {item.get(field)!r:.60}")
            key = (item["id"], item["answer"])
            self.saved[key] = _checked_verdict(item.get("verdict"), where)
            self.lines[key] = number

    def save(self) -> None:
        lines = [json.dumps({"judge": self.key})]
        lines += [json.dumps({"id": k[0], "answer": k[1], "verdict": v}, ensure_ascii=False)
                  for k, v in self.saved.items()]
        atomic_write_lines(self.path, lines)


def _checked_verdict(verdict: Any, where: str) -> dict[str, Any]:
    """A saved verdict whose fields have their types and whose method agrees with its ``correct``."""
    from agents.evaluation.judges import VERDICT_METHODS

    if not isinstance(verdict, dict):
        raise ValueError(f"{where}, field 'verdict': expected an object, got {verdict!r:.60}")
    method = verdict.get("method")
    if method not in VERDICT_METHODS or method == "failed":
        raise ValueError(f"{where}, field 'verdict.method': expected one of "
                         f"{', '.join(m for m in VERDICT_METHODS if m != 'failed')}, got {method!r:.60}")
    if "correct" not in verdict:
        raise ValueError(f"{where}, field 'verdict.correct': missing")
    if verdict["correct"] is not VERDICT_METHODS[method]:
        raise ValueError(f"{where}, field 'verdict.correct': {verdict['correct']!r:.20} contradicts method "
                         f"{method!r} (which means correct={VERDICT_METHODS[method]})")
    if not isinstance(verdict.get("reason"), str):
        raise ValueError(f"{where}, field 'verdict.reason': expected a string, got {verdict.get('reason')!r:.60}")
    choices = verdict.get("choices", [])
    if not isinstance(choices, list) or not all(c is None or isinstance(c, str) for c in choices):
        raise ValueError(f"{where}, field 'verdict.choices': expected a list of strings or nulls, got {choices!r:.60}")
    asked = method in ("model", "model_wrong", "inconsistent", "unparsed")
    shaped = {"model": lambda c: c[0] is not None and c[0] == c[1], "model_wrong": lambda c: c[0] is not None and
              c[0] == c[1], "inconsistent": lambda c: None not in c and c[0] != c[1], "unparsed": lambda c: None in c}
    if asked and not (len(choices) == 2 and shaped[method](choices)) or not asked and choices:
        raise ValueError(f"{where}, field 'verdict.choices': {choices!r:.80} is not what method {method!r} records")
    return {"correct": verdict["correct"], "reason": verdict["reason"], "method": method, "choices": choices}


def _recheck(verdict: Mapping[str, Any], answer: str | None, golds: Sequence[str], where: str) -> None:
    """Refuse a saved verdict that what can be recomputed from the answer and the gold answers contradicts."""
    from searchenv.metrics import exact_match

    method = verdict["method"]
    expected = "no_answer" if answer is None or not answer.strip() else "exact" if exact_match(answer, golds) else None
    if expected is not None and method != expected or expected is None and method in ("no_answer", "exact"):
        raise ValueError(f"{where}, field 'verdict.method': {method!r} for answer {str(answer)!r:.60}, which is "
                         f"{expected or 'neither empty nor equal to a gold answer'}")
    if method == "model" and verdict["choices"][0] != golds[0]:
        raise ValueError(f"{where}, field 'verdict.choices': {verdict['choices'][0]!r:.60} is not the gold "
                         f"candidate {golds[0]!r:.60} that method 'model' means")


def _key(episode: Any) -> tuple[str, str]:
    return str(episode.example_id), episode.answer or ""


def judge_set(judge: Any, examples: Sequence[Any], episodes: Sequence[Any], path: Path,
              batch: int = 32, pool: Sequence[str] | None = None) -> list[Any]:
    """Judge a set's answers, reusing the verdicts saved in ``path`` by the same judge.

    A saved verdict is checked before it is used: its fields and types, that its ``correct``
    agrees with its method, that an ``exact`` or ``no_answer`` one is what the answer and the gold
    answers give, and that a ``model`` one chose the gold candidate. A judgement that fails (the
    judge model's request failed) is returned as ``failed`` and not saved, so a rerun asks again.

    Args:
        judge: A :class:`agents.evaluation.judges.ChoiceAnswerJudge`.
        examples: The questions of the set.
        episodes: Their finished episodes (as :func:`agents.evaluation.evaluate.evaluate` returns them).
        path: The file of saved verdicts.
        batch: Answers per call to the judge.
        pool: Answers the decoys are drawn from (default: the first gold answer of each of ``examples``).

    Returns:
        One :class:`agents.evaluation.judges.Judgement` per episode.

    Raises:
        ValueError: For a saved verdict that fails a check (naming the file, line and field), or
            an answer with too few decoys in the pool.
    """
    from agents.evaluation.judges import Judgement

    log = _JudgementLog(path, judge.describe())
    pool = list(pool) if pool is not None else judge_pool(examples)
    for e in episodes:
        key = _key(e)
        if key in log.saved:
            _recheck(log.saved[key], e.answer, e.gold, f"{path}, line {log.lines[key]}")
    fresh: dict[tuple[str, str], Any] = {}
    todo = list({_key(e): e for e in episodes
                 if _key(e) not in log.saved}.values())
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        items = [(e.answer, e.gold, [a for a in pool if a not in e.gold]) for e in chunk]
        for e, verdict in zip(chunk, judge.judge(items), strict=True):
            key = _key(e)
            if verdict.method == "failed":
                fresh[key] = verdict
            else:
                log.saved[key] = verdict.to_dict()
        log.save()
    out = []
    for e in episodes:
        key = _key(e)
        if key in fresh:
            out.append(fresh[key])
            continue
        v = log.saved[key]
        out.append(Judgement(v["correct"], v["reason"], v["method"], tuple(v["choices"])))
    return out
