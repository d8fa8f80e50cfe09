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


# ---------------------------------------------------------------------------------------------
# Single-token decoding: the query heads packed onto the key/value heads, no repeat_kv copy
# ---------------------------------------------------------------------------------------------


def _repeat_kv_reference(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    groups = q.shape[1] // k.shape[1]
    k2, v2 = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k2, v2, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


@pytest.mark.parametrize("mask_kind", ["shared-bool", "per-head-bool", "shared-additive", "none"])
def test_packed_decode_attention_equals_repeated_keys(mask_kind: str) -> None:
    gen = torch.Generator().manual_seed(0)
    b, heads, kv_heads, length, dim = 3, 9, 3, 37, 16
    q = torch.randn(b, heads, 1, dim, generator=gen)
    k, v = torch.randn(b, kv_heads, length, dim, generator=gen), torch.randn(b, kv_heads, length, dim, generator=gen)
    keep = torch.ones(b, 1, 1, length, dtype=torch.bool)
    keep[0, ..., :11] = False  # left padding
    keep[2, ..., 30:] = False  # unused cache columns
    mask = {
        "shared-bool": keep,
        "per-head-bool": keep.expand(b, heads, 1, length).clone(),
        "shared-additive": torch.zeros(b, 1, 1, length).masked_fill(~keep, float("-inf")),
        "none": None,
    }[mask_kind]

    class Module:
        num_key_value_groups = heads // kv_heads
        is_causal = True

    out, _ = grouped_sdpa_attention(Module(), q, k, v, mask, scaling=dim**-0.5)
    torch.testing.assert_close(out, _repeat_kv_reference(q, k, v, mask, dim**-0.5), rtol=1e-5, atol=1e-5)


class _Allocations(torch.utils._python_dispatch.TorchDispatchMode):  # type: ignore[misc]
    """Records each operator's largest new tensor (views are not counted) and counts host syncs."""

    def __init__(self) -> None:
        super().__init__()
        self.largest: list[tuple[int, str]] = []
        self.syncs = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith(("_local_scalar_dense", "is_nonzero", "item")):
            self.syncs += 1
        if any(r.alias_info is not None for r in func._schema.returns):
            return out  # a view of an input (a transposed weight, a slice): nothing allocated
        flat = torch.utils._pytree.tree_leaves(out)
        sizes = [t.numel() for t in flat if isinstance(t, torch.Tensor)]
        if sizes:
            self.largest.append((max(sizes), str(func)))
        return out


def _decode_step_allocations(model: Any, rows: int = 4, length: int = 48) -> tuple[_Allocations, int]:
    """One single-token decode step over a padded cache; returns the recorder and rows x heads x L x dim."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 300, (rows, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :9] = 0
    with torch.no_grad():
        past = model(input_ids=ids, attention_mask=mask, use_cache=True).past_key_values
        step = torch.randint(3, 300, (rows, 1), generator=gen)
        step_mask = torch.cat([mask, torch.ones(rows, 1, dtype=mask.dtype)], dim=1)
        with _Allocations() as rec:
            model(input_ids=step, attention_mask=step_mask, past_key_values=past, use_cache=True)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return rec, rows * cfg.num_attention_heads * (length + 1) * head_dim


def test_a_decode_step_allocates_no_repeated_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.integrations import sdpa_attention

    # transformers releases before 5.2x repeat the whole cache per query head at every masked decode
    # step; this makes the installed one do the same, so the check is seen to catch it
    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)
    plain, _ = build_tiny_model(seed=2, num_heads=4, num_kv_heads=2)
    rec, limit = _decode_step_allocations(plain)
    assert max(rec.largest)[0] >= limit, "the check no longer sees repeat_kv's copy"

    packed, _ = build_tiny_model(seed=2, num_heads=4, num_kv_heads=2)
    assert use_grouped_sdpa(packed)
    rec, limit = _decode_step_allocations(packed)
    big = [(n, op) for n, op in rec.largest if n >= limit]
    assert big == [], f"a decode step allocated rows x heads x length x dim or more: {big[:3]}"


def test_the_fixed_decode_step_neither_copies_the_cache_nor_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.integrations import sdpa_attention

    from agents.policies.hf import FixedShapeStep

    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)  # as older transformers
    model, tok = build_tiny_model(seed=5, num_heads=4, num_kv_heads=2)
    policy = HFPolicy(model, tok, decode="static", fixed_shape_step=True)  # on the CPU: eager, no capture
    seen: list[tuple[_Allocations, tuple[int, ...]]] = []
    original = FixedShapeStep._forward

    def recorded(self: Any) -> Any:
        with _Allocations() as rec:
            out = original(self)
        seen.append((rec, tuple(self.mask4.shape)))
        return out

    monkeypatch.setattr(FixedShapeStep, "_forward", recorded)
    policy.generate([[5, 17, 33, 41], [8, 9, 10, 11, 12, 13, 14], [40, 41]], max_new_tokens=8, temperature=0.0)
    assert seen, "the fixed-shape step did not run"
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    for rec, (rows, _, _, capacity) in seen:
        limit = rows * model.config.num_attention_heads * capacity * head_dim
        assert [op for n, op in rec.largest if n >= limit] == []
        assert rec.syncs == 0, "the fixed decode step read a value back to the host"


def test_packed_decoding_generates_the_same_tokens_as_repeated_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.integrations import sdpa_attention

    prompts = [[5, 17, 33, 41], [8, 9, 10, 11, 12, 13, 14, 15, 16], [40, 41]]
    packed = HFPolicy(*build_tiny_model(seed=4, num_heads=4, num_kv_heads=2))
    assert packed.model.config._attn_implementation == GROUPED_SDPA
    want = packed.generate(prompts, max_new_tokens=12, temperature=0.0)
    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)
    plain_model, tok = build_tiny_model(seed=4, num_heads=4, num_kv_heads=2)
    plain = HFPolicy(plain_model, tok)
    plain.model.set_attn_implementation("sdpa")  # transformers' own, repeat_kv and all
    got = plain.generate(prompts, max_new_tokens=12, temperature=0.0)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=1e-5, atol=1e-5)


def test_the_fixed_step_counts_its_eager_steps_and_failed_captures() -> None:
    from agents.policies.hf.decode import GRAPH_STATS

    prompts = [[5, 17, 33, 41], [8, 9, 10, 11, 12, 13, 14]]
    policy = HFPolicy(*build_tiny_model(seed=6, num_heads=4, num_kv_heads=2), decode="static", fixed_shape_step=True)
    policy.reset_stats()
    want = policy.generate(prompts, max_new_tokens=6, temperature=0.0)
    stats = policy.stats
    assert stats["fixed_eager_steps"] == stats["decode_steps"] > 0  # on the CPU: the fixed step, never captured
    assert stats["graph_captures"] == stats["graph_replays"] == stats["graph_fallbacks"] == 0

    # A capture that fails (as when something in the step syncs with the host) is counted, and the
    # step runs eagerly with the same tokens; the bucket does not try again on the next call.
    def failing_capture(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing")

    policy.graph_capture = failing_capture
    policy.clear_cache()  # the bucket kept from the first call knows nothing can capture on the CPU
    policy.reset_stats()
    with pytest.warns(UserWarning, match="capture of the decode step failed"):
        got = policy.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    assert {k: policy.stats[k] for k in GRAPH_STATS} == {
        "graph_captures": 0, "graph_replays": 0, "graph_fallbacks": 1,
        "fixed_eager_steps": policy.stats["decode_steps"], "graph_evictions": 0,
    }
    policy.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert policy.stats["graph_fallbacks"] == 1
