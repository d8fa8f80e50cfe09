"""``searchenv tasks`` and ``searchenv convert``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.corpus import read_corpus
from searchenv.tasks import read_qa_jsonl

runner = CliRunner()

HOTPOT = [
    {
        "_id": "h1",
        "question": "Which city is the capital of Essaly?",
        "answer": "Montabri",
        "type": "bridge",
        "supporting_facts": [["Essaly", 0]],
        "context": [["Essaly", ["Essaly is a country.", " Its capital is Montabri."]], ["Karsk", ["Karsk is a town."]]],
    }
]


def test_tasks_lists_named_tasks_with_sizes() -> None:
    res = runner.invoke(get_app(), ["tasks", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    for name in ("synthetic-1hop", "synthetic-2hop", "synthetic-3hop", "synthetic-mixed"):
        assert rows[name]["passages"] >= 10_000
        assert rows[name]["train"] >= 2000 and rows[name]["dev"] >= 200 and rows[name]["test"] >= 200
    table = runner.invoke(get_app(), ["tasks"], env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert "synthetic-mixed" in table.output and "20,000" in table.output


def test_tasks_build_unknown_name_fails() -> None:
    res = runner.invoke(get_app(), ["tasks", "--build", "no-such-task"])
    assert res.exit_code != 0
    assert "unknown task" in res.output


def test_convert_hotpotqa_writes_flashrag_files(tmp_path: Path) -> None:
    src = tmp_path / "hotpot.json"
    src.write_text(json.dumps(HOTPOT), encoding="utf-8")
    qa, corpus = tmp_path / "out" / "qa.jsonl", tmp_path / "out" / "corpus.jsonl"
    res = runner.invoke(
        get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa), "--out-corpus", str(corpus)]
    )
    assert res.exit_code == 0, res.output
    assert "wrote 1 examples" in res.output and "2 passages" in res.output
    (ex,) = read_qa_jsonl(qa)
    docs = {d.id: d for d in read_corpus(corpus)}
    assert ex.answers == ("Montabri",)
    assert docs[ex.evidence_ids[0]].text == "Essaly is a country. Its capital is Montabri."


def test_convert_malformed_input_exits_with_the_location(tmp_path: Path) -> None:
    bad = [dict(HOTPOT[0]), {**HOTPOT[0], "_id": "h2", "context": "nope"}]
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(bad), encoding="utf-8")
    qa = tmp_path / "qa.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa)])
    assert res.exit_code == 1
    assert "[record 1]" in res.output and "'context'" in res.output
    assert not qa.exists()


def test_convert_blames_the_input_file_not_out_corpus(tmp_path: Path) -> None:
    src = tmp_path / "hotpot.jsonl"
    src.write_bytes(json.dumps(HOTPOT[0]).encode() + b'\n{"_id": "h2", "question": "Why \xff?"}\n')
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    args = ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa), "--out-corpus", str(corpus)]
    res = runner.invoke(get_app(), args)
    assert res.exit_code == 1, res.output
    assert f"{src}:2: not valid UTF-8" in res.output and "--out-corpus" not in res.output
    assert not qa.exists() and not corpus.exists()


def test_convert_empty_input_is_an_error_and_keeps_the_old_output(tmp_path: Path) -> None:
    src = tmp_path / "empty.json"
    src.write_text("", encoding="utf-8")
    qa = tmp_path / "qa.jsonl"
    qa.write_text("previous\n", encoding="utf-8")
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa)])
    assert res.exit_code == 1, res.output
    assert f"{src}: no records" in res.output
    assert qa.read_text(encoding="utf-8") == "previous\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "squad"], "unknown format"),
        (["--format", "flashrag", "--out-corpus", "c.jsonl"], "no context paragraphs"),
        (["--format", "musique", "--out-corpus", "o.jsonl"], "same file"),
    ],
)
def test_convert_bad_options(tmp_path: Path, args: list[str], needle: str) -> None:
    src = tmp_path / "qa.jsonl"
    src.write_text(json.dumps({"id": "q", "question": "Who?", "golden_answers": ["me"]}) + "\n", encoding="utf-8")
    args = [str(tmp_path / a) if a.endswith(".jsonl") else a for a in args]
    res = runner.invoke(get_app(), ["convert", str(src), "--out-qa", str(tmp_path / "o.jsonl"), *args])
    assert res.exit_code != 0
    assert needle in res.output


def test_convert_numbers_records_without_ids_and_says_so(tmp_path: Path) -> None:
    src = tmp_path / "hotpot.jsonl"
    src.write_text(json.dumps({k: v for k, v in HOTPOT[0].items() if k != "_id"}) + "\n", encoding="utf-8")
    qa = tmp_path / "qa.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa)])
    assert res.exit_code == 0, res.output
    assert "1 record has no id" in res.stderr and "hotpotqa-q0" in res.stderr
    assert [e.id for e in read_qa_jsonl(qa)] == ["hotpotqa-q0"]


def test_convert_question_only_file_and_no_corpus_for_it(tmp_path: Path) -> None:
    src = tmp_path / "musique_500.jsonl"
    src.write_text(json.dumps({"idx": 7, "question": "Who wrote X?", "answer": "Ann Lee"}) + "\n", encoding="utf-8")
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "qa", "--out-qa", str(qa)])
    assert res.exit_code == 0, res.output
    (ex,) = read_qa_jsonl(qa)
    assert (ex.id, ex.answers, ex.evidence_ids) == ("7", ("Ann Lee",), ())
    res = runner.invoke(
        get_app(), ["convert", str(src), "--format", "qa", "--out-qa", str(qa), "--out-corpus", str(corpus)]
    )
    assert res.exit_code == 2 and "corpus of your choice" in res.output and not corpus.exists()
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "musique", "--out-qa", str(qa)])
    assert res.exit_code == 1 and "looks like format 'qa'" in res.output


def test_convert_flashrag_json_array_with_multihop_metadata_writes_its_corpus(tmp_path: Path) -> None:
    rec = HOTPOT[0]
    flashrag = {
        "id": rec["_id"],
        "question": rec["question"],
        "golden_answers": [rec["answer"]],
        "metadata": {
            "type": rec["type"],
            "supporting_facts": {"title": [f[0] for f in rec["supporting_facts"]], "sent_id": [0]},
            "context": {"title": [c[0] for c in rec["context"]], "sentences": [c[1] for c in rec["context"]]},
        },
    }
    src = tmp_path / "dev.json"
    src.write_text(json.dumps([flashrag]), encoding="utf-8")
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    args = ["convert", str(src), "--format", "flashrag", "--out-qa", str(qa), "--out-corpus", str(corpus)]
    res = runner.invoke(get_app(), args)
    assert res.exit_code == 0, res.output
    (ex,) = read_qa_jsonl(qa)
    docs = {d.id: d for d in read_corpus(corpus)}
    assert docs[ex.evidence_ids[0]].text == "Essaly is a country. Its capital is Montabri."
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "musique", "--out-qa", str(qa)])
    assert res.exit_code == 1 and "looks like format 'flashrag', not 'musique'" in res.output
