"""The OpenAI-compatible policies: reply handling, request shapes, failures, and the chat path of the agents.

Request shapes and failure handling run against a scripted stand-in server (a real server does not
fail on demand); ``test_openai_served.py`` runs the same policies against ``transformers serve``.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("httpcore")

from agents.policies.base import ChatPolicy, Policy  # noqa: E402
from agents.policies.openai_compat import (  # noqa: E402
    ModelServerError,
    OpenAIChatPolicy,
    OpenAICompletionsPolicy,
    api_base,
    openai_policy,
    restore_stop,
)

from .conftest import DOCS, EXAMPLES, ScriptedHandler  # noqa: E402

STOPS = ("</search>", "</answer>")
Scripted = tuple[str, type[ScriptedHandler]]


def _completion(text: str, finish: str = "stop", tokens: int = 3, **extra: Any) -> bytes:
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    return json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": finish, **extra}],
                       "usage": usage}).encode()


def _chat(text: str | None, finish: str = "stop", tokens: int = 2) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": finish}],
                       "usage": {"prompt_tokens": 20, "completion_tokens": tokens}}).encode()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    from .tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


# ---------------------------------------------------------------- replies as the Policy contract has them


@pytest.mark.parametrize(
    ("text", "finish", "stop_reason", "expected"),
    [
        # transformers serve keeps the stop string (and may run past it within the last token)
        ("<search> q </search>", "stop", None, ("<search> q </search>", "stop")),
        ("<answer> a </answer>\n", "stop", None, ("<answer> a </answer>", "stop")),
        # OpenAI and vLLM leave it out: vLLM names it, otherwise the open tag tells
        ("<search> q ", "stop", "</search>", ("<search> q </search>", "stop")),
        ("I think. <search> q ", "stop", None, ("I think. <search> q </search>", "stop")),
        ("<search> a </search> <answer> b", "stop", None, ("<search> a </search>", "stop")),
        ("<answer> b", "stop", None, ("<answer> b</answer>", "stop")),
        ("The answer is b.", "stop", None, ("The answer is b.", "eos")),
        ("<search> q", "length", None, ("<search> q", "length")),
        ("<search> q", "stop", 2, ("<search> q</search>", "stop")),  # a token id: the open tag decides
    ],
)
def test_restore_stop(text: str, finish: str, stop_reason: Any, expected: tuple[str, str]) -> None:
    assert restore_stop(text, finish, STOPS, stop_reason) == expected


@given(st.text(alphabet="<>/sarchenwq b\n", max_size=60), st.sampled_from(["stop", "length", None, "eos"]))
def test_restore_stop_never_loses_text_and_ends_at_most_one_stop(text: str, finish: Any) -> None:
    out, reason = restore_stop(text, finish, STOPS)
    assert reason in ("stop", "length", "eos")
    if any(s in text for s in STOPS):
        assert text.startswith(out) and reason == "stop" and out.endswith(STOPS)
        assert not any(s in out[: -len(next(s for s in STOPS if out.endswith(s)))] for s in STOPS)
    else:
        assert out.startswith(text)
        assert (out != text) == (reason == "stop")


def test_api_base() -> None:
    assert api_base("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert api_base("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"
    assert api_base("https://api.example.com/v1/") == "https://api.example.com/v1"
    assert api_base("http://h:1/openai/v1") == "http://h:1/openai/v1"
    with pytest.raises(ValueError, match="http"):
        api_base("127.0.0.1:8000")


def test_options_are_checked(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        OpenAICompletionsPolicy("http://127.0.0.1:9", tokenizer=None)
    with pytest.raises(ValueError, match="prompt_format"):
        OpenAICompletionsPolicy("http://127.0.0.1:9", tokenizer=tokenizer, prompt_format="bytes")
    for bad in ({"max_concurrency": 0}, {"timeout": -1}, {"retries": -1}, {"backoff": float("nan")}, {"model": ""}):
        with pytest.raises(ValueError):
            OpenAIChatPolicy("http://127.0.0.1:9", **bad)
    with pytest.raises(ValueError, match="printable ASCII"):
        OpenAIChatPolicy("http://127.0.0.1:9", api_key="sk bad")
    with pytest.raises(ValueError, match="api must be"):
        openai_policy("http://127.0.0.1:9", api="responses")
    assert isinstance(openai_policy("http://127.0.0.1:9", tokenizer=tokenizer), OpenAICompletionsPolicy)
    chat = openai_policy("http://127.0.0.1:9")
    assert isinstance(chat, ChatPolicy) and not isinstance(chat, Policy)
    with pytest.raises(ValueError, match="without a tokenizer has no token ids"):
        chat.encode("x")


# ---------------------------------------------------------------- completions: request shape and fallbacks


def test_completions_send_token_ids_with_stop_and_per_prompt_seeds(scripted: Scripted, tokenizer: Any) -> None:
    url, handler = scripted
    handler.script = [(200, _completion("x")), (200, _completion("<search> q ")), (200, _completion("b </answer>"))]
    policy = OpenAICompletionsPolicy(url, tokenizer=tokenizer, model="m", api_key="sk-1", max_concurrency=1)
    prompts = [tokenizer.encode("Question: a", add_special_tokens=False), "Question: b"]
    gens = policy.generate(prompts, stop=STOPS, max_new_tokens=7, temperature=0.5, top_p=0.9, seed=[1, 2])
    probe, *bodies = handler.seen
    assert probe["prompt"] == prompts[0] and probe["max_tokens"] == 1  # auto: the server took ids
    assert policy.prompt_format == "ids"
    assert [b["prompt"] for b in bodies] == [prompts[0], tokenizer.encode("Question: b", add_special_tokens=False)]
    for b in bodies:
        assert b["model"] == "m" and b["stop"] == list(STOPS) and b["max_tokens"] == 7
        assert b["temperature"] == 0.5 and b["top_p"] == 0.9
    assert bodies[0]["seed"] != bodies[1]["seed"]
    assert [(g.text, g.finish_reason) for g in gens] == [("<search> q </search>", "stop"), ("b </answer>", "stop")]
    assert gens[0].token_ids == tuple(tokenizer.encode("<search> q </search>", add_special_tokens=False))
    assert gens[0].logprobs is None and gens[0].n_tokens == 3 and gens[0].num_tokens == 3
    usage = policy.usage
    assert usage["requests"] == 3 and usage["completion_tokens"] == 9 and usage["prompt_tokens"] == 30
    # the same seeds give the same request seeds (reproducible where the server honours seed)
    handler.script = [(200, _completion("y")), (200, _completion("z"))]
    policy.generate(prompts, stop=STOPS, max_new_tokens=7, temperature=0.5, seed=[1, 2])
    assert [b["seed"] for b in handler.seen[-2:]] == [b["seed"] for b in bodies]


def test_completions_fall_back_to_text_when_ids_are_refused(scripted: Scripted, tokenizer: Any) -> None:
    url, handler = scripted
    handler.script = [(400, b'{"detail": "prompt must be a string."}'), (200, _completion("<answer> a </answer>"))]
    policy = OpenAICompletionsPolicy(url, tokenizer=tokenizer, model="m")
    ids = policy.chat_prompt_ids([{"role": "user", "content": "hi"}])
    [gen] = policy.generate([ids], stop=STOPS, temperature=0)
    assert policy.prompt_format == "text"
    sent = handler.seen[-1]
    assert sent["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # special tokens kept
    assert "top_p" not in sent and sent["temperature"] == 0.0
    assert gen.text == "<answer> a </answer>"


def test_model_name_comes_from_v1_models(scripted: Scripted, tokenizer: Any) -> None:
    url, handler = scripted
    handler.script = [(200, b'{"data": [{"id": "served-7b"}]}'), (200, _completion("a"))]
    policy = OpenAICompletionsPolicy(url + "/v1", tokenizer=tokenizer, prompt_format="text")
    policy.generate(["q"], max_new_tokens=2)
    assert handler.seen[0] == {"GET": "/v1/models"} and handler.seen[1]["model"] == "served-7b"
    handler.script = [(500, b"Internal Server Error")]
    with pytest.raises(ModelServerError, match="--served-model"):
        _ = OpenAIChatPolicy(url).model


# ---------------------------------------------------------------- failures


def test_5xx_and_429_are_retried_honouring_retry_after(scripted: Scripted) -> None:
    url, handler = scripted
    handler.script = [(503, b'{"error": {"message": "overloaded"}}'),
                      (429, b"{}", {"Retry-After": "0.4"}), (200, _chat("<answer> x </answer>"))]
    policy = OpenAIChatPolicy(url, model="m", retries=3, backoff=0.01)
    start = time.monotonic()
    [gen] = policy.generate_chat([[{"role": "user", "content": "q"}]], stop=STOPS)
    assert time.monotonic() - start >= 0.4
    assert gen.text == "<answer> x </answer>" and policy.usage["retries"] == 2


def test_retries_are_bounded_and_the_error_names_the_server(scripted: Scripted) -> None:
    url, handler = scripted
    handler.script = [(502, b'{"error": {"message": "bad gateway"}}')] * 3
    policy = OpenAIChatPolicy(url, model="m", retries=2, backoff=0.01)
    with pytest.raises(ModelServerError, match=r"model server .*/v1/chat/completions failed after 3 attempt\(s\): "
                                               r"HTTP 502: bad gateway"):
        policy.generate_chat([[{"role": "user", "content": "q"}]])


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (401, b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}',
         "HTTP 401: Incorrect API key provided"),
        (200, b'{"object": "error"}', "without 'choices'"),
        (200, b'{"choices": [{"message": {"role": "user"}}]}', "without string 'message.content'"),
        (200, b"<html>", "malformed JSON"),
    ],
)
def test_refusals_and_malformed_answers_fail_clearly(scripted: Scripted, status: int, body: bytes, match: str) -> None:
    url, handler = scripted
    handler.script = [(status, body)]
    with pytest.raises(ModelServerError, match=match):
        OpenAIChatPolicy(url, model="m", retries=0).generate_chat([[{"role": "user", "content": "q"}]])
    assert len(handler.seen) == 1  # a refusal is not retried


def test_nothing_listening_is_an_error_within_the_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = OpenAIChatPolicy(f"http://127.0.0.1:{port}", model="m", retries=1, backoff=0.01, timeout=5)
    with pytest.raises(ModelServerError, match="cannot reach the server"):
        policy.generate_chat([[{"role": "user", "content": "q"}]])


def test_chat_messages_are_checked(scripted: Scripted) -> None:
    url, _ = scripted
    with pytest.raises(ValueError, match="conversation 0 message 1"):
        OpenAIChatPolicy(url, model="m").generate_chat([[{"role": "user", "content": "q"}, {"role": "tool"}]])


# ---------------------------------------------------------------- the chat path of the reference agents


def test_rag_agent_on_a_chat_policy_sends_the_transcript_as_messages(scripted: Scripted, tmp_path: Any) -> None:
    from agents.baselines import make_agent, run_agent
    from searchenv.retrievers.bm25 import BM25Retriever

    url, handler = scripted
    # the model answers without opening <answer> (a chat API cannot be given that prefix) and the
    # second one with the tag and some talk before it
    handler.script = [(200, _chat("Montabri")), (200, _chat("Sure. <answer> Vuldoria </answer> done"))]
    policy = OpenAIChatPolicy(url, model="m", max_concurrency=1)
    agent = make_agent("rag", policy=policy)
    retriever = BM25Retriever.build(DOCS, tmp_path / "idx")
    episodes = run_agent(agent, EXAMPLES[:2], retriever, batch_size=2, seed=0)
    assert [e.answer for e in episodes] == ["Montabri", "Vuldoria"]
    assert [e.steps[-1]["generated_tokens"] for e in episodes] == [2, 2]
    for body, ex in zip(sorted(handler.seen, key=lambda b: b["messages"][1]["content"]),
                        sorted(EXAMPLES[:2], key=lambda e: e.question), strict=True):
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["system", "user", "assistant", "user"]  # the environment's reply speaks as the user
        assert body["messages"][2]["content"] == f"<search> {ex.question} </search>"
        assert body["messages"][3]["content"].startswith("<information>")
        assert body["stop"] == ["</answer>"]


def test_an_end_of_sequence_finish_ends_the_ids_with_eos_as_in_process(scripted: Scripted, tokenizer: Any) -> None:
    url, handler = scripted
    handler.script = [(200, _completion("Paris.", tokens=3)), (200, _completion("Par", finish="length", tokens=1))]
    policy = OpenAICompletionsPolicy(url, tokenizer=tokenizer, model="m", prompt_format="text", max_concurrency=1)
    eos, cut = policy.generate(["q1", "q2"], stop=STOPS, max_new_tokens=3)
    assert eos.finish_reason == "eos" and eos.token_ids[-1] == tokenizer.eos_token_id
    assert eos.token_ids[:-1] == tuple(tokenizer.encode("Paris.", add_special_tokens=False))
    assert cut.finish_reason == "length" and tokenizer.eos_token_id not in cut.token_ids


def test_text_prompts_whose_ids_the_server_would_not_make_again_are_counted(scripted: Scripted,
                                                                            tokenizer: Any) -> None:
    # A server that takes only text (transformers serve) tokenizes the decoded prompt itself: ids
    # encoded in pieces ("Ess" + "aly") reach it as the one-piece encoding, so it sees other tokens.
    url, handler = scripted
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    pieced = enc("Question: Ess") + enc("aly")
    whole = enc("Question: Essaly")
    assert pieced != whole and tokenizer.decode(pieced) == tokenizer.decode(whole)
    handler.script = [(400, b'{"detail": "prompt must be a string."}'), (200, _completion("a")),
                      (200, _completion("b"))]
    policy = OpenAICompletionsPolicy(url, tokenizer=tokenizer, model="m", max_concurrency=1)
    with pytest.warns(UserWarning, match=r"1 of 2 prompt\(s\) .* re-encode to other token ids"):
        policy.generate([whole, pieced], stop=STOPS, temperature=0)
    assert policy.prompt_format == "text"
    assert policy.is_exact(whole) and not policy.is_exact(pieced)
    assert policy.usage["inexact_prompts"] == 1
    # a server that takes ids gets them exactly
    handler.script = [(200, _completion("x")), (200, _completion("y"))]
    ids_policy = OpenAICompletionsPolicy(url, tokenizer=tokenizer, model="m")
    ids_policy.generate([pieced], stop=STOPS, temperature=0)
    assert ids_policy.prompt_format == "ids" and ids_policy.is_exact(pieced)
    assert ids_policy.usage["inexact_prompts"] == 0


def test_a_failed_request_keeps_the_generations_of_the_others(scripted: Scripted) -> None:
    from agents.policies.base import GenerationError
    from agents.policies.openai_compat import ModelRequestsError

    url, handler = scripted
    handler.script = [(200, _chat("<answer> a </answer>")), (502, b'{"error": {"message": "bad gateway"}}')]
    policy = OpenAIChatPolicy(url, model="m", retries=0, max_concurrency=1)
    with pytest.raises(ModelRequestsError, match=r"1 of 2 requests failed; .* HTTP 502: bad gateway") as info:
        policy.generate_chat([[{"role": "user", "content": "q1"}], [{"role": "user", "content": "q2"}]])
    assert isinstance(info.value, GenerationError) and isinstance(info.value, ModelServerError)
    first, second = info.value.results
    assert first is not None and first.text == "<answer> a </answer>" and second is None
    assert info.value.errors[0] is None and "bad gateway" in str(info.value.errors[1])


def _reasoning_reply(reasoning: str | None, field: str = "reasoning_content", content: str | None = None,
                     finish: str = "stop") -> bytes:
    """A reasoning model's reply as vLLM / SGLang send it: its text parsed out into a reasoning field."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message[field] = reasoning
    return json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": finish}],
                       "usage": {"prompt_tokens": 20, "completion_tokens": 9}}).encode()


