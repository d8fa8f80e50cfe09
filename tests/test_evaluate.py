"""Evaluation tables: aggregation on constructed episodes, runs on the tiny world, written files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.baselines import EpisodeResult
from agents.evaluation.evaluate import (
    COLUMNS,
    EvalResult,
    compare,
    evaluate,
    markdown_table,
    rich_table,
    summarize,
    write_results,
)
from searchenv.retrievers import retriever_for_corpus
from tests.conftest import EXAMPLES


def _episode(i: int, **metrics: Any) -> EpisodeResult:
    base = {
        "em": 0.0,
        "f1": 0.0,
        "contains": 0.0,
        "evidence_recall": None,
        "searches": 0,
        "queries": 0,
        "turns": 1,
        "invalid_turns": 0,
        "answered": True,
        "return": 0.0,
        "generated_tokens": 0,
        "infra_errors": 0,
    }
    base.update(metrics)
    return EpisodeResult(f"e{i}", f"question {i}?", ["gold"], "x", [], [], base)


def test_summarize_means_on_constructed_episodes() -> None:
    eps = [
        _episode(0, em=1.0, f1=1.0, contains=1.0, evidence_recall=1.0, searches=2, turns=3, generated_tokens=30),
        _episode(1, em=0.0, f1=0.5, contains=1.0, evidence_recall=0.5, searches=1, turns=2, generated_tokens=10),
        _episode(2, em=0.0, f1=0.0, contains=0.0, evidence_recall=None, searches=0, turns=4, answered=False,
                 invalid_turns=4, generated_tokens=20, **{"return": -1.0}),
        _episode(3, em=1.0, f1=1.0, contains=1.0, evidence_recall=0.0, searches=3, turns=4, generated_tokens=0),
    ]
    row = summarize(eps, seconds=2.0)
    assert row["n"] == 4
    assert row["em"] == pytest.approx(0.5)
    assert row["f1"] == pytest.approx(2.5 / 4)
    assert row["contains"] == pytest.approx(0.75)
    assert row["evidence_recall"] == pytest.approx(1.5 / 3)  # the episode without gold evidence is skipped
    assert row["searches"] == pytest.approx(1.5)
    assert row["turns"] == pytest.approx(13 / 4)
    assert row["invalid_turns"] == pytest.approx(1.0)
    assert row["answered"] == pytest.approx(0.75)
    assert row["return"] == pytest.approx(-0.25)
    assert row["gen_tokens"] == pytest.approx(15.0)
    assert row["sec_per_q"] == pytest.approx(0.5)
    assert {k for k, _, _ in COLUMNS} <= set(row)


def test_summarize_without_any_gold_evidence_and_bad_input() -> None:
    assert summarize([_episode(0)], 1.0)["evidence_recall"] is None
    with pytest.raises(ValueError, match="episodes"):
        summarize([], 1.0)
    with pytest.raises(ValueError, match="seconds"):
        summarize([_episode(0)], -1.0)


def test_evaluate_oracle_on_tiny_world(corpus_file: Path) -> None:
    result = evaluate("oracle", task=EXAMPLES, corpus=corpus_file, retriever="bm25")
    assert result.agent == "oracle" and result.retriever == "bm25"
    assert result.row["n"] == len(EXAMPLES) == len(result.episodes)
    assert result.row["em"] == 1.0 and result.row["evidence_recall"] == 1.0
    # q0 needs 3 searches, the others 1
    assert result.row["searches"] == pytest.approx(6 / 4)
    assert result.row["turns"] == pytest.approx(10 / 4)
    assert result.row["gen_tokens"] == 0.0
    assert result.config["top_k"] == 3 and result.config["n"] == 4


def test_evaluate_takes_the_first_n_questions(corpus_file: Path) -> None:
    result = evaluate("random", task=EXAMPLES, corpus=corpus_file, n=2, seed=5)
    assert [e.example_id for e in result.episodes] == ["q0", "q1"]
    with pytest.raises(ValueError, match="n must be"):
        evaluate("random", task=EXAMPLES, corpus=corpus_file, n=0)


def test_evaluate_with_a_retriever_instance_and_row_matches_episodes(corpus_file: Path) -> None:
    retriever = retriever_for_corpus("bm25", corpus_file)
    result = evaluate("random", task=EXAMPLES, retriever=retriever, max_turns=2, seed=1)
    assert result.retriever == type(retriever).__name__
    assert all(e.metrics["turns"] <= 2 for e in result.episodes)
    assert result.row["em"] == pytest.approx(sum(e.metrics["em"] for e in result.episodes) / 4)


def test_compare_orders_rows_and_writes_files(corpus_file: Path, tmp_path: Path) -> None:
    seen: list[str] = []
    results = compare(
        ["oracle", "random"],
        ["bm25"],
        task=EXAMPLES,
        corpus=corpus_file,
        on_result=lambda r: seen.append(r.agent),
    )
    assert [r.agent for r in results] == ["oracle", "random"] == seen
    paths = write_results(results, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert [row["agent"] for row in data["rows"]] == ["oracle", "random"]
    assert data["rows"][0]["em"] == 1.0 and data["rows"][0]["n"] == 4
    lines = (tmp_path / "out" / data["rows"][0]["transcripts"]).read_text().splitlines()
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert first["example_id"] == "q0" and first["gold"] == ["Essaly"] and first["answer"] == "Essaly"
    assert first["messages"][0]["role"] == "system" and first["messages"][-1]["role"] == "assistant"
    assert len(first["steps"]) == 4 and all("reward_terms" in s for s in first["steps"])
    assert first["metrics"]["em"] == 1.0
    md = paths["md"].read_text()
    assert md.count("\n") == 4 and "| oracle | bm25 | 4 | 1.000 |" in md


def test_tables_render_missing_values_as_dash() -> None:
    row = summarize([_episode(0, em=1.0)], 0.1)
    result = EvalResult("a", "bm25", "t", "dev", row, [], 0.1)
    assert "| a | bm25 | 1 | 1.000 |" in markdown_table([result])
    assert " - |" in markdown_table([result])  # evidence recall unknown
    assert rich_table([result]).row_count == 1


def test_compare_needs_agents_and_retrievers(corpus_file: Path) -> None:
    with pytest.raises(ValueError, match="agents"):
        compare([], ["bm25"], task=EXAMPLES, corpus=corpus_file)
    with pytest.raises(ValueError, match="retrievers"):
        compare(["oracle"], [], task=EXAMPLES, corpus=corpus_file)
