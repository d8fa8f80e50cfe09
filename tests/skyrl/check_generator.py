"""docs/engines/skyrl.md's launch, as written, through SkyRL's generator (run in .venv-skyrl by test_skyrl_train.py).

The test reads the ``bash`` block of docs/engines/skyrl.md's Launch section and runs it in a scratch
folder holding a tiny corpus and task where the block expects Wikipedia and HotpotQA:
``searchenv rows`` and ``searchenv serve`` as written (on a free port instead of 8000), and the
arguments of ``python -m agents.integrations.skyrl``, as bash expands them, through the module's
``parse`` (SkyRL's ``from_cli_overrides`` on the extended config) and SkyRL's ``validate_cfg``.
Then ``searchqa`` episodes run with that config through SkyRL's ``PromptDataset``,
``prepare_generator_input`` (with the sampling parameters SkyRL's trainer builds) and
``SkyRLGymGenerator``. The only stand-in is the inference engine (vLLM needs a GPU): an
``InferenceEngineInterface`` whose "model" writes a search, then made-up ``<information>`` and an
answer in one breath unless a stop string ends its turn, honouring ``stop`` as vLLM does with the
stop string kept (SkyRL's vLLM parameters set ``include_stop_str_in_output``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skyrl.backends.skyrl_train.inference_servers.base import InferenceEngineInterface
from tests.conftest import EXAMPLES
from tests.doc_blocks import bash_commands, launch_block, scratch_task
from tests.tiny_model import build_tiny_tokenizer

from agents.integrations.skyrl import SearchQAEnvConfig, config_classes, parse, parse_command_line

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def skyrl_block() -> list[str]:
    """The commands of the ``bash`` block of docs/engines/skyrl.md's Launch section (continuations joined)."""
    return bash_commands("engines/skyrl.md", "Launch", comment=r"\s+#[^'\"]*$")


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The docs' commands run in a scratch folder; yields the folder, the server's port and the entry point's argv."""
    work = tmp_path_factory.mktemp("skyrl-launch")
    scratch_task(work)
    with launch_block(skyrl_block(), work, "python -m agents.integrations.skyrl", BIN) as (port, argv):
        yield {"work": work, "port": port, "argv": argv}


def _docs_config(launched: dict[str, Any], *extra: str) -> Any:
    """The documented arguments through the entry point's parser, the server on its test port."""
    argv = [a.replace("127.0.0.1:8000", f"127.0.0.1:{launched['port']}") for a in launched["argv"]]
    return parse(argv + list(extra))


def test_plain_skyrl_config_rejects_the_section_and_the_extended_one_takes_it(launched: dict[str, Any]) -> None:
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils import validate_cfg

    with pytest.raises(ValueError, match="Invalid fields {'searchqa'} for SkyRLGymConfig"):
        SkyRLTrainConfig.from_cli_overrides(["environment.skyrl_gym.searchqa.retriever=http://127.0.0.1:8000"])
    cfg = _docs_config(launched)
    validate_cfg(cfg)  # what the entry point runs before starting Ray
    section = cfg.environment.skyrl_gym.searchqa
    assert isinstance(section, config_classes()["section"]) and isinstance(section, SearchQAEnvConfig)
    assert section.to_env_config() == {"retriever": f"http://127.0.0.1:{launched['port']}", "reward": "r3-rag",
                                       "top_k": 3}
    assert cfg.environment.env_class == "searchqa"
    assert list(cfg.generator.sampling_params.stop) == ["</search>", "</answer>"]
    assert list(cfg.generator.eval_sampling_params.stop) == ["</search>", "</answer>"]
    assert cfg.data.train_data == [str(launched["work"] / "data" / "skyrl" / "train.parquet")]
    with pytest.raises(ValueError, match="Invalid fields"):
        parse(["environment.skyrl_gym.searchqa.topk=3"])  # a typo is refused, with SkyRL's message
    with pytest.raises(ValueError, match="'\\+' prefix"):
        parse(["+environment.skyrl_gym.searchqa.retriever=x"])  # SkyRL refuses Hydra's + outright
    # through SkyRL's main_base dispatch (trainer.override_entrypoint=agents.integrations.skyrl), the same config
    dispatched = parse_command_line(["trainer.override_entrypoint=agents.integrations.skyrl", *launched["argv"]])
    assert dispatched.environment.skyrl_gym.searchqa == parse(launched["argv"]).environment.skyrl_gym.searchqa


