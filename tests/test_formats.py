"""Readers for HotpotQA, MuSiQue, 2WikiMultiHopQA and FlashRAG files, on fixtures built here."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from searchenv.corpus import CorpusFormatError, read_corpus
from searchenv.tasks import QAExample, read_qa_jsonl, write_qa_jsonl
from searchenv.tasks.formats import (
    FORMATS,
    convert,
    read_2wiki,
    read_format,
    read_hotpotqa,
    read_musique,
)

HOTPOT = [
    {
        "_id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
        "context": [
            ["Ed Wood (film)", ["Ed Wood is a 1994 American biographical film.", " It was directed by Tim Burton."]],
            ["Scott Derrickson", ["Scott Derrickson is an American director.", " He lives in Los Angeles."]],
            ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker."]],
        ],
    },
    {
        "_id": "5a8c7595554299585d9e36b6",
        "question": "What government position was held by the woman who portrayed Corliss Archer?",
        "answer": "Chief of Protocol",
        "type": "bridge",
        "level": "medium",
        "supporting_facts": [["Kiss and Tell (1945 film)", 0], ["Shirley Temple", 0], ["Shirley Temple", 1]],
        "context": [
            ["Kiss and Tell (1945 film)", ["Kiss and Tell is a 1945 film starring Shirley Temple as Corliss Archer."]],
            ["Shirley Temple", ["Shirley Temple was an American actress.", " She served as Chief of Protocol."]],
            ["Ed Wood", ["Edward Davis Wood Jr. was an American filmmaker."]],  # shared with record 0
        ],
    },
]


def _columns(record: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face column layout of a HotpotQA record."""
    out = {k: v for k, v in record.items() if k not in ("_id", "context", "supporting_facts")}
    out["id"] = record["_id"]
    out["context"] = {"title": [c[0] for c in record["context"]], "sentences": [c[1] for c in record["context"]]}
    out["supporting_facts"] = {
        "title": [f[0] for f in record["supporting_facts"]],
        "sent_id": [f[1] for f in record["supporting_facts"]],
    }
    return out


MUSIQUE = [
    {
        "id": "2hop__460946_294723",
        "question": "Who is the spouse of the Green performer?",
        "answer": "Miquette Giraudy",
        "answer_aliases": ["Miquette"],
        "answerable": True,
        "paragraphs": [
            {
                "idx": 0,
                "title": "Grant's First Stand",
                "paragraph_text": "Grant's First Stand is a jazz album.",
                "is_supporting": False,
            },
            {
                "idx": 1,
                "title": "Miquette Giraudy",
                "paragraph_text": "Miquette Giraudy is the partner of Steve Hillage.",
                "is_supporting": True,
            },
            {
                "idx": 2,
                "title": "Green (Steve Hillage album)",
                "paragraph_text": "Green is an album by Steve Hillage.",
                "is_supporting": True,
            },
        ],
        "question_decomposition": [
            {"id": 460946, "question": "Green >> performer", "answer": "Steve Hillage", "paragraph_support_idx": 2},
            {"id": 294723, "question": "#1 >> spouse", "answer": "Miquette Giraudy", "paragraph_support_idx": 1},
        ],
    },
    {
        "id": "3hop1__1_2_3",
        "question": "When was the university attended by the author of X founded?",
        "answer": "1636",
        "answer_aliases": [],
        "answerable": False,
        "paragraphs": [
            {"idx": 0, "title": "X", "paragraph_text": "X is a novel by Ann Lee.", "is_supporting": True},
            {"idx": 1, "title": "Ann Lee", "paragraph_text": "Ann Lee studied at Harvard.", "is_supporting": True},
        ],
        "question_decomposition": [
            {"id": 1, "question": "Who wrote X?", "answer": "Ann Lee", "paragraph_support_idx": 0},
            {"id": 2, "question": "Where did #1 study?", "answer": "Harvard", "paragraph_support_idx": 1},
            {"id": 3, "question": "When was #2 founded?", "answer": "1636", "paragraph_support_idx": None},
        ],
    },
]

