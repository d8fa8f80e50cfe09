"""The generated world: validity of every question, determinism, splits, names, dials."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchenv.corpus import read_corpus
from searchenv.tasks import QAExample, read_qa_jsonl
from searchenv.tasks.synthetic import (
    QUESTION_KINDS,
    QuestionConfig,
    SyntheticTaskConfig,
    World,
    WorldConfig,
    document,
    entity_keys,
    generate_questions,
    iter_documents,
    stream_passages,
    write_world,
)
from searchenv.tasks.world.names import TYPE_INVENTORIES, name_space
from searchenv.tasks.world.questions import bridge_chains
from searchenv.tasks.world.world import ENTITY_TYPES, RELATIONS

ALL_KINDS = tuple((k, 1.0) for k in QUESTION_KINDS)


def _mentions(text: str, phrase: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(phrase.lower()) + r"(?!\w)", text.lower()) is not None


def check_example(ex: QAExample, texts: dict[str, str]) -> None:
    """Every property a generated question must have; raises AssertionError naming the failure."""
    assert ex.decomposition, ex
    assert len(ex.evidence_ids) == len(ex.decomposition) == ex.hops
    for i, sub in enumerate(ex.decomposition):
        assert sub.evidence_ids and sub.evidence_ids[0] == ex.evidence_ids[i]
        for doc_id in sub.evidence_ids:
            assert doc_id in texts, f"{ex.id}: evidence {doc_id} is not in the corpus"
            assert _mentions(texts[doc_id], sub.answer), f"{ex.id} hop {i}: {sub.answer!r} not in {doc_id}"
    if ex.type == "comparison":
        a, b = ex.metadata["compared_entities"]
        assert a != b
        if ex.answers[0] in ("yes", "no"):
            same = ex.decomposition[0].answer == ex.decomposition[1].answer
            assert ex.answers == (("yes",) if same else ("no",))
        else:
            assert _mentions(ex.question, ex.answers[0])
            y0, y1 = (int(s.answer) for s in ex.decomposition)
            assert y0 != y1
            first = ex.decomposition[0 if y0 < y1 else 1].question
            assert _mentions(first, ex.answers[0]), "the earlier entity must be the answer"
        return
    # single-hop and bridge: the answer is the last hop's answer, stated in the last hop's evidence,
    # and no answer alias is in the question.
    assert ex.answers[0] == ex.decomposition[-1].answer
    assert _mentions(texts[ex.evidence_ids[-1]], ex.answers[0])
    for alias in ex.answers:
        assert not _mentions(ex.question, alias), f"{ex.id}: answer {alias!r} is in the question"
    # The chain: each intermediate answer is named by the next sub-question but not by the question.
    for prev, nxt in zip(ex.decomposition, ex.decomposition[1:], strict=False):
        assert _mentions(nxt.question, prev.answer), f"{ex.id}: {prev.answer!r} not in {nxt.question!r}"
        assert not _mentions(ex.question, prev.answer), f"{ex.id}: bridge {prev.answer!r} is in the question"
    assert ex.type == ("single-hop" if ex.hops == 1 else "bridge")


@pytest.fixture(scope="module")
def small() -> tuple[World, dict[str, list[QAExample]], dict[str, str]]:
    world = World(WorldConfig(num_passages=4000, seed=7))
    splits = generate_questions(world, QuestionConfig(mix=ALL_KINDS, train=150, dev=60, test=60))
    texts = {d.id: d.contents for d in iter_documents(world)}
    return world, splits, texts


def test_every_question_is_answerable_from_its_gold_evidence(small) -> None:  # type: ignore[no-untyped-def]
    _, splits, texts = small
    kinds: Counter[str] = Counter()
    for examples in splits.values():
        for ex in examples:
            check_example(ex, texts)
            kinds[ex.metadata["kind"]] += 1
    assert set(kinds) == set(QUESTION_KINDS)
    assert sum(kinds.values()) == 270


def test_check_example_catches_broken_examples(small) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    _, splits, texts = small
    bridge = next(e for e in splits["dev"] if e.type == "bridge")
    wrong_answer = dataclasses.replace(bridge, answers=("Nowhere",))
    with pytest.raises(AssertionError):
        check_example(wrong_answer, texts)
    leaky = dataclasses.replace(bridge, question=bridge.question + " " + bridge.decomposition[0].answer)
    with pytest.raises(AssertionError):
        check_example(leaky, texts)
    other = next(d for d in texts if d not in bridge.evidence_ids and d.startswith("mention"))
    bad_sub = dataclasses.replace(bridge.decomposition[0], evidence_ids=(bridge.evidence_ids[0], other))
    moved = dataclasses.replace(bridge, decomposition=(bad_sub, *bridge.decomposition[1:]))
    with pytest.raises(AssertionError):
        check_example(moved, texts)


def test_splits_are_disjoint_in_questions_and_entities(small) -> None:  # type: ignore[no-untyped-def]
    _, splits, _ = small
    ids = [e.id for s in splits.values() for e in s]
    assert len(ids) == len(set(ids))
    questions = {name: {e.question for e in ex} for name, ex in splits.items()}
    keys = {name: entity_keys(ex) for name, ex in splits.items()}
    bridges = {name: {k for e in ex for k in e.metadata["bridge_entities"]} for name, ex in splits.items()}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not questions[a] & questions[b]
        assert not keys[a] & keys[b]
        assert not bridges[a] & bridges[b]
    assert all(bridges.values())


def test_gold_evidence_is_the_subjects_own_passage(small) -> None:  # type: ignore[no-untyped-def]
    world, splits, _ = small
    for ex in splits["train"]:
        subjects = [ex.metadata["topic"], *ex.metadata["bridge_entities"]]
        if ex.type == "comparison":
            subjects = list(ex.metadata["compared_entities"])
        for sub_key, doc_id in zip(subjects, ex.evidence_ids, strict=True):
            assert doc_id == sub_key or doc_id.startswith(sub_key + "-"), (doc_id, sub_key)
        assert document(world, ex.evidence_ids[0]).id == ex.evidence_ids[0]


def test_no_single_passage_spans_two_hops(small) -> None:  # type: ignore[no-untyped-def]
    """A later hop's evidence never names the topic: the full question cannot reach it."""
    world, splits, texts = small
    for ex in splits["dev"]:
        if ex.type != "bridge":
            continue
        topic_name = _entity_name(world, ex.metadata["topic"])
        for sub in ex.decomposition[1:]:
            for doc_id in sub.evidence_ids:
                assert not _mentions(texts[doc_id], topic_name) or doc_id in ex.decomposition[0].evidence_ids


