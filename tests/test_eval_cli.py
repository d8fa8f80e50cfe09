"""`searchenv eval`: prints the comparison table and writes JSON + JSONL transcripts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.tasks import write_qa_jsonl
from tests.conftest import EXAMPLES


def _qa_file(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    write_qa_jsonl(path, EXAMPLES)
    return path


def test_eval_prints_table_and_writes_results(tmp_path: Path, corpus_file: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "--agent", "oracle", "--agent", "random", "--task", str(_qa_file(tmp_path))]
    args += ["--corpus", str(corpus_file), "--retriever", "bm25", "--n", "3", "--out", str(out), "--seed", "2"]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 0, result.output
    assert "oracle" in result.output and "random" in result.output and "EM" in result.output
    data = json.loads((out / "results.json").read_text())
    rows = {r["agent"]: r for r in data["rows"]}
    assert set(rows) == {"oracle", "random"}
    assert rows["oracle"]["em"] == 1.0 and rows["oracle"]["n"] == 3
    assert rows["random"]["config"]["seed"] == 2
    for row in rows.values():
        lines = (out / row["transcripts"]).read_text().splitlines()
        assert [json.loads(x)["example_id"] for x in lines] == ["q0", "q1", "q2"]
    assert (out / "results.md").read_text().startswith("| Agent |")


def test_eval_rejects_unknown_agent(tmp_path: Path, corpus_file: Path) -> None:
    args = ["eval", "--agent", "nope", "--task", str(_qa_file(tmp_path)), "--corpus", str(corpus_file)]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code != 0
    assert "unknown agent" in result.output


def test_eval_reports_a_bad_task_without_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(get_app(), ["eval", "--agent", "oracle", "--task", "no-such-task"])
    assert result.exit_code == 2
    assert "unknown task" in result.output


def test_eval_with_an_llm_agent_from_a_model_folder(tmp_path: Path, corpus_file: Path) -> None:
    pytest.importorskip("transformers")
    from tests.tiny_model import tiny_model_folder

    folder = tiny_model_folder(tmp_path / "tiny")
    out = tmp_path / "run"
    args = ["eval", "--agent", "rag", "--agent", "oracle", "--task", str(_qa_file(tmp_path))]
    args += ["--corpus", str(corpus_file), "--n", "2", "--model", str(folder), "--max-new-tokens", "6"]
    result = CliRunner().invoke(get_app(), [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["agent"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert rows["rag"]["gen_tokens"] > 0 and rows["rag"]["searches"] == 1.0
    assert rows["oracle"]["em"] == 1.0


def test_eval_first_steps_get_clear_errors(tmp_path: Path, corpus_file: Path) -> None:
    from searchenv.corpus import read_corpus, write_corpus
    from searchenv.retrievers.bm25 import BM25Retriever

    qa = _qa_file(tmp_path)
    run = CliRunner().invoke
    # A stale index: one error line with the rebuild command, no traceback.
    BM25Retriever.build(read_corpus(corpus_file), tmp_path / "idx")
    changed = tmp_path / "changed.jsonl"
    write_corpus(changed, read_corpus(corpus_file)[:-1])
    res = run(get_app(), ["eval", "-a", "oracle", "--task", str(qa), "--retriever", str(tmp_path / "idx"),
                          "--corpus", str(changed), "--n", "1"])
    assert res.exit_code == 2 and "stale" in res.output and "searchenv index --corpus" in res.output
    assert "Traceback" not in res.output
    # A file in another public layout: the error suggests searchenv convert.
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"_id": "a", "question": "q?", "answer": "x", "context": []}]))
    res = run(get_app(), ["eval", "-a", "oracle", "--task", str(hotpot), "--corpus", str(corpus_file), "--n", "1"])
    assert res.exit_code == 2 and "searchenv convert" in res.output
    # A QA file with a named retriever and no corpus: the CLI flag is named, not the Python keyword.
    res = run(get_app(), ["eval", "-a", "oracle", "--task", str(qa), "--n", "1"])
    assert res.exit_code == 2 and "--corpus" in res.output and "corpus=PATH" not in res.output
    # --split does not apply to a QA file: refused instead of ignored.
    res = run(get_app(), ["eval", "-a", "oracle", "--task", str(qa), "--corpus", str(corpus_file), "--split", "test"])
    assert res.exit_code == 2 and "--split" in res.output


@pytest.mark.parametrize("link", ["transcripts", "checkpoints", "results.json", "results.md",
                                  "transcripts/heuristic__bm25.jsonl", "checkpoints/heuristic__bm25.jsonl"])
def test_eval_writes_nothing_through_a_link_under_out(tmp_path: Path, corpus_file: Path, link: str) -> None:
    out, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    target = outside if "." not in link else outside / "victim.txt"
    if target != outside:
        target.write_text("keep me\n")
    (out / link).parent.mkdir(parents=True, exist_ok=True)
    (out / link).symlink_to(target, target_is_directory=target.is_dir())
    args = ["eval", "--agent", "heuristic", "--task", str(_qa_file(tmp_path)), "--corpus", str(corpus_file),
            "--retriever", "bm25", "--n", "2", "--out", str(out)]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 2, result.output
    assert f"{out / link} is a symbolic link" in " ".join(result.output.split()), result.output
    assert sorted(p.name for p in outside.iterdir()) == ([] if target == outside else ["victim.txt"])
    assert target == outside or target.read_text() == "keep me\n"
    assert not (out / "results.json").is_file() or (out / "results.json").is_symlink()


def test_an_index_folder_named_like_a_kind_is_the_folder_with_a_warning(
        tmp_path: Path, corpus_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--retriever bm25`` where ./bm25 is the user's index: opened (not refused as a kind without a corpus)."""
    from searchenv.corpus import read_corpus
    from searchenv.retrievers.bm25 import BM25Retriever

    BM25Retriever.build(read_corpus(corpus_file), tmp_path / "bm25")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(get_app(), ["eval", "-a", "oracle", "--task", str(_qa_file(tmp_path)),
                                         "--retriever", "bm25", "--n", "2", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "names both an index kind and the index folder" in res.output and "./bm25" in res.output
    rows = json.loads((tmp_path / "o" / "results.json").read_text())["rows"]
    assert rows[0]["em"] == 1.0


def test_eval_takes_your_own_agent_as_module_class(
        tmp_path: Path, corpus_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agent.py").write_text(
        "from agents.baselines import Turn\n\n\n"
        "class TopTitle:\n"
        "    name = 'top-title'\n"
        "    max_turns = 2\n\n"
        "    def adapt_protocol(self, protocol):\n"
        "        return protocol\n\n"
        "    def act(self, episodes, *, seed):\n"
        "        return [Turn(f'<answer> {ep.retrieved_hits()[0].title} </answer>' if ep.retrieved_hits()\n"
        "                     else f'<search> {ep.example.question} </search>') for ep in episodes]\n\n\n"
        "NOT_AN_AGENT = 3\n")
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--task", str(_qa_file(tmp_path)), "--corpus", str(corpus_file), "--n", "2"]
    res = CliRunner().invoke(get_app(), [*args, "--agent", "my_agent:TopTitle", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((tmp_path / "o" / "results.json").read_text())["rows"]
    assert row["agent"] == "top-title" and row["n"] == 2 and row["searches"] == 1.0
    res = CliRunner().invoke(get_app(), [*args, "--agent", "my_agent:NOT_AN_AGENT"])
    assert res.exit_code == 2 and "is a int, not a class or factory" in res.output
    res = CliRunner().invoke(get_app(), [*args, "--agent", "no_such_module:X"])
    assert res.exit_code == 2 and "cannot import module 'no_such_module'" in res.output


def test_an_unknown_generation_dtype_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(get_app(), ["eval", "--agent", "searcher", "--generation-dtype", "half", "--n", "1"])
    said = re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)  # rich's boxes and wrapping taken out
    assert result.exit_code == 2
    assert "--generation-dtype" in said and "auto, float32, bfloat16" in said


def test_an_unknown_decode_loop_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(get_app(), ["eval", "--agent", "llm", "--decode", "fast", "--n", "1"])
    said = re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)
    assert result.exit_code == 2
    assert "--decode" in said and "auto, static or dynamic" in said


def test_eval_tells_an_in_process_model_its_decode_loop_and_keeps_32_in_flight_off_cuda(
    qa_file: Path, corpus_file: Path
) -> None:
    from agents.evaluation.evaluate import evaluate
    from tests.tiny_model import tiny_policy

    policy = tiny_policy(seed=0)
    path = policy.generation_path()
    assert (path.decode, path.fixed_shape_step) == ("dynamic", False)  # the CPU's own choice
    result = evaluate("llm", task=qa_file, corpus=corpus_file, policy=policy, n=2, max_turns=1, max_new_tokens=3,
                      decode="static", cuda_graph=True)
    path = policy.generation_path()
    assert (path.decode, path.fixed_shape_step, path.dtype) == ("static", True, None)
    assert result.config["batch_size"] == 32  # unset: the host's number
    with pytest.raises(ValueError, match="decode must be auto, static or dynamic"):
        evaluate("llm", task=qa_file, corpus=corpus_file, policy=policy, n=1, decode="fast")


def test_the_flags_that_turn_off_each_part_of_the_cuda_path_are_accepted(tmp_path: Path, corpus_file: Path) -> None:
    """docs/guides/gpu.md's `--decode dynamic --no-cuda-graph --generation-dtype float32`, and --batch-size unset."""
    out = tmp_path / "run"
    args = ["eval", "--agent", "heuristic", "--task", str(_qa_file(tmp_path)), "--corpus", str(corpus_file),
            "--n", "2", "--out", str(out), "--decode", "dynamic", "--no-cuda-graph", "--generation-dtype", "float32"]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 0, result.output
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["config"]["batch_size"] == 32 and row["n"] == 2


def test_a_question_too_long_is_refused_naming_file_line_example_and_field(tmp_path: Path, corpus_file: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    big = EXAMPLES[1].to_flashrag() | {"question": "x" * (10 * 1024 * 1024)}
    qa.write_text("\n".join(json.dumps(r) for r in (EXAMPLES[0].to_flashrag(), big)) + "\n")
    args = ["eval", "--agent", "oracle", "--task", str(qa), "--corpus", str(corpus_file), "--retriever", "bm25",
            "--n", "2", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(get_app(), args)
    message = " ".join(result.output.split())
    assert result.exit_code == 2
    assert (f"error: {qa}:2: example '{EXAMPLES[1].id}': field 'question' has 10485760 characters, over "
            "max_question_chars=2000") in message, result.output
