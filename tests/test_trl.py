"""The TRL adapter: rollout output layout, and GRPOTrainer (the real trl package) training through it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from agents.integrations.trl import SearchQARollout, reward_functions, searchenv_return  # noqa: E402
from agents.policies.base import chat_template_ids  # noqa: E402
from searchenv.env import SearchQAEnv  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from searchenv.rewards import StepContext  # noqa: E402

from .conftest import DOCS, EXAMPLES  # noqa: E402
from .learning import letter_mass, margin  # noqa: E402
from .test_rollout import ScriptPolicy  # noqa: E402
from .tiny_model import build_tiny_model, tiny_policy  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("trl") / "idx")


def test_rollout_output_is_token_exact_with_environment_tokens_masked(bm25: BM25Retriever) -> None:
    tiny = tiny_policy(seed=0)
    script = ScriptPolicy(tiny)
    rollout = SearchQARollout(list(EXAMPLES), retriever=bm25, max_turns=4)
    q0, q1 = EXAMPLES[0].question, EXAMPLES[1].question
    prompts = [q0, q0, [{"role": "user", "content": q1}], [{"role": "user", "content": q1}]]  # two GRPO groups
    eos = tiny.tokenizer.eos_token_id
    out = rollout.run(prompts, script, seed=3, eos_token_id=eos)
    assert {len(v) for v in out.values()} == {4}
    for i, ex in enumerate([EXAMPLES[0]] * 2 + [EXAMPLES[1]] * 2):
        env = SearchQAEnv([ex], retriever=bm25, max_turns=4)
        env.reset(options={"index": 0})
        assert out["prompt_ids"][i] == tiny.chat_prompt_ids(env.messages()[:2])
        ids, mask = out["completion_ids"][i], out["env_mask"][i]
        assert len(ids) == len(mask) == len(out["logprobs"][i])
        assert ids[-1] == eos and mask[-1] == 0  # answered: EOS appended, not trained on
        # the policy's tokens are the turns as generated; the rest is the environment's replies
        policy_text = tiny.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
        env_ids = [t for t, m in zip(ids[:-1], mask[:-1], strict=True) if m == 0]
        turns, replies, total = [], [], 0.0
        context = tiny.decode(out["prompt_ids"][i])
        for _ in range(3):
            [gen] = script.generate([tiny.encode(context)])
            turns.append(gen.text)
            _, reward, done, _, info = env.step(gen.text)
            total += float(reward)
            replies.append(info["new_text"])
            context += gen.text + info["new_text"]
            if done:
                break
        assert policy_text == "".join(turns)
        assert env_ids == [t for r in replies for t in tiny.encode(r)]
        assert out["searchenv_return"][i] == pytest.approx(total)
        assert out["searchenv_metrics"][i]["searches"] == 2.0 and "reward/outcome" in out["searchenv_metrics"][i]
        assert all(lp == 0.0 for lp, m in zip(out["logprobs"][i], mask, strict=True) if m == 0)


def test_prompts_must_be_questions_of_the_task(bm25: BM25Retriever) -> None:
    rollout = SearchQARollout(list(EXAMPLES), retriever=bm25)
    assert rollout.dataset(2) == [{"prompt": EXAMPLES[0].question, "example_id": EXAMPLES[0].id},
                                  {"prompt": EXAMPLES[1].question, "example_id": EXAMPLES[1].id}]
    with pytest.raises(ValueError, match=r"prompt 1: 'What is 2\+2\?' is not a question of this task"):
        rollout.run([EXAMPLES[0].question, "What is 2+2?"], tiny_policy(seed=0))
    with pytest.raises(ValueError, match="prompt 0: expected the question"):
        rollout.example([{"role": "system", "content": "x"}])


class _Failing:
    def search_batch(self, queries: list[str], k: int) -> list[list[Any]]:
        raise OSError("index went away")


def test_an_episode_the_retriever_failed_in_trains_nothing() -> None:
    tiny = tiny_policy(seed=0)
    out = SearchQARollout(list(EXAMPLES), retriever=_Failing(), max_turns=2).run([EXAMPLES[0].question],
                                                                                 ScriptPolicy(tiny))
    assert out["searchenv_metrics"][0]["infra_errors"] >= 1 and sum(out["env_mask"][0]) == 0


def _toy(ctx: StepContext) -> tuple[float, dict[str, float]]:
    """A reward a tiny random model can learn in a few steps: more letters 'e' in its turns."""
    value = ctx.text.count("e") / 10.0
    return value, {"toy": value}


class _Recording(SearchQARollout):
    """Keeps what each call returned, to compare with what TRL logged."""

    calls: list[dict[str, list[Any]]]

    def __call__(self, prompts: Any, trainer: Any) -> dict[str, list[Any]]:
        out = super().__call__(prompts, trainer)
        self.calls.append(out)
        return out


def _trainer(tmp_path: Path, rollout: SearchQARollout, steps: int, **config: Any) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = build_tiny_model(seed=0)
    funcs, weights = reward_functions()
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                      max_steps=steps, logging_steps=1, report_to="none", use_cpu=True, bf16=False,
                      save_strategy="no", beta=0.0, reward_weights=weights, seed=0, **config)
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=funcs, args=args,
                       train_dataset=Dataset.from_list(rollout.dataset() * 8), rollout_func=rollout)


@pytest.mark.slow
@pytest.mark.learning
def test_grpo_trainer_learns_a_toy_reward_with_searchenv_owning_it(tmp_path: Path, bm25: BM25Retriever) -> None:
    """GRPO raises the probability of the rewarded letter where the episode starts.

    Measured exactly on the model's next-token distribution over the task's first-turn prompts, not
    on sampled rewards (whose rise starts at a step that differs between CPUs' arithmetic and sampling
    seeds). 24 steps took every run seen (GRPOConfig seeds 0-5, native and portable arithmetic) from
    0.05 expected letters to 0.96 or more, most to 2; at 16 steps one run (portable, seed 0) was still
    at 0.30, so the bound of half a letter gets the steps that leave it a wide margin.
    """
    rollout = _Recording(list(EXAMPLES), retriever=bm25, reward=_toy, max_turns=2, max_new_tokens=12)
    rollout.calls = []
    trainer = _trainer(tmp_path, rollout, steps=24, learning_rate=2e-2, lr_scheduler_type="constant")
    contexts = []
    for ex in EXAMPLES:
        env = SearchQAEnv([ex], retriever=bm25, max_turns=2)
        env.reset(options={"index": 0})
        contexts.append(chat_template_ids(trainer.processing_class, env.messages()[:2]))
    before = letter_mass(trainer.model, trainer.processing_class, contexts, "e")
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 24 == len(rollout.calls)
    for log, out in zip(logs, rollout.calls, strict=True):
        # what TRL logs is searchenv's return, and TRL counted only the policy's tokens
        assert log["rewards/searchenv_return/mean"] == pytest.approx(sum(out["searchenv_return"]) / 16, rel=1e-5)
        assert log["completions/mean_length"] == pytest.approx(sum(map(sum, out["env_mask"])) / 16, rel=1e-5)
        assert log["rewards/searchenv_turns/mean"] == 2.0  # weight-0 metrics are logged too
        lengths = [len(ids) for ids in out["completion_ids"]]
        assert sum(lengths) > sum(map(sum, out["env_mask"]))  # environment tokens were there, masked
    after = letter_mass(trainer.model, trainer.processing_class, contexts, "e")
    margin("expected letters 'e' in the first token, after 24 GRPO steps", after, before + 0.5)


class _Scripted(SearchQARollout):
    """Generation by a scripted policy that answers (the trainer's model is still what TRL trains)."""

    @contextlib.contextmanager
    def _policy(self, trainer: Any) -> Iterator[Any]:
        from agents.policies.hf import HFPolicy

        yield ScriptPolicy(HFPolicy(trainer.model, trainer.processing_class))


def test_answered_episodes_are_not_truncated_completions(tmp_path: Path, bm25: BM25Retriever) -> None:
    rollout = _Scripted(list(EXAMPLES), retriever=bm25, max_turns=4)
    trainer = _trainer(tmp_path, rollout, steps=1, mask_truncated_completions=True)
    trainer.train()
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert log["completions/clipped_ratio"] == 0.0  # every episode answered and ends with EOS
    assert log["rewards/searchenv_answered/mean"] == 1.0


def test_trl_sampling_settings_are_honoured_or_refused(tmp_path: Path, bm25: BM25Retriever) -> None:
    """max_completion_length caps each episode's completion; settings transformers cannot apply are refused."""
    rollout = _Recording(list(EXAMPLES), retriever=bm25, max_turns=4, max_new_tokens=12)
    rollout.calls = []
    trainer = _trainer(tmp_path, rollout, steps=1, max_completion_length=40)
    trainer.train()
    [out] = rollout.calls
    assert max(len(ids) for ids in out["completion_ids"]) <= 40  # turns, documents and EOS together
    assert any(m["turns"] < 4 for m in out["searchenv_metrics"])  # cut by the cap, not the turn budget
    prompts = [EXAMPLES[0].question] * 4
    for setting, value in (("top_k", 5), ("min_p", 0.1), ("repetition_penalty", 1.2),
                           ("generation_kwargs", {"no_repeat_ngram_size": 3})):
        other = _trainer(tmp_path, rollout, steps=1, **{setting: value})
        with pytest.raises(ValueError, match=rf"GRPOConfig\({setting}={value!r}\).*use_vllm=True"):
            rollout(prompts, other)


def test_reward_functions_are_named_and_weighted() -> None:
    funcs, weights = reward_functions(("em", "evidence_recall"))
    assert [f.__name__ for f in funcs] == ["searchenv_return", "searchenv_em", "searchenv_evidence_recall"]
    assert weights == [1.0, 0.0, 0.0]
    assert funcs[2](["c"], searchenv_metrics=[{"em": 1.0}]) == [None]  # no gold evidence: left out of the mean
    assert searchenv_return(["c", "d"], searchenv_return=[0.5, 1]) == [0.5, 1.0]


def test_tool_env_runs_an_episode_through_its_tools(bm25: BM25Retriever) -> None:
    from agents.integrations.trl import SearchQAToolEnv

    make_env = SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, max_turns=3)
    assert make_env.dataset(1) == [{"prompt": [{"role": "user", "content": EXAMPLES[0].question}],
                                    "example_id": EXAMPLES[0].id}]
    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    env = make_env()
    assert env.reset(example_id=tobin.id, prompt="ignored") is None
    found = env.search("Tobin Quenn born")
    assert found.startswith("<information>") and "Karsk" in found
    assert env.answer("Karsk") == "Answer recorded."
    assert env.search("more") == "The episode is over; no more searches."
    plain = SearchQAEnv([tobin], retriever=bm25, max_turns=3)
    plain.reset(options={"index": 0})
    want = sum(float(plain.step(t)[1]) for t in ("<search> Tobin Quenn born </search>", "<answer> Karsk </answer>"))
    assert env.get_reward() == pytest.approx(want) and env.final_metrics["em"] == 1.0
    # a rollout that never answers is ended when TRL asks for the reward; the budget ends searching
    other = make_env()
    other.reset(prompt=[{"role": "user", "content": tobin.question}])
    for _ in range(3):
        last = other.search("Tobin")
    assert last.endswith("the episode is over.") and other.final_metrics["answered"] == 0.0
    with pytest.raises(ValueError, match="no question of the task"):
        other.reset(prompt="What is 2+2?")