def _entity_name(world: World, key: str) -> str:
    m = re.fullmatch(r"([a-z]+)(\d+)", key)
    assert m
    return world.name(m.group(1), int(m.group(2)))


def test_names_are_unique_and_types_share_no_word() -> None:
    world = World(WorldConfig(num_passages=20_000, seed=3))
    for etype in ENTITY_TYPES:
        names = [world.name(etype, i) for i in range(world.count(etype))]
        assert len(set(names)) == len(names), etype
    # Invented words of different types never coincide, so a name is never mistaken for another type.
    spaces = {k: {n.lower() for n in name_space(k)} for k in TYPE_INVENTORIES}
    kinds = sorted(spaces)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            assert not spaces[a] & spaces[b], (a, b)
    # Near-collisions are there on purpose: shared surnames among people.
    surnames = Counter(world.surname(i) for i in range(world.count("person")))
    assert surnames.most_common(1)[0][1] >= 2


def test_documents_are_consistent_and_complete(small) -> None:  # type: ignore[no-untyped-def]
    world, _, texts = small
    assert len(texts) == world.sizes.passages == 4000
    # Each fact of a sample of people, in every passage that states it.
    for p in range(0, world.count("person"), 37):
        born = world.name("city", int(world.birthplace[p]))
        assert _mentions(texts[f"person{p}-bio"], born)
        assert str(int(world.birth_year[p])) in texts[f"person{p}-bio"]
        if world.spouse[p] >= 0:
            sp = int(world.spouse[p])
            assert _mentions(texts[f"person{sp}-personal"], world.name("person", p))
    # Facts are phrased in more than one way across the corpus.
    openings = Counter(
        re.sub(r"[A-Z]\w+", "X", t.split("\n", 1)[1])[:18] for k, t in texts.items() if k.endswith("-bio")
    )
    assert len(openings) >= 3
    with pytest.raises(ValueError, match="no passage"):
        document(world, "person0-personal" if world.spouse[0] < 0 else "mention999999")
    with pytest.raises(ValueError):
        document(world, "planet3")


