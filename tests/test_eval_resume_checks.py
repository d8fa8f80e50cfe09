"""A resumed evaluation continues only its own run, and scores its saved episodes again.

Saved episodes (``evaluate(..., checkpoint_dir=...)``) are refused, with the setting named, when
anything that decides the result differs: the questions' gold answers and evidence, the corpus
behind the index, the settings of the run. What the saved data decides (EM, F1, gold-in-pred,
evidence recall from the saved answer and the current gold; counts from the saved steps) is
computed again on load, and a saved number that disagrees is refused with its file, line and
field; the saved turns are played again in the run's environment, so every reward term, reward and
the return are recomputed (an edit consistent across terms, reward and return is refused too). A
refusal leaves the saved file as it was.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agents.baselines import EpisodeResult
from agents.evaluation.evaluate import evaluate
from searchenv.corpus import Document, write_corpus
from searchenv.tasks import QAExample, write_qa_jsonl

PLACES = ["Ostrava", "Brno", "Plzen", "Liberec"]
DOCS = [Document(f"d{i}", f"Painter {i}", f"Painter {i} was born in {p}.") for i, p in enumerate(PLACES)]
QUESTIONS = [QAExample(f"q{i}", f"Where was Painter {i} born?", (p,), (f"d{i}",)) for i, p in enumerate(PLACES)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The four oracle episodes as an episode log saves them."""
    folder = tmp_path_factory.mktemp("saved")
    qa, corpus = folder / "qa.jsonl", folder / "corpus.jsonl"
    write_qa_jsonl(qa, QUESTIONS)
    write_corpus(corpus, DOCS)
    res = evaluate("oracle", task=str(qa), corpus=str(corpus), retriever="bm25", top_k=1, batch_size=2)
    return {p: e.to_dict() for p, e in enumerate(res.episodes)}


@pytest.fixture()
def run(tmp_path: Path) -> dict[str, Path]:
    """A finished oracle run over four questions whose episodes are saved under ``ck``."""
    qa, corpus, ck = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl", tmp_path / "ck"
    write_qa_jsonl(qa, QUESTIONS)
    write_corpus(corpus, DOCS)
    res = evaluate("oracle", task=str(qa), corpus=str(corpus), retriever="bm25", top_k=1, batch_size=2,
                   checkpoint_dir=ck)
    assert res.row["em"] == 1.0 and res.config["resumed"] == 0
    return {"qa": qa, "corpus": corpus, "ck": ck, "log": ck / "oracle__bm25.jsonl"}


def _again(run: dict[str, Path], **kw: Any) -> Any:
    args: dict[str, Any] = {"task": str(run["qa"]), "corpus": str(run["corpus"]), "retriever": "bm25",
                            "top_k": 1, "batch_size": 2, "checkpoint_dir": run["ck"]}
    return evaluate("oracle", **{**args, **kw})


def _edit(path: Path, line: int, change: Any) -> None:
    """Apply ``change`` to the saved episode on (1-based) ``line``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    item = json.loads(lines[line - 1])
    change(item["episode"])
    lines[line - 1] = json.dumps(item)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def test_an_untouched_run_resumes_from_every_saved_episode(run: dict[str, Path]) -> None:
    again = _again(run)
    assert again.config["resumed"] == 4 and again.row["em"] == 1.0 and again.row["n"] == 4


def test_resume_refuses_edited_gold_answers(run: dict[str, Path]) -> None:
    before = run["log"].read_bytes()
    edited = [QAExample(q.id, q.question, ("Prague",) if q.id == "q2" else q.answers, q.evidence_ids)
              for q in QUESTIONS]
    write_qa_jsonl(run["qa"], edited)
    with pytest.raises(ValueError, match=r"oracle__bm25.jsonl holds episodes of a run with other settings "
                                         r"\(gold: \"[0-9a-f]+\" there, \"[0-9a-f]+\" now\)"):
        _again(run)
    assert run["log"].read_bytes() == before  # refused, not rewritten


def test_resume_refuses_another_corpus(run: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    write_corpus(other, [*DOCS, Document("d9", "Painter 9", "Painter 9 was born in Opava.")])
    with pytest.raises(ValueError, match=r"other settings \(index: \"[0-9a-f]+\" there, \"[0-9a-f]+\" now\)"):
        _again(run, corpus=str(other))


def test_resume_refuses_a_saved_em_the_saved_answer_does_not_earn(run: dict[str, Path]) -> None:
    # The answer is wrong but its em still says 1: the score is computed again and disagrees.
    _edit(run["log"], 3, lambda ep: ep.update(answer="Prague"))
    before = run["log"].read_bytes()
    with pytest.raises(ValueError, match=r"oracle__bm25.jsonl, line 3, field 'metrics.em': saved 1.0, but the "
                                         r"saved answer 'Prague' and the gold \['Brno'\] give 0.0"):
        _again(run)
    assert run["log"].read_bytes() == before


def _answer(ep: dict[str, Any], answer: str) -> None:
    """Give the saved episode another answer, with the scores that answer earns against its gold."""
    from searchenv.metrics import exact_match, f1_score, gold_in_prediction

    ep["answer"] = answer
    ep["metrics"].update(em=exact_match(answer, ep["gold"]), f1=f1_score(answer, ep["gold"]),
                         contains=gold_in_prediction(answer, ep["gold"]))


def _last_turn(ep: dict[str, Any], text: str) -> None:
    """Put ``text`` in the saved episode's last assistant turn."""
    [*_, last] = (m for m in ep["messages"] if m["role"] == "assistant")
    last["content"] = text


