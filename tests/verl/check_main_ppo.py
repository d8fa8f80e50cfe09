"""docs/engines/verl.md's command through verl's ``main_ppo``: one training step on a CPU (run by tests/test_verl.py).

The ``bash`` block of docs/engines/verl.md's Launch section runs as check_launch.py runs it (a tiny corpus and task in
Wikipedia's and HotpotQA's place, ``searchenv serve`` on a free port), and then its
``python -m verl.trainer.main_ppo`` command itself, with the arguments bash hands over, plus the
overrides in :data:`CPU_OVERRIDES` (a tiny local model, 4 questions x 5 samples, one worker, and
what a CPU needs). verl's default v1 trainer runs: Ray, TransferQueue, the FSDP2 actor and reference
model in a Ray worker group on a placement group, the initial validation, one GRPO step (rollout
through verl's agent-loop workers and the shipped ``searchqa_agent`` loop, reward, old and reference
log-probs, advantages, the actor's policy update) and the weight sync to the rollout server.

What stands in: the generation server (vLLM needs a GPU): ``rollout.name: vllm`` resolves, through
verl's rollout registries, to the scripted server of tests/verl/cpu_standin.py. That module (loaded
by ``import verl`` in every process through ``VERL_USE_EXTERNAL_MODULES``) also gives verl 0.9.1
what it lacks for a CPU: a ``cpu`` platform in its platform registry, its FSDP engine registered for
that device, ``cpu:gloo`` as the process group's backend (verl names the CPU twice), and the
reference model's CPU offload without pinned memory.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES
from tests.doc_blocks import bash_commands, launch_block, scratch_task
from tests.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

#: Added to the documented command's arguments (the model and the retriever's URL come with them).
CPU_OVERRIDES = (
    # sized for the tiny task: 4 questions x n=5 samples, micro-batches that divide the 20 samples
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "data.dataloader_num_workers=0",
    # one step, on one worker (and one agent-loop and one reward worker: each Ray actor imports torch)
    "trainer.total_training_steps=1",
    "trainer.save_freq=-1",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    # the CPU: the cpu platform (tests/verl/cpu_standin.py); FSDP2 (verl's FSDP1 path asks torch for a
    # CUDA device); eager attention (no flash-attn); Ray told of one GPU slot (a logical resource
    # that verl's placement groups ask for) and of enough logical CPUs for verl's and TransferQueue's
    # actors; one TransferQueue storage unit
    "trainer.device=cpu",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "actor_rollout_ref.model.use_remove_padding=false",
    "+ray_kwargs.ray_init.num_gpus=1",
    "ray_kwargs.ray_init.num_cpus=8",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # memory: Ray's dashboard (about 1 GB of processes here; TransferQueue's ray[default] brings it)
    "+ray_kwargs.ray_init.include_dashboard=false",
)

ENTRY = "python -m verl.trainer.main_ppo"


def logged_steps(stdout: str) -> list[dict[str, float]]:
    """The metrics verl's console logger printed (``step:N - key:value - ...``), one dict per line."""
    steps = []
    for line in stdout.splitlines():
        match = re.search(r"step:(\d+) - (.*)$", line)
        if match is None:
            continue
        metrics: dict[str, float] = {"step": float(match.group(1))}
        for item in match.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())  # np.float64(4.0) -> 4.0
            try:
                metrics[key] = float(value)
            except ValueError:
                continue
        steps.append(metrics)
    return steps


def test_main_ppo_runs_one_grpo_step_with_the_documented_command(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    scratch_task(work)
    (work / "docs" / "engines").mkdir(parents=True)
    (work / "docs" / "engines" / "verl").symlink_to(ROOT / "docs" / "engines" / "verl")
    model, tokenizer = build_tiny_model()
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    report = tmp_path / "server.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "VERL_USE_EXTERNAL_MODULES": "tests.verl.cpu_standin",
        "VERL_PLATFORM": "cpu",
        "SEARCHENV_STANDIN_ANSWERS": "\n".join(f"{ex.question}\t{ex.answers[0]}" for ex in EXAMPLES),
        "SEARCHENV_STANDIN_REPORT": str(report),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_DEDUP_LOGS": "0",
    }
    with launch_block(bash_commands("engines/verl.md", "Launch"), work, ENTRY, BIN) as (port, argv):
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *argv, f"actor_rollout_ref.model.path={work / 'model'}",
             f"searchenv.retriever=http://127.0.0.1:{port}", *CPU_OVERRIDES],
            cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    steps = logged_steps(proc.stdout + proc.stderr)

    # the training step: verl's actor update ran, with a finite loss and a gradient
    [train] = [s for s in steps if "actor/pg_loss" in s]
    assert train["training/global_step"] == 1
    assert all(math.isfinite(train[k]) for k in ("actor/pg_loss", "actor/grad_norm", "actor/loss", "actor/entropy"))
    assert train["actor/grad_norm"] > 0
    assert train["timing_s/update_actor"] > 0 and train["timing_s/old_log_prob"] > 0 and train["timing_s/ref"] > 0
    # the SearchQA returns as verl's scores: right and wrong answers in the step, so advantages either side
    assert train["critic/score/max"] > train["critic/score/min"]
    assert train["critic/advantages/max"] > 0 > train["critic/advantages/min"]
    assert train["num_turns/mean"] == 4  # two turns (search, answer), as verl counts them (both sides' messages)
    # the initial validation: EM and F1 of the episodes in verl's validation metrics
    [val] = [s for s in steps if any(k.startswith("val-core/") for k in s)]
    for key in ("em", "f1", "searches", "infra_errors"):
        assert any(re.fullmatch(rf"val-aux/.+/{key}/mean@1", k) for k in val), (key, sorted(val))
    assert [v for k, v in val.items() if k.endswith("/infra_errors/mean@1")] == [0.0]

    # the stand-in server: verl sent it the vLLM parameters, synced the FSDP actor's weights to it
    # before the step and after the update (changed), and put it to sleep between
    server: dict[str, Any] = json.loads(report.read_text())
    assert server["params"] and all(p["stop"] == ["</search>", "</answer>"] and p["include_stop_str_in_output"]
                                    for p in server["params"])
    synced = server["synced"]
    assert len(synced) >= 2 and all(s["tensors"] > 0 for s in synced), synced
    assert synced[-1]["checksum"] != synced[0]["checksum"], synced  # the update changed the weights
    assert "sleep" in server["calls"]