def test_mention_passages_state_no_asked_fact(small) -> None:  # type: ignore[no-untyped-def]
    _, _, texts = small
    mentions = [t for k, t in texts.items() if k.startswith("mention")]
    assert mentions
    fact_words = ("born", "founded", "capital", "married", "directed", "studied", "citizen", "headquartered")
    for t in mentions:
        assert not any(_mentions(t, w) for w in fact_words), t


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31),
    density=st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    variety=st.sampled_from([1, 2, 3]),
)
def test_questions_valid_over_seeds_and_dials(seed: int, density: float, variety: int) -> None:
    world = World(WorldConfig(num_passages=2500, seed=seed, distractor_density=density, template_variety=variety))
    mix = (("single", 1.0), ("bridge2", 1.0), ("bridge3", 1.0), ("comparison", 1.0))
    splits = generate_questions(world, QuestionConfig(mix=mix, train=24, dev=8, test=8))
    texts = {d.id: d.contents for d in iter_documents(world)}
    assert len(texts) == 2500
    for examples in splits.values():
        for ex in examples:
            check_example(ex, texts)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(150, 3000), seed=st.integers(0, 1000))
def test_stream_passages_yields_exactly_n_unique_passages(n: int, seed: int) -> None:
    docs = list(stream_passages(n, seed=seed))
    assert len(docs) == n
    assert len({d.id for d in docs}) == n
    assert all(d.title and d.text for d in docs)


def test_stream_passages_is_lazy_and_deterministic() -> None:
    it = stream_passages(1_000_000, seed=1)
    first = [next(it) for _ in range(5)]  # a million-passage world does not render up front
    again = stream_passages(1_000_000, seed=1)
    assert [next(again) for _ in range(5)] == first
    other = stream_passages(1_000_000, seed=2)
    assert [next(other) for _ in range(5)] != first


def test_same_seed_gives_byte_identical_files(tmp_path: Path) -> None:
    cfg = SyntheticTaskConfig(
        world=WorldConfig(num_passages=1500, seed=11),
        questions=QuestionConfig(
            mix=(("single", 1.0), ("bridge2", 2.0), ("comparison", 1.0)), train=40, dev=10, test=10
        ),
    )
    write_world(cfg, tmp_path / "a")
    write_world(cfg, tmp_path / "b")
    other = SyntheticTaskConfig(world=WorldConfig(num_passages=1500, seed=12), questions=cfg.questions)
    write_world(other, tmp_path / "c")
    names = ["corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "info.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "corpus.jsonl").read_bytes() != (tmp_path / "c" / "corpus.jsonl").read_bytes()
    # The files round-trip through the FlashRAG readers with evidence and decomposition.
    dev = read_qa_jsonl(tmp_path / "a" / "dev.jsonl")
    corpus_ids = {d.id for d in read_corpus(tmp_path / "a" / "corpus.jsonl")}
    assert len(dev) == 10
    assert all(set(e.evidence_ids) <= corpus_ids and e.decomposition for e in dev)


