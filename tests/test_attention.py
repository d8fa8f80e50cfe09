"""Grouped-query SDPA: the same logits and gradients as transformers' sdpa, without repeated keys/values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.policies.attention import GROUPED_SDPA, grouped_sdpa_attention, use_grouped_sdpa  # noqa: E402
from agents.policies.hf import HFPolicy, _head_logits  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def _padded_batch(seed: int = 0) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 300, (3, 17), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, 12:] = 0  # right padding, as in training batches
    mask[1, :5] = 0  # left padding, as in generation batches
    return ids, mask


def _logits_and_grads(model: Any, ids: Any, mask: Any) -> tuple[Any, dict[str, Any]]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, attention_mask=mask).logits
    (logits.float().square() * mask[..., None]).mean().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_grouped_sdpa_matches_sdpa_in_forward_and_backward() -> None:
    ids, mask = _padded_batch()
    ref_model, _ = build_tiny_model(seed=3, num_heads=4, num_kv_heads=2)
    model, _ = build_tiny_model(seed=3, num_heads=4, num_kv_heads=2)
    assert use_grouped_sdpa(model)
    assert model.config._attn_implementation == GROUPED_SDPA
    ref_logits, ref_grads = _logits_and_grads(ref_model, ids, mask)
    logits, grads = _logits_and_grads(model, ids, mask)
    real = mask.bool()
    assert torch.equal(logits[real], ref_logits[real])  # the forward pass is bit-identical
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_grouped_sdpa_is_what_runs_for_masked_multi_token_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = build_tiny_model(seed=1, num_heads=4, num_kv_heads=2)
    use_grouped_sdpa(model)
    seen: list[tuple[bool, int, int]] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((bool(kwargs.get("enable_gqa", False)), query.shape[1], key.shape[1]))
        return original(query, key, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ids, mask = _padded_batch()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    # every layer: 4 query heads against 2 key/value heads, nothing repeated
    assert seen == [(True, 4, 2)] * model.config.num_hidden_layers


def test_other_attention_implementations_are_left_alone() -> None:
    model, _ = build_tiny_model(seed=0)
    model.set_attn_implementation("eager")
    assert not use_grouped_sdpa(model)
    assert model.config._attn_implementation == "eager"
    assert not use_grouped_sdpa(object())


def test_policy_switches_its_model_and_generation_is_unchanged() -> None:
    model, tok = build_tiny_model(seed=2)
    plain, tok2 = build_tiny_model(seed=2)
    policy = HFPolicy(model, tok)
    assert model.config._attn_implementation == GROUPED_SDPA
    prompts = [policy.encode("<search> who directed"), policy.encode("Question: In which country is Karsk?")]
    got = policy.generate(prompts, max_new_tokens=12, temperature=0.0)
    # the same model under transformers' own sdpa, driven through HFPolicy's loop with the switch undone
    reference = HFPolicy(plain, tok2)
    plain.set_attn_implementation("sdpa")
    want = reference.generate(prompts, max_new_tokens=12, temperature=0.0)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]


def test_grouped_sdpa_without_groups_or_mask_defers_to_transformers() -> None:
    class Module(torch.nn.Module):
        num_key_value_groups = 1
        is_causal = True

    q = torch.randn(2, 2, 5, 8)
    k = torch.randn(2, 2, 5, 8)
    v = torch.randn(2, 2, 5, 8)
    out, weights = grouped_sdpa_attention(Module(), q, k, v, None, scaling=8**-0.5)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=8**-0.5)
    assert weights is None
    torch.testing.assert_close(out, want.transpose(1, 2))


@pytest.mark.parametrize("rows", [1, 5])
def test_head_logits_equal_the_module(rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    for bias in (False, True):
        head = torch.nn.Linear(16, 50, bias=bias)
        hidden = torch.randn(rows, 16, generator=gen)
        torch.testing.assert_close(_head_logits(head, hidden), head(hidden))


def test_head_logits_call_wrapped_heads() -> None:
    class Scaled(torch.nn.Linear):  # a subclass (e.g. an adapter) must run its own forward
        def forward(self, x: Any) -> Any:
            return super().forward(x) * 2

    head = Scaled(8, 10)
    hidden = torch.randn(3, 8)
    torch.testing.assert_close(_head_logits(head, hidden), head(hidden))
