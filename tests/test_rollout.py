"""The rollout engine: token-exact records, masks, batched retrieval, determinism, budgets."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agents.policies.base import Generation  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from agents.rollout import RolloutEngine, rollout  # noqa: E402
from searchenv.retrievers.base import Hit, RetrieverError  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    model, tokenizer = build_tiny_model(0)
    return HFPolicy(model, tokenizer)


class SpyPolicy:
    """Delegates to a real policy and records every prompt it was given and what it generated."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[list[tuple[int, ...]]] = []
        self.pairs: list[set[tuple[tuple[int, ...], tuple[int, ...]]]] = []

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any) -> list[Generation]:
        gens = self.inner.generate(prompts, **kwargs)
        self.calls.append([tuple(p) for p in prompts])
        self.pairs.append({(tuple(p), tuple(g.token_ids)) for p, g in zip(prompts, gens, strict=True)})
        return gens  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ScriptPolicy:
    """A deterministic text policy over the tiny tokenizer: search twice, then answer.

    It reads its own context (the decoded prompt) like a model would: the number of
    ``<information>`` blocks so far decides the turn.
    """

    def __init__(self, tokenizer_policy: HFPolicy, answer: str = "Karsk") -> None:
        self.tok = tokenizer_policy
        self.answer = answer

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(ids)

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.tok.chat_prompt_ids(messages)

    def first_turn(self, question: str) -> str:
        return f"<think> look it up </think>\n<search> {question} </search>"

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 256, **kwargs: Any
    ) -> list[Generation]:
        out = []
        for p in prompts:
            context = self.decode(p)
            question = re.search(r"Question: (.*)", context)
            seen = context.split("Question:")[-1].count("<information>")  # after the instructions
            if seen == 0:
                text = self.first_turn(question.group(1) if question else "x")
            elif seen == 1:
                text = "<search> Karsk country </search>"
            else:
                text = f"<answer> {self.answer} </answer>"
            ids = tuple(self.encode(text))
            reason = "stop"
            if len(ids) > max_new_tokens:
                ids, reason = ids[:max_new_tokens], "length"
                text = self.decode(ids)
            out.append(Generation(text, ids, tuple(-1.0 for _ in ids), reason))
        return out


