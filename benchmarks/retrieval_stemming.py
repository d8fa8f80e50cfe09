"""Does English stemming help BM25? Recall@k of gold evidence with and without it.

Our BM25 removes English stop words but, by default, matches exact word forms ("founded" does not
match "founding"); Pyserini's default analyzer, which Search-R1 and FlashRAG use, also stems. This
benchmark builds the same corpus twice (``stemmer=None`` and ``stemmer="english"``) and reports
recall@1/5/10 of gold evidence (``searchenv.retrieval_quality.evaluate_retrieval``) on:

- ``real-text``: a small real-English fixture written for this benchmark
  (``benchmarks/data/real_text``: 40 encyclopedic passages, 40 questions whose wording often differs
  in form from the passage: "constructed" / "built", "founded" / "founding");
- ``synthetic-1hop`` dev: one search with the question;
- ``synthetic-2hop`` sub-questions: each hop's gold sub-question searched alone (the searches an
  agent that decomposes well makes).

Usage: python benchmarks/retrieval_stemming.py [--n 250]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402
from searchenv.corpus import read_corpus  # noqa: E402
from searchenv.retrieval_quality import evaluate_retrieval  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.tasks import QAExample, load_task, read_qa_jsonl  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "real_text"
KS = (1, 5, 10)


def datasets(n: int) -> dict[str, tuple[Path, list[QAExample]]]:
    """Name -> (corpus file, questions with gold evidence)."""
    one = load_task("synthetic-1hop")
    two = load_task("synthetic-2hop")
    hops = [
        QAExample(f"{ex.id}-h{i}", sub.question, (sub.answer,), tuple(sub.evidence_ids))
        for ex in two.examples("dev")[:n]
        for i, sub in enumerate(ex.decomposition)
    ]
    return {
        "real-text": (DATA / "corpus.jsonl", read_qa_jsonl(DATA / "qa.jsonl")),
        "synthetic-1hop (question)": (Path(one.corpus_path), one.examples("dev")[:n]),
        "synthetic-2hop (gold sub-questions)": (Path(two.corpus_path), hops),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=250, help="Dev questions per synthetic task.")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (corpus, examples) in datasets(args.n).items():
            docs = read_corpus(corpus)
            for stemmer in (None, "english"):
                index = BM25Retriever.build(docs, Path(tmp) / f"{len(rows)}", stemmer=stemmer)
                q = evaluate_retrieval(index, examples, KS, name=name)
                rows.append({"data": name, "stemmer": stemmer or "none", "questions": len(examples), **q.to_dict()})
    lines = [
        "BM25 (k1 0.9, b 0.4, English stop words removed) with and without English stemming (Snowball).",
        "",
        "| data | questions | stemming | recall@1 | recall@5 | recall@10 |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['data']} | {r['questions']} | {r['stemmer']} | "
            + " | ".join(f"{r[f'recall@{k}']:.3f}" for k in KS)
            + " |"
        )
    write_results("retrieval_stemming", {"ks": list(KS), "rows": rows}, "\n".join(lines))


if __name__ == "__main__":
    main()
