"""docs/engines/verl.md's launch, as written, through verl's own pieces (run in .venv-verl by tests/test_verl.py).

The test reads the ``bash`` block of docs/engines/verl.md's Launch section and runs it in a scratch
folder that holds a tiny corpus and task where the block expects Wikipedia and HotpotQA:
``searchenv rows`` and ``searchenv serve`` run as written (on a free port instead of 8000, which
other processes on a shared machine may hold), and the ``main_ppo`` command's arguments, expanded
by bash, are composed with Hydra and checked by verl's ``validate_config`` as ``main_ppo`` does
first. Then one GRPO step's rollout, reward and advantages run with that config through verl's
real ``AgentLoopManager`` (agent-loop workers as Ray actors, which load the agent loop from the
documented ``agent_loops.yaml``), ``LLMServerClient`` and ``GlobalRequestLoadBalancer``, and the
trainer's ``extract_reward``, ``compute_advantage`` and validation metrics. The only stand-in is
the generation server (vLLM/SGLang need a GPU): a Ray actor with the server's ``generate`` call
that plays search-then-answer. ``main_ppo`` itself, run for one training step with the policy
update, is tests/verl/check_main_ppo.py.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
import torch
from hydra import compose, initialize_config_dir
from tests.conftest import EXAMPLES
from tests.doc_blocks import bash_commands, launch_block, scratch_task
from tests.tiny_model import build_tiny_model
from tests.verl.scripted import scripted_turn
from verl.protocol import DataProto
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device
from verl.workers.rollout.replica import TokenOutput

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def verl_block() -> list[str]:
    """The commands of the ``bash`` block of docs/engines/verl.md's Launch section (continuations joined)."""
    return bash_commands("engines/verl.md", "Launch")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The docs' commands run in a scratch folder; yields the folder, the server's URL and the main_ppo argv."""
    work = tmp_path_factory.mktemp("verl-launch")
    scratch_task(work)
    (work / "docs" / "engines").mkdir(parents=True)
    (work / "docs" / "engines" / "verl").symlink_to(ROOT / "docs" / "engines" / "verl")
    with launch_block(verl_block(), work, "python -m verl.trainer.main_ppo", BIN) as (port, argv):
        yield {"work": work, "url": f"http://127.0.0.1:{port}", "argv": argv}


def _compose(argv: list[str], extra: list[str] | tuple[str, ...] = ()) -> Any:
    """The config main_ppo builds from ``argv`` (``--config-path``, ``--config-name``, overrides), plus ``extra``."""
    args = list(argv)
    config_path = args.pop(args.index("--config-path") + 1)
    args.remove("--config-path")
    config_name = args.pop(args.index("--config-name") + 1)
    args.remove("--config-name")
    with initialize_config_dir(config_dir=config_path, version_base=None):
        return compose(config_name=config_name, overrides=args + list(extra))


def _validate(config: Any) -> None:
    """What verl's main_ppo runs before anything else."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_the_documented_command_passes_verls_validate_config(launched: dict[str, Any]) -> None:
    config = _compose(launched["argv"])
    _validate(config)  # raises on what main_ppo would reject
    work = str(launched["work"])
    # every path verl's workers open is absolute (a relative one fails on another node)
    paths = [*config.data.train_files, *config.data.val_files] if not isinstance(config.data.train_files, str) \
        else [config.data.train_files, config.data.val_files]
    paths.append(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert all(os.path.isabs(p) and p.startswith(work) and os.path.exists(p) for p in paths), paths


def test_the_shipped_config_has_no_relative_paths_and_no_missing_file() -> None:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(ROOT / "docs" / "engines" / "verl" / "searchqa_grpo.yaml"))
    # mandatory (???): the command line gives them absolute, never a path relative to one node's folder
    assert raw["data"]["train_files"] == raw["data"]["val_files"] == "???"
    assert raw["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"] == "???"
    # the module's docstring names the shipped config, which exists
    import agents.integrations.verl as adapter

    named = set(re.findall(r"docs/[\w./-]+\.(?:yaml|md)", adapter.__doc__ or ""))
    assert named and all((ROOT / p).exists() for p in named), named