@pytest.mark.parametrize(
    ("change", "saved", "said"),
    [
        # the answer edited (its scores made to match it): the saved turn says the model answered Brno
        (lambda ep: _answer(ep, "Prague"), "Prague", "Brno"),
        # the turn edited: the model "said" a wrong answer, the saved answer and em 1.0 are kept
        (lambda ep: _last_turn(ep, "<answer> Herman Melville </answer>"), "Brno", "Herman Melville"),
        # a turn that answers nothing
        (lambda ep: _last_turn(ep, "I am not sure."), "Brno", None),
    ],
    ids=["answer-edited", "turn-edited", "turn-without-answer"],
)
def test_resume_refuses_a_saved_answer_its_saved_turn_does_not_give(
    run: dict[str, Path], change: Any, saved: str, said: str | None
) -> None:
    _edit(run["log"], 3, change)
    before = run["log"].read_bytes()
    with pytest.raises(ValueError, match=rf"oracle__bm25.jsonl, line 3, field 'answer': saved '{saved}', but the "
                                         rf"last assistant turn of the saved messages gives {re.escape(repr(said))}"):
        _again(run)
    assert run["log"].read_bytes() == before


def test_resume_reads_the_answer_of_a_tool_call_turn_as_the_environment_does(run: dict[str, Path]) -> None:
    ck = run["ck"] / "tools"
    first = _again(run, protocol="tools", checkpoint_dir=ck)
    assert first.row["em"] == 1.0 and first.episodes[1].messages[-1].get("tool_calls")
    assert _again(run, protocol="tools", checkpoint_dir=ck).config["resumed"] == 4  # untouched: all taken
    _edit(ck / "oracle__bm25.jsonl", 3, lambda ep: _answer(ep, "Prague"))
    with pytest.raises(ValueError, match=r"line 3, field 'answer': saved 'Prague', but the last assistant turn of "
                                         r"the saved messages gives 'Brno' \(read by the tools protocol\)"):
        _again(run, protocol="tools", checkpoint_dir=ck)


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("metrics.em", lambda ep: ep["metrics"].update(em=0.0)),
        ("metrics.f1", lambda ep: ep["metrics"].update(f1=0.5)),
        ("metrics.contains", lambda ep: ep["metrics"].update(contains=0.0)),
        ("metrics.evidence_recall", lambda ep: ep["metrics"].update(evidence_recall=0.0)),
        ("metrics.return", lambda ep: ep["metrics"].update({"return": 2.0})),
        ("metrics.turns", lambda ep: ep["metrics"].update(turns=1)),
        ("metrics.searches", lambda ep: ep["metrics"].update(searches=0)),
        ("metrics.answered", lambda ep: ep["metrics"].update(answered=False)),
        ("steps[1].reward", lambda ep: ep["steps"][-1].update(reward=ep["steps"][-1]["reward"] + 1.0)),
        ("gold", lambda ep: ep.update(gold=["Ostrava"])),
        ("example_id", lambda ep: ep.update(example_id="q0")),
    ],
)
def test_resume_refuses_a_saved_number_that_disagrees_with_the_saved_episode(
    run: dict[str, Path], field: str, change: Any
) -> None:
    _edit(run["log"], 3, change)
    with pytest.raises(ValueError, match=rf"oracle__bm25.jsonl, line 3, field '{re.escape(field)}'"):
        _again(run)


