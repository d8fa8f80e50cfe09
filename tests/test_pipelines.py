"""Reference pipelines of the multi-agent RAG episode: oracle, heuristic and one LLM in every role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.baselines import Turn
from agents.baselines.pipelines import RoleTurn, make_pipeline, run_pipeline
from agents.evaluation.evaluate import evaluate, load_split
from searchenv.env import SearchQAEnv
from searchenv.multi_agent import ROLE_PROMPTS, ROLES
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def two_hop() -> tuple[list[Any], Any]:
    return load_split("synthetic-2hop", "dev", "bm25", n=6)


def test_oracle_pipeline_scores_equal_searchqa_for_the_same_answers(two_hop: tuple[list[Any], Any]) -> None:
    examples, retriever = two_hop
    records = run_pipeline(make_pipeline("mmoa-oracle"), examples, retriever, batch_size=4)
    assert [r.example_id for r in records] == [ex.id for ex in examples]
    single = SearchQAEnv("synthetic-2hop", split="dev", retriever=retriever)
    for rec in records:
        single.reset(options={"example_id": rec.example_id})
        info = single.step(f"<answer> {rec.answer} </answer>")[4]
        assert (rec.metrics["em"], rec.metrics["f1"], rec.metrics["contains"]) == (info["em"], info["f1"],
                                                                                   info["contains"])
    assert sum(r.metrics["em"] for r in records) >= 4  # the gold decomposition finds the evidence
    assert [s["action_type"] for s in records[0].steps] == ["rewrite", "search", "select", "answer"]


def test_pipeline_turns_replayed_through_the_pettingzoo_env_give_the_same_episode(corpus_file: Path) -> None:
    pytest.importorskip("pettingzoo")
    from searchenv.multi_agent import MMOARAGEnv
    from searchenv.retrievers import retriever_for_corpus

    turns: dict[tuple[int, str], Turn] = {}
    records = run_pipeline(make_pipeline("mmoa-heuristic"), EXAMPLES, retriever_for_corpus("bm25", corpus_file),
                           on_turn=lambda pos, role, turn: turns.__setitem__((pos, role), turn))
    e = MMOARAGEnv(EXAMPLES, corpus=corpus_file)
    for pos, rec in enumerate(records):
        e.reset(options={"index": pos})
        final: dict[str, Any] = {}
        for agent in e.agent_iter():
            _, _, terminated, _, info = e.last()
            final = info if terminated else final
            e.step(None if terminated else turns[(pos, agent)].text)
        assert final["answer"] == rec.answer and final["f1"] == rec.metrics["f1"]
        assert final["summary"]["candidate_doc_ids"] == rec.metrics["retrieved_doc_ids"]
        assert final["summary"]["return"] == pytest.approx(rec.metrics["return"])


@pytest.mark.parametrize("roles", [("rewriter", "selector", "generator"), ("selector", "generator"), ("generator",)])
def test_pipelines_run_through_evaluate_and_resume_from_a_checkpoint(corpus_file: Path, tmp_path: Path,
                                                                       roles: tuple[str, ...]) -> None:
    pipeline = make_pipeline("mmoa-oracle", roles=roles)
    first = evaluate(pipeline, task=EXAMPLES, corpus=corpus_file, batch_size=3, checkpoint_dir=tmp_path)
    again = evaluate(pipeline, task=EXAMPLES, corpus=corpus_file, batch_size=3, checkpoint_dir=tmp_path)
    assert first.row["n"] == 4 and first.config["resumed"] == 0 and again.config["resumed"] == 4
    assert {k: v for k, v in first.row.items() if k != "sec_per_q"} == {
        k: v for k, v in again.row.items() if k != "sec_per_q"}
    assert first.row["searches"] == 1.0 and first.row["turns"] == len(roles) + 1
    json.dumps([e.to_dict() for e in first.episodes])  # transcripts are JSON


def test_make_pipeline_refuses_unknown_names_and_llm_without_a_policy() -> None:
    with pytest.raises(ValueError, match="unknown pipeline"):
        make_pipeline("mmoa-random")
    with pytest.raises(ValueError, match="needs a policy"):
        make_pipeline("mmoa-llm")
    with pytest.raises(ValueError, match="generator"):
        make_pipeline("mmoa-oracle", roles=("rewriter",))


def test_llm_pipeline_one_model_plays_every_role_with_its_own_tokens_masked(corpus_file: Path) -> None:
    pytest.importorskip("torch")
    from searchenv.retrievers import retriever_for_corpus
    from tests.tiny_model import one_thread, tiny_policy

    policy = tiny_policy(seed=0)
    turns: dict[tuple[int, str], Turn] = {}
    with one_thread():
        records = run_pipeline(make_pipeline("mmoa-llm", policy=policy, max_new_tokens=6), EXAMPLES[:2],
                               retriever_for_corpus("bm25", corpus_file),
                               on_turn=lambda pos, role, turn: turns.__setitem__((pos, role), turn))
    assert set(turns) == {(p, r) for p in (0, 1) for r in ROLES}
    for pos, rec in enumerate(records):
        chats = [rec.messages[i : i + 3] for i in range(0, len(rec.messages), 3)]
        assert [c[0]["content"] for c in chats] == [ROLE_PROMPTS[r].format(max_queries=4) for r in ROLES]
        for role, (system, user, assistant) in zip(ROLES, chats, strict=True):
            turn = turns[(pos, role)]
            assert isinstance(turn, RoleTurn) and assistant["content"] == turn.text
            assert list(turn.prompt_ids) == policy.chat_prompt_ids([system, user])  # the role's own prompt
            assert turn.loss_mask == [0] * len(turn.prompt_ids) + [1] * len(turn.completion_ids)
            assert policy.decode(turn.completion_ids) == turn.text and 0 < len(turn.completion_ids) <= 6
            assert turn.logprobs is not None and len(turn.logprobs) == len(turn.completion_ids)
            others = [turns[(pos, r)].text for r in ROLES if r != role and turns[(pos, r)].text.strip()]
            assert not any(o in policy.decode(turn.prompt_ids) for o in others if len(o) > 8)
        assert rec.metrics["generated_tokens"] == sum(len(turns[(pos, r)].completion_ids) for r in ROLES)


def test_llm_pipeline_on_a_served_chat_model(scripted: tuple[str, Any], corpus_file: Path) -> None:
    from agents.policies.openai_compat import OpenAIChatPolicy
    from searchenv.retrievers import retriever_for_corpus

    url, handler = scripted

    def reply(text: str) -> tuple[int, bytes]:
        return 200, json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 20, "completion_tokens": 3}}).encode()

    handler.script = [reply("Who directed The Glass Orchard?\nWhere was Velora Quenn born?\nIn which country is "
                            "Drathmoor?"), reply("Document0,Document1,Document2"), reply("Essaly")]
    policy = OpenAIChatPolicy(url, model="m", retries=0)
    [rec] = run_pipeline(make_pipeline("mmoa-llm", policy=policy), EXAMPLES[:1],
                         retriever_for_corpus("bm25", corpus_file), top_k=1)
    assert [m["messages"][0]["content"] for m in handler.seen] == [ROLE_PROMPTS[r].format(max_queries=4)
                                                                   for r in ROLES]
    assert "Document2 (Title: Drathmoor)" in handler.seen[1]["messages"][1]["content"]
    assert rec.answer == "Essaly" and rec.metrics["em"] == 1.0 and rec.metrics["selected_recall"] == 1.0


def test_searchenv_eval_reports_pipelines_by_name(qa_file: Path, corpus_file: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    result = CliRunner().invoke(get_app(), ["eval", "--agent", "mmoa-oracle", "--agent", "mmoa-heuristic", "--task",
                                            str(qa_file), "--corpus", str(corpus_file), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {r["agent"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    assert set(rows) == {"mmoa-oracle", "mmoa-heuristic"} and rows["mmoa-oracle"]["em"] == 1.0
