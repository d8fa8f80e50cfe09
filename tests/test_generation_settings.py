"""How an in-process model generates is one value: :class:`agents.devices.GenerationSettings`.

One vocabulary, checked when the value is made; what each ``auto`` becomes is decided from where the
model is when asked (never kept); the older option names map onto it; a model that cannot take the
fixed-shape step says so once.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.devices import (  # noqa: E402
    CUDA_GENERATION,
    HOST_GENERATION,
    GenerationPath,
    GenerationSettings,
)
from agents.policies.hf import HFPolicy  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


def test_one_vocabulary_checked_when_made() -> None:
    assert GenerationSettings() == GenerationSettings(decode="auto", fixed_shape_step="auto", dtype="auto")
    for dtype in ("auto", "float32", "bfloat16", "float16"):
        assert GenerationSettings(dtype=dtype).dtype == dtype
    for kwargs, match in (
        ({"decode": "fast"}, "decode must be auto, static or dynamic"),
        ({"decode": None}, "decode must be"),
        ({"fixed_shape_step": "yes"}, r"fixed_shape_step \(cuda_graph\) must be auto, true or false"),
        ({"fixed_shape_step": None}, "fixed_shape_step"),
        ({"dtype": "half"}, r"dtype \(generation_dtype\) must be auto, float32, bfloat16 or float16"),
        ({"dtype": None}, "generation_dtype"),
    ):
        with pytest.raises(ValueError, match=match):
            GenerationSettings(**kwargs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        GenerationSettings().decode = "static"  # type: ignore[misc]


def test_auto_is_decided_by_the_device_and_the_weights() -> None:
    auto = GenerationSettings()
    assert auto.resolve("cuda:0", torch.float32) == CUDA_GENERATION
    assert auto.resolve("cuda", torch.bfloat16) == dataclasses.replace(CUDA_GENERATION, dtype=None)  # no copy
    assert auto.resolve("cpu", torch.float32) == HOST_GENERATION
    told = GenerationSettings(decode="static", fixed_shape_step=True, dtype="float16")
    assert told.resolve("cpu", torch.float32) == told.resolve("cuda", torch.float32) == GenerationPath(
        "static", True, "float16")
    assert GenerationSettings(dtype="float32").resolve("cuda", torch.float32).dtype is None  # the weights
    # the fixed-shape step belongs to the static loop
    assert GenerationSettings(decode="dynamic", fixed_shape_step=True).resolve("cuda", torch.float32) == GenerationPath(
        "dynamic", False, "bfloat16")


def test_older_names_map_onto_the_value_and_a_given_part_overrides() -> None:
    assert GenerationSettings.from_options() == GenerationSettings()
    assert GenerationSettings.from_options(decode="static", cuda_graph=False, generation_dtype="bfloat16") == (
        GenerationSettings(decode="static", fixed_shape_step=False, dtype="bfloat16"))
    own = GenerationSettings(decode="static", dtype="bfloat16")
    assert own.overridden_by(GenerationSettings()) == own  # auto keeps the policy's own
    assert own.overridden_by(GenerationSettings(fixed_shape_step=False, dtype="float32")) == GenerationSettings(
        decode="static", fixed_shape_step=False, dtype="float32")


def test_the_rl_configs_fields_and_the_eval_flags_are_one_value() -> None:
    from agents.trainers.grpo import GRPOConfig

    assert GRPOConfig().generation == GenerationSettings()  # unset: auto
    cfg = GRPOConfig(decode="static", cuda_graph=False, generation_dtype="auto")  # auto: the one vocabulary
    assert cfg.generation == GenerationSettings(decode="static", fixed_shape_step=False)
    for field, value in (("generation_dtype", "int8"), ("decode", "fast"), ("cuda_graph", "yes")):
        with pytest.raises(ValueError, match=field):
            GRPOConfig(**{field: value})


def test_a_policy_derives_its_path_when_asked() -> None:
    policy = HFPolicy(*build_tiny_model(seed=0))
    assert policy.generation == GenerationSettings() and policy.generation_path() == HOST_GENERATION
    policy.generation = GenerationSettings(decode="static", dtype="bfloat16")
    assert policy.generation_path() == GenerationPath("static", False, "bfloat16")
    assert policy.generation_dtype == torch.bfloat16 and policy.generation_model is not policy.model
    policy.model.to(torch.bfloat16)  # the weights' dtype is read at every call too
    policy.generation = GenerationSettings()
    assert policy.generation_path() == HOST_GENERATION and policy.generation_model is policy.model
    with pytest.raises(TypeError, match="GenerationSettings"):
        policy.generation = {"decode": "static"}  # type: ignore[assignment]


def test_older_argument_spellings_still_work_with_a_warning() -> None:
    model, tok = build_tiny_model(seed=0)
    with pytest.warns(DeprecationWarning, match="fixed_shape_step"):
        old = HFPolicy(model, tok, decode="static", cuda_graph=True)
    assert old.generation == GenerationSettings(decode="static", fixed_shape_step=True)
    with pytest.warns(DeprecationWarning, match="float32"):
        own = HFPolicy(model, tok, generation_dtype=None)
    assert own.generation.dtype == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert HFPolicy(model, tok, generation_dtype=torch.float16).generation.dtype == "float16"
    with pytest.raises(ValueError, match="not both"), pytest.warns(DeprecationWarning):
        HFPolicy(model, tok, fixed_shape_step=False, cuda_graph=True)


def test_a_model_that_cannot_take_the_fixed_step_says_so_once_and_decodes_the_same() -> None:
    model, tok = build_tiny_model(seed=2)
    prompts = [[5, 17, 33, 41], [8, 9, 10, 11, 12, 13, 14]]
    kw: dict[str, Any] = {"max_new_tokens": 6, "temperature": 1.0, "seed": 3}
    want = HFPolicy(model, tok, decode="static", fixed_shape_step=False).generate(prompts, **kw)
    model.config.use_sliding_window = True  # as a sliding-window model's config says
    policy = HFPolicy(model, tok, decode="static", fixed_shape_step=True)
    with pytest.warns(UserWarning, match="fixed-shape decode step needs full attention"):
        got = policy.generate(prompts, **kw)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    assert policy.stats["fixed_eager_steps"] == 0  # the model was called step by step
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy.generate(prompts, **kw)  # said once


def test_kv_bytes_per_token_follow_the_generation_dtype() -> None:
    policy = HFPolicy(*build_tiny_model(seed=0))
    cfg = policy.model.config
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    assert policy.kv_bytes_per_token() == per_token * 4
    policy.generation = GenerationSettings(dtype="bfloat16")
    assert policy.kv_bytes_per_token() == per_token * 2
