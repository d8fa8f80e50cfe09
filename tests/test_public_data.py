"""A new user's first hour with files in a public layout (issue 34, items 4-9).

The fixtures are HotpotQA's distractor layout as published (a JSON array of records with
``_id``, ``question``, ``answer``, ``type``, ``level``, ``supporting_facts`` as ``[title,
sentence index]`` pairs and ``context`` as ``[title, [sentences]]`` pairs), two supporting
titles per question, in two files: a dev file and a train file with other questions and
paragraphs, as a user downloads them.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.corpus import DataWarning, corpus_fingerprint, read_corpus
from searchenv.tasks.base import read_qa_jsonl

runner = CliRunner()


def _record(qid: str, question: str, answer: str, qtype: str, gold: list[tuple[str, list[str]]],
            distractors: list[tuple[str, list[str]]]) -> dict[str, object]:
    return {
        "_id": qid,
        "question": question,
        "answer": answer,
        "type": qtype,
        "level": "medium",
        "supporting_facts": [[title, len(sents) - 1] for title, sents in gold],
        "context": [[title, sents] for title, sents in [gold[0], *distractors[:1], gold[1], *distractors[1:]]],
    }


HOTPOT_DEV = [
    _record(
        "5ab3b0bf5542992ade7c6e39", "Which city hosts the observatory founded by the astronomer Irena Valko?",
        "Kestrel Bay", "bridge",
        [("Irena Valko", ["Irena Valko was an astronomer.", " She founded the Larkspur Observatory in 1931."]),
         ("Larkspur Observatory", ["The Larkspur Observatory is a research station.",
                                   " It stands on a hill above Kestrel Bay."])],
        [("Kestrel (bird)", ["A kestrel is a small falcon."]),
         ("Irena Valko Prize", ["The Irena Valko Prize is an award given by an astronomy society."])],
    ),
    _record(
        "5a8c7595554299585d9e36b6", "Which river is longer, the Ostrava Water or the Delmore?", "Delmore",
        "comparison",
        [("Ostrava Water", ["The Ostrava Water is a river.", " It is 210 kilometres long."]),
         ("Delmore", ["The Delmore is a river in the north.", " It is 640 kilometres long."])],
        [("Delmore Bridge", ["Delmore Bridge crosses a river near a mill."]),
         ("Ostrava Water Company", ["The Ostrava Water Company supplies water to a river town."])],
    ),
    _record(
        "5ae0185b55429942ec259c1b", "What instrument did the teacher of the composer Anselm Rook play?",
        "viola", "bridge",
        [("Anselm Rook", ["Anselm Rook was a composer.", " He studied with Petra Linde."]),
         ("Petra Linde", ["Petra Linde was a teacher and musician.", " She played the viola."])],
        [("Rook (chess)", ["The rook is a chess piece."]),
         ("Anselm Rook Quartet", ["The Anselm Rook Quartet is a group of composer fans who play."])],
    ),
]

HOTPOT_TRAIN = [
    _record(
        "5a7a06935542990198eaf050", "Which magazine was started first, the Arden Review or the Vell Gazette?",
        "Arden Review", "comparison",
        [("Arden Review", ["The Arden Review is a literary magazine.", " It was started in 1844."]),
         ("Vell Gazette", ["The Vell Gazette is a magazine for gardeners.", " It was started in 1989."])],
        [("Arden (forest)", ["Arden is a forest."]), ("Gazette", ["A gazette is a newspaper."])],
    ),
    _record(
        "5a879ab05542996e4f30887e", "In which country was the painter of Blue Harbour born?", "Norland", "bridge",
        [("Blue Harbour", ["Blue Harbour is a painting.", " It was painted by Oskar Wend."]),
         ("Oskar Wend", ["Oskar Wend was a painter.", " He was born in Norland."])],
        [("Harbour", ["A harbour is a sheltered body of water."]), ("Wend people", ["The Wends are a people."])],
    ),
]


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def _convert(tmp_path: Path, name: str, records: list[dict[str, object]]) -> tuple[Path, Path]:
    src = _write(tmp_path / f"{name}.json", records)
    qa, corpus = tmp_path / name / "qa.jsonl", tmp_path / name / "corpus.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa),
                                    "--out-corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    return qa, corpus


def _index(corpus: Path, out: Path) -> Path:
    res = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--retriever", "bm25", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


# ------------------------------------------------------------------ 8. errors that mislead
def test_play_with_a_qa_file_and_no_corpus_names_the_flag(tmp_path: Path) -> None:
    qa, _ = _convert(tmp_path, "dev", HOTPOT_DEV)
    res = runner.invoke(get_app(), ["play", "--task", str(qa)], input="")
    assert res.exit_code == 2, res.output
    assert "--corpus" in res.output and "--retriever" in res.output
    assert "corpus=PATH" not in res.output and not isinstance(res.exception, ValueError)


@pytest.mark.parametrize(("command", "code"), [(["eval", "--agent", "oracle"], 2), (["play"], 2),
                                             (["rows", "--out", "rows.parquet"], 1)])
def test_a_mistyped_task_file_says_file_not_found(tmp_path: Path, command: list[str], code: int) -> None:
    typo = tmp_path / "my" / "qa.jsnl"
    res = runner.invoke(get_app(), [*command, "--task", str(typo)], input="")
    assert res.exit_code == code, res.output
    assert "not found" in res.output and str(typo) in res.output
    assert "unknown task" not in res.output


def test_eval_retrieval_with_a_missing_qa_file_names_the_flag(tmp_path: Path) -> None:
    _, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    index = _index(corpus, tmp_path / "idx")
    res = runner.invoke(get_app(), ["eval-retrieval", "--index", str(index), "--qa", str(tmp_path / "missing")])
    assert res.exit_code == 2, res.output
    assert "--qa" in res.output and "Errno" not in res.output


def test_format_2wiki_refuses_a_hotpotqa_file_and_says_what_it_looks_like(tmp_path: Path) -> None:
    src = _write(tmp_path / "hotpot_dev_distractor_v1.json", HOTPOT_DEV)
    qa = tmp_path / "qa.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "2wiki", "--out-qa", str(qa)])
    assert res.exit_code == 1, res.output
    assert "[record 0]" in res.output and "'evidences'" in res.output
    assert "looks like format 'hotpotqa', not '2wiki'" in res.output
    assert not qa.exists()


# ------------------------------------------------------------------ 9. doc drift
def test_play_help_lists_every_protocol() -> None:
    from searchenv.protocols import protocol_names

    res = runner.invoke(get_app(), ["play", "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    for name in protocol_names():
        assert name in res.output, name


def test_results_json_says_split_file_for_a_file_task(tmp_path: Path) -> None:
    qa, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    out = tmp_path / "run"
    res = runner.invoke(get_app(), ["eval", "--agent", "heuristic", "--task", str(qa), "--corpus", str(corpus),
                                    "--n", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["split"] == "file"