@pytest.mark.parametrize("protocol", ["tools", "search-r1"])
def test_the_tool_env_shows_no_reward_or_metric_before_the_episode_ends(bm25: BM25Retriever, protocol: str) -> None:
    """Under rewards that pay relevance on search steps, the tool replies are those of the outcome-only reward."""
    from agents.integrations.trl import SearchQAToolEnv

    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    seen: dict[str, list[str]] = {}
    for reward in ("search-r1", "process", "shaped"):
        env = SearchQAToolEnv.factory([tobin], retriever=bm25, reward=reward, protocol=protocol, max_turns=4)()
        env.reset(example_id=tobin.id)
        replies = [env.search("Tobin Quenn born"), env.search("Karsk")]
        assert env.final_metrics == {}  # nothing measured is offered before the end
        replies.append(env.answer("Karsk"))
        seen[reward] = replies
        assert env.final_metrics["em"] == 1.0
    assert seen["process"] == seen["shaped"] == seen["search-r1"]


def test_tool_envs_follow_the_protocol(bm25: BM25Retriever) -> None:
    """browse adds an open tool, arena's answer cites documents; TRL can build a schema for each tool."""
    import inspect

    from transformers.utils import get_json_schema

    from agents.integrations.trl import SearchQAArenaToolEnv, SearchQABrowseToolEnv, SearchQAToolEnv

    def tools(cls: type) -> list[str]:  # what TRL offers the model: the class's public methods
        names = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)]
        return [n for n in names if n not in ("reset", "get_reward") and not n.startswith("_")]

    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    browse = SearchQAToolEnv.factory([tobin], retriever=bm25, protocol="browse", max_turns=6)()
    assert isinstance(browse, SearchQABrowseToolEnv) and tools(SearchQABrowseToolEnv) == ["answer", "open", "search"]
    assert tools(SearchQAToolEnv) == ["answer", "search"]
    for cls in (SearchQAToolEnv, SearchQABrowseToolEnv, SearchQAArenaToolEnv):
        for name in tools(cls):
            assert get_json_schema(getattr(cls, name))["function"]["name"] == name
    browse.reset(example_id=tobin.id)
    assert "Doc 1(Title: Tobin Quenn)" in browse.search("Tobin Quenn born")
    page = browse.open(1)
    assert "page 1 of 1" in page and "Invalid" not in page
    assert "unknown_document" in browse.open(9) and "bad_open" in browse.open("the first")  # type: ignore[arg-type]
    browse.answer("Karsk")
    assert browse.final_metrics["opens"] == 1.0 and browse.final_metrics["em"] == 1.0
    arena = SearchQAToolEnv.factory([tobin], retriever=bm25, protocol="arena", reward="arena")()
    assert isinstance(arena, SearchQAArenaToolEnv)
    arena.reset(example_id=tobin.id)
    shown = arena.search("Tobin Quenn born")
    number = int(shown.split("(Title: Tobin Quenn)")[0].rsplit("Doc ", 1)[1])
    assert arena.answer("Karsk", [number], "It says he was born in Karsk.") == "Answer recorded."
    assert arena.get_reward() == pytest.approx(2.5) and arena.final_metrics["reward/bonus"] == 0.5


