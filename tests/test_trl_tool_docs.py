"""docs/engines/trl.md's TRL ``environment_factory`` first run, as written: cold start on the tools, then GRPO."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests.doc_blocks import python_blocks  # noqa: E402
from tests.learning import margin  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.mark.slow(minutes=5)
@pytest.mark.learning
def test_the_tool_run_trains_through_trl_from_the_packaged_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block as written: the SearchQA reward is earned through TRL's own tool loop on the first step."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    start = time.perf_counter()
    block = python_blocks("engines/trl.md", "TRL: `environment_factory`")[0]
    exec(compile(block, "docs/engines/trl.md (TRL environment_factory)", "exec"), namespace)  # noqa: S102
    seconds = time.perf_counter() - start
    sft, trainer = namespace["sft"], namespace["trainer"]
    sft_logs = [h for h in sft.state.log_history if "loss" in h and "train_loss" not in h]
    logs = [h for h in trainer.state.log_history if "reward" in h]
    steps = [{k: round(v, 3) for k, v in h.items() if k.startswith(("rewards/", "tools/", "grad", "step_time"))}
             for h in logs]
    print(f"\nSFT losses {[round(h['loss'], 3) for h in sft_logs]}; GRPO steps {steps}; {seconds:.0f} s in all")
    assert len(logs) == 1
    margin("TRL SFT loss, first logged step minus last", sft_logs[0]["loss"] - sft_logs[-1]["loss"], 0.0)
    first = logs[0]
    # SearchQA-v0's EM reward, earned through TRL's tool calls: how many of the group's 4 episodes answered right
    margin("episodes of 4 that earned the EM reward on the first GRPO step", 4 * first["rewards/SearchQAToolEnv/mean"],
           0.0)
    assert first["tools/call_frequency"] > 0 and first["tools/failure_frequency"] < 1
    assert any(h["grad_norm"] > 0 for h in logs)  # a group's rewards differ: GRPO has a gradient
    assert trainer.model.peft_config["default"].r == 16  # new LoRA adapters on the tool-SFT model