class CountingRetriever:
    """A real retriever underneath; counts search_batch calls and their sizes."""

    def __init__(self, inner: Any, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.batches: list[int] = []

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.batches.append(len(queries))
        if self.fail:
            raise RetrieverError("index server unreachable")
        return self.inner.search_batch(queries, k)  # type: ignore[no-any-return]


def _check_layout(rec: Any, policy: Any) -> None:
    """Spans tile the completion in order; mask is 1 exactly on policy turns; env ids are encode(new_text)."""
    pieces: list[int] = []
    for t, (start, end) in enumerate(rec.turn_spans):
        assert start == len(pieces)
        pieces.extend(rec.generated_ids[t])
        assert end == len(pieces)
        if t < len(rec.env_ids):
            env = rec.env_ids[t]
            if env:
                assert (len(pieces), len(pieces) + len(env)) in rec.env_spans
            pieces.extend(env)
    assert pieces == rec.completion_ids
    mask = [0] * len(rec.completion_ids)
    for start, end in rec.turn_spans:
        mask[start:end] = [1] * (end - start)
    assert rec.loss_mask == mask
    for start, end in rec.env_spans:
        assert set(rec.loss_mask[start:end]) == {0} and set(rec.logprobs[start:end]) == {0.0}
    assert len(rec.logprobs) == len(rec.completion_ids)
    assert len(rec.rewards) == len(rec.turn_spans) == len(rec.reward_terms)
    for t, info in enumerate(rec.step_infos):
        full = policy.encode(info["new_text"])
        if t < len(rec.step_infos) - 1:
            assert rec.env_ids[t] == full
        else:  # the last insertion may be cut to the token budget
            assert rec.env_ids[t] == full[: len(rec.env_ids[t])]


def test_records_are_token_exact(tiny: HFPolicy, make_env: Any) -> None:
    spy = SpyPolicy(tiny)
    env = make_env(max_turns=3)
    batch = RolloutEngine(spy, env, concurrency=6, max_new_tokens=12, temperature=1.0).run(
        EXAMPLES[:3], group_size=2, seed=1
    )
    assert len(batch) == 6 and len(spy.calls) == 3  # one generate per round (turn) for all six episodes
    assert [len(c) for c in spy.calls] == [6, 6, 6]
    for rec in batch:
        ex = next(e for e in EXAMPLES if e.id == rec.example_id)
        messages = [
            {"role": "system", "content": env.protocol.system_prompt()},
            {"role": "user", "content": env.protocol.user_prompt(ex.question)},
        ]
        assert rec.prompt_ids == tiny.chat_prompt_ids(messages)
        _check_layout(rec, tiny)
        assert rec.stop_reason == "max_turns" and rec.truncated and not rec.terminated
        for t, (start, _end) in enumerate(rec.turn_spans):
            fed = tuple(rec.prompt_ids + rec.completion_ids[:start])  # what the model saw at turn t
            assert fed in spy.calls[t]
            assert (fed, tuple(rec.generated_ids[t])) in spy.pairs[t]  # kept exactly as generated
        assert rec.turn_texts == [tiny.decode(ids) for ids in rec.generated_ids]
        assert rec.env_ids == [tiny.encode(info["new_text"]) for info in rec.step_infos]  # nothing cut
        assert rec.info["em"] == 0.0 and "summary" in rec.info
        assert rec.num_generated_tokens == sum(len(g) for g in rec.generated_ids)


def test_rollout_logprobs_match_token_logprobs(tiny: HFPolicy, make_env: Any) -> None:
    batch = RolloutEngine(tiny, make_env(max_turns=2), concurrency=4, max_new_tokens=10, temperature=1.0).run(
        EXAMPLES, seed=3
    )
    lps = tiny.token_logprobs([r.input_ids for r in batch], [len(r.prompt_ids) for r in batch])
    for rec, lp in zip(batch, lps, strict=True):
        policy_pos = [i for i, m in enumerate(rec.loss_mask) if m]
        got = torch.tensor([rec.logprobs[i] for i in policy_pos])
        assert torch.allclose(lp.detach()[policy_pos], got, atol=1e-4)


def test_same_seed_same_rollout_regardless_of_concurrency(tiny: HFPolicy, make_env: Any) -> None:
    def run(concurrency: int, seed: int) -> list[list[int]]:
        engine = RolloutEngine(tiny, make_env(max_turns=2), concurrency=concurrency, max_new_tokens=8)
        return [r.completion_ids for r in engine.run(EXAMPLES[:2], group_size=2, seed=seed)]

    a = run(4, seed=5)
    assert a == run(4, seed=5)
    assert a == run(1, seed=5)  # one episode at a time: same episodes
    engine = RolloutEngine(tiny, make_env(max_turns=2), concurrency=2, max_new_tokens=8)
    second = engine.run(EXAMPLES[1:2], group_size=2, seed=5, first_index=2)  # the second half on its own
    assert [r.completion_ids for r in second] == a[2:] and [r.index for r in second] == [2, 3]
    assert a != run(4, seed=6)
    assert a[0] != a[1]  # two samples of one question differ


def test_one_search_batch_per_round_and_same_results_as_stepping(
    tiny: HFPolicy, make_env: Any
) -> None:
    env = make_env(max_turns=4)
    counting = CountingRetriever(env.retriever)
    env.retriever = counting
    script = ScriptPolicy(tiny)
    batch = RolloutEngine(script, env, concurrency=8, temperature=0.0).run(EXAMPLES, group_size=2, seed=0)
    assert counting.batches == [8, 8]  # two search rounds, all eight episodes' queries in each
    assert batch.stats.search_calls == 2 and batch.stats.queries == 16 and batch.stats.rounds == 3
    reference = make_env(max_turns=4)
    for rec in batch:
        _check_layout(rec, tiny)
        assert rec.stop_reason == "answered" and rec.terminated
        reference.reset(options={"example_id": rec.example_id})
        rewards = [reference.step(text)[1] for text in rec.turn_texts]
        assert rec.rewards == pytest.approx(rewards)
        assert rec.step_infos[0]["doc_ids"]
    by_id = {r.example_id: r for r in batch}
    assert by_id["q1"].em == 1.0 and by_id["q0"].em == 0.0
    assert by_id["q1"].info["answer"] == "Karsk"
    assert batch.stats.generated_tokens == sum(r.num_generated_tokens for r in batch)


def test_retriever_failure_marks_infra_error(tiny: HFPolicy, make_env: Any) -> None:
    env = make_env(max_turns=4)
    env.retriever = CountingRetriever(env.retriever, fail=True)
    batch = RolloutEngine(ScriptPolicy(tiny), env, concurrency=4).run(EXAMPLES, seed=0)
    for rec in batch:
        assert rec.infra_error
        assert rec.step_infos[0]["infra_error"] and "Search failed" in rec.step_infos[0]["new_text"]


class OverflowingReply:
    """A user retriever whose answer holds a 5,000-digit integer: converting it raises ValueError."""

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return [[Hit("d0", "t", "x", float(int("9" * 5000)))] for _ in queries]


def test_any_retriever_exception_marks_infra_error(tiny: HFPolicy, make_env: Any) -> None:
    env = make_env(max_turns=4, retriever=OverflowingReply())
    batch = RolloutEngine(ScriptPolicy(tiny), env, concurrency=2).run(EXAMPLES[:2], seed=0)
    for rec in batch:
        assert rec.infra_error and rec.step_infos[0]["infra_error_type"] == "ValueError"
        assert "Search failed: ValueError" in rec.step_infos[0]["new_text"]
        assert rec.stop_reason == "answered"


def test_max_total_tokens_truncates_cleanly(tiny: HFPolicy, make_env: Any) -> None:
    env = make_env(max_turns=6)
    prompt_lens = []
    for ex in EXAMPLES:
        env.reset(options={"example_id": ex.id})
        prompt_lens.append(len(tiny.chat_prompt_ids(env.messages()[:2])))
    prompt_len = max(prompt_lens)
    budget = prompt_len + 40
    batch = RolloutEngine(tiny, env, concurrency=4, max_new_tokens=16, max_total_tokens=budget).run(
        EXAMPLES, seed=2
    )
    for rec in batch:
        assert len(rec.input_ids) <= budget
        assert rec.stop_reason == "max_total_tokens" and rec.truncated and not rec.terminated
        assert len(rec.rewards) == len(rec.turn_spans)
        assert rec.info["answer"] is None and rec.info["em"] == 0.0
        assert rec.info["summary"]["turns"] == len(rec.step_infos)
        _check_layout(rec, tiny)
    # a budget that fits every first turn but not the search results: the search still ran, its text is cut
    script = ScriptPolicy(tiny)
    firsts = [len(script.encode(script.first_turn(e.question))) for e in EXAMPLES]
    budget = max(n + f for n, f in zip(prompt_lens, firsts, strict=True)) + 3
    script_batch = RolloutEngine(script, env, concurrency=4, max_total_tokens=budget).run(EXAMPLES, seed=0)
    for rec in script_batch:
        assert len(rec.input_ids) <= budget and rec.stop_reason == "max_total_tokens"
        assert rec.step_infos[0]["action_type"] == "search" and len(rec.turn_spans) == 1
        assert 0 < len(rec.env_ids[0]) < len(tiny.encode(rec.step_infos[0]["new_text"]))
        assert rec.info["summary"]["searches"] == 1 and rec.info["summary"]["retrieved_doc_ids"]


def test_prompt_longer_than_budget_ends_without_turns(tiny: HFPolicy, make_env: Any) -> None:
    batch = RolloutEngine(tiny, make_env(), max_total_tokens=10).run(EXAMPLES[:1])
    [rec] = batch.episodes
    assert rec.stop_reason == "max_total_tokens" and rec.completion_ids == [] and rec.turn_spans == []


def test_groups_order_and_options(tiny: HFPolicy, corpus_file: Any) -> None:
    env = gym.make("searchenv:SearchQA-v0", task=EXAMPLES, corpus=corpus_file)  # wrappers are looked through
    batch = RolloutEngine(ScriptPolicy(tiny), env, concurrency=3).run(["q2", 1, EXAMPLES[0]], group_size=3, seed=0)
    assert [(r.group, r.sample) for r in batch] == [(g, s) for g in range(3) for s in range(3)]
    assert [r.index for r in batch] == list(range(9))
    assert [r.example_id for r in batch] == ["q2"] * 3 + ["q1"] * 3 + ["q0"] * 3
    groups = batch.groups()
    assert len(groups) == 3 and all(len(g) == 3 for g in groups)
    assert len({r.seed for r in batch}) == 9


def test_rollout_function_with_examples_and_retriever(tiny: HFPolicy, make_env: Any) -> None:
    retriever = make_env().retriever
    batch = rollout(ScriptPolicy(tiny), EXAMPLES, retriever, group_size=2, max_turns=4, seed=0)
    assert len(batch) == 8 and all(r.stop_reason == "answered" for r in batch)
    assert batch[:2] == batch.episodes[:2]
    stats = batch.stats.to_dict()
    assert 0.0 <= stats["outside_generation_share"] <= 1.0 and stats["generated_tokens"] > 0
    assert not math.isnan(stats["tokens_per_second"])


def test_engine_rejects_bad_arguments(tiny: HFPolicy, make_env: Any) -> None:
    env = make_env()
    with pytest.raises(ValueError, match="concurrency"):
        RolloutEngine(tiny, env, concurrency=0)
    with pytest.raises(ValueError, match="max_total_tokens"):
        RolloutEngine(tiny, env, max_total_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        RolloutEngine(tiny, env, top_p=2.0)
    with pytest.raises(TypeError, match="SearchQAEnv"):
        RolloutEngine(tiny, [object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="group_size"):
        RolloutEngine(tiny, env).run(EXAMPLES, group_size=0)
    with pytest.raises(TypeError, match="example"):
        RolloutEngine(tiny, env).run([3.5])  # type: ignore[list-item]


class TextPolicy:
    """Emits the given turn texts in order (turn ``t`` of every episode gets ``turns[t]``)."""

    def __init__(self, tokenizer_policy: HFPolicy, turns: list[str]) -> None:
        self.tok = tokenizer_policy
        self.turns = turns
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(ids)

    def chat_prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.tok.chat_prompt_ids(messages)

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 256, **kwargs: Any
    ) -> list[Generation]:
        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = tuple(self.encode(text))[:max_new_tokens]
        reason = "length" if len(ids) < len(self.encode(text)) else "stop"
        text = self.decode(ids) if reason == "length" else text
        return [Generation(text, ids, tuple(-0.5 for _ in ids), reason) for _ in prompts]


_TURN = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["<search> Karsk </search>", "<answer> Karsk </answer>", "<search></search>",
                     "<information>fake</information>", "<answer> a </answer> trailing", "<think>x</think>"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(_TURN, min_size=1, max_size=4), budget=st.integers(min_value=1, max_value=400))
def test_any_model_text_gives_consistent_records(
    tiny: HFPolicy, make_env: Any, turns: list[str], budget: int
) -> None:
    env = make_env(max_turns=3)
    policy = TextPolicy(tiny, turns)
    env.reset(options={"example_id": "q1"})
    prompt_len = len(tiny.chat_prompt_ids(env.messages()[:2]))
    max_total = prompt_len + budget
    batch = RolloutEngine(policy, env, concurrency=2, max_new_tokens=64, max_total_tokens=max_total).run(
        ["q1"], group_size=2, seed=0
    )
    for rec in batch:
        assert rec.stop_reason in ("answered", "max_turns", "max_total_tokens")
        assert len(rec.input_ids) <= max_total
        _check_layout(rec, tiny)
        for t, ids in enumerate(rec.generated_ids):
            assert rec.logprobs[rec.turn_spans[t][0] : rec.turn_spans[t][1]] == [-0.5] * len(ids)
        assert set(rec.info) >= {"em", "f1", "evidence_recall", "answer", "summary"}


class BrowsePolicy(ScriptPolicy):
    """Search, open the first document, answer: the ``browse`` protocol through the engine."""

    def generate(
        self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 256, **kwargs: Any
    ) -> list[Generation]:
        self.stops = kwargs.get("stop")
        out = []
        for p in prompts:
            seen = self.decode(p).split("Question:")[-1].count("<information>")
            text = ["<search> Tobin Quenn born </search>", "<think> read it </think><open> 1 </open>",
                    "<answer> Karsk </answer>"][min(seen, 2)]
            ids = tuple(self.encode(text))
            out.append(Generation(text, ids, tuple(-1.0 for _ in ids), "stop"))
        return out


def test_browse_opens_are_environment_tokens_masked_out(tiny: HFPolicy, make_env: Any) -> None:
    policy = BrowsePolicy(tiny)
    env = make_env(protocol="browse", max_turns=4)
    engine = RolloutEngine(policy, env, max_new_tokens=40)
    assert "</open>" in engine.stop
    [rec] = engine.run([EXAMPLES[1]], group_size=1, seed=0)
    assert "</open>" in policy.stops
    assert [i["action_type"] for i in rec.step_infos] == ["search", "open", "answer"] and rec.info["em"] == 1.0
    _check_layout(rec, policy)
    page = rec.env_ids[1]
    assert "page 1 of 1" in tiny.decode(page)  # the opened page is environment text, masked out


def test_the_seed_schemes_keep_their_published_formulas() -> None:
    """Every trainer's and adapter's seeds come from agents.rollout.seeds, each formula as its numbers were made."""
    from agents.rollout.seeds import STEP_SALTS, agent_seed, step_seed, trl_call_seed

    m = 2**31 - 1
    assert [step_seed(7, 3, STEP_SALTS[t]) for t in ("grpo", "ppo", "mappo")] == [
        (7 * 1_000_003 + 3 * 7_919 + salt) % m for salt in (1, 2, 3)]
    assert step_seed(7, 3) == step_seed(7, 3, STEP_SALTS["grpo"])
    assert trl_call_seed(7, 3, 1, 2) == (7 * 1_000_003 + 3 * 10_007 + 101 + 2) % (1 << 63)
    assert agent_seed(7, 3) == (7 * 1_000_003 + 3 * 7919 + 17) % m
    for path in Path(__file__).resolve().parents[1].joinpath("src", "agents").rglob("*.py"):
        if path.name != "seeds.py":
            assert "* 1_000_003 + step *" not in path.read_text(encoding="utf-8"), path