def test_grpo_trainer_with_the_tool_env_as_environment_factory(tmp_path: Path, bm25: BM25Retriever) -> None:
    from importlib.resources import files

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agents.integrations.trl import SearchQAToolEnv

    model, tokenizer = build_tiny_model(seed=0)
    tokenizer.chat_template = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()  # renders tool calls
    make_env = SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, max_turns=3)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                      max_steps=2, logging_steps=1, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                      beta=0.0, max_completion_length=16, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, environment_factory=make_env,
                          train_dataset=Dataset.from_list(make_env.dataset() * 4))
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and all("rewards/SearchQAToolEnv/mean" in h for h in logs)  # the env owns the reward
    # the random model calls no tools, so every rollout is ended unanswered and scored by SearchQA-v0's preset
    assert all(h["rewards/SearchQAToolEnv/mean"] == 0.0 for h in logs)


def test_tool_env_under_the_tools_protocol(bm25: BM25Retriever) -> None:
    """TRL's own tool calls step a ``tools`` environment as its calls, and results come without the tags."""
    from agents.integrations.trl import SearchQABrowseToolEnv, SearchQAToolEnv

    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    env = SearchQAToolEnv.factory([tobin], retriever=bm25, protocol="tools", max_turns=3)()
    env.reset(example_id=tobin.id)
    found = env.search("Tobin Quenn born")
    assert found.startswith("Doc 1(Title: Tobin Quenn)") and "tool_response" not in found
    assert env.answer("Karsk") == "Answer recorded." and env.final_metrics["em"] == 1.0
    assert env.final_metrics["invalid_turns"] == 0.0
    browse = SearchQAToolEnv.factory([tobin], retriever=bm25, protocol="tools-browse", max_turns=4)()
    assert isinstance(browse, SearchQABrowseToolEnv)
    browse.reset(example_id=tobin.id)
    browse.search("Tobin Quenn born")
    assert "page 1 of 1" in browse.open(1)