class RunOnEngine(InferenceEngineInterface):
    """Stands in for SkyRL's vLLM engine: a "model" that runs on past ``</search>`` unless stopped.

    Its turn is ``<search> question </search>`` followed, in the same breath, by made-up
    ``<information>`` and a wrong answer; after real information it answers right. ``stop`` is
    honoured as vLLM does with SkyRL's parameters: the text ends after the first stop string,
    which is kept, and the stop reason is ``stop``.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.answers = {ex.question: ex.answers[0] for ex in EXAMPLES}
        self.params: list[dict[str, Any]] = []

    def model_name(self) -> str:
        return "scripted"

    async def generate(self, input_batch: Any, model: str | None = None) -> Any:
        self.params.append(dict(input_batch.get("sampling_params") or {}))
        stop = list((input_batch.get("sampling_params") or {}).get("stop") or [])
        responses, ids, reasons = [], [], []
        for prompt_ids in input_batch["prompt_token_ids"]:
            context = self.tokenizer.decode(prompt_ids)
            question = next(q for q in self.answers if q in context)
            turns = context.split(question)[-1]
            if "(Title: " in turns:  # the environment's passages, not its own made-up ones
                text = f"<answer> {self.answers[question]} </answer>"
            else:
                text = (f"<search> {question} </search>\n<information> Doc 1 (Nowhere) {question} Nobody knows. "
                        "</information>\n<answer> nowhere </answer>")
            ends = [i + len(s) for s in stop if (i := text.find(s)) >= 0]
            text = text[: min(ends)] if ends else text
            responses.append(text)
            ids.append(self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id])
            reasons.append("stop")
        return {"responses": responses, "response_ids": ids, "stop_reasons": reasons,
                "response_logprobs": [[-0.5] * len(i) for i in ids], "prompt_logprobs": None,
                "rollout_expert_indices": None, "rollout_sample_support": None}

    def get_endpoint_url(self) -> str:
        return "http://127.0.0.1:0"

    async def chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("token-in-token-out only")

    async def render_chat_completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("token-in-token-out only")

    async def completion(self, request_payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("token-in-token-out only")

    # the engine's life cycle (weights, memory, sessions): nothing to do for a scripted engine
    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def update_named_weights(self, request: Any) -> None:
        return None

    async def load_lora_adapter(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def teardown(self) -> None:
        return None

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        return None

    async def pause_generation(self) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def finish_session(self, session_id: str) -> None:
        return None

    async def get_world_size(self) -> tuple[int, int]:
        return 1, 1


def _generate(cfg: Any) -> tuple[Any, RunOnEngine]:
    """One batch of the train data through SkyRL's dataset, generator input and SkyRLGymGenerator."""
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
    from skyrl.train.dataset import PromptDataset
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator
    from skyrl.train.generators.utils import prepare_generator_input

    from searchenv.integrations.skyrl import register

    register()
    tokenizer = build_tiny_tokenizer()
    dataset = PromptDataset(datasets=cfg.data.train_data, tokenizer=tokenizer,
                            max_prompt_length=cfg.trainer.max_prompt_length, num_workers=1)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    params = get_sampling_params_for_backend(cfg.generator.inference_engine.backend, cfg.generator.sampling_params)
    generator_input, _ = prepare_generator_input(prompts, 2, params, cfg.environment.env_class, "train", 0)
    engine = RunOnEngine(tokenizer)
    generator = SkyRLGymGenerator(generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym,
                                  inference_engine_client=engine, tokenizer=tokenizer)
    return asyncio.run(generator.generate(generator_input, disable_tqdm=True)), engine


def test_skyrl_gym_generator_runs_searchqa_episodes_with_the_documented_config(launched: dict[str, Any]) -> None:
    cfg = _docs_config(launched, "generator.inference_engine.max_num_seqs=8")
    out, engine = _generate(cfg)
    assert all(p["stop"] == ["</search>", "</answer>"] for p in engine.params)  # the recipe's stop strings
    n = 2 * len(EXAMPLES)
    assert len(out["response_ids"]) == n and all(r == "stop" for r in out["stop_reasons"])
    metrics = out["rollout_metrics"]
    # each turn ended at </search>, the environment searched, the answer was right: no made-up information
    assert metrics["environment/em"] == pytest.approx(1.0) and metrics["environment/f1"] == 1.0
    assert metrics["environment/searches"] == pytest.approx(1.0)
    assert metrics["environment/invalid_turns"] == 0.0 and metrics["environment/infra_errors"] == 0.0
    # token-level rewards: each turn's reward on that turn's last token, summing to the episode return
    _check_turn_rewards(out, metrics)
    for mask in out["loss_masks"]:
        assert 0 in mask and 1 in mask  # the environment's reply is masked out of the loss


def _check_turn_rewards(out: Any, metrics: dict[str, Any]) -> list[int]:
    """Rewards are per token, non-zero only at a turn's last token, and sum to the mean return; the non-zero counts."""
    counts = []
    for rewards, ids, mask in zip(out["rewards"], out["response_ids"], out["loss_masks"], strict=True):
        assert isinstance(rewards, list) and len(rewards) == len(ids) == len(mask)
        ends = {i for i in range(len(mask)) if mask[i] == 1 and (i + 1 == len(mask) or mask[i + 1] == 0)}
        assert {i for i, r in enumerate(rewards) if r != 0.0} <= ends
        counts.append(sum(1 for r in rewards if r != 0.0))
    mean = sum(sum(r) for r in out["rewards"]) / len(out["rewards"])
    assert mean == pytest.approx(metrics["environment/return"], abs=1e-5)
    return counts


def test_without_the_stop_strings_a_turn_runs_past_search_and_is_scored_made_up(launched: dict[str, Any]) -> None:
    # what the previously documented config (no generator.sampling_params.stop) gave
    cfg = _docs_config(launched, "generator.sampling_params.stop=null")
    out, _ = _generate(cfg)
    metrics = out["rollout_metrics"]
    assert metrics["environment/em"] == 0.0 and metrics["environment/searches"] == 0.0
    # the turn is a malformed one (the protocol's reason: fake_information), -0.9 each under r3-rag
    assert metrics["environment/invalid_turns"] > 0 and metrics["environment/reward/format"] < 0
    # a penalty at every malformed turn, each on its own turn's last token: rewards per turn, not per episode
    assert max(_check_turn_rewards(out, metrics)) > 1
