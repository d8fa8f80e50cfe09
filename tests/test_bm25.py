from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.corpus import Document, write_corpus
from searchenv.retrievers import (
    RetrieverError,
    StaleIndexError,
    build_index,
    open_index,
    retriever_for_corpus,
)
from searchenv.retrievers.bm25 import BM25Retriever, RankBM25Retriever, tokenize, top_k_canonical
from searchenv.retrievers.index.metadata import data_folder

from .conftest import DOCS


def test_round_trip_same_results_plain_and_mmap(tmp_path, corpus_file) -> None:
    built = build_index("bm25", corpus_file, tmp_path / "idx")
    queries = ["Quenn born", "country of Essaly", "copper mines", "zzz unknown words"]
    expected = built.search_batch(queries, 3)
    for mmap in (False, True):
        again = open_index(tmp_path / "idx", mmap=mmap)
        assert again.search_batch(queries, 3) == expected
    assert expected[3] == []  # no shared term, no hits
    assert expected[2][0].doc_id == "d7" and expected[2][0].title == "Vuldoria"
    assert len(expected[0]) == 3 and expected[0][0].score >= expected[0][1].score


def test_index_folder_has_no_pickles(tmp_path, corpus_file) -> None:
    build_index("bm25", corpus_file, tmp_path / "idx")
    for f in (tmp_path / "idx").rglob("*"):
        if f.suffix == ".npy":
            np.load(f, allow_pickle=False)  # raises if the array needed pickle
        assert f.suffix not in {".pkl", ".pickle"}


def test_stale_index_is_refused_with_rebuild_hint(tmp_path, corpus_file) -> None:
    build_index("bm25", corpus_file, tmp_path / "idx")
    open_index(tmp_path / "idx", corpus=corpus_file)  # fresh: accepted
    # Same documents, different formatting: still fresh.
    reformatted = tmp_path / "same.jsonl"
    reformatted.write_text(
        "\n".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) for d in DOCS) + "\n",
        encoding="utf-8",
    )
    open_index(tmp_path / "idx", corpus=reformatted)
    changed = tmp_path / "changed.jsonl"
    write_corpus(changed, [*DOCS[:-1], Document("d7", "Vuldoria", "Vuldoria is a country of salt.")])
    with pytest.raises(StaleIndexError, match="stale.*searchenv index --corpus"):
        open_index(tmp_path / "idx", corpus=changed)


def test_not_an_index_and_wrong_k(tmp_path, corpus_file) -> None:
    with pytest.raises(RetrieverError, match="not a searchenv index"):
        open_index(tmp_path)
    r = build_index("bm25", corpus_file, tmp_path / "idx")
    with pytest.raises(ValueError, match="k must be a positive integer"):
        r.search_batch(["x"], 0)


def test_cache_builds_once_and_rebuilds_when_corpus_changes(tmp_path, corpus_file) -> None:
    a = retriever_for_corpus("bm25", corpus_file, cache_root=tmp_path / "c")
    b = retriever_for_corpus("bm25", corpus_file, cache_root=tmp_path / "c")
    assert a.search_batch(["Karsk"], 2) == b.search_batch(["Karsk"], 2)
    assert len(list((tmp_path / "c").iterdir())) == 1
    write_corpus(corpus_file, [*DOCS, Document("d8", "Karsk Museum", "The Karsk Museum opened in Karsk.")])
    c = retriever_for_corpus("bm25", corpus_file, cache_root=tmp_path / "c")
    assert "d8" in {h.doc_id for h in c.search_batch(["Karsk Museum"], 3)[0]}


def test_damaged_index_raises_retriever_error(tmp_path, corpus_file) -> None:
    build_index("bm25", corpus_file, tmp_path / "idx")
    shutil.rmtree(data_folder(tmp_path / "idx") / "bm25")
    with pytest.raises(RetrieverError, match="bm25/.*is missing; rebuild it with `searchenv index"):
        open_index(tmp_path / "idx")


_WORDS = [f"w{i}" for i in range(40)]