def test_tool_sft_dataset_is_what_trls_tool_loop_renders(tmp_path: Path, bm25: BM25Retriever) -> None:
    """Oracle demonstrations through the tools are token for token TRL's rollout of the same calls."""
    import json
    from importlib.resources import files

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import parse_response

    from agents.integrations.trl import SearchQAToolEnv, tool_schemas, tool_sft_dataset

    model, tokenizer = build_tiny_model(seed=0)
    tokenizer.chat_template = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    make_env = SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, max_turns=4)
    rows = tool_sft_dataset(make_env, reasoning=True, successful_only=False)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                      report_to="none", use_cpu=True, bf16=False, save_strategy="no", max_completion_length=16)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, environment_factory=make_env,
                          train_dataset=Dataset.from_list(make_env.dataset()))
    tools = trainer._env_tools[None]  # the tools TRL offers (bound methods of its probe instance)
    assert [r["example_id"] for r in rows] == [ex.id for ex in EXAMPLES]
    for row, prompt_row in zip(rows, make_env.dataset(), strict=True):
        schemas = json.loads(row["tools"])
        assert schemas == tool_schemas(make_env()) and [t["function"]["name"] for t in schemas] == ["answer", "search"]
        messages = row["messages"]
        assert messages[:1] == prompt_row["prompt"] and messages[-1]["role"] == "assistant"
        # TRL's loop: the prompt rendered with the tools, each turn as generated (ending in EOS), each tool
        # result as TRL's own suffix ids; the replies are what a fresh tool env answers to the same calls
        env = make_env()
        env.reset(**prompt_row)
        ids = tokenizer.apply_chat_template(messages[:1], tools=tools, chat_template=trainer.chat_template,
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = tokenizer.apply_chat_template(messages[:i], tools=tools, tokenize=False,
                                                   add_generation_prompt=True)
            turn = tokenizer.apply_chat_template(messages[: i + 1], tools=tools, tokenize=False)[len(before) :]
            turn_ids = tokenizer(turn.removesuffix("\n"), add_special_tokens=False)["input_ids"]
            assert turn_ids[-1] == tokenizer.eos_token_id
            parsed = parse_response(trainer._tokenizer, turn_ids, prefix=ids, tools=tools)
            assert parsed.get("tool_calls", []) == message.get("tool_calls", [])  # TRL reads the call back as made
            ids = ids + turn_ids
            replies = [m for m in messages[i + 1 : i + 2] if m["role"] == "tool"]
            for reply, call in zip(replies, message.get("tool_calls", []), strict=True):
                assert reply["content"] == getattr(env, call["function"]["name"])(**call["function"]["arguments"])
            if replies:
                ids = ids + trainer._get_tool_suffix_ids(replies)
        full = tokenizer.apply_chat_template(messages, tools=json.loads(row["tools"]), tokenize=True, return_dict=False)
        assert full == ids + tokenizer("\n", add_special_tokens=False)["input_ids"]
    by_id = {r["example_id"]: r for r in rows}
    calls = [m["tool_calls"][0]["function"] for m in by_id["q1"]["messages"] if m.get("tool_calls")]
    assert [c["name"] for c in calls] == ["search", "answer"] and calls[1]["arguments"] == {"answer": "Karsk"}
    assert by_id["q1"]["messages"][2]["content"].startswith("<information>")
    # as the docs build the SFT dataset: each call keeps its own arguments (a plain from_list adds nulls)
    assert Dataset.from_list(rows, on_mixed_types="use_json")[0]["messages"] == rows[0]["messages"]
    assert Dataset.from_list(rows)[0]["messages"] != rows[0]["messages"]


def test_tool_sft_dataset_refuses_what_it_cannot_demonstrate(bm25: BM25Retriever) -> None:
    from agents.integrations.trl import SearchQAToolEnv, tool_sft_dataset

    make_env = SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, max_turns=4)
    assert len(tool_sft_dataset(make_env, 2, successful_only=False)) == 2
    with pytest.raises(ValueError, match="positive integer"):
        tool_sft_dataset(make_env, 0)
    with pytest.raises(ValueError, match="arena"):
        tool_sft_dataset(SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, protocol="arena"))
    with pytest.raises(ValueError, match="no demonstration left"):  # one turn: the oracle cannot search and answer
        tool_sft_dataset(SearchQAToolEnv.factory(list(EXAMPLES), retriever=bm25, max_turns=1))



