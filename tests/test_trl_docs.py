"""docs/engines/trl.md's TRL `rollout_func` blocks, run as written (the first) and checked against TRL (the second)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests.doc_blocks import python_blocks  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _blocks() -> list[str]:
    return python_blocks("engines/trl.md", "TRL: `rollout_func`")


@pytest.mark.slow(minutes=2)
def test_the_first_run_trains_through_trl_from_the_packaged_sft_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block as written: one GRPO step through TRL's own trainer with SearchQA-v0's reward.

    The SFT model answers the block's question correctly when decoding greedily (it was chosen
    so, from the first 16 training questions, 5 of which it answers), so sampled episodes score
    above zero and TRL gets a learning signal on the first step, which the doc promises.
    """
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(_blocks()[0], "docs/engines/trl.md (TRL first run)", "exec"), namespace)  # noqa: S102
    trainer = namespace["trainer"]
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert log["rewards/searchenv_em/mean"] > 0  # the SearchQA reward, not a toy one, is earned
    assert log["reward"] == pytest.approx(log["rewards/searchenv_return/mean"])
    assert log["rewards/searchenv_answered/mean"] > 0 and log["completions/clipped_ratio"] < 1
    assert log["grad_norm"] > 0  # the group's rewards differ: GRPO has a gradient
    assert trainer.model.peft_config["default"].r == 16  # TRL trained new LoRA adapters on the SFT model


def test_the_scale_config_is_accepted_by_trl() -> None:
    """The second block's GRPOConfig, evaluated as written, and the settings the text promises."""
    import dataclasses

    from trl import GRPOConfig

    [config] = re.findall(r"(args = GRPOConfig\(.*?\n\))", _blocks()[1], re.S)
    names = set(re.findall(r"(\w+)=", config.split("(", 1)[1]))
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert names <= fields, f"not GRPOConfig fields: {sorted(names - fields)}"
    namespace: dict[str, Any] = {"GRPOConfig": GRPOConfig, "weights": [1.0]}
    try:
        exec(config, namespace)  # noqa: S102
    except (ValueError, ImportError) as err:  # needs a GPU (bf16) or vLLM here: say which, then stop
        pytest.skip(f"TRL refuses the scale config on this machine: {err}")
    args = namespace["args"]
    assert args.max_completion_length == 4096 and args.mask_truncated_completions
    assert args.use_vllm and args.vllm_mode == "colocate"