@ray.remote
class ScriptedGenerationServer:
    """Stands in for a vLLM server replica: ``generate`` from token ids, search-then-answer.

    Answers the question right on every other episode (so each GRPO group has a spread of
    rewards), and records the sampling parameters it was sent.
    """

    def __init__(self, model_path: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.answers = {ex.question: ex.answers[0] for ex in EXAMPLES}
        self.answered = 0
        self.params: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        self.params.append(dict(sampling_params))
        text, self.answered = scripted_turn(self.tokenizer.decode(prompt_ids), self.answers, self.answered)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))

    def sent(self) -> list[dict[str, Any]]:
        return self.params


def test_one_grpo_step_through_verls_agent_loop_manager(launched: dict[str, Any], tmp_path: Path) -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer.ppo.metric_utils import process_validation_metrics
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage
    from verl.trainer.ppo.reward import extract_reward
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    model, tokenizer = build_tiny_model()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    # the documented config, sized for a CPU (a tiny model, 4 questions x n=5, one agent-loop worker)
    config = _compose(launched["argv"], (
        f"actor_rollout_ref.model.path={tmp_path / 'model'}", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.agent.num_workers=1", f"searchenv.retriever={launched['url']}"))
    _validate(config)
    n = int(config.actor_rollout_ref.rollout.n)

    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(4)]))
    batch.non_tensor_batch["uid"] = np.array([f"q{i}" for i in range(4)], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)  # as verl's trainer repeats each prompt n times

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}})
    try:
        server = ScriptedGenerationServer.remote(str(tmp_path / "model"))
        balancer = ray.remote(GlobalRequestLoadBalancer).remote(servers={"replica-0": server})
        manager = AgentLoopManager.create(config, LLMServerClient(config, load_balancer_handle=balancer))
        out = manager.generate_sequences(batch)
        sent = ray.get(server.sent.remote())
    finally:
        ray.shutdown()

    assert len(out) == 4 * n and out.batch["responses"].shape[1] == config.data.max_response_length
    # the vLLM backend's parameters (the shipped config's rollout.name)
    assert all(p["stop"] == ["</search>", "</answer>"] and p["include_stop_str_in_output"] for p in sent)
    # episode metrics reach the trainer: reward_extra_keys and the agent-loop timings
    keys = out.meta_info["reward_extra_keys"]
    assert {"em", "f1", "searches", "invalid_turns", "infra_errors"} <= set(keys)
    timing = out.meta_info["timing"]
    assert timing["agent_loop/generate_sequences/mean"] > 0 and timing["agent_loop/tool_calls/mean"] > 0

    # the trainer's side of the step (RayPPOTrainer.fit after generation): reward, then GRPO advantages
    batch = batch.union(out)
    reward, extra = extract_reward(batch)
    batch.batch["token_level_scores"] = batch.batch["token_level_rewards"] = reward
    scores = reward.sum(-1)
    assert torch.allclose(scores, torch.tensor([float(r) for r in batch.non_tensor_batch["return"]]))
    assert sorted(set(float(e) for e in extra["em"])) == [0.0, 1.0]  # right and wrong answers in the step
    batch = compute_advantage(batch, adv_estimator=config.algorithm.adv_estimator, num_repeat=n,
                              norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo,
                              config=config.algorithm)
    adv = batch.batch["advantages"]
    mask = batch.batch["response_mask"].bool()
    assert (adv[~mask] == 0).all() and adv[mask].abs().sum() > 0  # advantages on the policy's tokens only
    # the per-turn rewards ride along and sum to the score on the last token
    for turns, score in zip(batch.non_tensor_batch["turn_scores"], scores.tolist(), strict=True):
        assert sum(turns) == pytest.approx(score, abs=1e-5)

    # validation: verl's per-data-source metrics carry EM and F1, not only the shaped return
    sources = list(batch.non_tensor_batch["data_source"])
    infos = {"reward": scores.tolist(), **{k: list(v) for k, v in extra.items()}}
    val = process_validation_metrics(sources, list(batch.non_tensor_batch["uid"]), infos)
    [source] = val
    assert "em" in val[source] and "f1" in val[source] and "mean@5" in val[source]["em"]
    # the names the trainer logs them under (RayPPOTrainer._val_metrics_update uses no trainer state)
    logged = RayPPOTrainer._val_metrics_update(None, sources, list(batch.non_tensor_batch["uid"]), infos, [])
    assert {f"val-aux/{source}/{k}/mean@5" for k in ("em", "f1", "searches", "invalid_turns", "infra_errors")} <= \
        set(logged)
    assert f"val-core/{source}/reward/mean@5" in logged