@pytest.mark.parametrize("protocol", ["search-r1", "tools", "browse", "tools-browse", "arena"])
def test_tool_env_tells_the_model_the_truth_about_hostile_calls(bm25: BM25Retriever, protocol: str) -> None:
    """A refused answer or open is an invalid turn and the tool says why; "Answer recorded." only if it was."""
    import json

    from agents.integrations.trl import SearchQAToolEnv

    tobin = next(ex for ex in EXAMPLES if ex.question == "Where was Tobin Quenn born?")
    env = SearchQAToolEnv.factory([tobin], retriever=bm25, protocol=protocol, max_turns=30)()
    answers = ["", "   ", "x" * 5000, "a </answer> b", "<answer> a", "a <search> b", "\ud800", "Karsk \udfff"]
    opens: list[tuple[Any, Any]] = [(0, 1), (99, 1), ("the first", 1), (1, 0), (1, "\ud800"), (-3, 1)]
    calls = [("open", o) for o in opens if hasattr(env, "open")] + [("answer", a) for a in answers]
    env.reset(example_id=tobin.id)
    for name, arg in calls:
        if name == "open":
            said = env.open(*arg)  # type: ignore[attr-defined]
        elif protocol == "arena":
            said = env.answer(arg, [1], "It says so.")  # type: ignore[call-arg]
        else:
            said = env.answer(arg)
        said.encode("utf-8")  # TRL tokenizes it next
        info = env._info or {}
        assert "No tool call found" not in said and "No action found" not in said, (name, arg, said)
        recorded = name == "answer" and info["action_type"] == "answer"
        assert (said == "Answer recorded.") == recorded, (name, arg, said)
        if info["invalid_reason"] is not None:  # the reason, and the episode goes on
            assert f"({info['invalid_reason']})" in said and not env._done, (name, arg, said)
        if recorded:  # what the episode holds is writable as UTF-8; the next call starts a new one
            json.dumps([env._final, env._env.messages()], ensure_ascii=False, default=str).encode("utf-8")
            env.reset(example_id=tobin.id)


