"""Refiners between retriever and reasoner: sentence selection, the environment's info, fuzzing."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.corpus import Document
from searchenv.refiners import SentenceRefiner, get_refiner, split_sentences
from searchenv.retrievers.base import Hit

from .conftest import EXAMPLES

LONG = Document(
    "d9", "Tobin Quenn",
    "Tobin Quenn grew up near the coast. He studied metallurgy for six years. "
    "Tobin Quenn was born in Karsk in 1940. His brother Ansel kept bees! Did he travel? Rarely.",
)


def test_sentences_matching_the_query_are_kept_in_order() -> None:
    assert split_sentences(LONG.text)[2] == "Tobin Quenn was born in Karsk in 1940."
    refiner = SentenceRefiner(max_sentences=2)
    (hits,), choices = refiner.refine(["Where was Tobin Quenn born?"], [[Hit(LONG.id, LONG.title, LONG.text, 1.0)]])
    assert hits[0].text == "Tobin Quenn grew up near the coast. Tobin Quenn was born in Karsk in 1940."
    assert hits[0].doc_id == "d9" and hits[0].score == 1.0
    assert choices == [[{"doc_id": "d9", "kept": [0, 2], "sentences": 6, "chars_before": len(LONG.text),
                         "chars_after": len(hits[0].text)}]]
    short = Hit("d1", "T", "One sentence only.", 0.5)
    (same,), _ = refiner.refine(["q"], [[short]])
    assert same == (short,)  # nothing to cut
    assert refiner.refine([], []) == ((), [])
    with pytest.raises(ValueError, match="max_sentences"):
        SentenceRefiner(max_sentences=0)
    with pytest.raises(ValueError, match="scorer"):
        SentenceRefiner(scorer="llm")
    with pytest.raises(ValueError, match="unknown refiner"):
        get_refiner("summaries")
    with pytest.raises(ValueError, match="refine"):
        get_refiner(object())  # type: ignore[arg-type]


def test_the_environment_shows_refined_hits_and_reports_its_choices(tmp_path: Any) -> None:
    from searchenv.retrievers.bm25 import BM25Retriever

    from .conftest import DOCS

    retriever = BM25Retriever.build([*DOCS, LONG], tmp_path / "idx")
    plain = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, retriever=retriever, top_k=2)
    refined = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, retriever=retriever, top_k=2, refiner="sentences")
    turn = "<search> Where was Tobin Quenn born? </search>"
    for env in (plain, refined):
        env.reset(options={"example_id": "q1"})
    _, _, _, _, info_plain = plain.step(turn)
    _, _, _, _, info = refined.step(turn)
    assert info["doc_ids"] == info_plain["doc_ids"]  # the same documents, less of their text
    assert "refined" in info and "refined" not in info_plain
    assert "He studied metallurgy" in info_plain["new_text"] and "He studied metallurgy" not in info["new_text"]
    assert "born in Karsk in 1940" in info["new_text"]
    chosen = {c["doc_id"]: c for c in info["refined"][0]}
    assert chosen["d9"]["chars_after"] < chosen["d9"]["chars_before"]
    _, _, _, _, answered = refined.step("<answer> Karsk </answer>")
    assert answered["em"] == 1.0 and "refined" not in answered


@settings(max_examples=200, deadline=None)
@given(query=st.text(max_size=80), text=st.text(max_size=400), n=st.integers(1, 4))
def test_any_text_is_refined_without_error(query: str, text: str, n: int) -> None:
    (hits,), choices = SentenceRefiner(max_sentences=n).refine([query], [[Hit("x", "t", text, 0.0)]])
    kept = choices[0][0]["kept"]
    assert len(kept) == min(n, choices[0][0]["sentences"]) and kept == sorted(set(kept))
    assert len(hits[0].text) <= len(text) + 1 and hits[0].doc_id == "x"


def test_eval_retrieval_compares_with_and_without_a_refiner(tmp_path: Any) -> None:
    from searchenv.retrieval_quality import evaluate_retrieval
    from searchenv.retrievers.bm25 import BM25Retriever

    from .conftest import DOCS

    retriever = BM25Retriever.build([*DOCS, LONG], tmp_path / "idx")
    whole = evaluate_retrieval(retriever, EXAMPLES, [1, 3])
    cut = evaluate_retrieval(retriever, EXAMPLES, [1, 3], refiner=SentenceRefiner(max_sentences=1))
    assert cut.recall == whole.recall  # the same documents
    assert cut.chars_read[1] <= whole.chars_read[1] and cut.chars_read[3] < whole.chars_read[3]  # less to read
    assert all(cut.answer_in_docs[k] <= whole.answer_in_docs[k] for k in (1, 3))
    assert "chars_read@3" in cut.to_dict()


def test_eval_retrieval_cli_adds_refined_rows(tmp_path: Any, corpus_file: Any, qa_file: Any) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    runner = CliRunner()
    built = runner.invoke(get_app(), ["index", "--corpus", str(corpus_file), "--out", str(tmp_path / "i")])
    assert built.exit_code == 0
    res = runner.invoke(get_app(), ["eval-retrieval", "--index", str(tmp_path / "i"), "--qa", str(qa_file),
                                    "--k", "1", "--refiner", "sentences", "--json", str(tmp_path / "q.json")])
    assert res.exit_code == 0, res.output
    import json

    names = [r["name"] for r in json.loads((tmp_path / "q.json").read_text())["results"]]
    assert names == [str(tmp_path / "i"), f"{tmp_path / 'i'} + sentences"]


def test_eval_reports_the_characters_an_agent_read(tmp_path: Any) -> None:
    from agents.evaluation.evaluate import evaluate
    from searchenv.retrievers.bm25 import BM25Retriever

    from .conftest import DOCS

    retriever = BM25Retriever.build([*DOCS, LONG], tmp_path / "idx")
    whole = evaluate("oracle", task=EXAMPLES, retriever=retriever, top_k=3)
    cut = evaluate("oracle", task=EXAMPLES, retriever=retriever, top_k=3,
                   env_kwargs={"refiner": SentenceRefiner(max_sentences=1)})
    assert 0 < cut.row["chars_read"] < whole.row["chars_read"]
    assert cut.row["evidence_recall"] == whole.row["evidence_recall"]