def test_resume_refuses_a_return_and_rewards_edited_together_against_their_terms(run: dict[str, Path]) -> None:
    def richer(ep: dict[str, Any]) -> None:
        ep["steps"][-1]["reward"] += 2.0
        ep["metrics"]["return"] += 2.0

    _edit(run["log"], 2, richer)
    with pytest.raises(ValueError, match=r"line 2, field 'steps\[1\]\.reward': saved [-0-9.e]+, but its "
                                         r"reward_terms sum to"):
        _again(run)


def test_resume_refuses_a_position_beyond_the_run(run: dict[str, Path]) -> None:
    with run["log"].open("a", encoding="utf-8") as f:
        line = json.loads(run["log"].read_text(encoding="utf-8").splitlines()[1])
        f.write(json.dumps({"position": 7, "episode": line["episode"]}) + "\n")
    with pytest.raises(ValueError, match=r"line 6, field 'position': 7 is not a question of this run \(it has 4\)"):
        _again(run)


def test_the_served_model_and_its_url_are_settings_of_the_run() -> None:
    from agents.evaluation.resume import public_url, served_model_settings
    from agents.policies.openai_compat import openai_policy

    class Agent:
        policy = openai_policy("http://user:secret@127.0.0.1:9/v1?key=k", api="chat", model="model-a")

    assert served_model_settings(Agent()) == {"served_model_name": "model-a", "model_server": "http://127.0.0.1:9/v1"}
    assert served_model_settings(object()) == {}
    assert public_url("https://u:p@host:8000/v1/?token=t#x") == "https://host:8000/v1/"


def test_resume_refuses_a_position_saved_twice(run: dict[str, Path]) -> None:
    lines = run["log"].read_text(encoding="utf-8").splitlines()
    with run["log"].open("a", encoding="utf-8") as f:
        f.write(lines[2] + "\n")  # position 1 again, on line 6
    with pytest.raises(ValueError, match=r"line 6, field 'position': 1 was saved before, on line 3"):
        _again(run)


RECOMPUTED = ("em", "f1", "contains", "evidence_recall", "return", "turns", "searches", "queries",
              "invalid_turns", "opens", "infra_errors", "generated_tokens")


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, 3), key=st.sampled_from(RECOMPUTED),
       value=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 50)))
def test_any_edited_score_is_refused_naming_its_line_and_field(
    saved: dict[int, dict[str, Any]], position: int, key: str, value: float
) -> None:
    from agents.evaluation.resume import check_saved

    episodes = {p: EpisodeResult.from_dict(e) for p, e in saved.items()}
    edited = EpisodeResult.from_dict(json.loads(json.dumps(saved[position])))
    assume(not math.isclose(float(edited.metrics[key] or 0), float(value), rel_tol=1e-9, abs_tol=1e-9))
    edited.metrics[key] = value
    episodes[position] = edited
    lines = {p: p + 2 for p in episodes}
    with pytest.raises(ValueError, match=rf"ck.jsonl, line {position + 2}, field 'metrics\.{key}'"):
        check_saved(episodes, QUESTIONS, "ck.jsonl", lines)
    # untouched, they pass and keep their scores
    assert check_saved({p: EpisodeResult.from_dict(e) for p, e in saved.items()}, QUESTIONS, "ck.jsonl",
                       lines)[position].metrics == saved[position]["metrics"]


def test_a_local_model_is_fingerprinted_by_its_weights(tmp_path: Path) -> None:
    import os

    from agents.evaluation.resume import model_files_fingerprint

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w" * 10)
    (model / "config.json").write_text("{}")
    (model / "notes.txt").write_text("x")
    first = model_files_fingerprint(str(model))
    (model / "notes.txt").write_text("not a weight")
    assert model_files_fingerprint(str(model)) == first
    (model / "model.safetensors").write_bytes(b"v" * 11)  # retrained in place
    second = model_files_fingerprint(str(model))
    assert second not in (None, first)
    weights = model / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # same size, rewritten
    assert model_files_fingerprint(str(model)) not in (None, first, second)
    assert model_files_fingerprint(str(weights)) is not None  # a .gguf or weights file alone
    assert model_files_fingerprint("SmolLM2-135M-Instruct") is None and model_files_fingerprint(None) is None


def _consistent(step: int, terms: dict[str, float]) -> Any:
    """An edit of one step's reward terms with its reward and the return made to agree with them."""
    def change(ep: dict[str, Any]) -> None:
        old = ep["steps"][step]["reward"]
        ep["steps"][step]["reward_terms"] = dict(terms)
        ep["steps"][step]["reward"] = sum(terms.values())
        ep["metrics"]["return"] += sum(terms.values()) - old
    return change