def test_a_reply_with_its_text_in_the_reasoning_field_is_read_from_there(scripted: Scripted) -> None:
    url, handler = scripted
    handler.script = [(200, _reasoning_reply("<think> Karsk. </think> <answer> Karsk")),
                      (200, _reasoning_reply("<answer> Essaly </answer>", field="reasoning", content="")),
                      (200, _reasoning_reply("thinking", content="<answer> Montabri </answer>"))]
    policy = OpenAIChatPolicy(url, model="m", max_concurrency=1)
    gens = policy.generate_chat([[{"role": "user", "content": f"q{i}"}] for i in range(3)], stop=STOPS)
    assert [g.text for g in gens] == ["<think> Karsk. </think> <answer> Karsk</answer>", "<answer> Essaly </answer>",
                                      "<answer> Montabri </answer>"]  # content, when it has text, comes first


@pytest.mark.parametrize("reply", [_reasoning_reply(None), _reasoning_reply(None, content=""),
                                   _reasoning_reply("  ", content=" \n", finish="length")],
                         ids=["null-content", "empty-content", "blank-content-and-reasoning"])
def test_a_reply_without_text_or_tool_calls_fails_its_request_as_an_empty_reply(scripted: Scripted,
                                                                                 reply: bytes) -> None:
    from agents.policies.openai_compat import ModelRequestsError

    url, handler = scripted
    handler.script = [(200, reply)]
    with pytest.raises(ModelRequestsError, match=r"model server sent an empty reply: no text in 'message.content' "
                                                 r"or 'reasoning_content' or 'reasoning' and no 'tool_calls'"):
        OpenAIChatPolicy(url, model="m", retries=0).generate_chat([[{"role": "user", "content": "q"}]])
    assert len(handler.seen) == 1  # the server answered: not asked again


