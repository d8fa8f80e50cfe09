"""How well does the embedding relevance verifier separate evidence from other passages?

Fits (and checks) the logistic calibration stored in ``searchenv.rewards.verifiers`` as
``EMBEDDING_SLOPE`` / ``EMBEDDING_INTERCEPT``:

1. On ``synthetic-mixed`` (train split, ``--questions`` questions), each question's targets are
   the question and its sub-questions (what :class:`~searchenv.rewards.verifiers.EmbeddingVerifier`
   compares against by default). A passage's feature is its best cosine similarity to a target
   under all-MiniLM-L6-v2.
2. Positives: the question's gold evidence passages. Negatives: BM25 top-``--hard-k`` passages for the
   question and each sub-question that are not evidence ("hard"), and random passages.
3. A class-balanced 1-D logistic regression ``p = sigmoid(a * cos + b)`` is fitted by Newton's
   method on even-numbered questions and evaluated on odd-numbered ones.

Reported: held-out AUC of the cosine, mean calibrated score per class, accuracy at p = 0.5, the
same for the stored constants (what the reward uses), and, as the baseline, the raw cosine
clipped to [0, 1]. Also the verifier's step-scoring speed with a warm embedding cache relative
to a cold one.

Usage: python benchmarks/relevance_calibration.py [--questions 150] [--hard-k 5] [--steps 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402
from searchenv.corpus import read_corpus  # noqa: E402
from searchenv.protocols import Search  # noqa: E402
from searchenv.retrievers import retriever_for_corpus  # noqa: E402
from searchenv.rewards import StepContext  # noqa: E402
from searchenv.rewards.verifiers import (  # noqa: E402
    EMBEDDING_INTERCEPT,
    EMBEDDING_SLOPE,
    EmbeddingVerifier,
    doc_text,
)
from searchenv.tasks import load_task  # noqa: E402


def fit_logistic(x: np.ndarray, y: np.ndarray, iters: int = 50) -> tuple[float, float]:
    """Class-balanced 1-D logistic regression by Newton's method; returns (slope, intercept)."""
    w = np.where(y == 1, 0.5 / max(1, int(y.sum())), 0.5 / max(1, int((1 - y).sum())))
    X = np.stack([x, np.ones_like(x)], axis=1)
    theta = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(X @ theta)))
        grad = X.T @ (w * (p - y))
        hess = (X * (w * p * (1 - p))[:, None]).T @ X + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(theta[0]), float(theta[1])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (probability a positive outranks a negative; ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    allv = np.concatenate([pos, neg])[order]
    i = 0
    while i < len(allv):  # average ranks over ties
        j = i
        while j + 1 < len(allv) and allv[j + 1] == allv[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    r_pos = ranks[: len(pos)].sum()
    return float((r_pos - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def summarize(p: np.ndarray, y: np.ndarray, kind: np.ndarray) -> dict[str, float]:
    return {
        "mean_positive": float(p[y == 1].mean()),
        "mean_hard_negative": float(p[kind == 1].mean()),
        "mean_random_negative": float(p[kind == 2].mean()),
        "accuracy_at_0.5": float(((p >= 0.5) == (y == 1)).mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=150)
    parser.add_argument("--hard-k", type=int, default=5, help="BM25 hits per target searched for hard negatives")
    parser.add_argument("--steps", type=int, default=40, help="steps timed for the cache speedup")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    task = load_task("synthetic-mixed")
    docs = {d.id: d for d in read_corpus(task.corpus_path)}
    doc_ids = sorted(docs)
    bm25 = retriever_for_corpus("bm25", task.corpus_path)
    examples = list(task.examples("train"))[: args.questions]
    verifier = EmbeddingVerifier()

    feats: list[float] = []
    labels: list[int] = []
    kinds: list[int] = []  # 0 positive, 1 hard negative, 2 random negative
    groups: list[int] = []
    for qi, ex in enumerate(examples):
        targets = [ex.question] + [s.question for s in ex.decomposition if s.question != ex.question]
        gold = set(ex.evidence_ids)
        hard: set[str] = set()
        for per_q in bm25.search_batch(targets, args.hard_k):
            hard |= {h.doc_id for h in per_q if h.doc_id not in gold}
        rand = {doc_ids[i] for i in rng.choice(len(doc_ids), size=len(gold) + 2, replace=False)} - gold - hard
        cand = [(d, 1, 0) for d in sorted(gold)] + [(d, 0, 1) for d in sorted(hard)] + [(d, 0, 2) for d in sorted(rand)]
        emb = verifier.embed(targets + [doc_text_of(docs[d]) for d, _, _ in cand])
        q, dv = emb[: len(targets)], emb[len(targets) :]
        best = (dv @ q.T).max(axis=1)
        for (_, lab, kind), c in zip(cand, best, strict=True):
            feats.append(float(c))
            labels.append(lab)
            kinds.append(kind)
            groups.append(qi)
    x, y, k, g = np.array(feats), np.array(labels), np.array(kinds), np.array(groups)
    train, test = g % 2 == 0, g % 2 == 1
    slope, intercept = fit_logistic(x[train], y[train])

    def calibrated(a: float, b: float, xs: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(a * xs + b)))

    fitted = summarize(calibrated(slope, intercept, x[test]), y[test], k[test])
    stored = summarize(calibrated(EMBEDDING_SLOPE, EMBEDDING_INTERCEPT, x[test]), y[test], k[test])
    baseline = summarize(np.clip(x[test], 0, 1), y[test], k[test])
    held_out_auc = auc(x[test], y[test])

    # Step scoring speed: cold cache vs warm cache on the same steps.
    steps = []
    for ex in examples[: args.steps]:
        hits = tuple(bm25.search_batch([ex.question], 5))
        new_ids = tuple(dict.fromkeys(h.doc_id for h in hits[0]))
        steps.append(StepContext(ex, Search((ex.question,)), 1, False, False, hits=hits, new_doc_ids=new_ids))
    cold = EmbeddingVerifier(verifier.encoder)
    t0 = time.perf_counter()
    first = [cold(s) for s in steps]
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = [cold(s) for s in steps]
    t_warm = time.perf_counter() - t0
    if first != second:
        raise RuntimeError("cached scores differ from fresh ones")

    data = {
        "task": "synthetic-mixed",
        "questions": len(examples),
        "pairs": {
            "positive": int((y == 1).sum()),
            "hard_negative": int((k == 1).sum()),
            "random_negative": int((k == 2).sum()),
        },
        "held_out_auc": held_out_auc,
        "fitted": {"slope": slope, "intercept": intercept, **fitted},
        "stored": {"slope": EMBEDDING_SLOPE, "intercept": EMBEDDING_INTERCEPT, **stored},
        "baseline_raw_cosine": baseline,
        "step_scoring": {
            "steps": len(steps),
            "cold_s": t_cold,
            "warm_s": t_warm,
            "warm_speedup": t_cold / max(t_warm, 1e-9),
        },
    }
    rows = [
        ("fitted on even questions", fitted),
        ("stored constants (used by the reward)", stored),
        ("baseline: raw cosine clipped to [0, 1]", baseline),
    ]
    table = (
        f"Embedding relevance calibration on synthetic-mixed ({len(examples)} train questions; "
        f"held-out AUC of cosine {held_out_auc:.3f}).\n\n"
        f"Fitted: p = sigmoid({slope:.3f} * cos + {intercept:.3f}); stored: "
        f"p = sigmoid({EMBEDDING_SLOPE} * cos + {EMBEDDING_INTERCEPT}).\n\n"
        "| score | mean on evidence | mean on BM25 non-evidence | mean on random | accuracy at 0.5 |\n"
        "|---|---|---|---|---|\n"
        + "".join(
            f"| {name} | {s['mean_positive']:.3f} | {s['mean_hard_negative']:.3f} | "
            f"{s['mean_random_negative']:.3f} | {s['accuracy_at_0.5']:.3f} |\n"
            for name, s in rows
        )
        + f"\nStep scoring, {len(steps)} steps of 5 documents: cold cache {t_cold:.2f} s, warm cache "
        f"{t_warm * 1000:.1f} ms ({t_cold / max(t_warm, 1e-9):.0f}x faster).\n"
    )
    write_results("relevance_calibration", data, table)


def doc_text_of(doc: object) -> str:
    """The verifier's text for a corpus document (same as for a hit)."""
    from searchenv.retrievers.base import Hit

    return doc_text(Hit(doc.id, doc.title, doc.text, 0.0))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