def test_resume_refuses_an_outcome_term_edited_consistently_with_its_reward_and_return(run: dict[str, Path]) -> None:
    """An unanswered episode (EM 0) given an outcome of 1 with the reward and return to match."""
    ck = run["ck"] / "random"
    args = {"task": str(run["qa"]), "corpus": str(run["corpus"]), "retriever": "bm25", "top_k": 1, "batch_size": 2,
            "checkpoint_dir": ck, "max_turns": 2}
    evaluate("random", **args)
    log = ck / "random__bm25.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    number, episode = next((n, json.loads(x)["episode"]) for n, x in enumerate(lines[1:], start=2)
                           if json.loads(x)["episode"]["metrics"]["em"] == 0.0)
    last = len(episode["steps"]) - 1
    _edit(log, number, _consistent(last, {"outcome": 1.0, "format": 0.1}))
    before = log.read_bytes()
    with pytest.raises(ValueError, match=rf"random__bm25.jsonl, line {number}, field 'steps\[{last}\]\.reward_terms\."
                                         r"outcome': saved 1.0, but replaying the saved turns gives 0.0"):
        evaluate("random", **args)
    assert log.read_bytes() == before


def test_resume_refuses_a_relevance_term_edited_consistently(run: dict[str, Path]) -> None:
    """Under the process reward a search's relevance to the gold evidence is recomputed from the saved turn."""
    ck = run["ck"] / "process"
    first = _again(run, reward="process", checkpoint_dir=ck)
    assert first.episodes[2].steps[0]["reward_terms"]["relevance"] > 0  # the oracle's search finds the evidence
    _edit(ck / "oracle__bm25.jsonl", 4, _consistent(0, {"outcome": 0.0, "relevance": 0.9}))
    with pytest.raises(ValueError, match=r"line 4, field 'steps\[0\]\.reward_terms\.relevance': saved 0.9, but "
                                         r"replaying the saved turns gives 0.5"):
        _again(run, reward="process", checkpoint_dir=ck)


def test_resume_refuses_saved_steps_the_saved_turns_do_not_make(run: dict[str, Path]) -> None:
    def drop_first_turn(ep: dict[str, Any]) -> None:
        first = next(i for i, m in enumerate(ep["messages"]) if m["role"] == "assistant")
        del ep["messages"][first:first + 2]  # the search turn and its results: one step more than turns

    _edit(run["log"], 2, drop_first_turn)
    with pytest.raises(ValueError, match=r"line 2, field 'steps': 2 saved steps, but the saved messages hold 1 "
                                         r"assistant turns"):
        _again(run)


@pytest.mark.parametrize("protocol", ["search-r1", "multi-query", "tools", "tools-browse", "browse", "arena"])
@pytest.mark.parametrize("reward", ["default", "frugal", "process", "shaped", "r3-rag", "arena"])
@pytest.mark.parametrize("agent", ["oracle", "heuristic", "random"])
def test_an_untouched_run_of_any_protocol_and_reward_replays_to_its_saved_rewards(
    run: dict[str, Path], agent: str, protocol: str, reward: str
) -> None:
    args = {"task": str(run["qa"]), "corpus": str(run["corpus"]), "retriever": "bm25", "top_k": 2, "batch_size": 3,
            "checkpoint_dir": run["ck"] / "any", "protocol": protocol, "reward": reward}
    first = evaluate(agent, **args)
    again = evaluate(agent, **args)
    assert again.config["resumed"] == len(QUESTIONS) - first.row["failed"]
    assert [e.metrics for e in again.episodes] == [e.metrics for e in first.episodes]


def test_resume_with_a_retriever_that_fails_now_says_so_instead_of_blaming_the_file(run: dict[str, Path]) -> None:
    from searchenv.retrievers.base import RetrieverError
    from searchenv.retrievers.bm25 import RankBM25Retriever

    class Switchable:
        def __init__(self) -> None:
            self.inner, self.down = RankBM25Retriever(DOCS), False

        def search_batch(self, queries: list[str], k: int) -> Any:
            if self.down:
                raise RetrieverError("connection refused")
            return self.inner.search_batch(queries, k)

    retriever = Switchable()
    args = {"task": str(run["qa"]), "corpus": str(run["corpus"]), "retriever": retriever, "top_k": 1,
            "batch_size": 2, "checkpoint_dir": run["ck"] / "switch", "retriever_label": "switch"}
    evaluate("oracle", **args)
    retriever.down = True
    with pytest.raises(RetrieverError, match=r"line 2, field 'steps\[0\]': cannot play the saved turns again to "
                                             r"check their rewards: the retriever failed \(RetrieverError: "
                                             r"connection refused\); resume when it answers"):
        evaluate("oracle", **args)
