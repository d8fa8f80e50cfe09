from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.evaluation.judges import PolicyAnswerJudge, PolicyRelevanceJudge, parse_relevance_score, parse_verdict
from searchenv.retrievers.base import Hit
from searchenv.rewards.verifiers import JudgeVerifier

from .conftest import DOCS

HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "tokenizers"))
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch, transformers and tokenizers (the llm extra)")

# ---- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Score: 7", 0.7),
        ("score=10", 1.0),
        ("Score: **3**", 0.3),
        ("The relevance score is 4.", 0.4),
        ("Rating: 8/10", 0.8),
        ("Score: 3 out of 5", 0.6),
        ("Score: 0.25", 0.25),
        ("Score: 75%", 0.75),
        ("7/10 - it names the director", 0.7),
        ("9", 0.9),
        ("  6. The document mentions the city.", 0.6),
        ("<think>The doc says Score: 2 maybe</think>Score: 9", 0.9),
        ("Not relevant at all.", 0.0),
        ("The document is irrelevant.", 0.0),
        ("Partially relevant: it names the country.", 0.5),
        ("Highly relevant.", 1.0),
        ("Yes.", 1.0),
        ("no", 0.0),
        ("Score: 42", None),  # out of range on 0-10, nothing else to read
        ("11/10", None),
        ("I cannot tell.", None),
        ("", None),
    ],
)
def test_parse_relevance_score(reply: str, expected: float | None) -> None:
    got = parse_relevance_score(reply)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_parse_relevance_scale_and_errors() -> None:
    assert parse_relevance_score("Score: 3", scale=5) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="scale"):
        parse_relevance_score("Score: 3", scale=0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_parse_never_raises_and_stays_in_unit_interval(reply: str) -> None:
    got = parse_relevance_score(reply)
    assert got is None or (0.0 <= got <= 1.0 and math.isfinite(got))
    assert parse_verdict(reply) in (True, False, None)


_FILLER = st.text(alphabet=st.sampled_from(list("abcdefgh ,.;:!?\n")), max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10), _FILLER, _FILLER)
def test_score_line_is_found_inside_chatter(n: int, before: str, after: str) -> None:
    assert parse_relevance_score(f"{before}\nScore: {n}\n{after}") == pytest.approx(n / 10)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes", True),
        ("yes, they match", True),
        ("No.", False),
        ("Incorrect", False),
        ("hmm", None),
        ("<think>no idea... yes?</think> No", False),
    ],
)
def test_parse_verdict(reply: str, expected: bool | None) -> None:
    assert parse_verdict(reply) is expected


# ---- with a real (tiny, random) transformers policy ----------------------------------------------------


class Counting:
    """Delegates to a real policy and records each generate call's batch size."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.batches: list[int] = []

    def generate(self, prompts: Any, **kw: Any) -> Any:
        self.batches.append(len(prompts))
        return self.policy.generate(prompts, **kw)

    def encode(self, text: str) -> list[int]:
        return self.policy.encode(text)  # type: ignore[no-any-return]

    def decode(self, ids: Any) -> str:
        return self.policy.decode(ids)  # type: ignore[no-any-return]

    def chat_prompt_ids(self, messages: Any) -> list[int]:
        return self.policy.chat_prompt_ids(messages)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def tiny() -> Any:
    if not HAS_TORCH:
        pytest.skip("needs torch, transformers and tokenizers (the llm extra)")
    from tests.tiny_model import tiny_policy

    return tiny_policy(0)


HITS = [Hit(d.id, d.title, d.text, 1.0) for d in DOCS[:3]]


@pytest.mark.slow
@needs_torch
def test_relevance_judge_batches_one_call_per_step_with_a_real_model(tiny: Any) -> None:
    policy = Counting(tiny)
    judge = PolicyRelevanceJudge(policy, max_new_tokens=6)
    prompts = judge.prompts("Where was Velora Quenn born?", HITS)
    assert len(prompts) == 3 and all(isinstance(p, list) for p in prompts)  # chat template -> token ids
    text = tiny.decode(prompts[0])
    assert "Where was Velora Quenn born?" in text and "Velora Quenn is a painter" in text and "Score: N" in text
    scores = judge("Where was Velora Quenn born?", HITS)
    assert policy.batches == [3]  # all documents in one generate call
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    assert judge.stats["calls"] == 1 and judge.stats["prompts"] == 3
    # a random model mostly writes garbage: unparsable replies count and fall back to the default
    assert judge.stats["parse_failures"] == sum(
        parse_relevance_score(g.text) is None for g in tiny.generate(prompts, max_new_tokens=6, temperature=0.0, seed=0)
    )
    assert judge("Where was Velora Quenn born?", HITS) == scores  # greedy: deterministic


@needs_torch
def test_relevance_judge_as_cached_verifier_in_env(tiny: Any, make_env: Any) -> None:
    policy = Counting(tiny)
    verifier = PolicyRelevanceJudge(policy, max_new_tokens=4, default=0.5).as_verifier()
    assert isinstance(verifier, JudgeVerifier)
    env = make_env(reward={"relevance": {"weight": 1.0, "verifier": verifier}})
    for _ in range(2):  # the same documents for the same question again: served from the cache
        env.reset(options={"example_id": "q0"})
        _, r, _, _, info = env.step("<search>Velora Quenn born</search>")
        assert 0.0 <= r <= 1.0 and info["reward_signals"]["relevance"] == r
    assert policy.batches == [3]
    assert verifier.cache_info["hits"] == 3


@needs_torch
def test_answer_judge_with_a_real_model(tiny: Any) -> None:
    judge = PolicyAnswerJudge(Counting(tiny), max_new_tokens=4, default=0.0)
    value = judge("Karsk", ["Karsk"])
    assert value in (0.0, 1.0)
    assert judge.stats["calls"] == 1


class FixedReplies:
    """A minimal real Policy that answers every prompt with the next of some fixed texts.

    It stands in for a whole LLM when the point is what the judge does with the replies.
    """

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.prompts: list[Any] = []

    def generate(self, prompts: Any, **kw: Any) -> list[Any]:
        from agents.policies.base import Generation

        self.prompts.extend(prompts)
        out = [self.replies[i % len(self.replies)] for i in range(len(prompts))]
        return [Generation(t, tuple(self.encode(t)), None, "stop") for t in out]

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Any) -> str:
        return "".join(chr(i) for i in ids)

    def chat_prompt_ids(self, messages: Any) -> list[int]:
        raise ValueError("no chat template")


def test_judges_map_replies_to_scores_and_fall_back_to_text_prompts() -> None:
    policy = FixedReplies(["Score: 9", "irrelevant", "banana"])
    judge = PolicyRelevanceJudge(policy, default=0.25)
    assert judge("q?", HITS) == pytest.approx([0.9, 0.0, 0.25])
    assert judge.stats["parse_failures"] == 1
    assert all(isinstance(p, str) and p.startswith(judge.system_prompt) for p in policy.prompts)
    answer = PolicyAnswerJudge(FixedReplies(["Yes, same person."]))
    assert answer("JFK", ["John F. Kennedy"]) == 1.0
    with pytest.raises(ValueError, match="max_new_tokens"):
        PolicyRelevanceJudge(policy, max_new_tokens=0)
    with pytest.raises(TypeError, match="Policy protocol"):
        PolicyRelevanceJudge(object())  # type: ignore[arg-type]
