"""The SB3 controller with an LLM reader: reachable states, precomputed answers, resuming, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from agents.sb3 import HashingEncoder, MacroAction, QuestionEmbedder, make_macro_env  # noqa: E402
from agents.sb3.reader import ReaderAnswers, precompute_reader_answers, reader_states  # noqa: E402
from searchenv.protocols import sanitize  # noqa: E402
from tests.tiny_model import one_thread, tiny_policy  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402


def _env(corpus_file: Path, **kwargs: Any):  # type: ignore[no-untyped-def]
    return make_macro_env(EXAMPLES, corpus=corpus_file, embedder=QuestionEmbedder(HashingEncoder(64), dim=3),
                          max_turns=3, **kwargs)


def _answer_turn(answer: str) -> str:
    return f"<answer> {' '.join(sanitize(answer).split()) or 'unknown'} </answer>"


class CountingPolicy:
    """The tiny model, counting the prompts it is asked to continue."""

    def __init__(self) -> None:
        self.inner = tiny_policy(seed=0)
        self.prompts = 0

    def generate(self, prompts: Any, **kwargs: Any) -> Any:
        self.prompts += len(prompts)
        return self.inner.generate(prompts, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_states_are_every_query_sequence_the_controller_can_reach(corpus_file: Path) -> None:
    env = _env(corpus_file)
    states = reader_states(env, max_searches=2, limit=2)
    first = [q for ex_id, q in states if ex_id == EXAMPLES[0].id]
    assert first[0] == () and len(first) == len(set(first)) and 3 <= len(first) <= 7
    assert all(len(q) <= 2 for q in first)
    # a state's queries are exactly what the wrapper searches along that path
    env.reset(options={"index": 0})
    env.step(MacroAction.SEARCH_QUESTION)
    env.step(MacroAction.SEARCH_REFORMULATED)
    assert env.queries in first and env.queries[0] == EXAMPLES[0].question
    with pytest.raises(ValueError, match="no turn to answer"):
        reader_states(env, max_searches=3)


def test_precomputed_answers_drive_the_wrapper_and_resume(corpus_file: Path, tmp_path: Path) -> None:
    env = _env(corpus_file)
    states = reader_states(env, max_searches=1, limit=3)
    policy = CountingPolicy()
    with one_thread():
        answers = precompute_reader_answers(states, EXAMPLES, policy, tmp_path / "reader", retriever=env.base.retriever,
                                            top_k=env.base.top_k, max_doc_chars=env.base.max_doc_chars, chunk_size=4)
    first = policy.prompts
    # one free turn per state, and an answer-slot turn for the states whose free turn did not answer
    assert len(answers) == len(states) and len(states) <= first <= 2 * len(states)
    assert len(list((tmp_path / "reader").glob("chunk-*.json"))) == -(-len(states) // 4)
    again = precompute_reader_answers(states, EXAMPLES, policy, tmp_path / "reader", retriever=env.base.retriever,
                                      top_k=env.base.top_k, max_doc_chars=env.base.max_doc_chars, chunk_size=4)
    assert policy.prompts == first and again.answers == answers.answers  # resumed: nothing regenerated
    loaded = ReaderAnswers.load(tmp_path / "reader")
    assert loaded.answers == answers.answers

    read = _env(corpus_file, reader=loaded)
    read.reset(options={"index": 1})
    ex_id = read.base.example.id
    _, _, _, _, info = read.step(MacroAction.SEARCH_QUESTION)
    *_, info = read.step(MacroAction.ANSWER_EXTRACTED)
    assert info["action_text"] == _answer_turn(loaded(ex_id, (EXAMPLES[1].question,)))
    read.reset(options={"index": 1})
    *_, info = read.step(MacroAction.ANSWER_CLOSED_BOOK)
    assert info["action_text"] == _answer_turn(loaded(ex_id, ()))
    read.reset(options={"index": 1})
    read.step(MacroAction.SEARCH_QUESTION)
    read.step(MacroAction.SEARCH_QUESTION)  # two searches: never precomputed with max_searches=1
    with pytest.raises(KeyError, match="no precomputed reader answer for question"):
        read.step(MacroAction.ANSWER_EXTRACTED)


def test_a_folder_of_other_states_is_refused(corpus_file: Path, tmp_path: Path) -> None:
    env = _env(corpus_file)
    states = reader_states(env, max_searches=0, limit=2)
    with one_thread():
        precompute_reader_answers(states, EXAMPLES, tiny_policy(seed=0), tmp_path, retriever=env.base.retriever)
        with pytest.raises(ValueError, match="other states"):
            precompute_reader_answers(states[::-1], EXAMPLES, tiny_policy(seed=0), tmp_path,
                                      retriever=env.base.retriever)
    (tmp_path / "chunk-00000.json").write_text("{not json")
    with pytest.raises(ValueError, match="chunk-00000.json: not a reader-answer chunk"):
        ReaderAnswers.load(tmp_path)
    with pytest.raises(ValueError, match="not among the examples"):
        precompute_reader_answers([("nope", ())], EXAMPLES, tiny_policy(seed=0), tmp_path / "x",
                                  retriever=env.base.retriever)