@settings(max_examples=25, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=12), min_size=4, max_size=25),
    queries=st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4), min_size=1, max_size=5),
)
def test_bm25s_agrees_with_rank_bm25(tmp_path_factory, docs, queries) -> None:
    """Where every term occurs in fewer than half the documents, both scorers agree up to (k1 + 1)."""
    n = len(docs)
    df: dict[str, int] = {}
    for d in docs:
        for w in set(d):
            df[w] = df.get(w, 0) + 1
    docs = [[w for w in d if df[w] * 2 < n] or ["filler" + str(i)] for i, d in enumerate(docs)]
    documents = [Document(f"d{i}", "", " ".join(d)) for i, d in enumerate(docs)]
    folder = tmp_path_factory.mktemp("agree")
    fast = BM25Retriever.build(documents, folder, k1=1.2, b=0.75, method="robertson")
    ref = RankBM25Retriever(documents, k1=1.2, b=0.75)
    for q in (" ".join(x) for x in queries):
        np.testing.assert_allclose(fast.scores(q) * 2.2, ref.scores(q), rtol=1e-4, atol=1e-5)
        got = [h.doc_id for h in fast.search_batch([q], 5)[0]]
        want = [h.doc_id for h in ref.search_batch([q], 5)[0]]
        assert got == want


def test_tokenize_and_canonical_top_k() -> None:
    assert tokenize("The Glass-Orchard, of 1931!") == ["glass", "orchard", "1931"]
    scores = np.array([0.5, 2.0, 2.0, 0.0, 1.0])
    assert top_k_canonical(scores, 3).tolist() == [1, 2, 4]
    assert top_k_canonical(scores, 10).tolist() == [1, 2, 4, 0]


def test_english_stemming_is_an_index_option(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from searchenv.corpus import Document
    from searchenv.retrievers.bm25 import BM25Retriever, tokenize
    from searchenv.retrievers.index.metadata import read_meta

    docs = [
        Document("a", "Glass works", "The company was founded by Velora Quenn in 1901."),
        Document("b", "Harbour", "Ships unload copper in the harbour of Drathmoor."),
        Document("c", "Mills", "Founding members met in Karsk."),
    ]
    assert tokenize("Founded cities", "english") == ["found", "citi"]
    plain = BM25Retriever.build(docs, tmp_path / "plain")
    stem = BM25Retriever.build(docs, tmp_path / "stem", stemmer="english")
    # "founding" matches only the exact word form without stemming; both forms with it.
    assert [h.doc_id for h in plain.search_batch(["founding"], 3)[0]] == ["c"]
    assert sorted(h.doc_id for h in stem.search_batch(["founding"], 3)[0]) == ["a", "c"]
    # The stemmer is recorded and reapplied to queries when the index is reopened.
    assert read_meta(tmp_path / "stem")["params"]["stemmer"] == "english"
    reopened = BM25Retriever.load(tmp_path / "stem")
    assert reopened.stemmer == "english"
    assert sorted(h.doc_id for h in reopened.search_batch(["founding"], 3)[0]) == ["a", "c"]
    with pytest.raises(ValueError, match="stemmer must be one of"):
        BM25Retriever.build(docs, tmp_path / "bad", stemmer="klingon")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_numba_backend_ranks_exactly_as_numpy(tmp_path: Path) -> None:
    """bm25s's numba top-k orders ties arbitrarily; the wrapper's canonical order must not change."""
    pytest.importorskip("numba")
    from searchenv.tasks.synthetic import stream_passages

    docs = list(stream_passages(3000, seed=1))
    plain = BM25Retriever.build(docs, tmp_path / "idx")
    fast = BM25Retriever.load(tmp_path / "idx", backend="numba")
    rng = np.random.default_rng(0)
    queries = ["", "zzz unknown words", "the the the"]
    for i in rng.choice(len(docs), 60, replace=False):
        words = docs[int(i)].text.split()
        queries += [docs[int(i)].title, " ".join(words[:2]), " ".join([docs[int(i)].title, *words[3:5]])]
    for k in (1, 3, 10, 50):
        assert fast.search_batch(queries, k) == plain.search_batch(queries, k)
    with pytest.raises(ValueError, match="backend must be one of"):
        BM25Retriever.load(tmp_path / "idx", backend="rust")
