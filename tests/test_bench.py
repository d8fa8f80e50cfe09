"""``searchenv bench``: both suites on fixtures in their public layouts; card numbers recomputed by hand.

The fixtures under ``tests/fixtures/bench`` are written in the published layouts: FlashRAG QA JSONL
files of the seven Search-R1 sets with a wiki-18-style corpus (``{"id", "contents"}`` with the quoted
title on the first line), and BrowseComp-Plus's decrypted queries, ``{"docid", "text", "url"}``
corpus and TREC qrels.
"""

from __future__ import annotations

import json
import re
import shutil
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.baselines import EpisodeState, Turn
from agents.evaluation.bench import compare_cards, read_card, run_bench
from searchenv.cli import get_app
from searchenv.corpus import CorpusFormatError
from searchenv.tasks.formats import read_browsecomp_plus, read_trec_qrels

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
SEVEN = ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"]


# ------------------------------------------------------------- an independent scorer, written out here


def _norm(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _em(pred: str | None, golds: Sequence[str]) -> float:
    return float(pred is not None and any(_norm(pred) == _norm(g) for g in golds))


def _cover(pred: str | None, golds: Sequence[str]) -> float:
    return float(pred is not None and any(_norm(g) and _norm(g) in _norm(pred) for g in golds))


def _f1(pred: str | None, golds: Sequence[str]) -> float:
    if pred is None:
        return 0.0
    best = 0.0
    for g in golds:
        p, t = _norm(pred).split(), _norm(g).split()
        if {_norm(pred), _norm(g)} & {"yes", "no", "noanswer"} and _norm(pred) != _norm(g):
            continue
        common = sum((Counter(p) & Counter(t)).values())
        if not p or not t:
            best = max(best, float(p == t))
        elif common:
            prec, rec = common / len(p), common / len(t)
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


def _words(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def _by_hand(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """A card row from transcripts, computed without the package's metric code."""
    n = len(episodes)
    codes: Counter[str] = Counter(s["invalid_reason"] for e in episodes for s in e["steps"] if s["invalid_reason"])
    return {
        "n": n,
        "em": sum(_em(e["answer"], e["gold"]) for e in episodes) / n,
        "cover_em": sum(_cover(e["answer"], e["gold"]) for e in episodes) / n,
        "f1": sum(_f1(e["answer"], e["gold"]) for e in episodes) / n,
        "searches": sum(sum(s["action_type"] == "search" for s in e["steps"]) for e in episodes) / n,
        "turns": sum(len(e["steps"]) for e in episodes) / n,
        "answered": sum(e["answer"] is not None for e in episodes) / n,
        "gen_tokens": 0.0,
        "read_tokens": sum(_words(m["content"]) for e in episodes for m in e["messages"] if m["role"] == "tool") / n,
        "invalid_turns": sum(codes.values()) / n,
        "invalid_by_code": dict(codes),
        "unanswered": sum(e["answer"] is None for e in episodes),
    }


def _check_row(row: dict[str, Any], want: dict[str, Any]) -> None:
    for key, value in want.items():
        if isinstance(value, float):
            assert row[key] == pytest.approx(value, abs=1e-12), key
        else:
            assert row[key] == value, key


def _bench(args: list[str]) -> Any:
    return CliRunner().invoke(get_app(), ["bench", *args])


# ------------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("agent", ["heuristic", "random"])
def test_seven_set_suite_card_equals_numbers_recomputed_by_hand(tmp_path: Path, agent: str) -> None:
    out = tmp_path / "run"
    result = _bench(["search-r1", "--data", str(FIXTURES / "search-r1"), "--agent", agent, "--out", str(out),
                     "--index-root", str(tmp_path / "idx"), "--seed", "3"])
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    assert list(card["sets"]) == SEVEN
    rows = {}
    for name in SEVEN:
        episodes = [json.loads(x) for x in (out / "transcripts" / f"{name}.jsonl").read_text().splitlines()]
        qa_file = next((FIXTURES / "search-r1" / name).glob("*.jsonl"))
        questions = [json.loads(x) for x in qa_file.read_text().splitlines()]
        assert [e["example_id"] for e in episodes] == [q["id"] for q in questions]
        rows[name] = _by_hand(episodes)
        _check_row(card["sets"][name], rows[name])
        assert card["sets"][name]["judge_acc"] is None and card["sets"][name]["failed"] == 0
    for key in ("em", "cover_em", "f1", "searches", "turns", "read_tokens"):  # each set weighs the same
        assert card["average"][key] == pytest.approx(sum(r[key] for r in rows.values()) / 7, abs=1e-12)
    assert card["average"]["n"] == 10
    # the comparability settings
    s = card["settings"]
    assert s["corpus_fingerprint"] and s["index_kind"] == "bm25" and len(s["index_hash"]) == 64
    assert (s["top_k"], s["max_turns"], s["protocol"], s["agent"]) == (3, 4, "search-r1", agent)
    assert s["sampling"]["seed"] == 3 and s["code_version"]["searchenv"]
    assert card["read_token_unit"] == "words"
    assert all(r["note"] == "published, not measured here" for r in card["published"])
    md = (out / "card.md").read_text()
    assert md == result.stdout[result.stdout.index("# search-r1"):]
    assert "published, not measured here" in md.lower() and "| **average** | 10 |" in md
    assert not list((out / "checkpoints").rglob("*.jsonl"))  # complete: nothing left to resume


def test_browsecomp_plus_layout_runs_with_qrels_as_evidence(tmp_path: Path) -> None:
    out = tmp_path / "bc"
    result = _bench(["browsecomp-plus", "--data", str(FIXTURES / "browsecomp-plus"), "--agent", "oracle",
                     "--out", str(out), "--index-root", str(tmp_path / "idx"), "--max-turns", "6"])
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    episodes = [json.loads(x) for x in (out / "transcripts" / "browsecomp-plus.jsonl").read_text().splitlines()]
    assert [e["example_id"] for e in episodes] == ["1", "2", "3"]
    _check_row(card["sets"]["browsecomp-plus"], _by_hand(episodes))
    # the oracle answers only once it retrieved every evidence document the qrels name
    assert card["sets"]["browsecomp-plus"]["em"] == pytest.approx(
        sum(e["metrics"]["evidence_recall"] == 1.0 for e in episodes) / 3)
    assert {d for e in episodes for s in e["steps"] for d in s["doc_ids"]} <= {f"doc-{i}" for i in range(101, 109)}
    assert card["published"] == [] and card["settings"]["suite"] == "browsecomp-plus"


def test_one_index_per_corpus_is_built_once_and_reused(tmp_path: Path) -> None:
    args = ["search-r1", "--data", str(FIXTURES / "search-r1"), "--agent", "heuristic", "--index-root",
            str(tmp_path / "idx"), "--set", "nq", "--set", "bamboogle"]
    first = _bench([*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    [folder] = list((tmp_path / "idx").iterdir())
    stamp = (folder / "searchenv_index.json").stat().st_mtime_ns
    second = _bench([*args, "--out", str(tmp_path / "b")])
    assert second.exit_code == 0, second.output
    assert (folder / "searchenv_index.json").stat().st_mtime_ns == stamp and "building" in first.output
    assert "building" not in second.output
    a, b = read_card(tmp_path / "a" / "card.json"), read_card(tmp_path / "b" / "card.json")
    assert list(a["sets"]) == ["nq", "bamboogle"] and compare_cards(a, b) == []
    assert a["sets"] == b["sets"]


def test_an_index_folder_of_another_corpus_is_refused(tmp_path: Path) -> None:
    built = _bench(["browsecomp-plus", "--data", str(FIXTURES / "browsecomp-plus"), "--agent", "oracle",
                    "--out", str(tmp_path / "bc"), "--index-root", str(tmp_path / "idx")])
    assert built.exit_code == 0, built.output
    [folder] = list((tmp_path / "idx").iterdir())
    result = _bench(["search-r1", "--data", str(FIXTURES / "search-r1"), "--agent", "oracle", "--out",
                     str(tmp_path / "x"), "--index", str(folder)])
    assert result.exit_code == 2
    assert "belongs to another corpus" in result.output and "Traceback" not in result.output


def test_missing_files_are_named_with_where_they_come_from(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "search-r1", data)
    (data / "musique" / "dev.jsonl").unlink()
    (data / "wiki-18.jsonl").unlink()
    result = _bench(["search-r1", "--data", str(data), "--agent", "oracle", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "musique/dev.jsonl" in result.output and "wiki-18.jsonl" in result.output
    assert "docs/reference/benchmarks.md" in result.output


def test_a_bad_record_is_named_by_file_line_and_field(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "search-r1", data)
    lines = (data / "popqa" / "test.jsonl").read_text().splitlines()
    lines[1] = json.dumps({"id": "test_1", "question": "In what country is Ostrava?", "golden_answers": "?"})
    (data / "popqa" / "test.jsonl").write_text("\n".join(lines) + "\n")
    result = _bench(["search-r1", "--data", str(data), "--agent", "oracle", "--out", str(tmp_path / "o"),
                     "--index-root", str(tmp_path / "idx")])
    assert result.exit_code == 2
    assert f"{data / 'popqa' / 'test.jsonl'}:2" in result.output and "golden_answers" in result.output


def test_unknown_suite_and_set_are_refused(tmp_path: Path) -> None:
    result = _bench(["nope", "--data", str(tmp_path), "--agent", "oracle", "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "unknown suite" in result.output
    result = _bench(["search-r1", "--data", str(FIXTURES / "search-r1"), "--agent", "oracle", "--out",
                     str(tmp_path / "o"), "--set", "squad"])
    assert result.exit_code == 2 and "no set 'squad'" in result.output


# ----------------------------------------------- a scripted agent: every metric, with numbers worked out


class Scripted:
    """Turn 1: an invalid turn for q ids ending in 0; then one search; then the answer in ``ANSWERS``
    (no answer for the ids missing there, which keep searching until the budget ends)."""

    name = "scripted"
    max_turns: int | None = None

    def __init__(self, answers: dict[str, str], fail_after: int | None = None) -> None:
        self.answers = answers
        self.fail_after = fail_after
        self.calls: list[str] = []

    def adapt_protocol(self, protocol: Any) -> Any:
        return protocol

    def act(self, episodes: Sequence[EpisodeState], *, seed: int) -> list[Turn]:
        turns = []
        for ep in episodes:
            if ep.turn == 0:
                self.calls.append(ep.example.id)
                if self.fail_after is not None and len(self.calls) > self.fail_after:
                    raise KeyboardInterrupt("killed")
            if ep.turn == 0 and ep.example.id.endswith("0"):
                turns.append(Turn("I think the answer is near."))  # no action: invalid
            elif ep.turn <= 1 or ep.example.question not in self.answers:
                turns.append(Turn(f"<search> {ep.example.question} </search>"))
            else:
                turns.append(Turn(f"<answer> {self.answers[ep.example.question]} </answer>"))
        return turns


# question -> answer, for the nq and triviaqa fixture sets
ANSWERS = {
    "who wrote the novel moby dick": "Herman Melville",  # test_0: EM 1, cover 1, F1 1
    "what is the capital city of australia": "Sydney, not Canberra",  # test_1: EM 0, cover 1, F1 2/4=0.5
    "Which planet is known as the Red Planet?": "planet Mars",  # test_0: EM 0, cover 1, F1 2/3
    # triviaqa test_1 (Timbuktu) is never answered
}


def _scripted_run(tmp_path: Path, out: Path, agent: Scripted) -> dict[str, Any]:
    return run_bench("search-r1", FIXTURES / "search-r1", out, agent, sets=["nq", "triviaqa"],
                     index_root=tmp_path / "idx", max_turns=3, batch_size=1)


def test_scripted_run_every_metric_worked_out_by_hand(tmp_path: Path) -> None:
    card = _scripted_run(tmp_path, tmp_path / "s", Scripted(ANSWERS))
    nq, tq, avg = card["sets"]["nq"], card["sets"]["triviaqa"], card["average"]
    # nq: test_0 invalid, search, answer (3 turns); test_1 search, search, answer (3 turns)
    _check_row(nq, {"n": 2, "em": 0.5, "cover_em": 1.0, "f1": 0.75, "searches": 1.5, "turns": 3.0,
                    "answered": 1.0, "invalid_turns": 0.5, "invalid_by_code": {"no_action": 1}, "unanswered": 0,
                    "gen_tokens": 0.0})
    # triviaqa: test_0 invalid, search, answer; test_1 three searches, no answer (turn budget)
    _check_row(tq, {"n": 2, "em": 0.0, "cover_em": 0.5, "f1": (2 / 3) / 2, "searches": 2.0, "turns": 3.0,
                    "answered": 0.5, "invalid_turns": 0.5, "invalid_by_code": {"no_action": 1}, "unanswered": 1})
    _check_row(avg, {"n": 4, "em": 0.25, "cover_em": 0.75, "f1": (0.75 + 1 / 3) / 2, "searches": 1.75,
                     "invalid_by_code": {"no_action": 2}, "unanswered": 1})
    assert card["settings"]["agent"] == "scripted"


def test_a_killed_run_continues_where_it_stopped_and_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    whole = _scripted_run(tmp_path, tmp_path / "whole", Scripted(ANSWERS))
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        _scripted_run(tmp_path, out, Scripted(ANSWERS, fail_after=3))  # nq done, triviaqa test_0 saved
    assert not (out / "card.json").exists()
    again = Scripted(ANSWERS)
    card = _scripted_run(tmp_path, out, again)
    assert again.calls == ["test_1"]  # only triviaqa's second question was left
    assert card["sets"] == whole["sets"] and card["average"] == whole["average"]
    assert compare_cards(card, whole) == []


def test_compare_cards_names_every_setting_that_differs(tmp_path: Path) -> None:
    a = _scripted_run(tmp_path, tmp_path / "a", Scripted(ANSWERS))
    b = run_bench("search-r1", FIXTURES / "search-r1", tmp_path / "b", Scripted(ANSWERS), sets=["nq"],
                  index_root=tmp_path / "idx", max_turns=2, top_k=2, batch_size=1)
    lines = compare_cards(a, b)
    assert any(line.startswith("max_turns: 3 vs 2") for line in lines)
    assert any(line.startswith("top_k: 3 vs 2") for line in lines)
    assert "set triviaqa: only in the first card" in lines
    result = CliRunner().invoke(get_app(), ["compare-cards", str(tmp_path / "a" / "card.json"),
                                            str(tmp_path / "b" / "card.json")])
    assert result.exit_code == 0 and "not comparable" in result.output and "top_k: 3 vs 2" in result.output
    same = CliRunner().invoke(get_app(), ["compare-cards", str(tmp_path / "a" / "card.json"),
                                          str(tmp_path / "a" / "card.json")])
    assert "same settings" in same.output


# ------------------------------------------------------------------------------ BrowseComp-Plus files


def test_browsecomp_plus_reader_and_its_errors(tmp_path: Path) -> None:
    examples = read_browsecomp_plus(FIXTURES / "browsecomp-plus" / "browsecomp_plus_decrypted.jsonl",
                                    FIXTURES / "browsecomp-plus" / "topics-qrels" / "qrel_evidence.txt")
    assert [(e.id, e.answers, e.evidence_ids) for e in examples][1] == ("2", ("Halea",),
                                                                        ("doc-104", "doc-105", "doc-106"))
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"query_id": 1, "query": "q?", "answer": "a"}\n{"query_id": 2, "query": "q2?"}\n')
    with pytest.raises(CorpusFormatError, match=rf"{re.escape(str(bad))}:2: field 'answer'"):
        read_browsecomp_plus(bad)
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("1 0 doc-1 1\n1 0 doc-2 high\n")
    with pytest.raises(CorpusFormatError, match=rf"{re.escape(str(qrels))}:2: field 'REL' .* 'high'"):
        read_trec_qrels(qrels)
    qrels.write_text("1 0 doc-1 1\n1 0 doc-2 0\n9 0 doc-3 1\n")
    assert read_trec_qrels(qrels) == {"1": ["doc-1"], "9": ["doc-3"]}
    good = tmp_path / "g.jsonl"
    good.write_text('{"query_id": 1, "query": "q?", "answer": "a"}\n')
    with pytest.raises(CorpusFormatError, match="'9'"):
        read_browsecomp_plus(good, qrels)


def test_questions_per_set_must_be_a_positive_integer(tmp_path: Path) -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n must be a positive integer"):
            run_bench("search-r1", FIXTURES / "search-r1", tmp_path / "o", "oracle", n=bad)  # type: ignore[arg-type]
    card = run_bench("search-r1", FIXTURES / "search-r1", tmp_path / "o", "oracle", n=1, sets=["nq", "popqa"],
                     index_root=tmp_path / "idx")
    assert [r["n"] for r in card["sets"].values()] == [1, 1] and card["settings"]["questions_per_set"] == 1


def test_judge_flags_are_checked(tmp_path: Path) -> None:
    result = _bench(["search-r1", "--data", str(FIXTURES / "search-r1"), "--agent", "oracle", "--out",
                     str(tmp_path / "o"), "--judge-model", "m"])
    assert result.exit_code == 2 and "--judge-model applies to --judge-url" in result.output