def _eval_served(url: str, tmp_path: Any, qa_file: Any, corpus_file: Any) -> Any:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    args = ["eval", "--agent", "llm", "--task", str(qa_file), "--corpus", str(corpus_file), "--retriever", "bm25",
            "--n", "2", "--batch-size", "1", "--model-url", url, "--served-model", "m", "--api", "chat",
            "--concurrency", "1", "--out", str(tmp_path / "run")]
    return CliRunner().invoke(get_app(), args)


def test_eval_scores_a_reasoning_model_whose_server_sends_null_content(scripted: Scripted, tmp_path: Any,
                                                                       qa_file: Any, corpus_file: Any) -> None:
    url, handler = scripted
    handler.script = [(200, _reasoning_reply("<think> The director was born in Essaly. </think> <answer> Essaly")),
                      (200, _reasoning_reply("<answer> Karsk </answer>"))]
    res = _eval_served(url, tmp_path, qa_file, corpus_file)
    assert res.exit_code == 0, res.output
    [row] = json.loads((tmp_path / "run" / "results.json").read_text())["rows"]
    assert row["em"] == 1.0 and row["invalid_turns"] == 0 and row["invalid_share"] == {}


def test_eval_fails_the_episodes_of_empty_replies_and_exits_3(scripted: Scripted, tmp_path: Any, qa_file: Any,
                                                               corpus_file: Any) -> None:
    url, handler = scripted
    handler.script = [(200, _reasoning_reply(None)), (200, _reasoning_reply("<answer> Karsk </answer>"))]
    res = _eval_served(url, tmp_path, qa_file, corpus_file)
    assert res.exit_code == 3, res.output
    said = " ".join(res.output.split())
    assert "1 of 2 episodes failed" in said and "q0: model server sent an empty reply" in said, said
    [row] = json.loads((tmp_path / "run" / "results.json").read_text())["rows"]
    assert row["n"] == 1 and row["failed"] == 1 and row["em"] == 1.0
    assert "empty reply" in row["failures"][0]["error"]


