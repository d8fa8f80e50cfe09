from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app

runner = CliRunner()


def test_index_then_search_json(tmp_path, corpus_file) -> None:
    app = get_app()
    out = tmp_path / "idx"
    res = runner.invoke(
        app, ["index", "--corpus", str(corpus_file), "--retriever", "bm25", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "indexed 8 documents" in res.output
    res = runner.invoke(
        app, ["search", "--index", str(out), "--k", "2", "--json", "Karsk town", "Essaly capital"]
    )
    assert res.exit_code == 0, res.output
    hits = json.loads(res.output)
    assert len(hits) == 2 and all(len(h) <= 2 for h in hits)
    assert set(hits[0][0]) == {"id", "title", "text", "score"}
    assert hits[0][0]["id"] == "d4"
    res = runner.invoke(app, ["search", "--index", str(out), "Karsk"])
    assert res.exit_code == 0 and "Karsk" in res.output


def test_index_errors_name_the_problem(tmp_path) -> None:
    app = get_app()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "contents": "x"}\n{"id": 3.5}\n', encoding="utf-8")
    res = runner.invoke(app, ["index", "--corpus", str(bad), "--out", str(tmp_path / "i")])
    assert res.exit_code == 2 and "bad.jsonl:2" in res.output
    res = runner.invoke(app, ["search", "--index", str(tmp_path), "q"])
    assert res.exit_code == 2 and "not a searchenv index" in res.output


def test_play_an_episode_by_hand(tmp_path, corpus_file) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps({"id": "q", "question": "Where was Tobin Quenn born?", "golden_answers": ["Karsk"]})
        + "\n",
        encoding="utf-8",
    )
    app = get_app()
    res = runner.invoke(
        app,
        ["play", "--task", str(qa), "--corpus", str(corpus_file)],
        input="<search>Tobin Quenn</search>\n<think>it says Karsk</think>\\n<answer>Karsk</answer>\n",
    )
    assert res.exit_code == 0, res.output
    assert "Doc 1(Title: Tobin Quenn)" in res.output
    assert "answer='Karsk'" in res.output and "em=1.0" in res.output


@pytest.mark.parametrize("argv", [["--help"], ["tasks"], ["train", "--help"],
                                  ["eval", "--agent", "heuristic", "--agent", "oracle", "--task", "synthetic-2hop",
                                   "--n", "3"]])
def test_commands_that_need_no_model_do_not_import_torch(argv: list[str]) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        f"sys.argv = ['searchenv', *{argv!r}]\n"
        "from searchenv.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH", out.stdout[-500:]


def test_an_episode_of_the_environment_does_not_import_torch() -> None:
    """The core install (`pip install -e .`, no torch) runs the environment: the README says so."""
    import subprocess
    import sys

    code = ("import sys, gymnasium as gym, searchenv\n"
            "env = gym.make('SearchQA-v0', task='synthetic-2hop')\n"
            "env.reset(seed=0); env.step('<search> x </search>'); env.step('<answer> x </answer>')\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH", out.stdout[-500:]


def test_train_help_still_lists_the_config_fields() -> None:
    result = CliRunner().invoke(get_app(), ["train", "grpo", "--help"])
    assert result.exit_code == 0
    assert "group_size (default 4)" in result.output


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_index_of_an_empty_corpus_names_the_file(tmp_path, text: str) -> None:
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text(text)
    res = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--out", str(tmp_path / "idx")])
    assert res.exit_code == 2
    assert f"error: {corpus}: cannot build an index over an empty corpus" in " ".join(res.output.split()), res.output
    assert not (tmp_path / "idx").exists()


def test_convert_names_the_line_and_field_of_json_nested_too_deeply(tmp_path) -> None:
    """One JSON document over several lines (an array in a .jsonl file): the line and the field, not just the file."""
    deep = "[" * 5000 + "]" * 5000
    src = tmp_path / "X.jsonl"
    src.write_text('[{"id": "q1", "question": "Who?", "golden_answers": ["A"]},\n'
                   '{"id": "q2", "question": "Who?", "golden_answers": ["A"], "metadata": {"extra": ' + deep + "}}]\n")
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "flashrag", "--out-qa", str(tmp_path / "o")])
    message = " ".join(res.output.split())
    assert res.exit_code != 0 and f"{src}: JSON nested too deeply" in message, res.output
    assert "line 2 column" in message and "in field '[1].metadata.extra[0][0]" in message, res.output
    lines = tmp_path / "Y.jsonl"
    lines.write_text('{"id": "q1", "question": "Who?", "golden_answers": ["A"]}\n{"id": "q2", "extra": ' + deep + "}\n")
    res = runner.invoke(get_app(), ["convert", str(lines), "--format", "flashrag", "--out-qa", str(tmp_path / "o")])
    message = " ".join(res.output.split())
    assert f"{lines}:2: JSON nested too deeply" in message and "in field 'extra[0]" in message, res.output
