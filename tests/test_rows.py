"""Engine dataset rows: written by ``searchenv rows``, read back by the adapters."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.tasks import QAExample, blank_answer, write_qa_jsonl
from searchenv.tasks.rows import example_from_row, task_rows, write_parquet

from .conftest import EXAMPLES

runner = CliRunner()
text = st.text(min_size=1, max_size=30).filter(lambda s: s.strip())
answer = text.filter(lambda s: not blank_answer(s))  # "", "?" are refused (issue 31: 8)


@given(st.lists(st.tuples(text, st.lists(answer, min_size=1, max_size=3), st.lists(text, max_size=3)), min_size=1,
                max_size=5))
def test_rows_round_trip(items: list[tuple[str, list[str], list[str]]]) -> None:
    examples = [QAExample(f"q{i}", q, tuple(a), tuple(e)) for i, (q, a, e) in enumerate(items)]
    for ex, row in zip(examples, task_rows(examples, data_source="x", split="train"), strict=True):
        back = example_from_row(row)
        assert (back.id, back.question, back.answers, back.evidence_ids) == (ex.id, ex.question, ex.answers,
                                                                                ex.evidence_ids)


@given(text, text, st.lists(st.one_of(answer, st.integers()), min_size=1, max_size=3),
       st.one_of(text, st.lists(st.one_of(text, st.integers()), max_size=3)))
def test_a_row_gives_the_example_the_dataclass_would(ident: str, question: str, answers: list[object],
                                                     evidence: object) -> None:
    """The flat-row reader builds examples without re-running QAExample's checks: same value, as frozen."""
    back = example_from_row({"id": ident, "question": question, "answers": answers, "evidence_ids": evidence})
    expected = QAExample(ident, question, tuple(map(str, answers)),
                         (evidence,) if isinstance(evidence, str) else tuple(map(str, evidence)))  # type: ignore[call-overload]
    assert back == expected and hash(back.answers) == hash(expected.answers)
    assert (back.decomposition, back.type, back.hops, back.metadata) == ((), "single-hop", 1, {})
    with pytest.raises(AttributeError):
        back.question = "changed"  # type: ignore[misc]
    assert back.metadata is not example_from_row({"question": question, "answers": answers}).metadata


def test_rows_of_other_layouts_and_bad_rows() -> None:
    skyrl = {"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Where is Karsk?"}],
             "reward_spec": {"ground_truth": {"target": "Vuldoria"}}}
    ex = example_from_row(skyrl)
    assert ex.question == "Where is Karsk?" and ex.answers == ("Vuldoria",) and ex.evidence_ids == ()
    with pytest.raises(ValueError, match="no question"):
        example_from_row({"answers": ["a"]})
    with pytest.raises(ValueError, match="no gold answers"):
        example_from_row({"question": "q", "reward_model": {"ground_truth": {"target": []}}})
    # issue 31: 8. A gold answer that normalizes to nothing would let "<answer>the</answer>" score EM 1
    with pytest.raises(ValueError, match=r"gold answer 1 \('\?'\) has no letter or digit"):
        example_from_row({"question": "q", "answers": ["Karsk", "?"]})
    assert example_from_row({"question": "q", "answers": ["A"]}).answers == ("A",)  # a word, if an article


def test_rows_command_writes_parquet_verl_reads(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    out = tmp_path / "verl" / "train.parquet"
    res = runner.invoke(get_app(), ["rows", "--task", str(qa), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(EXAMPLES) and rows[0]["agent_name"] == "searchqa_agent"
    assert rows[0]["reward_model"]["ground_truth"]["target"] == list(EXAMPLES[0].answers)
    assert [example_from_row(r).id for r in rows] == [ex.id for ex in EXAMPLES]
    res = runner.invoke(get_app(), ["rows", "--task", str(qa), "--split", "dev", "--out", str(out)])
    assert res.exit_code == 2 and "one split" in res.output
    before = out.read_bytes()
    res = runner.invoke(get_app(), ["rows", "--task", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    assert res.exit_code == 1 and out.read_bytes() == before  # nothing written over the old file
    with pytest.raises(ValueError, match="no rows"):
        write_parquet([], tmp_path / "empty.parquet")
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.parquet"]  # no temporary file left


@given(text, st.lists(answer, min_size=1, max_size=3), st.lists(text, max_size=3), st.sampled_from(["dict", "proxy"]))
def test_flat_and_nested_rows_read_the_same(question: str, answers: list[str], evidence: list[str],
                                            info_kind: str) -> None:
    from types import MappingProxyType

    flat = {"question": question, "answers": answers, "evidence_ids": evidence, "id": 7}
    info = {"question": question, "answers": answers, "evidence_ids": evidence, "id": 7}
    nested = {"question": None, "evidence_ids": None, "id": None,
              "extra_info": info if info_kind == "dict" else MappingProxyType(info)}
    a, b = example_from_row(flat), example_from_row(nested)
    assert (a.id, a.question, a.answers, a.evidence_ids) == (b.id, b.question, b.answers, b.evidence_ids)
    assert (a.id, a.question, a.answers, a.evidence_ids) == ("7", question, tuple(answers), tuple(evidence))
    assert example_from_row({**flat, "extra_info": "not a mapping"}).question == question