TWOWIKI = [
    {
        "_id": "8813f87c0bdd11eba7f7acde48001122",
        "type": "compositional",
        "question": "Who is the mother of the director of film Polish-Russian War (Film)?",
        "answer": "Małgorzata Braunek",
        "context": [
            ["Maheen Khan", ["Maheen Khan is a Pakistani fashion designer."]],
            [
                "Polish-Russian War (film)",
                ["Polish-Russian War is a 2009 film.", "It was directed by Xawery Żuławski."],
            ],
            ["Xawery Żuławski", ["Xawery Żuławski is a director.", "His mother is Małgorzata Braunek."]],
        ],
        "supporting_facts": [["Polish-Russian War (film)", 1], ["Xawery Żuławski", 1]],
        "evidences": [
            ["Polish-Russian War", "director", "Xawery Żuławski"],
            ["Xawery Żuławski", "mother", "Małgorzata Braunek"],
        ],
    }
]


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _positions(data: Any) -> list[list[int]]:
    """Each example's evidence as places in the pooled corpus (passage ids are prefixed per file)."""
    rows = {d.id: i for i, d in enumerate(data.documents)}
    return [[rows[i] for i in e.evidence_ids] for e in data.examples]


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------ HotpotQA
def test_hotpotqa_list_layout_pools_contexts_and_maps_evidence(tmp_path: Path) -> None:
    data = read_hotpotqa(_write_json(tmp_path / "hotpot.json", HOTPOT))
    assert [e.id for e in data.examples] == [r["_id"] for r in HOTPOT]
    # 6 context paragraphs, one shared between the two records.
    assert len(data.documents) == 5
    docs = {d.id: d for d in data.documents}
    first, second = data.examples
    assert first.answers == ("yes",) and first.type == "comparison" and first.hops == 2
    assert [docs[i].title for i in first.evidence_ids] == ["Scott Derrickson", "Ed Wood"]
    assert [docs[i].title for i in second.evidence_ids] == ["Kiss and Tell (1945 film)", "Shirley Temple"]
    ed_wood = [d for d in data.documents if d.title == "Ed Wood"]
    assert len(ed_wood) == 1  # pooled once
    assert (
        docs[second.evidence_ids[1]].text == "Shirley Temple was an American actress. She served as Chief of Protocol."
    )
    assert first.metadata["level"] == "hard"
    assert first.metadata["supporting_facts"] == [["Scott Derrickson", 0], ["Ed Wood", 0]]


def test_hotpotqa_column_layout_and_jsonl_read_the_same(tmp_path: Path) -> None:
    listed = read_hotpotqa(_write_json(tmp_path / "a.json", HOTPOT))
    columns = read_hotpotqa(_write_jsonl(tmp_path / "b.jsonl", [_columns(r) for r in HOTPOT]))
    assert _positions(columns) == _positions(listed)
    assert [(d.title, d.text) for d in columns.documents] == [(d.title, d.text) for d in listed.documents]
    assert [e.question for e in columns.examples] == [e.question for e in listed.examples]


def test_hotpotqa_unmapped_supporting_title_is_recorded_not_dropped(tmp_path: Path) -> None:
    rec = copy.deepcopy(HOTPOT[0])
    rec["supporting_facts"].append(["Not In Context", 0])
    ex = read_hotpotqa(_write_json(tmp_path / "h.json", [rec])).examples[0]
    assert ex.metadata["unmapped_supporting_titles"] == ["Not In Context"]
    assert len(ex.evidence_ids) == 2


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("answer"), "'answer'"),
        (lambda r: r.update(question=""), "'question'"),
        (lambda r: r.update(context="oops"), "'context'"),
        (lambda r: r["context"].__setitem__(1, ["Scott Derrickson", "not a list"]), "context[1][1]"),
        (lambda r: r.update(supporting_facts=[["Ed Wood", "zero"]]), "supporting_facts[0]"),
        (lambda r: r.update(_id=None), "'_id'"),
    ],
)
def test_hotpotqa_malformed_record_names_file_record_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    bad = copy.deepcopy(HOTPOT)
    mutate(bad[1])
    path = _write_json(tmp_path / "bad.json", bad)
    with pytest.raises(CorpusFormatError) as err:
        read_hotpotqa(path)
    msg = str(err.value)
    assert str(path) in msg and "[record 1]" in msg and field in msg


