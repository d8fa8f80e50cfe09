"""SearchQA-v0 through ``skyrl_gym.make`` (the real skyrl-gym package)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from searchenv.client_view import ANSWER_DERIVED_KEYS  # noqa: E402
from searchenv.env import SearchQAEnv  # noqa: E402
from searchenv.integrations.skyrl import SearchQASkyRLEnv, register  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.tasks import QAExample  # noqa: E402
from searchenv.tasks.rows import example_from_row  # noqa: E402

from .conftest import DOCS, EXAMPLES  # noqa: E402

TURNS = ["<think> find Tobin </think> <search> Where was Tobin Quenn born? </search>",
         "<search> Karsk country </search>", "<answer> Vuldoria </answer>"]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("skyrl") / "idx"
    BM25Retriever.build(DOCS, folder)
    return folder


def _row(ex: Any) -> dict[str, Any]:
    return {"question": ex.question, "answers": list(ex.answers), "evidence_ids": list(ex.evidence_ids), "id": ex.id}


def test_episode_through_skyrl_gym_make_matches_searchqa_env(index: Path) -> None:
    register()
    register()  # again: a no-op
    ex = QAExample("t2", "In which country was Tobin Quenn born?", ("Vuldoria",), ("d3", "d4"), type="bridge", hops=2)
    config = {"retriever": str(index), "reward": "default", "top_k": 2}
    env = skyrl_gym.make("searchqa", env_config=config, extras=_row(ex))
    assert isinstance(env, SearchQASkyRLEnv)
    messages, meta = env.init([{"role": "user", "content": "ignored: the protocol's prompt is used"}])
    assert [m["role"] for m in messages] == ["system", "user"] and ex.question in messages[1]["content"]
    assert meta == {"example_id": ex.id}

    plain = SearchQAEnv([ex], retriever=str(index), reward="default", top_k=2)
    plain.reset(options={"index": 0})
    outputs = []
    for turn in TURNS:
        out = env.step(turn)
        _, reward, terminated, truncated, info = plain.step(turn)
        outputs.append(out)
        assert out["reward"] == pytest.approx(float(reward))
        assert out["done"] == (terminated or truncated)
        assert out["metadata"]["reward_terms"] == info["reward_terms"]
        if not out["done"]:  # nothing derived from the answer before the end
            assert not ANSWER_DERIVED_KEYS & set(out["metadata"]), sorted(out["metadata"])
            [obs] = out["observations"]
            assert obs == {"role": "user", "content": info["new_text"]} and "<information>" in obs["content"]
    assert [o["metadata"]["action_type"] for o in outputs] == ["search", "search", "answer"]
    final = outputs[-1]
    assert final["done"] and final["observations"] == [] and final["metadata"]["em"] == 1.0
    assert final["metadata"]["gold_answers"] == ["Vuldoria"] and "summary" in final["metadata"]
    metrics = env.get_metrics()
    assert metrics["em"] == 1.0 and metrics["searches"] == 2.0 and metrics["turns"] == 3.0
    assert metrics["evidence_recall"] == 1.0 and "reward/outcome" in metrics
    assert all(isinstance(v, float) for v in metrics.values())
    assert SearchQASkyRLEnv.aggregate_metrics([metrics, {**metrics, "em": 0.0}])["em"] == 0.5


def test_the_index_is_opened_once_per_process(index: Path) -> None:
    a, b = (SearchQASkyRLEnv({"retriever": str(index)}, _row(ex)) for ex in EXAMPLES[:2])
    assert a.env.retriever is b.env.retriever


def test_search_r1_style_rows_and_turn_budget(index: Path) -> None:
    row = {"extra_info": {"question": "Where was Tobin Quenn born?", "index": 7},
           "reward_spec": {"method": "rule", "ground_truth": {"target": ["Karsk"]}}, "max_turns": 1}
    assert example_from_row(row).answers == ("Karsk",) and example_from_row(row).id == "7"
    env = SearchQASkyRLEnv({"retriever": str(index)}, row)
    env.init()
    out = env.step("<search> Tobin Quenn </search>")  # the row's budget of one turn ends it unanswered
    assert out["done"] and out["metadata"]["answer"] is None and env.get_metrics()["answered"] == 0.0


def test_an_answer_is_read_from_the_agents_turn_only(index: Path) -> None:
    # SkyRL's own search env scores the whole chat, retrieved documents included; this one does not
    env = SearchQASkyRLEnv({"retriever": str(index)}, {"question": "Where was Tobin Quenn born?",
                                                       "answers": ["Karsk"]})
    env.init()
    env.step("<search> Tobin Quenn born </search>")  # the documents name Karsk
    out = env.step("<answer> I could not tell </answer>")
    assert out["metadata"]["em"] == 0.0


@pytest.mark.parametrize(
    ("config", "row", "match"),
    [
        ({"retriever": "x", "top_kk": 3}, {"question": "q", "answers": ["a"]}, "unknown env_config key"),
        ({}, {"answers": ["a"]}, "no question"),
        ({}, {"question": "q"}, "no gold answers"),
        ({"retriever": "not-an-index"}, {"question": "q", "answers": ["a"]}, "neither a known kind"),
    ],
)
def test_bad_configs_and_rows_say_what_is_wrong(config: dict[str, Any], row: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SearchQASkyRLEnv(config, row)


def test_a_closed_env_is_reused_by_the_next_trajectory(index: Path) -> None:
    first = SearchQASkyRLEnv({"retriever": str(index), "top_k": 1}, _row(EXAMPLES[0]))
    first.init()
    first.step("<answer> wrong </answer>")
    inner = first.env
    first.close()
    first.close()  # twice: a no-op
    with pytest.raises(RuntimeError, match="closed"):
        first.step("<answer> x </answer>")
    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    second = SearchQASkyRLEnv({"retriever": str(index), "top_k": 1}, _row(tobin))
    assert second.env is inner  # same settings: the closed one, reset for this question
    messages, meta = second.init()
    assert tobin.question in messages[1]["content"] and meta == {"example_id": tobin.id}
    assert second.step("<answer> Karsk </answer>")["metadata"]["em"] == 1.0
    other = SearchQASkyRLEnv({"retriever": str(index), "top_k": 2}, _row(tobin))
    assert other.env is not inner  # other settings: another environment


def test_the_rows_turn_budget_picks_the_environment(index: Path) -> None:
    """SkyRL's generator writes its max_turns into every row: each budget gets its own pooled environments."""
    row = _row(EXAMPLES[0])
    config = {"retriever": str(index), "top_k": 1}
    three = SearchQASkyRLEnv(config, {**row, "max_turns": 3})
    assert three.max_turns == 3 and three.env is not None and three.env.max_turns == 3
    inner = three.env
    three.close()
    again = SearchQASkyRLEnv(config, {**row, "max_turns": 3})
    assert again.env is inner  # the same budget: the environment the last trajectory closed
    two = SearchQASkyRLEnv(config, {**row, "max_turns": 2})
    assert two.env is not inner and two.max_turns == 2
    two.init()
    two.step("<search> Tobin Quenn </search>")
    assert two.step("<search> Karsk </search>")["done"]  # its own budget of two turns, not three
    other = SearchQASkyRLEnv({"retriever": str(index), "top_k": 2}, {**row, "max_turns": 3})
    assert other.env is not inner and other.env is not None and other.env.top_k == 2  # settings, then budget
    for env in (again, two, other):
        env.close()