# ---------------------------------------------------------------- native tool calls (protocol="tools")


def _tool_reply(name: str, arguments: str, call_id: str, content: str | None = None) -> bytes:
    message = {"role": "assistant", "content": content,
               "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                       "usage": {"prompt_tokens": 20, "completion_tokens": 7}}).encode()


def test_llm_agent_calls_tools_natively_on_a_chat_policy(scripted: Scripted, tmp_path: Any) -> None:
    from agents.baselines import make_agent, run_agent
    from searchenv.retrievers.bm25 import BM25Retriever

    url, handler = scripted
    handler.script = [(200, _tool_reply("search", '{"query": "Tobin Quenn born"}', "srv_1", "Let me look.")),
                      (200, _tool_reply("answer", '{"answer": "Karsk"}', "srv_2"))]
    policy = OpenAIChatPolicy(url, model="m", max_concurrency=1)
    retriever = BM25Retriever.build(DOCS, tmp_path / "idx")
    [episode] = run_agent(make_agent("llm", policy=policy), EXAMPLES[1:2], retriever, protocol="tools", seed=0)
    assert episode.answer == "Karsk" and episode.metrics["em"] == 1.0 and episode.metrics["invalid_turns"] == 0
    first, second = handler.seen
    assert [t["function"]["name"] for t in first["tools"]] == ["search", "answer"]
    assert "stop" not in first  # the server's tool-call parser ends the turn
    assistant, tool = second["messages"][2:]
    call = {"name": "search", "arguments": '{"query": "Tobin Quenn born"}'}
    assert assistant["content"] == "Let me look." and assistant["tool_calls"] == [
        {"id": "srv_1", "type": "function", "function": call}]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "srv_1" and tool["content"].startswith("Doc 1(Title:")
    assert episode.messages[-1]["tool_calls"][0]["id"] == "srv_2"


def test_tool_calls_come_back_as_the_protocols_text(scripted: Scripted) -> None:
    from searchenv.protocols import Search, get_protocol, tool_turn_text

    url, handler = scripted
    handler.script = [(200, _tool_reply("search", '{"query": "a"}', "c1")), (200, _tool_reply("search", "{bad", "c2"))]
    policy = OpenAIChatPolicy(url, model="m", max_concurrency=1)
    tools = get_protocol("tools").tools
    good, bad = policy.generate_chat([[{"role": "user", "content": "q"}]] * 2, tools=tools)
    assert good.finish_reason == "eos"  # the model ended its message after the call
    parsed = get_protocol("tools").parse(good.text)
    assert parsed == Search(("a",), call=parsed.call) and parsed.call.id == "c1"
    assert get_protocol("tools").parse(bad.text).code == "bad_json"
    call = {"id": "x", "function": {"name": "answer", "arguments": {"answer": "b"}}}
    assert tool_turn_text("", [call], ids=True) == \
        '<tool_call>\n{"id": "x", "name": "answer", "arguments": {"answer": "b"}}\n</tool_call>'
    with pytest.raises(ValueError, match="tool_call_id"):
        policy.generate_chat([[{"role": "tool", "content": "r"}]], tools=tools)
    with pytest.raises(ValueError, match="message 0"):  # without tools= a tool message is refused as before
        policy.generate_chat([[{"role": "tool", "tool_call_id": "c", "content": "r"}]])


def test_calls_a_server_left_as_text_go_back_as_text(scripted: Scripted, tmp_path: Any) -> None:
    """A server without a tool-call parser for the model (transformers serve with SmolLM2) returns the call as text."""
    from agents.baselines import make_agent, run_agent
    from searchenv.retrievers.bm25 import BM25Retriever

    url, handler = scripted
    written = 'Searching.\n<tool_call>\n{"name": "search", "arguments": {"query": "Tobin Quenn born"}}\n</tool_call>'
    handler.script = [(200, _chat(written)), (200, _tool_reply("answer", '{"answer": "Karsk"}', "srv_2"))]
    policy = OpenAIChatPolicy(url, model="m", max_concurrency=1)
    retriever = BM25Retriever.build(DOCS, tmp_path / "idx")
    [episode] = run_agent(make_agent("llm", policy=policy), EXAMPLES[1:2], retriever, protocol="tools", seed=0)
    assert episode.metrics["em"] == 1.0 and episode.metrics["invalid_turns"] == 0
    assert episode.messages[2]["tool_calls"][0]["id"] == "call_1"  # the environment still records the call
    assistant, reply = handler.seen[1]["messages"][2:]
    assert assistant == {"role": "assistant", "content": written}  # as the model wrote it, not an empty turn
    assert reply["role"] == "user" and reply["content"].startswith("Doc 1(Title:")


# ---------------------------------------------------------------- hostile replies fail one episode, never the run


def test_hostile_tool_calls_of_a_served_model_are_invalid_turns(scripted: Scripted, tokenizer: Any,
                                                                tmp_path: Any) -> None:
    """Arguments with a lone surrogate or nested hundreds deep: invalid turns, the episode goes on, all writable."""
    from agents.baselines import make_agent, run_agent
    from searchenv.retrievers.bm25 import BM25Retriever

    url, handler = scripted
    deep = '{"answer": ' + "[" * 700 + "]" * 700 + "}"
    handler.script = [(200, _tool_reply("answer", '{"answer": "\\ud800"}', "srv_1")),
                      (200, _tool_reply("answer", deep, "srv_2")),
                      (200, _tool_reply("answer", '{"answer": "Karsk"}', "srv_3"))]
    policy = OpenAIChatPolicy(url, model="m", tokenizer=tokenizer, max_concurrency=1)  # re-encodes each reply
    retriever = BM25Retriever.build(DOCS, tmp_path / "idx")
    [episode] = run_agent(make_agent("llm", policy=policy), EXAMPLES[1:2], retriever, protocol="tools", seed=0)
    assert episode.error is None and episode.answer == "Karsk" and episode.metrics["em"] == 1.0
    assert [s["invalid_reason"] for s in episode.steps] == ["bad_json", "bad_json", None]
    json.dumps(episode.to_dict(), ensure_ascii=False).encode("utf-8")  # what eval and bench write
    told = [m["content"] for m in handler.seen[2]["messages"] if m["role"] == "user"][1:]
    assert "lone surrogate" in told[0] and "nested deeper than 64 levels" in told[1]


class _BrokenOn:
    """The tiny tokenizer, raising on replies that hold ``marker``: an unexpected error while one answer is read.

    A stand-in, as the scripted server is: a real tokenizer does not fail on demand.
    """

    def __init__(self, tokenizer: Any, marker: str) -> None:
        self.inner, self.marker = tokenizer, marker
        self.eos_token_id = tokenizer.eos_token_id

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if self.marker in text:
            raise RuntimeError("the tokenizer broke")
        return list(self.inner.encode(text, add_special_tokens=add_special_tokens))


def test_an_answer_that_cannot_be_read_fails_only_its_request(scripted: Scripted, tokenizer: Any) -> None:
    from agents.policies.base import GenerationError
    from agents.policies.openai_compat import ModelRequestsError

    url, handler = scripted
    handler.script = [(200, _chat("<answer> a </answer>")), (200, _chat("<answer> boom </answer>"))]
    policy = OpenAIChatPolicy(url, model="m", tokenizer=_BrokenOn(tokenizer, "boom"), retries=0, max_concurrency=1)
    with pytest.raises(ModelRequestsError, match=r"1 of 2 requests failed; .* could not be read "
                                                 r"\(RuntimeError: the tokenizer broke\)") as info:
        policy.generate_chat([[{"role": "user", "content": "q1"}], [{"role": "user", "content": "q2"}]])
    assert isinstance(info.value, GenerationError)
    first, second = info.value.results
    assert first is not None and first.text == "<answer> a </answer>" and second is None
    assert len(handler.seen) == 2  # not retried: the server answered