def test_hotpotqa_malformed_jsonl_line_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_columns(HOTPOT[0])) + "\n" + "{not json\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:2: invalid JSON"):
        read_hotpotqa(path)
    path.write_text(json.dumps(_columns(HOTPOT[0])) + "\n" + json.dumps(["a list"]) + "\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:2: expected a JSON object"):
        read_hotpotqa(path)


def test_duplicate_ids_and_broken_arrays_are_errors(tmp_path: Path) -> None:
    with pytest.raises(CorpusFormatError, match=r"\[record 1\]: duplicate example id"):
        read_hotpotqa(_write_json(tmp_path / "dup.json", [HOTPOT[0], HOTPOT[0]]))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(HOTPOT)[:-30], encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"broken\.json: invalid JSON at column \d+"):
        read_hotpotqa(broken)


_HOSTILE = [
    (b'{"_id": "h9", "question": "Why \xff?"}', "not valid UTF-8"),
    (b'{"_id": ' + b"9" * 5000 + b"}", "4300 digits"),
    (b'{"_id": "h9", "context": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
]


@pytest.mark.parametrize(("record", "reason"), _HOSTILE)
def test_hostile_json_is_named_by_file_and_line(tmp_path: Path, record: bytes, reason: str) -> None:
    lines = tmp_path / "bad.jsonl"
    lines.write_bytes(json.dumps(_columns(HOTPOT[0])).encode() + b"\n" + record + b"\n")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(lines))}:2: .*{reason}"):
        read_hotpotqa(lines)
    array = tmp_path / "bad.json"
    array.write_bytes(b"[" + json.dumps(HOTPOT[0]).encode() + b",\n" + record + b"]")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(array))}: .*{reason}"):
        read_hotpotqa(array)


# ------------------------------------------------------------------ MuSiQue
def test_musique_decomposition_fills_hop_references_and_evidence(tmp_path: Path) -> None:
    data = read_musique(_write_jsonl(tmp_path / "musique.jsonl", MUSIQUE))
    docs = {d.id: d for d in data.documents}
    two, three = data.examples
    assert two.answers == ("Miquette Giraudy", "Miquette")
    assert two.type == "2hop" and two.hops == 2
    assert [s.question for s in two.decomposition] == ["Green >> performer", "Steve Hillage >> spouse"]
    assert [docs[i].title for i in two.evidence_ids] == ["Green (Steve Hillage album)", "Miquette Giraudy"]
    assert [docs[s.evidence_ids[0]].title for s in two.decomposition] == [
        "Green (Steve Hillage album)",
        "Miquette Giraudy",
    ]
    assert three.type == "3hop1" and three.hops == 3
    assert [s.question for s in three.decomposition] == [
        "Who wrote X?",
        "Where did Ann Lee study?",
        "When was Harvard founded?",
    ]
    assert three.decomposition[2].evidence_ids == ()
    assert len(three.evidence_ids) == 2
    assert three.metadata["answerable"] is False
    assert len(data.documents) == 5


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.update(paragraphs={}), "'paragraphs'"),
        (lambda r: r["paragraphs"][1].update(paragraph_text=3), "paragraphs[1]"),
        (lambda r: r["question_decomposition"][1].update(paragraph_support_idx=9), "paragraph_support_idx"),
        (lambda r: r["question_decomposition"][0].pop("question"), "question_decomposition[0]"),
        (lambda r: r.update(answer_aliases="Miquette"), "answer_aliases"),
        (lambda r: r.pop("answer"), "'answer'"),
    ],
)
def test_musique_malformed_record_names_line_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    bad = copy.deepcopy(MUSIQUE)
    mutate(bad[1] if "decomposition" not in field else bad[0])
    path = _write_jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(CorpusFormatError) as err:
        read_musique(path)
    msg = str(err.value)
    line = 1 if "decomposition" in field else 2
    assert f"bad.jsonl:{line}" in msg and field in msg