@pytest.mark.parametrize("protocol", ["search-r1", "tools", "browse", "tools-browse", "arena"])
def test_a_model_that_copies_what_the_tools_return_scores_nothing(bm25: BM25Retriever, protocol: str) -> None:
    """Every preset: the tools' returns before the answer never hold the gold, so the copier's EM is 0."""
    from agents.integrations.trl import SearchQAToolEnv
    from searchenv.rewards import PRESETS

    from .leak import SEALED, assert_no_gold, copied_answer

    for preset in PRESETS:
        make_env = SearchQAToolEnv.factory(list(SEALED), retriever=bm25, max_turns=5, protocol=protocol,
                                           reward=preset)
        for example in SEALED:
            env: Any = make_env()
            env.reset(example_id=example.id)
            seen = [env.search(example.question), env.search("zzz")]
            if hasattr(env, "open"):
                seen.append(env.open(1))
            assert_no_gold(seen, example.answers, f"{protocol}/{preset}/{example.id}")
            copied = copied_answer(seen)
            if protocol == "arena":
                env.answer(copied, [1], "copied")
            else:
                env.answer(copied)
            env.get_reward()
            assert env.final_metrics["em"] == 0.0, (protocol, preset, copied)


@pytest.mark.parametrize("protocol", ["search-r1", "browse", "arena"])
def test_tool_arguments_of_the_wrong_type_are_refused_before_any_turn(bm25: BM25Retriever, protocol: str) -> None:
    """An answer that is an object, a list or null is not text that happens to contain the gold answer."""
    from agents.integrations.trl import SearchQAToolEnv

    gold = EXAMPLES[1]  # Karsk; the gold "None" case: a question whose answer is the word None
    none_q = dataclasses.replace(EXAMPLES[2], id="qn", answers=("None",))
    make_env = SearchQAToolEnv.factory([gold, none_q], retriever=bm25, max_turns=3, protocol=protocol)
    cases: list[tuple[str, Any]] = [(gold.id, {"a": "Karsk"}), (gold.id, ["Karsk"]), (none_q.id, None)]
    for example_id, bad in cases:
        env: Any = make_env()
        env.reset(example_id=example_id)
        reply = env.answer(bad, [1], "x") if protocol == "arena" else env.answer(bad)
        assert reply.startswith("The answer was not recorded.") and "`answer` must be a string" in reply, reply
        assert env.search(["Karsk"]).startswith("The call was not made: `query` must be a string")
        if protocol == "arena":
            assert "`analysis` must be a string" in env.answer("Karsk", [1], {"why": "x"})
        env.get_reward()
        assert env.final_metrics["em"] == 0.0 and env.final_metrics["answered"] == 0.0
        assert env.final_metrics["invalid_turns"] == 0.0  # refused at the tool: no turn was taken
