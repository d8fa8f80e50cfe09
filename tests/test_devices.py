"""Trainers on an accelerator, checked without one: every tensor reaching the model is on its device.

The tiny policy is placed on a virtual ``cuda:0`` (:mod:`tests.virtual_device`): its tensors report
that device and any operation mixing them with host tensors raises, as CUDA does. SFT, GRPO (with
a reference model, several updates per batch, dynamic sampling, REX-RAG probes, the UR2 curriculum,
LoRA), PPO (value head, reference) and MAPPO (every role, the centralised value, reference) then run
whole steps; since everything really runs on the CPU, each run must also measure what the same run
without the check measures.
"""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.devices import (
    CUDA_GENERATION,
    HOST_GENERATION,
    GenerationSettings,
    autocast,
    check_device_name,
    fast_generation,
    model_device,
    resolve_device,
    to_device,
)
from agents.policies.hf.graphs import StandInGraph
from agents.trainers.metrics import read_metrics
from agents.trainers.samples import Sample, forward_logprobs, pad_samples
from searchenv.retrievers.base import Hit
from tests.test_trainers import _grpo_cfg, _sft_cfg, toy_reward
from tests.tiny_model import tiny_policy
from tests.virtual_device import DeviceMismatch, VirtualDevice, host_kernels


def _weights(policy: Any) -> dict[str, torch.Tensor]:
    with torch._C.DisableTorchFunction():
        return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def _placed(seed: int = 0, **kwargs: Any) -> tuple[Any, VirtualDevice]:
    """A tiny policy on the virtual ``cuda:0``; left to choose, it takes the CUDA generation path."""
    policy = tiny_policy(seed=seed, **kwargs)
    vd = VirtualDevice()
    vd.place(policy.model)
    policy.graph_capture = StandInGraph.capture  # the fixed-shape step runs eagerly: no CUDA here
    return policy, vd


def _cuda_path_on_the_host(seed: int = 0) -> Any:
    """The same tiny policy on the CPU, told to take the CUDA path: what the placed one must compute."""
    policy = tiny_policy(seed=seed, decode=CUDA_GENERATION.decode, fixed_shape_step=CUDA_GENERATION.fixed_shape_step,
                         generation_dtype=CUDA_GENERATION.dtype)
    policy.graph_capture = StandInGraph.capture
    return policy