# ------------------------------------------------------------------ 2Wiki
def test_2wiki_evidence_triples_become_sub_questions(tmp_path: Path) -> None:
    data = read_2wiki(_write_json(tmp_path / "dev.json", TWOWIKI))
    (ex,) = data.examples
    docs = {d.id: d for d in data.documents}
    assert ex.type == "compositional" and ex.hops == 2
    assert ex.answers == ("Małgorzata Braunek",)
    assert [docs[i].title for i in ex.evidence_ids] == ["Polish-Russian War (film)", "Xawery Żuławski"]
    first, second = ex.decomposition
    assert (first.question, first.answer) == ("director of Polish-Russian War", "Xawery Żuławski")
    assert docs[first.evidence_ids[0]].title == "Polish-Russian War (film)"
    assert docs[second.evidence_ids[0]].title == "Xawery Żuławski"
    assert ex.metadata["evidences"][1] == ["Xawery Żuławski", "mother", "Małgorzata Braunek"]


def test_2wiki_column_layout_with_content_key(tmp_path: Path) -> None:
    rec = _columns(TWOWIKI[0])
    rec["context"] = {"title": rec["context"]["title"], "content": rec["context"]["sentences"]}
    data = read_2wiki(_write_jsonl(tmp_path / "dev.jsonl", [rec]))
    assert _positions(data) == _positions(read_2wiki(_write_json(tmp_path / "d.json", TWOWIKI)))


def test_2wiki_malformed_evidence_triple(tmp_path: Path) -> None:
    bad = copy.deepcopy(TWOWIKI)
    bad[0]["evidences"][1] = ["Xawery Żuławski", "mother"]
    with pytest.raises(CorpusFormatError, match=r"\[record 0\].*evidences\[1\]"):
        read_2wiki(_write_json(tmp_path / "bad.json", bad))


# ------------------------------------------------------------------ FlashRAG + convert
def test_flashrag_round_trip_and_convert_writes_corpus(tmp_path: Path) -> None:
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    counts = convert("hotpotqa", _write_json(tmp_path / "h.json", HOTPOT), qa, corpus)
    assert counts == {"examples": 2, "documents": 5, "numbered": 0}
    back = read_qa_jsonl(qa)
    docs = read_corpus(corpus)
    assert [e.evidence_ids for e in back] == [e.evidence_ids for e in read_hotpotqa(tmp_path / "h.json").examples]
    assert {i for e in back for i in e.evidence_ids} <= {d.id for d in docs}
    again = read_format("flashrag", qa).examples
    assert again == back