def test_same_seed_in_another_process_gives_same_bytes(tmp_path: Path) -> None:
    """String hashing differs between processes; generated files must not depend on it."""
    import subprocess
    import sys

    code = (
        "import sys; from searchenv.tasks.synthetic import *; "
        "write_world(SyntheticTaskConfig(WorldConfig(num_passages=800, seed=5), "
        "QuestionConfig(mix=(('bridge2', 1.0), ('comparison', 1.0)), train=10, dev=4, test=4)), sys.argv[1])"
    )
    for name, hashseed in (("a", "1"), ("b", "2")):
        env = {"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True, env=env)
    for f in ("corpus.jsonl", "train.jsonl", "dev.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_bridge_chains_connect_and_avoid_loops() -> None:
    for hops in (2, 3, 4):
        chains = bridge_chains(hops)
        assert chains
        for chain in chains:
            assert len(chain) == hops
            for a, b in zip(chain, chain[1:], strict=False):
                assert RELATIONS[a][1] == RELATIONS[b][0]
                assert (a, b) != ("spouse", "spouse")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_passages": 10},
        {"num_passages": 2_000_000},
        {"num_passages": 1000, "seed": -1},
        {"num_passages": 1000, "distractor_density": 5.0},
        {"num_passages": 1000, "template_variety": 0},
        {"num_passages": 1000.0},
    ],
)
def test_world_config_rejects_bad_dials(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        WorldConfig(**kwargs)


def test_question_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown question kind"):
        QuestionConfig(mix=(("bridge9", 1.0),))
    with pytest.raises(ValueError, match="positive"):
        QuestionConfig(mix=(("single", 0.0),))
    with pytest.raises(ValueError, match="dev"):
        QuestionConfig(dev=-1)
    assert QuestionConfig(mix=(("single", 1.0), ("bridge2", 3.0))).counts(10) == {"single": 3, "bridge2": 7}


def test_too_small_world_says_so() -> None:
    world = World(WorldConfig(num_passages=150, seed=0))
    with pytest.raises(ValueError, match="world too small"):
        generate_questions(world, QuestionConfig(mix=(("bridge4", 1.0),), train=5000, dev=10, test=10))


def test_density_dial_adds_distractors() -> None:
    sparse = World(WorldConfig(num_passages=5000, distractor_density=0.0))
    dense = World(WorldConfig(num_passages=5000, distractor_density=2.0))
    assert dense.sizes.mentions > sparse.sizes.mentions
    shared = lambda w: max(Counter(w.surname(i) for i in range(w.count("person"))).values())  # noqa: E731
    assert shared(dense) > shared(sparse)
    assert int((dense.moved_to >= 0).sum()) > int((sparse.moved_to >= 0).sum()) == 0


def test_passages_must_be_read_not_copied(small) -> None:  # type: ignore[no-untyped-def]
    """Facts sit anywhere, subjects are often not named in the fact's sentence, others' facts interleave."""
    from searchenv.tasks.world import render

    for bank in (render._BIRTH, render._NATIONALITY, render._EDUCATION, render._EMPLOYER, render._SPOUSE,
                 render._CITY, render._COUNTRY, render._HQ, render._INDUSTRY, render._ORG_FOUNDED,
                 render._UNI_CITY, render._UNI_YEAR, *render._CREATOR.values(), *render._WORK_YEAR.values()):
        assert len(bank) >= 8 and len(set(bank)) == len(bank)
        assert all("{s}" in t or "{sp}" in t for t in bank)
    world, _, texts = small
    sentence_of_birth: Counter[int] = Counter()
    unnamed = 0
    people = range(0, world.count("person"), 7)
    for p in people:
        bio = texts[f"person{p}-bio"].split("\n", 1)[1]
        sentences = re.split(r"(?<=\.) ", bio)
        born = world.name("city", int(world.birthplace[p]))
        idx = next(i for i, s in enumerate(sentences) if _mentions(s, born) and str(int(world.birth_year[p])) in s)
        sentence_of_birth[idx] += 1
        unnamed += not _mentions(sentences[idx], world.name("person", p))
    assert len(sentence_of_birth) >= 4, sentence_of_birth  # the birth sentence moves around
    assert unnamed / len(people) > 0.4  # pronoun, surname or description instead of the full name
    # Some biographies state another person's fact in the same phrasings.
    assert any(
        _mentions(texts[f"person{p}-bio"], world.name("person", q))
        for p in people
        for q in range(0, world.count("person"), 3)
        if q != p
    )
