from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.retrieval_quality import evaluate_retrieval
from searchenv.retrievers.base import Hit
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import QAExample, write_qa_jsonl

from .conftest import DOCS, EXAMPLES

TEXT = {d.id: d for d in DOCS}


class ScriptedRetriever:
    """Returns a fixed ranking per question."""

    def __init__(self, rankings: dict[str, list[str]]) -> None:
        self.rankings = rankings
        self.calls: list[int] = []

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append(k)
        return [[Hit(i, TEXT[i].title, TEXT[i].text, 1.0) for i in self.rankings[q][:k]] for q in queries]


def test_metrics_match_hand_computation() -> None:
    q0, q1, q2, q3 = EXAMPLES  # evidence: (d5, d0, d1), (d3,), (d2,), (d0, d3)
    r = ScriptedRetriever({
        q0.question: ["d5", "d7", "d0", "d1"],  # recall@1 1/3, @2 1/3, @4 3/3; answer "Essaly" in d1 (rank 4)
        q1.question: ["d4", "d3"],              # recall@1 0, @2 1; "Karsk" in d4 (rank 1)
        q2.question: ["d6", "d2"],              # recall@1 0, @2 1; "Montabri" in d6 (rank 1)
        q3.question: ["d0", "d3"],              # recall@1 1/2, @2 1; "Velora Quenn" in d0 (rank 1)
    })
    result = evaluate_retrieval(r, EXAMPLES, [4, 1, 2, 2], name="scripted", batch_size=3)
    assert r.calls == [4, 4]  # one search per batch at the largest cut-off
    assert result.num_examples == 4 and result.num_with_evidence == 4
    assert result.recall[1] == pytest.approx((1 / 3 + 0 + 0 + 1 / 2) / 4)
    assert result.recall[2] == pytest.approx((1 / 3 + 1 + 1 + 1) / 4)
    assert result.recall[4] == pytest.approx(1.0)
    assert result.all_evidence == {1: 0.0, 2: 0.75, 4: 1.0}
    assert result.answer_in_docs == {1: 0.75, 2: 0.75, 4: 1.0}
    d = result.to_dict()
    assert d["name"] == "scripted" and d["recall@4"] == 1.0 and d["answer_in_docs@1"] == 0.75


def test_questions_without_evidence_count_only_for_answers() -> None:
    ex = [QAExample("x", "What is in Vuldoria?", ("copper",)), EXAMPLES[1]]
    r = ScriptedRetriever({ex[0].question: ["d7"], ex[1].question: ["d3"]})
    result = evaluate_retrieval(r, ex, [1])
    assert result.num_with_evidence == 1
    assert result.recall[1] == 1.0
    assert result.answer_in_docs[1] == 1.0
    empty = evaluate_retrieval(r, [], [1, 3])
    assert empty.recall == {1: None, 3: None} and empty.answer_in_docs == {1: 0.0, 3: 0.0}
    # Questions without evidence: recall is not 0, it is not applicable.
    no_evidence = evaluate_retrieval(r, ex[:1], [1])
    assert no_evidence.recall == {1: None} and no_evidence.all_evidence == {1: None}
    assert no_evidence.to_dict()["recall@1"] is None
    with pytest.raises(ValueError, match="cut-off"):
        evaluate_retrieval(r, ex, [])
    with pytest.raises(ValueError, match="k must"):
        evaluate_retrieval(r, ex, [0, 1])


def test_eval_retrieval_says_n_a_without_evidence(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    BM25Retriever.build(DOCS, tmp_path / "idx")
    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, [QAExample("x", "What is in Vuldoria?", ("copper",))])
    argv = ["eval-retrieval", "--index", str(tmp_path / "idx"), "--qa", str(qa), "--k", "1"]
    res = CliRunner().invoke(get_app(), argv)
    assert res.exit_code == 0, res.output
    assert "n/a" in res.output and "0.000" not in res.output.split("answer-in-docs")[0]


def test_eval_retrieval_command(tmp_path: Path) -> None:
    from searchenv.cli import get_app

    a, b = tmp_path / "bm25-a", tmp_path / "bm25-b"
    idx_a = BM25Retriever.build(DOCS, a)
    BM25Retriever.build(DOCS, b, k1=1.5, b=0.75)
    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    out = tmp_path / "out" / "quality.json"
    result = CliRunner().invoke(
        get_app(), ["eval-retrieval", "--index", str(a), str(b), "--qa", str(qa), "--k", "1", "5", "3",
                    "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "recall" in result.output and "answer-in-docs" in result.output and "@5" in result.output
    payload = json.loads(out.read_text())
    assert payload["k"] == [1, 3, 5] and [r["name"] for r in payload["results"]] == [str(a), str(b)]
    expected = evaluate_retrieval(idx_a, EXAMPLES, [1, 3, 5], name=str(a)).to_dict()
    assert payload["results"][0] == expected
    # The same flags as `searchenv eval`: a repeated --retriever and --n.
    same = CliRunner().invoke(
        get_app(), ["eval-retrieval", "-r", str(a), "--retriever", str(b), "--qa", str(qa), "--k", "1", "--n", "2",
                    "--json", str(out)]
    )
    assert same.exit_code == 0, same.output
    payload = json.loads(out.read_text())
    assert [r["name"] for r in payload["results"]] == [str(a), str(b)]
    assert payload["results"][0]["num_examples"] == 2


def test_eval_retrieval_command_errors(tmp_path: Path) -> None:
    from searchenv.cli import get_app

    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    runner = CliRunner()
    missing = runner.invoke(get_app(), ["eval-retrieval", "--index", str(tmp_path / "no"), "--qa", str(qa)])
    assert missing.exit_code == 2 and "not a searchenv index" in missing.output
    BM25Retriever.build(DOCS, tmp_path / "idx")
    bad_qa = runner.invoke(get_app(), ["eval-retrieval", "--index", str(tmp_path / "idx"), "--qa",
                                       str(tmp_path / "none.jsonl")])
    assert bad_qa.exit_code == 2
    typo = runner.invoke(get_app(), ["eval-retrieval", "--index", str(tmp_path / "idx"), "--qa", str(qa),
                                     "--kk", "3"])
    assert typo.exit_code != 0 and "--kk" in typo.output