def test_convert_writes_nothing_when_the_input_is_bad(tmp_path: Path) -> None:
    bad = copy.deepcopy(MUSIQUE)
    bad[1]["paragraphs"] = "nope"
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    qa.write_text("previous\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError):
        convert("musique", _write_jsonl(tmp_path / "m.jsonl", bad), qa, corpus)
    assert qa.read_text(encoding="utf-8") == "previous\n"
    assert not corpus.exists()
    assert not list(tmp_path.glob(".qa.jsonl.*"))


@pytest.mark.parametrize("content", ["", "\n\n", "[]"])
def test_convert_refuses_an_input_without_records_and_writes_nothing(tmp_path: Path, content: str) -> None:
    src = tmp_path / "empty.json"
    src.write_text(content, encoding="utf-8")
    qa = tmp_path / "qa.jsonl"
    qa.write_text("previous\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=f"^{re.escape(str(src))}: no records"):
        convert("hotpotqa", src, qa)
    assert qa.read_text(encoding="utf-8") == "previous\n"
    no_context = _write_json(tmp_path / "h.json", [{**HOTPOT[0], "context": [], "supporting_facts": []}])
    with pytest.raises(CorpusFormatError, match="no context paragraphs"):
        convert("hotpotqa", no_context, qa, tmp_path / "corpus.jsonl")
    with pytest.raises(ValueError, match="same file"):
        convert("hotpotqa", _write_json(tmp_path / "h.json", HOTPOT), qa, qa)
    assert qa.read_text(encoding="utf-8") == "previous\n" and not (tmp_path / "corpus.jsonl").exists()


def test_convert_flashrag_has_no_corpus_and_unknown_format(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write_qa_jsonl(src, [QAExample("q1", "Who?", ("me",))])
    with pytest.raises(ValueError, match="no context paragraphs"):
        convert("flashrag", src, tmp_path / "out.jsonl", tmp_path / "corpus.jsonl")
    assert convert("flashrag", src, tmp_path / "out.jsonl") == {"examples": 1, "documents": 0, "numbered": 0}
    with pytest.raises(ValueError, match="unknown format"):
        read_format("squad", src)
    assert set(FORMATS) == {"flashrag", "hotpotqa", "musique", "2wiki", "qa"}


# ------------------------------------------------------------------ issue 17: records without ids
def test_hotpotqa_records_without_ids_are_numbered_by_position(tmp_path: Path) -> None:
    with_ids = read_hotpotqa(_write_json(tmp_path / "ids.json", HOTPOT))
    no_id_list = [{k: v for k, v in r.items() if k != "_id"} for r in HOTPOT]
    no_id_columns = [{k: v for k, v in _columns(r).items() if k != "id"} for r in HOTPOT]
    for path in (_write_json(tmp_path / "list.json", no_id_list), _write_jsonl(tmp_path / "hf.jsonl", no_id_columns)):
        first, again = read_hotpotqa(path), read_hotpotqa(path)
        assert [e.id for e in first.examples] == ["hotpotqa-q0", "hotpotqa-q1"]
        assert first.examples == again.examples  # the same ids on every read
        assert first.numbered == 2 and with_ids.numbered == 0
        assert _positions(first) == _positions(with_ids)
    counts = convert("hotpotqa", tmp_path / "hf.jsonl", tmp_path / "qa.jsonl")
    assert counts["numbered"] == 2
    assert [e.id for e in read_qa_jsonl(tmp_path / "qa.jsonl")] == ["hotpotqa-q0", "hotpotqa-q1"]


# ------------------------------------------------------------------ issue 17: question-only files
# R1-Searcher's eval sets (2wiki_500.jsonl, musique_500.jsonl): question and answer, no context.
R1_SEARCHER = [
    {
        "idx": 0,
        "question": "Who is the mother of the director of film Polish-Russian War (Film)?",
        "answer": "Małgorzata Braunek",
        "gen_text_store": "",
    },
    {
        "idx": 1,
        "question": "Who is the spouse of the Green performer?",
        "answer": "Miquette Giraudy",
        "gen_text_store": "",
    },
]


def test_question_only_files_read_as_qa_without_evidence(tmp_path: Path) -> None:
    data = read_format("qa", _write_jsonl(tmp_path / "2wiki_500.jsonl", R1_SEARCHER))
    assert [e.id for e in data.examples] == ["0", "1"]
    assert [e.answers for e in data.examples] == [("Małgorzata Braunek",), ("Miquette Giraudy",)]
    assert all(e.evidence_ids == () and e.decomposition == () for e in data.examples)
    assert data.documents == [] and data.numbered == 0
    # No id at all, answers as a list, a JSON array: numbered, every answer kept.
    bare = [{"question": "Who wrote X?", "answer": ["Ann Lee", "A. Lee"]}]
    (ex,) = read_format("qa", _write_json(tmp_path / "bare.json", bare)).examples
    assert ex.id == "qa-q0" and ex.answers == ("Ann Lee", "A. Lee")
    qa = tmp_path / "qa.jsonl"
    assert convert("qa", tmp_path / "2wiki_500.jsonl", qa) == {"examples": 2, "documents": 0, "numbered": 0}
    assert read_qa_jsonl(qa) == data.examples
    with pytest.raises(ValueError, match="no context paragraphs.*corpus of your choice"):
        convert("qa", tmp_path / "2wiki_500.jsonl", qa, tmp_path / "corpus.jsonl")
    assert not (tmp_path / "corpus.jsonl").exists()


@pytest.mark.parametrize("fmt", ["hotpotqa", "musique", "2wiki", "flashrag"])
def test_question_only_file_read_with_a_dataset_format_points_to_qa(tmp_path: Path, fmt: str) -> None:
    path = _write_jsonl(tmp_path / "musique_500.jsonl", R1_SEARCHER)
    with pytest.raises(CorpusFormatError, match=r"musique_500\.jsonl:1: .*looks like format 'qa'"):
        read_format(fmt, path)


def test_qa_format_refuses_records_that_carry_context(tmp_path: Path) -> None:
    with pytest.raises(CorpusFormatError, match=r"\[record 0\]: field 'context': .*evidence"):
        read_format("qa", _write_json(tmp_path / "h.json", HOTPOT))
    bad = [{**R1_SEARCHER[0], "answer": ""}]
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:1: field 'answer'"):
        read_format("qa", _write_jsonl(tmp_path / "bad.jsonl", bad))


# ------------------------------------------------------------------ issue 17: FlashRAG layouts
def _flashrag_hotpot(record: dict[str, Any], content_key: str = "sentences") -> dict[str, Any]:
    """A HotpotQA (or 2Wiki) record as FlashRAG publishes it: the dataset's columns under ``metadata``."""
    cols = _columns(record)
    meta = {k: v for k, v in cols.items() if k not in ("id", "question", "answer")}
    meta["context"] = {"title": cols["context"]["title"], content_key: cols["context"]["sentences"]}
    return {"id": cols["id"], "question": cols["question"], "golden_answers": [cols["answer"]], "metadata": meta}


def _flashrag_musique(record: dict[str, Any]) -> dict[str, Any]:
    """A MuSiQue record as FlashRAG publishes it: each step carries its ``support_paragraph``."""
    by_idx = {p["idx"]: p for p in record["paragraphs"]}
    steps = [
        {**s, "support_paragraph": by_idx.get(s["paragraph_support_idx"])} for s in record["question_decomposition"]
    ]
    return {
        "id": record["id"],
        "question": record["question"],
        "golden_answers": [record["answer"], *record["answer_aliases"]],
        "metadata": {"question_decomposition": steps},
    }


def _titles(data: Any) -> list[list[str]]:
    """Evidence titles per example, then per decomposition step."""
    docs = {d.id: d.title for d in data.documents}
    return [
        [docs[i] for i in e.evidence_ids] + [docs[i] for s in e.decomposition for i in s.evidence_ids]
        for e in data.examples
    ]


def test_musique_reads_the_flashrag_layout(tmp_path: Path) -> None:
    native = read_musique(_write_jsonl(tmp_path / "m.jsonl", MUSIQUE))
    flash = read_musique(_write_jsonl(tmp_path / "dev.jsonl", [_flashrag_musique(r) for r in MUSIQUE]))
    assert [e.answers for e in flash.examples] == [e.answers for e in native.examples]
    assert [[s.question for s in e.decomposition] for e in flash.examples] == [
        [s.question for s in e.decomposition] for e in native.examples
    ]
    assert _titles(flash) == _titles(native)
    assert [e.type for e in flash.examples] == ["2hop", "3hop1"]
    assert len(flash.documents) == 4  # only the supporting paragraphs are published


def test_flashrag_reads_evidence_and_decompositions_from_metadata(tmp_path: Path) -> None:
    cases = [
        ("hotpotqa", read_hotpotqa(_write_json(tmp_path / "h.json", HOTPOT)), [_flashrag_hotpot(r) for r in HOTPOT]),
        (
            "2wiki",
            read_2wiki(_write_json(tmp_path / "w.json", TWOWIKI)),
            [_flashrag_hotpot(r, "content") for r in TWOWIKI],
        ),
        ("musique", read_musique(_write_jsonl(tmp_path / "m.jsonl", MUSIQUE)), [_flashrag_musique(r) for r in MUSIQUE]),
    ]
    for fmt, native, records in cases:
        path = _write_jsonl(tmp_path / "dev.jsonl", records)
        flash = read_format("flashrag", path)
        assert flash.documents and _titles(flash) == _titles(native)
        assert [e.answers for e in flash.examples] == [e.answers for e in native.examples]
        assert [e.hops for e in flash.examples] == [e.hops for e in native.examples]
        assert _titles(read_format(fmt, path)) == _titles(native)  # the dataset's reader reads this layout too
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    counts = convert(
        "flashrag", _write_jsonl(tmp_path / "dev.jsonl", [_flashrag_hotpot(r) for r in HOTPOT]), qa, corpus
    )
    assert counts["documents"] == 5
    assert {i for e in read_qa_jsonl(qa) for i in e.evidence_ids} <= {d.id for d in read_corpus(corpus)}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["metadata"]["context"]["sentences"].__setitem__(1, "oops"), "context.sentences[1]"),
        (lambda r: r["metadata"].update(supporting_facts={"title": ["Ed Wood"]}), "supporting_facts.sent_id"),
        (lambda r: r.update(golden_answers=[]), "golden_answers"),
    ],
)
def test_flashrag_multihop_errors_name_line_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    records = [_flashrag_hotpot(r) for r in HOTPOT]
    mutate(records[1])
    with pytest.raises(CorpusFormatError, match=rf"dev\.jsonl:2\b.*{re.escape(field)}"):
        read_format("flashrag", _write_jsonl(tmp_path / "dev.jsonl", records))


