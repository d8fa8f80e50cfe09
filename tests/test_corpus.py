from __future__ import annotations

import json
import re
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchenv.corpus import CorpusFormatError, Document, read_corpus, split_contents, write_corpus
from searchenv.retrievers.index.docstore import DocStore
from searchenv.tasks import QAExample, SubQuestion, read_qa_jsonl, write_qa_jsonl


def test_both_corpus_shapes_read(tmp_path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(
        json.dumps({"id": "a", "contents": '"Title A"\nBody a.'})
        + "\n\n"
        + json.dumps({"id": "b", "title": "B", "text": "Body b."})
        + "\n",
        encoding="utf-8",
    )
    assert read_corpus(p) == [Document("a", '"Title A"', "Body a."), Document("b", "B", "Body b.")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "c.jsonl:2: invalid JSON"),
        ('{"contents": "x"}', "c.jsonl:2: field 'id'"),
        ('{"id": "z", "contents": 5}', "c.jsonl:2: field 'contents'"),
        ('{"id": "z"}', "c.jsonl:2: needs 'contents' or 'text'"),
        ('{"id": "a", "contents": "dup"}', "c.jsonl:2: duplicate document id 'a'"),
        ("[1, 2]", "c.jsonl:2: expected a JSON object"),
    ],
)
def test_malformed_corpus_lines_are_named(tmp_path, line: str, message: str) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": "a", "contents": "T\nx"}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=message.replace("(", r"\(")):
        read_corpus(p)


def test_failed_write_keeps_previous_file(tmp_path) -> None:
    p = tmp_path / "c.jsonl"
    write_corpus(p, [Document("a", "T", "x")])

    def broken():  # type: ignore[no-untyped-def]
        yield Document("b", "T", "y")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_corpus(p, broken())
    assert read_corpus(p) == [Document("a", "T", "x")]
    assert [f.name for f in tmp_path.iterdir()] == ["c.jsonl"]


@given(st.text(), st.text())
def test_contents_round_trip(title: str, text: str) -> None:
    title = " ".join(title.split())  # a title is one line without surrounding whitespace
    assert split_contents(Document("x", title, text).contents) == (title, text)


def test_quoted_titles_and_title_less_multiline_texts_are_kept_as_stored(tmp_path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(
        '{"id": "a", "contents": "\\"Evan Morris\\"\\nEvan Morris was a lobbyist."}\n'
        '{"id": "b", "title": "", "text": "line one\\nline two"}\n',
        encoding="utf-8",
    )
    a, b = read_corpus(p)
    assert a.title == '"Evan Morris"' and a.contents == '"Evan Morris"\nEvan Morris was a lobbyist.'
    assert b.title == "" and b.text == "line one\nline two"
    write_corpus(tmp_path / "out.jsonl", [a, b])
    assert read_corpus(tmp_path / "out.jsonl") == [a, b]


def test_qa_round_trip_and_errors(tmp_path) -> None:
    ex = QAExample(
        "q", "Who?", ("A", "a1"), ("d1", "d2"), (SubQuestion("s?", "m", ("d1",)),), "bridge", 2, {"k": 1}
    )
    p = tmp_path / "qa.jsonl"
    write_qa_jsonl(p, [ex])
    assert read_qa_jsonl(p) == [ex]
    p.write_text('{"id": "q", "question": "Who?", "golden_answers": []}\n', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match="qa.jsonl:1: field 'golden_answers'"):
        read_qa_jsonl(p)
    with pytest.raises(ValueError, match="answers"):
        QAExample("q", "Who?", "A")  # type: ignore[arg-type]


_HOSTILE = [
    (b'{"id": "b", "contents": "T\\nbad \xff byte"}', "not valid UTF-8"),
    (b'{"id": ' + b"9" * 5000 + b', "contents": "x"}', "4300 digits"),
    (b'{"id": "b", "contents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b'{"id": "b", "contents": ' + b"[" * 100 + b"]" * 100 + b"}", "nested deeper than 64"),
]


@pytest.mark.parametrize(("line", "reason"), _HOSTILE)
def test_hostile_corpus_and_qa_lines_name_file_line_and_reason(tmp_path, line: bytes, reason: str) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(json.dumps({"id": "a", "contents": "T\nx"}).encode() + b"\n" + line + b"\n")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(corpus))}:2: .*{reason}"):
        read_corpus(corpus)
    qa = tmp_path / "qa.jsonl"
    qa.write_bytes(json.dumps({"id": "q", "question": "Who?", "golden_answers": ["A"]}).encode() + b"\n" + line + b"\n")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(qa))}:2: .*{reason}"):
        read_qa_jsonl(qa)


def _qa_line(metadata: object, qid: str = "q") -> str:
    return json.dumps({"id": qid, "question": "Who?", "golden_answers": ["A"], "metadata": metadata}) + "\n"


def test_qa_evidence_ids_given_as_one_id_is_a_one_element_list(tmp_path) -> None:
    p = tmp_path / "qa.jsonl"
    step = {"question": "s?", "answer": "m", "evidence_ids": "d12"}
    p.write_text(_qa_line({"evidence_ids": "d12", "decomposition": [step]}), encoding="utf-8")
    (ex,) = read_qa_jsonl(p)
    assert ex.evidence_ids == ("d12",) and ex.decomposition[0].evidence_ids == ("d12",)
    p.write_text(_qa_line({"evidence_ids": ["d1", 7]}), encoding="utf-8")
    assert read_qa_jsonl(p)[0].evidence_ids == ("d1", "7")  # integer ids, as in corpora


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"evidence_ids": [["d1"]]}, "'metadata.evidence_ids'"),
        ({"evidence_ids": None}, "'metadata.evidence_ids'"),
        ({"evidence_ids": ["d1", ""]}, "'metadata.evidence_ids'"),
        ({"decomposition": ["Who?"]}, "'metadata.decomposition[0]'"),
        ({"decomposition": [{"question": "s?", "answer": "m", "evidence_ids": {"d": 1}}]},
         "'metadata.decomposition[0].evidence_ids'"),
        ({"hops": "two"}, "'metadata.hops'"),
    ],
)  # fmt: skip
def test_qa_malformed_metadata_names_file_line_and_field(tmp_path, metadata: object, field: str) -> None:
    p = tmp_path / "qa.jsonl"
    p.write_text(_qa_line({}, qid="q0") + _qa_line(metadata), encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(p))}:2: field {re.escape(field)}"):
        read_qa_jsonl(p)
    with pytest.raises(ValueError, match="evidence_ids"):
        QAExample("q", "Who?", ("A",), "d1")  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=40)), min_size=1, max_size=5))
def test_document_store_round_trips_any_title_and_text(
    tmp_path_factory: pytest.TempPathFactory, parts: list[tuple[str, str]]
) -> None:
    """Title and text are stored apart: no title is made up from a first line, none is trimmed."""
    docs = [Document(f"d{i}", title, text) for i, (title, text) in enumerate(parts)]
    folder = tmp_path_factory.mktemp("store")
    DocStore.write(folder, docs)
    assert list(DocStore(folder)) == docs
    assert list(DocStore(folder, mmap_mode=True)) == docs
    shutil.rmtree(folder)
