"""A new user's first hour with files in a public layout (issue 34, items 4-9).

The fixtures are HotpotQA's distractor layout as published (a JSON array of records with
``_id``, ``question``, ``answer``, ``type``, ``level``, ``supporting_facts`` as ``[title,
sentence index]`` pairs and ``context`` as ``[title, [sentences]]`` pairs), two supporting
titles per question, in two files: a dev file and a train file with other questions and
paragraphs, as a user downloads them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app
from searchenv.corpus import DataWarning, corpus_fingerprint, read_corpus
from searchenv.tasks import read_qa_jsonl

runner = CliRunner()


def _record(qid: str, question: str, answer: str, qtype: str, gold: list[tuple[str, list[str]]],
            distractors: list[tuple[str, list[str]]]) -> dict[str, object]:
    return {
        "_id": qid,
        "question": question,
        "answer": answer,
        "type": qtype,
        "level": "medium",
        "supporting_facts": [[title, len(sents) - 1] for title, sents in gold],
        "context": [[title, sents] for title, sents in [gold[0], *distractors[:1], gold[1], *distractors[1:]]],
    }


HOTPOT_DEV = [
    _record(
        "5ab3b0bf5542992ade7c6e39", "Which city hosts the observatory founded by the astronomer Irena Valko?",
        "Kestrel Bay", "bridge",
        [("Irena Valko", ["Irena Valko was an astronomer.", " She founded the Larkspur Observatory in 1931."]),
         ("Larkspur Observatory", ["The Larkspur Observatory is a research station.",
                                   " It stands on a hill above Kestrel Bay."])],
        [("Kestrel (bird)", ["A kestrel is a small falcon."]),
         ("Irena Valko Prize", ["The Irena Valko Prize is an award given by an astronomy society."])],
    ),
    _record(
        "5a8c7595554299585d9e36b6", "Which river is longer, the Ostrava Water or the Delmore?", "Delmore",
        "comparison",
        [("Ostrava Water", ["The Ostrava Water is a river.", " It is 210 kilometres long."]),
         ("Delmore", ["The Delmore is a river in the north.", " It is 640 kilometres long."])],
        [("Delmore Bridge", ["Delmore Bridge crosses a river near a mill."]),
         ("Ostrava", ["Ostrava is a city in the east."])],
    ),
    _record(
        "5ae0185b55429942ec259c1b", "What instrument did the teacher of the composer Anselm Rook play?",
        "viola", "bridge",
        [("Anselm Rook", ["Anselm Rook was a composer.", " He studied with Petra Linde."]),
         ("Petra Linde", ["Petra Linde was a teacher and musician.", " She played the viola."])],
        [("Rook (chess)", ["The rook is a chess piece."]),
         ("Anselm Rook Quartet", ["The Anselm Rook Quartet is a group of composer fans who play."])],
    ),
]

HOTPOT_TRAIN = [
    _record(
        "5a7a06935542990198eaf050", "Which magazine was started first, the Arden Review or the Vell Gazette?",
        "Arden Review", "comparison",
        [("Arden Review", ["The Arden Review is a literary magazine.", " It was started in 1844."]),
         ("Vell Gazette", ["The Vell Gazette is a magazine for gardeners.", " It was started in 1989."])],
        [("Arden (forest)", ["Arden is a forest."]), ("Gazette", ["A gazette is a newspaper."])],
    ),
    _record(
        "5a879ab05542996e4f30887e", "In which country was the painter of Blue Harbour born?", "Norland", "bridge",
        [("Blue Harbour", ["Blue Harbour is a painting.", " It was painted by Oskar Wend."]),
         ("Oskar Wend", ["Oskar Wend was a painter.", " He was born in Norland."])],
        [("Harbour", ["A harbour is a sheltered body of water."]), ("Wend people", ["The Wends are a people."])],
    ),
]


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def _convert(tmp_path: Path, name: str, records: list[dict[str, object]]) -> tuple[Path, Path]:
    src = _write(tmp_path / f"{name}.json", records)
    qa, corpus = tmp_path / name / "qa.jsonl", tmp_path / name / "corpus.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "hotpotqa", "--out-qa", str(qa),
                                    "--out-corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    return qa, corpus


def _index(corpus: Path, out: Path) -> Path:
    res = runner.invoke(get_app(), ["index", "--corpus", str(corpus), "--retriever", "bm25", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


# ------------------------------------------------------------------ 8. errors that mislead
def test_play_with_a_qa_file_and_no_corpus_names_the_flag(tmp_path: Path) -> None:
    qa, _ = _convert(tmp_path, "dev", HOTPOT_DEV)
    res = runner.invoke(get_app(), ["play", "--task", str(qa)], input="")
    assert res.exit_code == 2, res.output
    assert "--corpus" in res.output and "--retriever" in res.output
    assert "corpus=PATH" not in res.output and not isinstance(res.exception, ValueError)


@pytest.mark.parametrize(("command", "code"), [(["eval", "--agent", "oracle"], 2), (["play"], 2),
                                             (["rows", "--out", "rows.parquet"], 1)])
def test_a_mistyped_task_file_says_file_not_found(tmp_path: Path, command: list[str], code: int) -> None:
    typo = tmp_path / "my" / "qa.jsnl"
    res = runner.invoke(get_app(), [*command, "--task", str(typo)], input="")
    assert res.exit_code == code, res.output
    assert "not found" in res.output and str(typo) in res.output
    assert "unknown task" not in res.output


def test_eval_retrieval_with_a_missing_qa_file_names_the_flag(tmp_path: Path) -> None:
    _, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    index = _index(corpus, tmp_path / "idx")
    res = runner.invoke(get_app(), ["eval-retrieval", "--index", str(index), "--qa", str(tmp_path / "missing")])
    assert res.exit_code == 2, res.output
    assert "--qa" in res.output and "Errno" not in res.output


def test_format_2wiki_refuses_a_hotpotqa_file_and_says_what_it_looks_like(tmp_path: Path) -> None:
    src = _write(tmp_path / "hotpot_dev_distractor_v1.json", HOTPOT_DEV)
    qa = tmp_path / "qa.jsonl"
    res = runner.invoke(get_app(), ["convert", str(src), "--format", "2wiki", "--out-qa", str(qa)])
    assert res.exit_code == 1, res.output
    assert "[record 0]" in res.output and "'evidences'" in res.output
    assert "looks like format 'hotpotqa', not '2wiki'" in res.output
    assert not qa.exists()


# ------------------------------------------------------------------ 9. doc drift
def test_play_help_lists_every_protocol() -> None:
    from searchenv.protocols import protocol_names

    res = runner.invoke(get_app(), ["play", "--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    for name in protocol_names():
        assert name in res.output, name


def test_results_json_says_split_file_for_a_file_task(tmp_path: Path) -> None:
    qa, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    out = tmp_path / "run"
    res = runner.invoke(get_app(), ["eval", "--agent", "heuristic", "--task", str(qa), "--corpus", str(corpus),
                                    "--n", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["split"] == "file"


# ------------------------------------------------------------------ 4. silent zeros on mismatched files
def test_converted_passage_ids_are_prefixed_per_file(tmp_path: Path) -> None:
    _, dev_corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    _, train_corpus = _convert(tmp_path, "train", HOTPOT_TRAIN)
    dev_ids = [d.id for d in read_corpus(dev_corpus)]
    train_ids = [d.id for d in read_corpus(train_corpus)]
    assert not set(dev_ids) & set(train_ids)  # an index of one file never answers with the other's ids
    (tmp_path / "again").mkdir()
    _, again = _convert(tmp_path / "again", "dev", HOTPOT_DEV)
    assert [d.id for d in read_corpus(again)] == dev_ids  # the same file gives the same ids on every run


def test_converted_questions_carry_the_fingerprint_of_their_corpus(tmp_path: Path) -> None:
    from searchenv.retrievers.index.metadata import read_meta

    qa, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    index = _index(corpus, tmp_path / "idx")
    fingerprints = {ex.metadata.get("corpus_fingerprint") for ex in read_qa_jsonl(qa)}
    assert fingerprints == {corpus_fingerprint(read_corpus(corpus))} == {read_meta(index)["fingerprint"]}


def _mismatched(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Dev questions, the dev corpus, an index of the dev corpus and an index of the train corpus."""
    dev_qa, dev_corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    _, train_corpus = _convert(tmp_path, "train", HOTPOT_TRAIN)
    return dev_qa, dev_corpus, _index(dev_corpus, tmp_path / "dev-idx"), _index(train_corpus, tmp_path / "train-idx")