def _sample(policy: Any) -> Sample:
    ids = policy.chat_prompt_ids([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
    return Sample(ids + [5, 6, 7], [0] * len(ids) + [1, 1, 1])


# ---- the checker itself ----------------------------------------------------------------------


def test_virtual_device_refuses_host_tensors_where_cuda_would() -> None:
    policy, vd = _placed()
    sample = _sample(policy)
    with vd:
        assert model_device(policy.model) == torch.device("cuda", 0)
        with pytest.raises(DeviceMismatch, match="embedding"):  # the H200 crash of the issue, reproduced
            policy.model(input_ids=pad_samples([sample], 0).input_ids)
        moved = pad_samples([sample], 0, model_device(policy.model))
        assert vd.on_device(moved.input_ids) and moved.input_ids.device == torch.device("cuda", 0)
        out = forward_logprobs(policy.model, moved)
        assert vd.on_device(out.logprobs)
        with pytest.raises(DeviceMismatch):
            out.logprobs * torch.ones_like(out.logprobs.cpu())
        with pytest.raises(TypeError, match="numpy"):
            out.logprobs.detach().numpy()
        host = out.logprobs.detach().cpu()
        assert not vd.on_device(host) and host.numpy().shape == out.logprobs.shape
        assert float(out.logprobs.sum()) < 0  # reading a value to the host is allowed (a sync)


def test_forward_logprobs_moves_a_host_batch_to_the_model_and_keeps_the_numbers() -> None:
    policy, vd = _placed()
    batch = pad_samples([_sample(policy)], 0)
    expected = forward_logprobs(policy.model, batch).logprobs.detach()
    with vd:
        got = forward_logprobs(policy.model, batch).logprobs.detach().cpu()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("decode", ["dynamic", "static", "auto"])
def test_generation_and_judges_on_the_device(decode: str) -> None:
    """Each loop from the model's weights, and (``auto``) the CUDA default: static, graph, bfloat16 copy."""
    from agents.evaluation.judges import PolicyAnswerJudge, PolicyRelevanceJudge

    prompts = [_sample(tiny_policy(seed=0)).ids, _sample(tiny_policy(seed=0)).ids[:-4]]
    kwargs = {"stop": ["</answer>"], "max_new_tokens": 6, "temperature": 1.0, "seed": [3, 4]}
    if decode == "auto":
        expected = _cuda_path_on_the_host().generate(prompts, **kwargs)
        policy, vd = _placed()
    else:
        told = {"decode": decode, "fixed_shape_step": False, "generation_dtype": "float32"}
        expected = tiny_policy(seed=0, **told).generate(prompts, **kwargs)
        policy, vd = _placed(**told)
    with vd:
        got = policy.generate(prompts, **kwargs)
        assert [g.token_ids for g in got] == [g.token_ids for g in expected]
        if decode == "auto":  # chosen at the first call on the device
            assert policy.generation_path() == CUDA_GENERATION and policy.generation_dtype == torch.bfloat16
            assert policy.generation_model is not policy.model and StandInGraph.captured
        lps = policy.token_logprobs([list(p) + list(g.token_ids) for p, g in zip(prompts, got, strict=True)],
                                    [len(p) for p in prompts])
        assert all(vd.on_device(x) for x in lps)
        PolicyAnswerJudge(policy)("Karsk", ["Karsk"])
        hits = [Hit(doc_id=f"d{i}", title=f"T{i}", text=f"Doc {i}.", score=1.0) for i in range(2)]
        assert len(PolicyRelevanceJudge(policy)("who directed it", hits)) == 2
    assert vd.checked > 100


# ---- whole training steps on the device ---------------------------------------------------------


def _run_both(train: Any, make_cfg: Any, must_move: bool = True, **kwargs: Any) -> dict[str, Any]:
    """Train the same run with and without the device check; compare what they measured and trained.

    The first step's rollouts (and SFT's first loss) come before any update, so they must agree.
    Later weights are not compared: the float sums of a step are not always taken in the same
    order in both runs (gradient norms differed in the last bit), and Adam turns a last-bit
    difference of a near-zero gradient into a visible one.
    """
    plain = train(make_cfg("plain"), policy=_cuda_path_on_the_host(), **kwargs)
    policy, vd = _placed()  # left to choose: the CUDA path, which the plain run was told to take
    with vd, host_kernels():
        checked = train(make_cfg("checked"), policy=policy, **kwargs)
        assert all(vd.on_device(p) for p in checked["policy"].model.parameters())
    assert vd.checked > 1000
    first = [read_metrics(out["run_dir"])[0] for out in (plain, checked)]
    for key in ("loss", "reward_mean", "em", "searches", "response_tokens"):
        if key in first[0]:
            assert first[1][key] == pytest.approx(first[0][key], rel=1e-5, abs=1e-7), key
    start = _weights(tiny_policy(seed=0))
    moved = [k for k, v in _weights(checked["policy"]).items() if k not in start or not torch.equal(v, start[k])]
    assert moved or not must_move
    return checked


@pytest.mark.slow
def test_sft_step_on_the_device(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.sft import train_sft

    _run_both(train_sft, lambda n: _sft_cfg(tmp_path / n, qa_file, corpus_file, steps=2))


def _parity_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    value = float(len(ctx.text) % 2)
    return value, {"toy": value}


def _spread_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    """A reward in [0, 1) that gives different texts different values (a CRC of the turn's text).

    A group whose completions differ at all then has a spread of rewards, so GRPO has a signal
    whatever the tiny random model samples (the toy reward needs it to happen to write "is").
    """
    value = zlib.crc32(ctx.text.encode("utf-8", "surrogatepass")) / 2**32
    return value, {"spread": value}


GRPO_VARIANTS = {
    "reference+updates": {"kl_coef": 0.05, "epochs": 2, "minibatches": 2},
    "dynamic+probes": {"dynamic_sampling": True, "max_sampling_rounds": 2, "rex_probes": 1},
    "curriculum": {"curriculum": "ur2", "closed_book_samples": 2, "hard_share": (0.5, 1.0)},
    "lora": {"lora": True, "lora_r": 4, "kl_coef": 0.1},
}


@pytest.mark.parametrize("variant", sorted(GRPO_VARIANTS))
def test_grpo_step_on_the_device(tmp_path: Path, qa_file: Path, corpus_file: Path, variant: str) -> None:
    from agents.trainers.grpo import train_grpo

    kw: dict[str, Any] = {"steps": 1, "group_size": 2, "max_new_tokens": 3, **GRPO_VARIANTS[variant]}
    reward: Any = _spread_reward
    if variant == "dynamic+probes":  # every group a dead end (the tiny model is never right), returns varied
        kw.update(protocol="search-r1", max_turns=2, max_new_tokens=6)
    if variant == "curriculum":
        # the toy reward scores no closed-book answer of the tiny model: the curriculum step has no signal
        reward = toy_reward
    make = lambda n: _grpo_cfg(tmp_path / n, qa_file, corpus_file, **kw)  # noqa: E731
    out = _run_both(train_grpo, make, reward=reward, must_move=variant != "curriculum")
    if variant != "curriculum":  # the update had a signal: rewards that differ within the step's groups
        first = read_metrics(out["run_dir"])[0]
        assert first["zero_variance_groups"] < first["groups"], first


def test_ppo_step_on_the_device(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.ppo import PPOConfig, train_ppo

    def make(name: str) -> PPOConfig:
        return PPOConfig(
            output_dir=str(tmp_path / name), task=str(qa_file), corpus=str(corpus_file), protocol="toy-free-answer",
            max_turns=1, max_new_tokens=3, batch_size=2, samples_per_question=2, micro_batch_size=8,
            learning_rate=1e-2, steps=1, save_every=0, progress=False, log_every=0, kl_coef=0.05,
        )

    out = _run_both(train_ppo, make, reward=_parity_reward)
    assert float(out["value_head"].linear.weight.detach().abs().sum()) > 0


def test_mappo_step_on_the_device(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.mappo import MAPPOConfig, train_mappo

    def make(name: str) -> MAPPOConfig:
        return MAPPOConfig(
            output_dir=str(tmp_path / name), task=str(qa_file), corpus=str(corpus_file), max_new_tokens=4, top_k=2,
            max_doc_chars=80, batch_size=2, epochs=2, minibatches=2, micro_batch_size=4, learning_rate=1e-2,
            steps=1, save_every=0, progress=False, log_every=0, kl_coef=0.05,
        )

    out = _run_both(train_mappo, make)
    assert float(out["value_head"].linear.weight.detach().abs().sum()) > 0
    assert all(r["tokens"] > 0 for r in read_metrics(out["run_dir"])[0]["roles"].values())


def test_checkpoints_hold_host_tensors_and_resume_onto_the_device(
        tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.checkpoints import load_checkpoint
    from agents.trainers.sft import train_sft

    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, steps=3, save_every=1)
    policy, vd = _placed()
    with vd:
        train_sft(cfg, policy=policy, stop_after=2)
        ckpt = load_checkpoint(cfg.output_dir)
        assert ckpt is not None
        assert not any(vd.on_device(t) for t in ckpt["model"].values())
        resumed, vd2 = _placed()
    with vd2:
        out = train_sft(cfg, policy=resumed, resume=True)
        assert out["step"] == 3 and all(vd2.on_device(p) for p in out["policy"].model.parameters())


# ---- settings ---------------------------------------------------------------------------------


def test_device_names_are_checked_and_auto_is_the_cpu_here() -> None:
    assert check_device_name("cuda:1") == "cuda:1"
    for bad in ("gpu", "cuda:x", "", None, "cpu:0:1"):
        with pytest.raises(ValueError, match="device must be"):
            check_device_name(bad)
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device("cuda")
    assert to_device({"a": [torch.ones(2)]}, "cpu")["a"][0].device.type == "cpu"
    with autocast("cpu", enabled=True):
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16


@pytest.mark.slow
def test_train_config_device_dtype_and_gradient_checkpointing(tmp_path: Path, qa_file: Path,
                                                              corpus_file: Path) -> None:
    from agents.trainers.sft import SFTConfig, train_sft

    with pytest.raises(ValueError, match="device must be"):
        _sft_cfg(tmp_path, qa_file, corpus_file, device="gpu0")
    with pytest.raises(ValueError, match="dtype must be"):
        _sft_cfg(tmp_path, qa_file, corpus_file, dtype="fp8")
    assert "device" in {f for f in SFTConfig.__dataclass_fields__}
    half = train_sft(_sft_cfg(tmp_path / "bf16", qa_file, corpus_file, steps=1, dtype="bfloat16", device="cpu"),
                     policy=tiny_policy(seed=0))["policy"]
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    plain = train_sft(_sft_cfg(tmp_path / "a", qa_file, corpus_file, steps=2), policy=tiny_policy(seed=0))
    ckpt = train_sft(_sft_cfg(tmp_path / "b", qa_file, corpus_file, steps=2, gradient_checkpointing=True),
                     policy=tiny_policy(seed=0))
    model = ckpt["policy"].model
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    a, b = _weights(plain["policy"]), _weights(ckpt["policy"])
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_cli_device_flags(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app

    runner = CliRunner()
    dry = runner.invoke(get_app(), ["train", "sft", "--dry-run", "--set", "device=cpu", "--device", "cuda:1"])
    assert dry.exit_code == 0, dry.output
    assert '"device": "cuda:1"' in dry.output  # --device is set last
    bad = runner.invoke(get_app(), ["train", "sft", "--dry-run", "--device", "gpu"])
    assert bad.exit_code == 2 and "device must be" in bad.output
    if not torch.cuda.is_available():
        missing = runner.invoke(get_app(), ["train", "sft", "--device", "cuda", "--set",
                                            f"output_dir={tmp_path / 'run'}"])
        assert missing.exit_code == 2 and "no CUDA GPU" in missing.output
        assert not (tmp_path / "run").exists()  # refused before the run folder was made
    ev = runner.invoke(get_app(), ["eval", "--agent", "heuristic", "--device", "tpu", "--n", "1"])
    assert ev.exit_code == 2 and "--device" in ev.output
    help_text = runner.invoke(get_app(), ["eval", "--help"]).output
    assert "--max-doc-chars" in help_text and "--device" in help_text


# ---- the generation copy's dtype: bfloat16 by default only where the CPU multiplies it natively -----------


@pytest.mark.parametrize("native", [True, False])
def test_the_searchers_auto_generation_dtype_follows_the_cpus_bfloat16_support(monkeypatch: pytest.MonkeyPatch,
                                                                              native: bool) -> None:
    from agents.baselines.registry import searcher_generation
    from agents.devices import native_bfloat16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_bfloat16("cpu") is native

    def copy(setting: str, device: Any) -> str | None:  # what the searcher's float32 weights generate from
        return searcher_generation(setting, device).resolve(device, torch.float32).dtype

    assert copy("auto", "cpu") == ("bfloat16" if native else None)  # said explicitly: bfloat16, where measured
    assert copy("float32", "cpu") is None
    assert copy("bfloat16", "cpu") == "bfloat16"
    assert copy("auto", "cuda") == "bfloat16"  # any model's auto on CUDA
    # not measured elsewhere: auto keeps the model's own weights there
    assert copy("auto", torch.device("meta")) is None
    assert searcher_generation("auto", "cuda") == GenerationSettings()  # auto, as for any model


def test_a_generation_dtype_outside_the_list_is_refused_before_any_model_loads() -> None:
    from agents.baselines import make_agent

    with pytest.raises(ValueError, match=r"generation_dtype\) must be auto, float32, bfloat16 or float16"):
        GenerationSettings(dtype="half")
    with pytest.raises(ValueError, match="generation_dtype"):
        make_agent("searcher", device="cpu", generation_dtype="int8")


def test_resume_settings_name_the_generation_copy_only_when_there_is_one() -> None:
    from types import SimpleNamespace

    from agents.evaluation.resume import generation_dtype_of, generation_settings

    own = SimpleNamespace(policy=tiny_policy())
    assert generation_settings(own) == {}
    assert generation_dtype_of(own) == "float32"
    own.policy.generation = GenerationSettings(dtype="bfloat16")
    assert generation_settings(own) == {"generation_dtype": "bfloat16"}
    assert generation_dtype_of(own) == "bfloat16"
    assert generation_settings(SimpleNamespace(name="oracle")) == {}


def test_a_policy_left_to_choose_generates_the_devices_fastest_way_and_follows_a_move() -> None:
    """CPU: dynamic loop, own weights. Moved to (virtual) CUDA: static step, captured, bfloat16 copy."""
    assert fast_generation("cpu") == fast_generation(torch.device("cpu")) == HOST_GENERATION != CUDA_GENERATION
    assert fast_generation("cuda:1") == fast_generation(torch.device("cuda")) == CUDA_GENERATION
    policy = tiny_policy(seed=0)
    told = tiny_policy(seed=0, decode="dynamic", fixed_shape_step=False, generation_dtype="float32")
    assert policy.generation_path() == HOST_GENERATION and policy.generation_dtype is None
    prompt = [_sample(policy).ids]
    policy.generate(prompt, max_new_tokens=2, temperature=0.0)
    for pol in (policy, told):
        vd = VirtualDevice()
        vd.place(pol.model)  # a trainer moved the model
        pol.graph_capture = StandInGraph.capture
        with vd:
            got = pol.generate(prompt, max_new_tokens=2, temperature=0.0)
            assert len(got[0].token_ids) == 2
            if pol is policy:  # decided at the call, where the model is now
                assert policy.generation_path() == CUDA_GENERATION and policy.generation_dtype == torch.bfloat16
                assert policy.generation_model is not policy.model
                policy.generation = GenerationSettings(fixed_shape_step=False, dtype="float32")  # told: stays
                assert policy.generation_path() == dataclasses.replace(CUDA_GENERATION, fixed_shape_step=False,
                                                                       dtype=None)
                assert policy.generation_model is policy.model  # the copy is gone with the setting
            else:
                assert told.generation_path() == HOST_GENERATION  # as told
    assert policy.generation_path() == HOST_GENERATION  # the decode loop left to choose: the host's again


def test_episodes_in_flight_fill_a_cuda_devices_free_memory_and_stay_32_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents.devices import HOST_EPISODES_IN_FLIGHT, episodes_in_flight
    from agents.policies.hf.kv_cache import kv_bytes_per_token

    policy = tiny_policy(seed=0)
    assert episodes_in_flight(policy, 500, 1000) == HOST_EPISODES_IN_FLIGHT == 32  # the CPU
    assert episodes_in_flight(None, 500, 1000) == 32  # a served model

    class OnCuda:  # the same model as a CUDA device reports it (no GPU here), generating from a bfloat16 copy
        device = torch.device("cuda", 0)

        def kv_bytes_per_token(self) -> int | None:
            return kv_bytes_per_token(policy.model, torch.bfloat16)

    cfg = policy.model.config
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 2
    free = 1000 * per_token * 1000  # room for 1,000 episodes of 1,000 tokens; half of it for key/values
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    assert episodes_in_flight(OnCuda(), 5000, 1000) == 500
    assert episodes_in_flight(OnCuda(), 200, 1000) == 200  # every episode at once
    assert episodes_in_flight(OnCuda(), 200, 10**9) == 1
