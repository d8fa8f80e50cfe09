"""Token-level rollouts under ``tools``: the chat template's markup is environment text, ids stay exact."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.policies.base import Generation  # noqa: E402
from agents.policies.chat import reply_ids, reply_text, template_renderer  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from agents.rollout import RolloutEngine  # noqa: E402
from searchenv.protocols import Answer, Search, get_protocol  # noqa: E402
from tests.tiny_model import TOOLS_CHAT_TEMPLATE, build_tiny_model, one_thread  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def tools_policy() -> HFPolicy:
    """The tiny model with a Hermes/Qwen-layout chat template that renders tool calls and results."""
    model, tokenizer = build_tiny_model(0)
    tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
    return HFPolicy(model, tokenizer)


class CallPolicy:
    """Writes the given turns in order (per episode: the number of replies in its context picks the turn)."""

    def __init__(self, inner: HFPolicy, turns: Sequence[str], *, eos: bool = False) -> None:
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.turns = list(turns)
        self.eos = eos
        self.prompts: list[list[int]] = []

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)

    def chat_prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        return self.inner.chat_prompt_ids(messages)

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any) -> list[Generation]:
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            turn = self.inner.tokenizer.decode(list(p)).count("<|im_start|>assistant") - 1
            text = self.turns[min(turn, len(self.turns) - 1)]
            ids = tuple(self.encode(text))
            if self.eos:  # the turn ended at the end-of-turn token, which the ids hold and the text does not
                out.append(Generation(text, (*ids, self.inner.tokenizer.eos_token_id), None, "eos"))
            else:
                out.append(Generation(text, ids, None, "stop"))
        return out


def _turns(protocol: Any) -> list[str]:
    return [
        protocol.format_action(Search(("who directed The Glass Orchard",)), "First the director."),
        "{not json",
        f"<tool_call>\n{json.dumps({'name': 'lookup', 'arguments': {'q': 'x'}})}\n</tool_call>",
        protocol.format_action(Search(("Velora Quenn born",))),
        protocol.format_action(Answer("Essaly"), "Drathmoor is in Essaly."),
    ]


@pytest.mark.parametrize("eos", [False, True])
def test_rollout_ids_are_the_templates_rendering_of_the_env_messages(
    tools_policy: HFPolicy, make_env: Any, eos: bool
) -> None:
    env = make_env(protocol="tools", max_turns=6)
    policy = CallPolicy(tools_policy, _turns(env.protocol), eos=eos)
    batch = RolloutEngine(policy, env, concurrency=1).run(["q0"])
    rec = batch[0]
    assert rec.stop_reason == "answered" and rec.info["em"] == 1.0
    assert [i["invalid_reason"] for i in rec.step_infos] == [None, "bad_json", "unknown_tool", None, None]
    rendered = tools_policy.tokenizer.apply_chat_template(env.messages(), tokenize=False)
    full = tools_policy.encode(rendered)
    ids = rec.prompt_ids + rec.completion_ids
    tail = tools_policy.encode("\n" if eos else "<|im_end|>\n")  # the template's end of the last message
    assert ids + tail == full
    assert rec.prompt_ids == tools_policy.chat_prompt_ids(env.messages()[:2])
    for t, (start, end) in enumerate(rec.turn_spans):  # generated ids kept as generated, mask 1 on them only
        assert rec.completion_ids[start:end] == rec.generated_ids[t]
        assert set(rec.loss_mask[start:end]) == {1}
    assert sum(rec.loss_mask) == sum(len(g) for g in rec.generated_ids)
    for start, end in rec.env_spans:  # the template's markup and the tool results are environment text
        assert set(rec.loss_mask[start:end]) == {0}
    first_reply = tools_policy.decode(rec.env_ids[0])
    assert "<tool_response>\nDoc 1(Title:" in first_reply and first_reply.endswith("assistant\n")


def test_truncated_episode_ends_with_the_reply_and_no_generation_prompt(tools_policy: HFPolicy, make_env: Any) -> None:
    env = make_env(protocol="tools", max_turns=1)
    policy = CallPolicy(tools_policy, _turns(env.protocol))
    rec = RolloutEngine(policy, env, concurrency=1).run(["q0"])[0]
    assert rec.stop_reason == "max_turns"
    rendered = tools_policy.tokenizer.apply_chat_template(env.messages(), tokenize=False)
    assert rec.prompt_ids + rec.completion_ids == tools_policy.encode(rendered)


def test_reply_text_and_ids_on_their_own(tools_policy: HFPolicy) -> None:
    render = template_renderer(tools_policy.tokenizer)
    p = get_protocol("tools")
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
            *p.turn_messages("", p.parse(p.format_action(Search(("x",)))), "\n<tool_response>\nR\n</tool_response>\n")]
    msgs[2]["tool_calls"][0]["id"] = "call_1"
    msgs[3]["tool_call_id"] = "call_1"
    end, reply = reply_text(render, msgs, 2, done=False)
    assert (end, reply) == ("<|im_end|>\n", "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n"
                                            "<|im_start|>assistant\n")
    enc = tools_policy.encode
    assert reply_ids(enc, [5, *enc("<|im_end|>")], end, reply) == enc("\n") + enc(reply)
    assert reply_ids(enc, [5], end, reply) == enc(end) + enc(reply)
    assert reply_text(render, msgs[:3], 2, done=True) == ("<|im_end|>\n", "")
    with pytest.raises(ValueError, match="chat template"):
        template_renderer(type("T", (), {"chat_template": None})())


def test_engine_needs_a_chat_template_under_tools(make_env: Any) -> None:
    class Bare:
        def generate(self, *a: Any, **k: Any) -> list[Generation]:
            return []

        def encode(self, text: str) -> list[int]:
            return []

        def decode(self, ids: Sequence[int]) -> str:
            return ""

        def chat_prompt_ids(self, messages: Any) -> list[int]:
            return []

    with pytest.raises(TypeError, match="chat template"):
        RolloutEngine(Bare(), make_env(protocol="tools"))
    RolloutEngine(Bare(), make_env(protocol="search-r1"))  # tag protocols need no template


def test_trl_rollout_func_keeps_the_templates_ids(tools_policy: HFPolicy, corpus_file: Any) -> None:
    pytest.importorskip("trl")
    from agents.integrations.trl import SearchQARollout
    from tests.conftest import EXAMPLES

    rollout = SearchQARollout(list(EXAMPLES), corpus=corpus_file, protocol="tools", max_turns=6,
                              max_total_tokens=4096)
    policy = CallPolicy(tools_policy, _turns(rollout.env.protocol))
    out = rollout.run([EXAMPLES[0].question], policy, eos_token_id=tools_policy.tokenizer.eos_token_id)
    env = rollout.env  # one episode, run in the rollout's own environment
    rendered = tools_policy.encode(tools_policy.tokenizer.apply_chat_template(env.messages(), tokenize=False))
    ids = out["prompt_ids"][0] + out["completion_ids"][0]
    assert ids + tools_policy.encode("\n") == rendered  # TRL's appended EOS is the template's <|im_end|>
    assert out["env_mask"][0][-1] == 0 and sum(out["env_mask"][0]) == sum(len(policy.encode(t)) for t in policy.turns)


@pytest.mark.parametrize("eos", [False, True])
def test_llm_agent_contexts_are_the_templates_rendering(tools_policy: HFPolicy, make_env: Any, eos: bool) -> None:
    from agents.baselines import LLMAgent, run_agent
    from tests.conftest import EXAMPLES

    env = make_env(protocol="tools")
    policy = CallPolicy(tools_policy, _turns(env.protocol), eos=eos)
    [episode] = run_agent(LLMAgent("llm", policy), EXAMPLES[:1], env.retriever, protocol="tools", max_turns=6)
    assert episode.metrics["em"] == 1.0 and len(policy.prompts) == 5
    render = tools_policy.tokenizer.apply_chat_template
    assert policy.prompts[-1] == tools_policy.encode(render(episode.messages[:-1], tokenize=False,
                                                            add_generation_prompt=True))


def test_parse_telemetry_in_trainer_metrics_eval_rows_and_episode_metrics(tools_policy: HFPolicy,
                                                                         make_env: Any) -> None:
    from agents.baselines import LLMAgent, run_agent
    from agents.evaluation.evaluate import summarize
    from agents.trainers.episodes import episode_from_record, step_metrics
    from searchenv.metrics import episode_metrics as env_episode_metrics
    from tests.conftest import EXAMPLES

    env = make_env(protocol="tools", max_turns=6)
    turns = _turns(env.protocol)  # search, bad_json, unknown_tool, search, answer
    batch = RolloutEngine(CallPolicy(tools_policy, turns), env, concurrency=2).run(["q0", "q1"])
    metrics = step_metrics([episode_from_record(r) for r in batch])
    assert metrics["invalid_share"] == {"bad_json": 0.2, "unknown_tool": 0.2}  # 2 of 10 turns each
    per_episode = env_episode_metrics(batch[0].info)
    assert per_episode["invalid/bad_json"] == per_episode["invalid/unknown_tool"] == 0.2
    assert per_episode["invalid/no_action"] == 0.0
    episodes = run_agent(LLMAgent("llm", CallPolicy(tools_policy, turns)), EXAMPLES[:2], env.retriever,
                         protocol="tools", max_turns=6)
    row = summarize(episodes, 1.0)
    assert row["invalid_share"] == {"bad_json": 0.2, "unknown_tool": 0.2} and row["invalid_turns"] == 2.0


def test_sft_lays_tools_demonstrations_out_as_the_template_renders_them(tools_policy: HFPolicy,
                                                                        make_env: Any) -> None:
    from agents.baselines import run_agent
    from agents.baselines.scripted import OracleAgent
    from agents.trainers.sft import messages_to_sample
    from tests.conftest import EXAMPLES

    env = make_env(protocol="tools")
    for record in run_agent(OracleAgent(), EXAMPLES, env.retriever, protocol="tools", top_k=3, max_turns=5):
        messages = record.messages
        sample = messages_to_sample(tools_policy, messages)
        rendered = tools_policy.encode(tools_policy.tokenizer.apply_chat_template(messages, tokenize=False))
        assert sample.ids + tools_policy.encode("<|im_end|>\n") == rendered
        trained = tools_policy.decode([t for t, m in zip(sample.ids, sample.mask, strict=True) if m])
        assert trained.count("<tool_call>") == sum(m["role"] == "assistant" for m in messages)
        assert "<tool_response>" not in trained and "Doc 1(" not in trained