def test_eval_retrieval_warns_once_when_evidence_ids_are_not_in_the_index(tmp_path: Path) -> None:
    dev_qa, dev_corpus, dev_idx, train_idx = _mismatched(tmp_path)
    res = runner.invoke(get_app(), ["eval-retrieval", "--index", str(train_idx), "--qa", str(dev_qa), "--k", "1", "5"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("warning:") == 1, res.stderr
    warning = " ".join(res.stderr.split())
    assert "6 of the 6 gold evidence ids" in warning and "not in index" in warning and str(train_idx) in warning
    assert corpus_fingerprint(read_corpus(dev_corpus)) in warning  # the corpus the questions belong to
    res = runner.invoke(get_app(), ["eval-retrieval", "--index", str(dev_idx), "--qa", str(dev_qa), "--k", "1", "5"])
    assert res.exit_code == 0 and "warning" not in res.stderr, res.stderr


def test_eval_warns_once_when_the_oracle_cannot_find_the_evidence(tmp_path: Path) -> None:
    dev_qa, _, _, train_idx = _mismatched(tmp_path)
    res = runner.invoke(get_app(), ["eval", "--agent", "oracle", "--agent", "heuristic", "--task", str(dev_qa),
                                    "--retriever", str(train_idx), "--n", "3"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("warning:") == 1, res.stderr
    assert "not in index" in " ".join(res.stderr.split())


def test_the_env_warns_when_its_questions_evidence_is_not_in_the_index(tmp_path: Path) -> None:
    from searchenv.env import SearchQAEnv

    dev_qa, _, dev_idx, train_idx = _mismatched(tmp_path)
    with pytest.warns(DataWarning, match=r"not in index"):
        SearchQAEnv(str(dev_qa), retriever=str(train_idx))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        SearchQAEnv(str(dev_qa), retriever=str(dev_idx))


# ------------------------------------------------------------------ 5. an index of another corpus
def test_an_index_of_another_corpus_says_which_and_is_not_offered_for_overwriting(tmp_path: Path) -> None:
    dev_qa, dev_corpus, _, train_idx = _mismatched(tmp_path)
    res = runner.invoke(get_app(), ["eval", "--agent", "oracle", "--task", str(dev_qa), "--corpus", str(dev_corpus),
                                    "--retriever", str(train_idx), "--n", "1"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert str((tmp_path / "train" / "corpus.jsonl").resolve()) in text  # the corpus the index was built from
    assert f"--out {train_idx}" not in text  # rebuilding it from the dev corpus would destroy the right index
    assert f"searchenv index --corpus {dev_corpus}" in text and "NEW_FOLDER" in text


def test_a_sharded_index_of_another_corpus_says_which(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    from searchenv.retrievers import StaleIndexError, build_index, open_index
    from tests.test_dense import HashEncoder

    _, dev_corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    _, train_corpus = _convert(tmp_path, "train", HOTPOT_TRAIN)
    folder = tmp_path / "sharded"
    build_index("dense", train_corpus, folder, shards=2, encoder=HashEncoder(), show_progress=False)
    with pytest.raises(StaleIndexError, match="belongs to another corpus") as err:
        open_index(folder, corpus=dev_corpus, encoder=HashEncoder())
    assert str(train_corpus.resolve()) in str(err.value) and f"--out {folder}" not in str(err.value)
    assert "--out NEW_FOLDER --shards N" in str(err.value)


# ------------------------------------------------------------------ 6. the oracle on HotpotQA-style data
@pytest.mark.parametrize(("protocol", "searches"), [("search-r1", 2.0), ("multi-query", 1.0)])
def test_the_oracle_searches_each_gold_title_and_finds_both(tmp_path: Path, protocol: str, searches: float) -> None:
    qa, corpus = _convert(tmp_path, "dev", HOTPOT_DEV)
    out = tmp_path / "run"
    # One document per search: one search of the question can never bring both supporting paragraphs.
    res = runner.invoke(get_app(), ["eval", "--agent", "oracle", "--task", str(qa), "--corpus", str(corpus),
                                    "--top-k", "1", "--protocol", protocol, "--n", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert (row["em"], row["evidence_recall"], row["searches"]) == (1.0, 1.0, searches)
    episodes = [json.loads(line) for line in (out / row["transcripts"]).read_text().splitlines()]
    for record, episode in zip(HOTPOT_DEV, episodes, strict=True):
        searched = " ".join(m["content"] for m in episode["messages"] if m["role"] == "assistant")
        for title, _ in record["supporting_facts"]:  # type: ignore[attr-defined]
            assert f"{title}" in searched


def test_sft_warns_when_it_keeps_under_half_of_its_demonstrations(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from agents.trainers.sft import SFTConfig, load_demos

    class Tokens:  # what load_demos asks of a policy
        def chat_prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
            return [1, 2]

        def encode(self, text: str) -> list[int]:
            return [3] * len(text.split())

    def demos(ems: list[float]) -> str:
        path = tmp_path / f"demos-{len(ems)}-{sum(ems)}.jsonl"
        turn = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "<answer> a </answer>"}]
        path.write_text("".join(json.dumps({"messages": turn, "metrics": {"em": em}}) + "\n" for em in ems))
        return str(path)

    cfg = SFTConfig(demos=demos([1.0, 0.0, 0.0, 0.0]), output_dir=str(tmp_path / "run"))
    with pytest.warns(DataWarning, match=r"keeps 1 of 4 demonstrations"):
        samples, stats = load_demos(cfg, Tokens())
    assert len(samples) == 1 and stats["demos_kept"] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        load_demos(SFTConfig(demos=demos([1.0, 1.0, 0.0, 0.0]), output_dir=str(tmp_path / "run")), Tokens())


# ------------------------------------------------------------------ 7. train and held-out questions
def test_split_a_converted_file_into_train_and_held_out_questions(tmp_path: Path) -> None:
    qa, corpus = _convert(tmp_path, "all", HOTPOT_DEV + HOTPOT_TRAIN)
    before = qa.read_bytes()
    train, dev = tmp_path / "my" / "train.jsonl", tmp_path / "my" / "dev.jsonl"
    args = ["split", str(qa), "--dev-fraction", "0.4", "--seed", "3", "--out-train", str(train), "--out-dev", str(dev)]
    res = runner.invoke(get_app(), args)
    assert res.exit_code == 0, res.output
    assert "3 train" in res.output and "2 held-out" in res.output
    ids = [ex.id for ex in read_qa_jsonl(qa)]
    train_ids, dev_ids = [ex.id for ex in read_qa_jsonl(train)], [ex.id for ex in read_qa_jsonl(dev)]
    assert len(dev_ids) == 2 and sorted(train_ids + dev_ids) == sorted(ids) and not set(train_ids) & set(dev_ids)
    assert train_ids == [i for i in ids if i in train_ids] and dev_ids == [i for i in ids if i in dev_ids]  # file order
    assert {ex.metadata["corpus_fingerprint"] for ex in read_qa_jsonl(dev)} == {
        corpus_fingerprint(read_corpus(corpus))}  # the questions still name their corpus
    first = (train.read_bytes(), dev.read_bytes())
    assert runner.invoke(get_app(), args).exit_code == 0 and (train.read_bytes(), dev.read_bytes()) == first
    other = runner.invoke(get_app(), [*args[:-4], "--seed", "4", "--out-train", str(tmp_path / "t4.jsonl"),
                                      "--out-dev", str(tmp_path / "d4.jsonl")])
    assert other.exit_code == 0, other.output
    assert sorted(p.name for p in train.parent.iterdir()) == ["dev.jsonl", "train.jsonl"]  # no temporary files
    # the input is never written over, and a split needs a question on each side
    for bad, needle in ((["--out-train", str(qa), "--out-dev", str(dev)], "input"),
                        (["--out-train", str(dev), "--out-dev", str(dev)], "same file"),
                        (["--dev-fraction", "1", "--out-train", str(train), "--out-dev", str(dev)], "--dev-fraction")):
        res = runner.invoke(get_app(), ["split", str(qa), *bad])
        assert res.exit_code == 2 and needle in " ".join(res.output.split()), res.output
    assert qa.read_bytes() == before


def test_the_oracle_reads_the_titles_of_files_converted_before_evidence_titles(tmp_path: Path) -> None:
    from agents.baselines.scripted import oracle_hops

    qa, _ = _convert(tmp_path, "dev", HOTPOT_DEV)
    older = []
    for line in qa.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        del record["metadata"]["evidence_titles"]  # what convert wrote before: supporting_facts only
        older.append(json.dumps(record, ensure_ascii=False))
    qa.write_text("\n".join(older) + "\n", encoding="utf-8")
    for record, example in zip(HOTPOT_DEV, read_qa_jsonl(qa), strict=True):
        hops = oracle_hops(example)
        assert [h.question for h in hops] == [t for t, _ in record["supporting_facts"]]  # type: ignore[attr-defined]
        assert [h.evidence_ids for h in hops] == [(e,) for e in example.evidence_ids]
