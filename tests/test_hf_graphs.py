"""The generation copy of the weights and the decode buckets kept across ``generate`` calls.

A CUDA graph cannot run on the CPU, so the graph's lifecycle is checked with
:class:`~agents.policies.hf.graphs.StandInGraph` set as the policy's ``graph_capture``: it runs the
same step, and refuses to replay when a tensor it read at capture (weights, key/value buffers,
static inputs) has moved, as a real graph would then read freed memory. Throughout, the tokens are
those of the default (dynamic, eager) loop.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import weakref
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.policies.base import Generation  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from agents.policies.hf.graphs import StandInGraph, capacity_bucket, row_bucket  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

FIXED: dict[str, Any] = {"decode": "static", "sync_every": 4, "fixed_shape_step": True, "prefix_cache": False}


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


@pytest.fixture()
def tiny() -> tuple[Any, Any]:
    return build_tiny_model(0)


def _prompts(pol: HFPolicy) -> list[list[int]]:
    """Six prompts of mixed lengths, two of them the same (a GRPO group)."""
    chat = [
        pol.chat_prompt_ids([{"role": "user", "content": q}])
        for q in ("Where was Velora Quenn born?", "What is the capital of Essaly?", "Karsk?")
    ]
    return [chat[0], chat[1], pol.encode("<search> Karsk"), chat[0], chat[2], pol.encode("<answer>")]


def _same_tokens(want: list[Generation], got: list[Generation], atol: float = 1e-4) -> None:
    """Same tokens and finish reasons; log-probs within ``atol`` (bfloat16 rounds differently per batch shape)."""
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert b.token_ids == a.token_ids, f"row {i}"
        assert b.finish_reason == a.finish_reason, f"row {i}"
        assert np.allclose(a.logprobs, b.logprobs, atol=atol), f"row {i}"


def _graph(pol: HFPolicy) -> tuple[int, int, int, int, int]:
    s = pol.stats
    return (int(s["graph_captures"]), int(s["graph_replays"]), int(s["graph_evictions"]),
            int(s["graph_fallbacks"]), int(s["fixed_eager_steps"]))


def test_buckets() -> None:
    assert [row_bucket(n) for n in (1, 3, 4, 5, 64, 65, 128, 129)] == [1, 4, 4, 8, 64, 128, 128, 192]
    assert [capacity_bucket(c) for c in (1, 128, 129, 700)] == [128, 128, 256, 768]
    with pytest.raises(ValueError, match="rows"):
        row_bucket(0)


def test_stand_in_graph_lifecycle(tiny: tuple[Any, Any]) -> None:
    """One capture per bucket across calls, replays equal steps, LRU eviction, invalidation on new weights."""
    model, tokenizer = tiny
    eager = HFPolicy(model, tokenizer, prefix_cache=False)
    pol = HFPolicy(model, tokenizer, graph_buckets=2, **FIXED)
    pol.graph_capture = StandInGraph.capture
    prompts = _prompts(pol)
    kw: dict[str, Any] = {"temperature": 1.0, "seed": 3, "stop": ["e"]}

    def call(rows: list[list[int]], max_new: int) -> tuple[int, int, int, int, int]:
        steps = pol.stats["decode_steps"]
        want = eager.generate(rows, max_new_tokens=max_new, **kw)
        _same_tokens(want, pol.generate(rows, max_new_tokens=max_new, **kw))
        captures, replays, evictions, fallbacks, eager_steps = _graph(pol)
        assert replays == pol.stats["decode_steps"] and pol.stats["decode_steps"] > steps  # every step replayed
        return captures, replays, evictions, fallbacks, eager_steps

    assert call(prompts, 8)[0::2] == (1, 0, 0)  # first call: one capture (captures, evictions, eager steps)
    assert call(prompts, 8)[0::2] == (1, 0, 0)  # same bucket: replays only
    assert call(prompts[:3], 8)[0::2] == (2, 0, 0)  # fewer rows: a bucket of its own
    assert call(prompts[1:6], 8)[0::2] == (2, 0, 0)  # 5 rows: the 6-row bucket, pad rows never read
    assert call(prompts, 200)[0::2] == (3, 1, 0)  # a larger capacity: a third bucket evicts the 3-row one
    assert call(prompts[:3], 8)[0::2] == (4, 2, 0)  # ... which is captured again, evicting the 6-row one
    assert call(prompts, 200)[0::2] == (4, 2, 0)  # the large one was used last but one: still kept
    assert pol.stats["graph_fallbacks"] == 0

    # Weights updated in place (an optimizer step) keep their storage: the graphs stay, with new values.
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    pol.token_logprobs([prompts[0]], [1])[0].sum().backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    assert call(prompts, 200)[0::2] == (4, 2, 0)
    # A new model object (weights elsewhere) drops every bucket: a stale graph would read freed memory.
    pol.model = eager.model = copy.deepcopy(model)
    assert call(prompts, 200)[0::2] == (5, 2, 0)


def test_stand_in_refuses_a_stale_graph(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    pol = HFPolicy(model, tokenizer, **FIXED)
    pol.graph_capture = StandInGraph.capture
    prompts = _prompts(pol)
    pol.generate(prompts, max_new_tokens=4, temperature=0.0)
    graph = pol._slots.slots[next(iter(pol._slots.slots))].graph
    weight = next(model.parameters())
    weight.data = weight.data.clone()  # the weight now lives elsewhere; the slots do not know yet
    with pytest.raises(RuntimeError, match="stale graph"):
        graph.replay()


def _bf16_reference(model: Any) -> Any:
    """The model with every floating-point parameter rounded to bfloat16 (buffers as they are)."""
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.data = p.data.to(torch.bfloat16)
    return ref


def test_bfloat16_generation_copy(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    pol = HFPolicy(model, tokenizer, generation_dtype="bfloat16", prefix_cache=False)
    prompts = _prompts(pol)
    kw: dict[str, Any] = {"max_new_tokens": 12, "temperature": 0.0}
    got = pol.generate(prompts, **kw)
    gen_model = pol.generation_model
    assert gen_model is not model and next(gen_model.parameters()).dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the master stays float32
    # The same tokens as a bfloat16 model built directly, and mostly the float32 model's in the first steps.
    ref = HFPolicy(_bf16_reference(model), tokenizer, prefix_cache=False).generate(prompts, **kw)
    _same_tokens(ref, got)
    # Against float32: the same greedy tokens up to the first step where float32's top two logits are
    # within 0.1 of each other (bfloat16 rounding may swap those).
    fp32 = HFPolicy(model, tokenizer, prefix_cache=False).generate(prompts, **kw)
    compared = 0
    for p, a, b in zip(prompts, fp32, got, strict=True):
        seq = p + list(a.token_ids)
        with torch.no_grad():
            top = model(torch.tensor([seq])).logits[0, len(p) - 1 : len(seq) - 1].topk(2, -1).values
        close = (top[:, 0] - top[:, 1] < 0.1).tolist() + [True]
        k = close.index(True)
        assert b.token_ids[:k] == a.token_ids[:k]
        compared += k
    assert compared >= 2 * len(prompts)
    # Scoring (training) runs on the float32 master, with gradient.
    seq = prompts[0] + list(got[0].token_ids)
    lps = pol.token_logprobs([seq], [len(prompts[0])])[0]
    assert lps.dtype == torch.float32 and lps.requires_grad
    assert torch.equal(lps, HFPolicy(model, tokenizer).token_logprobs([seq], [len(prompts[0])])[0])
    assert np.allclose(lps.detach().numpy(), got[0].logprobs, atol=0.3)  # bfloat16 rounding apart
    # The static loop's fixed-shape step runs from the copy too. It attends over the bucket's whole
    # buffer, and bfloat16 sums round differently over other lengths, so a later near-tie may swap:
    # the first six steps are compared.
    fixed = HFPolicy(model, tokenizer, generation_dtype="bfloat16", **FIXED).generate(prompts, **kw | {
        "max_new_tokens": 6})
    _same_tokens(pol.generate(prompts, **kw | {"max_new_tokens": 6}), fixed, atol=0.05)


def test_generation_copy_follows_an_optimizer_step(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    pol = HFPolicy(model, tokenizer, generation_dtype=torch.bfloat16, graph_buckets=1, **FIXED)
    pol.graph_capture = StandInGraph.capture
    prompts = _prompts(pol)
    kw: dict[str, Any] = {"max_new_tokens": 10, "temperature": 1.0, "seed": 4}
    before = pol.generate(prompts, **kw)
    low = pol.generation_model
    pointers = [p.data_ptr() for p in low.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=0.2)
    model.train()
    seq = prompts[0] + list(before[0].token_ids)
    (-pol.token_logprobs([seq], [len(prompts[0])])[0].sum()).backward()
    opt.step()
    opt.zero_grad()
    model.eval()
    after = pol.generate(prompts, **kw)  # no explicit refresh: generate notices the new versions
    assert pol.generation_model is low and [p.data_ptr() for p in low.parameters()] == pointers  # in place
    for (name, p), q in zip(model.named_parameters(), low.parameters(), strict=True):
        assert torch.equal(q, p.detach().to(torch.bfloat16)), name
    _same_tokens(HFPolicy(_bf16_reference(model), tokenizer, prefix_cache=False).generate(prompts, **kw), after,
                 atol=0.05)
    assert [g.token_ids for g in after] != [g.token_ids for g in before]  # the step changed the samples
    assert pol.stats["graph_captures"] == 1  # the graph read the refreshed copy where it was
    # The explicit refresh the trainers call after a step does the same work earlier.
    with torch.no_grad():
        next(model.parameters()).mul_(0.5)
    assert pol.refresh_generation_weights()
    assert torch.equal(next(low.parameters()), next(model.parameters()).detach().to(torch.bfloat16))


def test_no_copy_unless_asked_and_dropped_when_turned_off(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    plain = HFPolicy(model, tokenizer)
    assert plain.generation_dtype is None and plain.generation_model is model
    assert not plain.refresh_generation_weights()
    pol = HFPolicy(model, tokenizer, generation_dtype="bfloat16", **FIXED)
    pol.generate(_prompts(pol)[:2], max_new_tokens=3, temperature=0.0)
    held = weakref.ref(pol.generation_model)
    assert held() is not None and pol._slots.slots
    pol.generation = dataclasses.replace(pol.generation, dtype="float32")
    gc.collect()
    assert held() is None and not pol._slots.slots  # the copy and the buckets kept for it are freed
    assert pol.generation_model is model
    assert HFPolicy(model, tokenizer, generation_dtype="float32").generation_dtype is None  # the model's own
    for kwargs, match in (({"generation_dtype": "int8"}, "dtype"), ({"graph_buckets": 0}, "graph_buckets"),
                          ({"decode": "fast"}, "decode"), ({"fixed_shape_step": "yes"}, "fixed_shape_step")):
        with pytest.raises(ValueError, match=match):
            HFPolicy(model, tokenizer, **kwargs)