def test_flashrag_musique_malformed_step_names_line_and_field(tmp_path: Path) -> None:
    records = [_flashrag_musique(r) for r in MUSIQUE]
    records[1]["metadata"]["question_decomposition"][1] = "oops"
    path = _write_jsonl(tmp_path / "dev.jsonl", records)
    for fmt in ("flashrag", "musique"):
        with pytest.raises(
            CorpusFormatError, match=r"dev\.jsonl:2 \(in 'metadata'\): field 'question_decomposition\[1\]'"
        ):
            read_format(fmt, path)


def test_flashrag_reads_a_json_array(tmp_path: Path) -> None:
    lines = tmp_path / "qa.jsonl"
    write_qa_jsonl(lines, [QAExample("q1", "Who?", ("me",), ("d1",)), QAExample("q2", "Where?", ("here",))])
    array = _write_json(tmp_path / "qa.json", [json.loads(line) for line in lines.read_text().splitlines()])
    assert read_format("flashrag", array).examples == read_qa_jsonl(lines)


@pytest.mark.parametrize(
    ("name", "fmt", "looks_like"),
    [
        ("hotpot", "musique", "hotpotqa"),
        ("hotpot", "flashrag", "hotpotqa"),
        ("hotpot", "qa", "hotpotqa"),
        ("musique", "hotpotqa", "musique"),
        ("2wiki", "hotpotqa", "2wiki"),
        ("flashrag", "hotpotqa", "flashrag"),
        ("flashrag-musique", "2wiki", "flashrag"),
    ],
)
def test_wrong_format_says_which_format_the_file_looks_like(
    tmp_path: Path, name: str, fmt: str, looks_like: str
) -> None:
    two_wiki = _columns(TWOWIKI[0])
    two_wiki["context"] = {"title": two_wiki["context"]["title"], "content": two_wiki["context"]["sentences"]}
    records = {
        "hotpot": HOTPOT,
        "musique": MUSIQUE,
        "2wiki": [two_wiki],
        "flashrag": [QAExample("q1", "Who?", ("me",)).to_flashrag()],
        "flashrag-musique": [_flashrag_musique(r) for r in MUSIQUE],
    }[name]
    path = _write_jsonl(tmp_path / "in.jsonl", records)
    with pytest.raises(CorpusFormatError, match=f"in.jsonl:1[ :].*looks like format '{looks_like}', not '{fmt}'"):
        read_format(fmt, path)