@pytest.mark.parametrize("protocol", ["browse", "arena"])
def test_new_protocols_through_skyrl(index: Path, protocol: str) -> None:
    """Opens, citations and their metrics come through the SkyRL adapter unchanged."""
    ex = QAExample("t3", "Where was Tobin Quenn born?", ("Karsk",), ("d3",))
    config = {"retriever": str(index), "protocol": protocol, "reward": "arena" if protocol == "arena" else "default",
              "top_k": 2, "max_turns": 4}
    env = SearchQASkyRLEnv(config, _row(ex))
    messages, _ = env.init([])
    assert ("<open>" in messages[0]["content"]) == (protocol == "browse")
    out = env.step("<search> Tobin Quenn born </search>")
    assert "Doc 1(Title: Tobin Quenn)" in out["observations"][0]["content"]
    if protocol == "browse":
        out = env.step("<open> 1 </open>")
        assert out["metadata"]["action_type"] == "open" and "page 1 of 1" in out["observations"][0]["content"]
        out = env.step("<answer> Karsk </answer>")
        assert env.get_metrics()["opens"] == 1.0
    else:
        out = env.step("<relevance> 1 </relevance><analysis> Doc 1 says Karsk </analysis><answer> Karsk </answer>")
        assert out["reward"] == pytest.approx(2.5)  # format, EM, citation F1 1, bonus
        assert env.get_metrics()["reward/bonus"] == 0.5
    assert out["done"] and out["metadata"]["em"] == 1.0


def test_the_typed_section_skyrls_trainer_passes_is_taken_as_env_config(index: Path) -> None:
    # SkyRL's generator hands over getattr(cfg.environment.skyrl_gym, "searchqa"): a config dataclass
    from agents.integrations.skyrl import SearchQAEnvConfig

    register()
    section = SearchQAEnvConfig(retriever=str(index), reward="default", top_k=2)
    ex = EXAMPLES[1]
    env = skyrl_gym.make("searchqa", env_config=section, extras=_row(ex))
    env.init([])
    assert env.env is not None and env.env.top_k == 2 and env.env.max_turns == 4  # unset: the env's default
    out = env.step(TURNS[0])
    plain = SearchQAEnv([ex], retriever=str(index), reward="default", top_k=2)
    plain.reset(options={"index": 0})
    assert out["reward"] == pytest.approx(float(plain.step(TURNS[0])[1]))
    env.close()


def test_tool_calls_through_skyrl_come_back_as_tool_messages(index: Path) -> None:
    """Under ``tools`` an observation is the tool message answering the call, with its id."""
    ex = QAExample("t3", "Where was Tobin Quenn born?", ("Karsk",), ("d3",))
    env = SearchQASkyRLEnv({"retriever": str(index), "protocol": "tools", "top_k": 2, "max_turns": 4}, _row(ex))
    messages, _ = env.init([])
    assert "<tools>" in messages[0]["content"]
    out = env.step('<tool_call>\n{"name": "search", "arguments": {"query": "Tobin Quenn born"}}\n</tool_call>')
    [reply] = out["observations"]
    assert reply["role"] == "tool" and reply["tool_call_id"] == "call_1" and reply["name"] == "search"
    assert reply["content"].startswith("Doc 1(Title: Tobin Quenn)")
    out = env.step("no call here")
    assert out["observations"][0]["role"] == "user" and "no_action" in out["observations"][0]["content"]
    out = env.step('{"name": "answer", "arguments": {"answer": "Karsk"}}')
    assert out["done"] and out["metadata"]["em"] == 1.0 and out["observations"] == []
    env.close()
