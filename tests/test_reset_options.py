"""``reset(options=...)`` chooses an episode's example the same way in SearchQA-v0 and the MMOA-RAG AEC view."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchenv.env import SearchQAEnv
from searchenv.tasks import QAExample
from searchenv.tasks.example import RESET_OPTIONS
from tests.conftest import EXAMPLES

pytest.importorskip("pettingzoo")
from searchenv.multi_agent import MMOARAGEnv  # noqa: E402

_SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _single(corpus: Path) -> Callable[..., QAExample]:
    env = SearchQAEnv(EXAMPLES, corpus=corpus)

    def chosen(**reset: Any) -> QAExample:
        env.reset(**reset)
        return env.example

    return chosen


def _aec(corpus: Path) -> Callable[..., QAExample]:
    env = MMOARAGEnv(EXAMPLES, corpus=corpus)

    def chosen(**reset: Any) -> QAExample:
        env.reset(**reset)
        example = env.episode.example
        assert example is not None and env.infos["rewriter"]["example_id"] == example.id
        return example

    return chosen


@pytest.fixture(params=["SearchQA-v0", "MMOARAGEnv"])
def chosen(request: pytest.FixtureRequest, corpus_file: Path) -> Callable[..., QAExample]:
    """``chosen(seed=..., options=...)``: reset one of the two environments and return its episode's example."""
    return (_single if request.param == "SearchQA-v0" else _aec)(corpus_file)


_INTEGERS = st.sampled_from([int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64])


@_SLOW
@given(i=st.integers(0, len(EXAMPLES) - 1), kind=_INTEGERS)
def test_an_index_of_any_integer_type_chooses_that_example(chosen: Any, i: int, kind: type) -> None:
    assert chosen(options={"index": kind(i)}) is EXAMPLES[i]


@_SLOW
@given(bad=st.one_of(st.booleans(), st.floats(), st.text(max_size=3), st.integers().filter(
    lambda i: not 0 <= i < len(EXAMPLES)), st.just(np.bool_(True)), st.just(np.float64(1.0))))
def test_an_index_that_is_no_integer_in_range_is_refused(chosen: Any, bad: object) -> None:
    with pytest.raises(ValueError, match=r"options\['index'\] must be an int"):
        chosen(options={"index": bad})


@_SLOW
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: k not in RESET_OPTIONS and k != "options"))
def test_an_unknown_option_is_refused_naming_it_and_the_options(chosen: Any, key: str) -> None:
    with pytest.raises(ValueError, match="unknown reset option") as err:
        chosen(options={key: 1, "example_id": "q1"})
    assert repr(key) in str(err.value) and all(name in str(err.value) for name in RESET_OPTIONS)


def test_an_id_an_example_or_a_custom_question_chooses_it(chosen: Any) -> None:
    assert chosen(options={"example_id": "q2"}) is EXAMPLES[2]
    own = QAExample("own", "Where was Tobin Quenn born?", ("Karsk",), ("d3",))
    assert chosen(options={"example": own}) is own
    custom = chosen(options={"question": "Where is Karsk?", "answers": "Vuldoria", "evidence_ids": "d4", "id": "c"})
    assert (custom.id, custom.question, custom.answers, custom.evidence_ids) == (
        "c", "Where is Karsk?", ("Vuldoria",), ("d4",))
    with pytest.raises(ValueError, match="no example with id 'zzz'"):
        chosen(options={"example_id": "zzz"})
    with pytest.raises(TypeError, match="must be a QAExample"):
        chosen(options={"example": {"question": "q"}})
    with pytest.raises(ValueError, match="needs options\\['answers'\\]"):
        chosen(options={"question": "Where is Karsk?"})
    with pytest.raises(ValueError, match="need options\\['question'\\]"):
        chosen(options={"answers": ["Vuldoria"], "index": 1})


@pytest.fixture()
def both(corpus_file: Path) -> tuple[Callable[..., QAExample], Callable[..., QAExample]]:
    return _single(corpus_file), _aec(corpus_file)


@_SLOW
@given(seed=st.integers(0, 2**32 - 1))
def test_one_seed_asks_the_same_question_in_both_environments(both: Any, seed: int) -> None:
    single, aec = both
    assert single(seed=seed) is aec(seed=seed) is single(seed=seed)


def test_the_aec_view_ignores_only_pettingzoos_probe(corpus_file: Path) -> None:
    """PettingZoo's ``api_test`` resets with ``options={"options": 1}``; that key alone is passed over."""
    aec = _aec(corpus_file)
    assert aec(seed=0, options={"options": 1}) is aec(seed=0)
    assert aec(options={"options": 1, "index": 3}) is EXAMPLES[3]
    with pytest.raises(ValueError, match="unknown reset option"):
        _single(corpus_file)(options={"options": 1})