# ------------------------------------------------------------------ issue 31: 2, 6
def test_convert_refuses_to_write_over_its_input(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    write_qa_jsonl(src, [QAExample("q1", "Who?", ("me",))])
    before = src.read_bytes()
    with pytest.raises(ValueError, match="--out-qa .* is the input file"):
        convert("flashrag", src, src)
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    with pytest.raises(ValueError, match="is the input file"):
        convert("flashrag", src, tmp_path / "out.jsonl", link)
    hotpot = _write_json(tmp_path / "h.json", HOTPOT)
    hotpot_bytes = hotpot.read_bytes()
    with pytest.raises(ValueError, match="--out-corpus .* is the input file"):
        convert("hotpotqa", hotpot, tmp_path / "qa.jsonl", tmp_path / "." / "h.json")
    assert src.read_bytes() == before and hotpot.read_bytes() == hotpot_bytes


def test_a_lone_surrogate_is_refused_on_reading_and_convert_keeps_the_old_pair(tmp_path: Path) -> None:
    # before: "\ud800" passed every reader and failed at write time, after --out-qa was replaced
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    qa.write_text("old questions\n", encoding="utf-8")
    corpus.write_text("old corpus\n", encoding="utf-8")
    bad = copy.deepcopy(HOTPOT)
    bad[1]["context"][0][1][0] = "A sentence \ud800 cut."
    src = tmp_path / "h.json"
    src.write_text(json.dumps(bad), encoding="utf-8")  # ensure_ascii: the lone surrogate as an escape
    with pytest.raises(CorpusFormatError, match=r"h\.json.*context.*not Unicode text.*lone surrogate"):
        convert("hotpotqa", src, qa, corpus)
    assert qa.read_text(encoding="utf-8") == "old questions\n"
    assert corpus.read_text(encoding="utf-8") == "old corpus\n"
    lines = tmp_path / "c.jsonl"
    lines.write_text('{"id": "d1", "contents": "T\\nok"}\n{"id": "d2", "contents": "T\\nx\\udc00"}\n', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"c\.jsonl:2: contents is not Unicode text"):
        read_corpus(lines)
    pair = tmp_path / "pair.jsonl"  # a surrogate pair is one character, and fine
    pair.write_text('{"id": "d1", "contents": "T\\n\\ud83d\\ude00"}\n', encoding="utf-8")
    assert read_corpus(pair)[0].text == "\U0001f600"


def test_convert_replaces_neither_output_when_writing_one_fails(tmp_path: Path, monkeypatch: Any) -> None:
    import searchenv.tasks.formats as formats

    def failing_lines(documents: Any) -> Any:
        yield "one line"
        raise OSError("No space left on device")

    monkeypatch.setattr(formats, "corpus_lines", failing_lines)
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    qa.write_text("old questions\n", encoding="utf-8")
    corpus.write_text("old corpus\n", encoding="utf-8")
    with pytest.raises(OSError, match="No space"):
        convert("hotpotqa", _write_json(tmp_path / "h.json", HOTPOT), qa, corpus)
    assert qa.read_text(encoding="utf-8") == "old questions\n"
    assert corpus.read_text(encoding="utf-8") == "old corpus\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "h.json", "qa.jsonl"]


# ------------------------------------------------------------------ issue 31: 8
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"golden_answers": ""}, r"golden_answers"),
        ({"golden_answers": ["Karsk", " ? "]}, r"answers\[1\] ' \? ' has no letter or digit"),
        ({"id": "   "}, r"field 'id' must be a non-empty string, got '   '"),
        ({"metadata": {"hops": -3}}, r"'metadata.hops' must be a positive integer, got -3"),
        ({"metadata": {"decomposition": [{"question": None, "answer": "x"}]}},
         r"'metadata.decomposition\[0\].question' must be a non-empty string, got None"),
        ({"metadata": {"decomposition": [{"question": "Where?", "answer": None}]}},
         r"'metadata.decomposition\[0\].answer' must be a non-empty string, got None"),
    ],
)
def test_qa_records_that_would_score_anything_or_lie_are_refused(tmp_path: Path, change: dict[str, Any],
                                                                  message: str) -> None:
    # before: all of these loaded ("" gold answers made <answer>the</answer> score EM 1.0; None became "None")
    good = {"id": "q1", "question": "Where was Tobin Quenn born?", "golden_answers": ["Karsk"]}
    path = _write_jsonl(tmp_path / "qa.jsonl", [good, {**good, "id": "q2", **change}])
    with pytest.raises(CorpusFormatError, match=rf"qa\.jsonl:2: .*{message}"):
        read_qa_jsonl(path)
    with pytest.raises(CorpusFormatError, match=r"qa\.jsonl:2: "):
        read_format("flashrag", path)

