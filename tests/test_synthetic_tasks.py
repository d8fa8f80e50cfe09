"""Named synthetic tasks: registry, on-disk cache, atomic builds, and a BM25 oracle check."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from searchenv.corpus import read_corpus
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import load_task, read_qa_jsonl, synthetic, task_specs
from searchenv.tasks.synthetic import (
    DEFAULT_TASK,
    QuestionConfig,
    SyntheticTaskConfig,
    WorldConfig,
    build_synthetic_task,
    write_world,
)

SMALL = SyntheticTaskConfig(
    world=WorldConfig(num_passages=3000, seed=4),
    questions=QuestionConfig(
        mix=(("single", 1.0), ("bridge2", 2.0), ("bridge3", 1.0), ("comparison", 1.0)), train=60, dev=40, test=20
    ),
)


def _world_quality() -> object:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "world_quality.py"
    spec = importlib.util.spec_from_file_location("world_quality", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["world_quality"] = module
    spec.loader.exec_module(module)
    return module


def test_named_tasks_are_registered() -> None:
    names = {s.name for s in task_specs()}
    assert {"synthetic-1hop", "synthetic-2hop", "synthetic-3hop", "synthetic-mixed"} <= names
    assert DEFAULT_TASK == "synthetic-mixed"
    mixed = next(s for s in task_specs() if s.name == "synthetic-mixed")
    assert 10_000 <= mixed.info["passages"] <= 30_000


def test_default_task_builds_into_the_cache_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCHENV_CACHE", str(tmp_path))
    task = load_task("synthetic-mixed")
    folder = task.corpus_path.parent
    assert folder.parent == tmp_path / "tasks" and folder.name.startswith("synthetic-mixed-")
    assert {p.name for p in folder.iterdir()} == {"corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "info.json"}
    assert [len(task.examples(s)) for s in ("train", "dev", "test")] == [2000, 250, 250]
    kinds = {e.metadata["kind"] for e in task.examples("dev")}
    assert kinds == {"single", "bridge2", "bridge3", "bridge4", "comparison"}
    # Second load reads the cache (the generator is not called again).
    monkeypatch.setattr(synthetic, "write_world", lambda *a, **k: pytest.fail("rebuilt a cached task"))
    again = load_task("synthetic-mixed")
    assert again.examples("dev") == task.examples("dev")


def test_killed_build_leaves_no_half_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = synthetic.write_qa_jsonl

    def failing(path: Path, examples: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # after train.jsonl, while writing dev.jsonl
            raise KeyboardInterrupt
        real(path, examples)  # type: ignore[arg-type]

    monkeypatch.setattr(synthetic, "write_qa_jsonl", failing)
    with pytest.raises(KeyboardInterrupt):
        build_synthetic_task("tiny", SMALL, tmp_path)
    assert list((tmp_path / "tasks").iterdir()) == []
    monkeypatch.setattr(synthetic, "write_qa_jsonl", real)
    task = build_synthetic_task("tiny", SMALL, tmp_path)
    assert len(task.examples("dev")) == 40
    assert [p.name for p in (tmp_path / "tasks").iterdir()] == [task.corpus_path.parent.name]


def test_config_change_changes_the_cache_key() -> None:
    other = SyntheticTaskConfig(world=WorldConfig(num_passages=3000, seed=5), questions=SMALL.questions)
    assert other.fingerprint() != SMALL.fingerprint()
    assert SyntheticTaskConfig(SMALL.world, SMALL.questions).fingerprint() == SMALL.fingerprint()


def test_bm25_oracle_beats_single_shot_search(tmp_path: Path) -> None:
    """Hop-by-hop searches find every hop's evidence; the full question does not (bridges)."""
    wq = _world_quality()
    write_world(SMALL, tmp_path / "w")
    retriever = BM25Retriever.build(read_corpus(tmp_path / "w" / "corpus.jsonl"), tmp_path / "idx")
    dev = read_qa_jsonl(tmp_path / "w" / "dev.jsonl")
    bridges = [e for e in dev if e.type == "bridge"]
    assert len(bridges) >= 20
    oracle = sum(wq.oracle_answer(e, retriever, 5) == e.answers[0] for e in dev) / len(dev)  # type: ignore[attr-defined]
    single = sum(wq.single_shot_found(e, retriever, 5) for e in bridges) / len(bridges)  # type: ignore[attr-defined]
    assert oracle >= 0.95
    assert single <= 0.2
    # The oracle answers nothing when a hop's evidence is missing.
    sub = dataclasses.replace(bridges[0].decomposition[-1], evidence_ids=("no-such-doc",))
    hopeless = dataclasses.replace(bridges[0], decomposition=(*bridges[0].decomposition[:-1], sub))
    assert wq.oracle_answer(hopeless, retriever, 5) == ""  # type: ignore[attr-defined]
