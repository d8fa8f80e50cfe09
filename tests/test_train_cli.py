"""Trainer configs: validation errors, file loading and overrides; the train/plot CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.trainers.config import TrainConfig, field_help, parse_value
from agents.trainers.grpo import GRPOConfig
from agents.trainers.ppo import PPOConfig
from agents.trainers.sft import SFTConfig
from searchenv.cli import get_app


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (GRPOConfig, {"group_size": 1}, "group_size"),
        (GRPOConfig, {"batch_size": 0}, "batch_size"),
        (GRPOConfig, {"kl_estimator": "k9"}, "kl_estimator"),
        (GRPOConfig, {"scale_rewards": "median"}, "scale_rewards"),
        (GRPOConfig, {"clip_low": 1.5}, "clip_low"),
        (GRPOConfig, {"kl_coef": -0.1}, "kl_coef"),
        (GRPOConfig, {"minibatches": 100}, "minibatches"),
        (GRPOConfig, {"temperature": 0.0}, "temperature"),
        (GRPOConfig, {"learning_rate": 0.0}, "learning_rate"),
        (GRPOConfig, {"lr_schedule": "step"}, "lr_schedule"),
        (GRPOConfig, {"steps": True}, "steps"),
        (PPOConfig, {"lam": 1.5}, "lam"),
        (PPOConfig, {"value_clip": -1.0}, "value_clip"),
        (PPOConfig, {"aggregation": "sum"}, "aggregation"),
        (PPOConfig, {"clip_low": 0.0}, "clip_low"),
        (PPOConfig, {"kl_estimator": "k4"}, "kl_estimator"),
        (PPOConfig, {"minibatches": 9}, r"minibatches \(9\) cannot exceed episodes per step \(8\)"),
        (PPOConfig, {"samples_per_question": 0}, "samples_per_question"),
        (PPOConfig, {"temperature": 0.0}, "temperature"),
        (GRPOConfig, {"clip_high": float("inf")}, "clip_high"),
        (SFTConfig, {"demos": "/nonexistent.jsonl"}, "demos"),
        (SFTConfig, {"batch_size": -2}, "batch_size"),
        (TrainConfig, {"reward": {"outcome": float("nan")}}, "reward"),
    ],
)
def test_invalid_configs_raise_with_the_field_name(cls: type, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_every_field_has_help() -> None:
    for cls in (SFTConfig, GRPOConfig, PPOConfig):
        for name, _default, text in field_help(cls):
            assert text, f"{cls.__name__}.{name} has no help"


def test_load_toml_and_json_with_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('steps = 7\nlearning_rate = 1\n[reward]\noutcome = 1.0\nrelevance = 0.2\n')
    cfg = GRPOConfig.load(toml, ["group_size=3", "task=synthetic-2hop", "clip_high=0.28", "lora=true"])
    assert (cfg.steps, cfg.group_size, cfg.task, cfg.clip_high, cfg.lora) == (7, 3, "synthetic-2hop", 0.28, True)
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.reward == {"outcome": 1.0, "relevance": 0.2}
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"train": {"steps": 3, "max_grad_norm": None}}))
    cfg2 = PPOConfig.load(js, ['reward={"outcome": 1}', "lora_target_modules=q_proj,v_proj"])
    assert cfg2.steps == 3 and cfg2.max_grad_norm is None
    assert cfg2.reward == {"outcome": 1}
    assert cfg2.lora_target_modules == ["q_proj", "v_proj"]


def test_load_rejects_unknown_keys_and_bad_overrides(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown GRPOConfig fields"):
        GRPOConfig.load(None, ["stepz=3"])
    with pytest.raises(ValueError, match="key=value"):
        GRPOConfig.load(None, ["steps"])
    with pytest.raises(ValueError, match="lora"):
        GRPOConfig.load(None, ["lora=maybe"])
    bad = tmp_path / "c.yaml"
    bad.write_text("steps: 3")
    with pytest.raises(ValueError, match="json or .toml"):
        GRPOConfig.load(bad)


def test_parse_value() -> None:
    assert parse_value("3") == 3
    assert parse_value("none") is None
    assert parse_value("True") is True
    assert parse_value("synthetic-1hop") == "synthetic-1hop"
    assert parse_value('{"a": 1}') == {"a": 1}


runner = CliRunner()


@pytest.mark.parametrize("kind", ["sft", "grpo", "ppo", "mappo-sft", "mappo"])
def test_cli_dry_run_prints_merged_config(tmp_path: Path, kind: str) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"steps": 5}))
    res = runner.invoke(get_app(), ["train", kind, "--config", str(cfg), "--set", "seed=4", "--dry-run"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["steps"] == 5 and data["seed"] == 4


def test_cli_reports_invalid_config_with_exit_code_2() -> None:
    res = runner.invoke(get_app(), ["train", "grpo", "--set", "group_size=1", "--dry-run"])
    assert res.exit_code == 2
    assert "group_size" in res.output


def test_cli_help_lists_fields() -> None:
    res = runner.invoke(get_app(), ["train", "grpo", "--help"])
    assert res.exit_code == 0
    assert "kl_coef" in res.output and "scale_rewards" in res.output


def test_plot_draws_png(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    recs = [{"step": i, "reward_mean": i / 10, "em": i / 20, "kl": 0.01 * i, "searches": 1.0} for i in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = runner.invoke(get_app(), ["plot", str(run)])
    assert res.exit_code == 0, res.output
    png = run / "learning_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in run.iterdir()) == ["learning_curves.png", "metrics.jsonl"]  # no temporary left


def test_plot_keeps_each_runs_colour_in_every_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without a panel's metric (only PPO logs value loss) must not hand its colour to another run."""
    import matplotlib.axes

    from agents.trainers.plot import plot_runs

    ppo, grpo = tmp_path / "ppo", tmp_path / "grpo"
    for run, extra in ((ppo, "vf_loss"), (grpo, "zero_variance_groups")):
        run.mkdir()
        recs = [{"step": i, "reward_mean": i / 10, extra: float(i)} for i in range(1, 6)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    drawn: list[tuple[str, str]] = []
    plot = matplotlib.axes.Axes.plot

    def recording(self: matplotlib.axes.Axes, *args: Any, **kwargs: Any) -> Any:
        lines = plot(self, *args, **kwargs)
        drawn.extend((kwargs.get("label", ""), lines[0].get_color()) for _ in lines)
        return lines

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recording)
    plot_runs([ppo, grpo], tmp_path / "curves.png", labels=["ppo", "grpo"], smooth=3)
    colours = {label: {c for name, c in drawn if name == label} for label in ("ppo", "grpo")}
    assert all(len(c) == 1 for c in colours.values()), colours
    assert colours["ppo"] != colours["grpo"]
    # each run's metric-only panel was drawn (value loss for ppo, zero-variance groups for grpo)
    assert sum(1 for name, _ in drawn if name == "grpo") == 2 and sum(1 for name, _ in drawn if name == "ppo") == 2


def test_plot_draws_seeds_of_one_arm_as_a_band(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`searchenv plot A0 A1 A2 B0 --label a --label a --label a --label b`: arm a as its seeds' mean in their range."""
    import matplotlib.axes

    runs = []
    for name, offset in (("a0", 0.0), ("a1", 0.2), ("a2", 0.4), ("b0", 1.0)):
        run = tmp_path / name
        run.mkdir()
        recs = [{"step": i, "em": offset + i / 10} for i in range(1, 5)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        runs.append(str(run))
    lines: dict[str, list[float]] = {}
    bands: list[tuple[list[float], list[float]]] = []
    plot, fill = matplotlib.axes.Axes.plot, matplotlib.axes.Axes.fill_between

    def recording_plot(self: matplotlib.axes.Axes, *args: Any, **kwargs: Any) -> Any:
        lines[kwargs.get("label", "")] = [float(y) for y in args[1]]
        return plot(self, *args, **kwargs)

    def recording_fill(self: matplotlib.axes.Axes, x: Any, low: Any, high: Any, **kwargs: Any) -> Any:
        bands.append(([float(v) for v in low], [float(v) for v in high]))
        return fill(self, x, low, high, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", recording_plot)
    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between", recording_fill)
    out = tmp_path / "curves.png"
    res = runner.invoke(get_app(), ["plot", *runs, "--out", str(out), "--label", "a", "--label", "a",
                                    "--label", "a", "--label", "b"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert lines["a (3 seeds)"] == pytest.approx([0.3, 0.4, 0.5, 0.6])  # the mean of the three seeds
    assert bands == [(pytest.approx([0.1, 0.2, 0.3, 0.4]), pytest.approx([0.5, 0.6, 0.7, 0.8]))]
    assert lines["b"] == pytest.approx([1.1, 1.2, 1.3, 1.4])
    bad = runner.invoke(get_app(), ["plot", *runs, "--out", str(out), "--label", "a"])
    assert bad.exit_code == 2 and "1 labels for 4 runs" in bad.output


def test_plot_without_metrics_fails_cleanly(tmp_path: Path) -> None:
    res = runner.invoke(get_app(), ["plot", str(tmp_path)])
    assert res.exit_code == 2


def _tiny_run_inputs(tmp_path: Path) -> None:
    """A tiny model folder (``model``), ``qa.jsonl`` and ``corpus.jsonl`` of the test world under ``tmp_path``."""
    from searchenv.corpus import write_corpus
    from searchenv.tasks import write_qa_jsonl
    from tests.conftest import DOCS, EXAMPLES
    from tests.tiny_model import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    write_qa_jsonl(tmp_path / "qa.jsonl", EXAMPLES)
    write_corpus(tmp_path / "corpus.jsonl", DOCS)


def test_cli_sft_trains_resumes_and_plots(tmp_path: Path) -> None:
    """End to end through the command line with a tiny model saved to a folder."""
    _tiny_run_inputs(tmp_path)
    cfg = tmp_path / "sft.toml"
    run = tmp_path / "run"
    cfg.write_text(
        f'model = "{tmp_path / "model"}"\ntask = "{tmp_path / "qa.jsonl"}"\ncorpus = "{tmp_path / "corpus.jsonl"}"\n'
        f'output_dir = "{run}"\nnum_demos = 4\nbatch_size = 2\nlearning_rate = 1e-3\nsave_every = 1\n'
    )
    res = runner.invoke(get_app(), ["train", "sft", "-c", str(cfg), "--set", "steps=2", "--set", "progress=false"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(get_app(), ["train", "sft", "-c", str(cfg), "--set", "steps=3", "--set", "progress=false",
                                    "--resume"])
    assert res.exit_code == 0, res.output
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert json.loads((run / "config.json").read_text())["steps"] == 3
    res = runner.invoke(get_app(), ["plot", str(run)])
    assert res.exit_code == 0, res.output
    assert (run / "learning_curves.png").is_file()


def test_eval_runs_a_trained_model_from_its_run_folder_with_every_lora_phase(tmp_path: Path) -> None:
    """SFT (LoRA) then GRPO (LoRA, init_from the SFT run): ``--model RUN`` gets both phases, in order."""
    import torch

    from agents.policies.hf import HFPolicy
    from agents.trainers.checkpoints import CheckpointError
    from agents.trainers.models import load_policy, load_trained_policy, load_weights

    _tiny_run_inputs(tmp_path)
    common = ["--set", f"model={tmp_path / 'model'}", "--set", f"task={tmp_path / 'qa.jsonl'}",
              "--set", f"corpus={tmp_path / 'corpus.jsonl'}", "--set", "progress=false", "--set", "lora=true",
              "--set", "lora_r=4", "--set", "max_new_tokens=8", "--set", "learning_rate=0.05"]
    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    res = runner.invoke(get_app(), ["train", "sft", *common, "--set", f"output_dir={sft}", "--set", "steps=2",
                                    "--set", "num_demos=4", "--set", "batch_size=2"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(get_app(), ["train", "grpo", *common, "--set", f"output_dir={grpo}", "--set", "steps=1",
                                    "--set", "batch_size=2", "--set", "group_size=2", "--set", f"init_from={sft}"])
    assert res.exit_code == 0, res.output

    got = load_policy(str(grpo))
    want = HFPolicy.from_pretrained(str(tmp_path / "model"))
    load_weights(want, sft)
    load_weights(want, grpo)
    only_last = HFPolicy.from_pretrained(str(tmp_path / "model"))
    load_weights(only_last, grpo)
    name, param = next((n, p) for n, p in got.model.named_parameters() if "q_proj" in n)
    assert torch.equal(param, dict(want.model.named_parameters())[name])
    assert not torch.equal(param, dict(only_last.model.named_parameters())[name])  # the SFT phase counts
    assert not got.model.training

    res = runner.invoke(get_app(), ["eval", "--agent", "llm", "--model", str(grpo), "--task",
                                    str(tmp_path / "qa.jsonl"), "--corpus", str(tmp_path / "corpus.jsonl"), "--n", "2",
                                    "--max-new-tokens", "8"])
    assert res.exit_code == 0, res.output
    assert "llm" in res.output

    (sft / "checkpoint.pt").unlink()
    with pytest.raises(FileNotFoundError, match="not a training run folder"):
        load_trained_policy(grpo)
    with pytest.raises(CheckpointError):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "checkpoint.pt").write_bytes(b"not a checkpoint")
        load_trained_policy(tmp_path / "bad")


def test_lora_gets_its_own_default_learning_rate() -> None:
    from agents.trainers.grpo import GRPOConfig
    from agents.trainers.ppo import PPOConfig
    from agents.trainers.sft import SFTConfig

    assert SFTConfig().learning_rate == 2e-5 and SFTConfig(lora=True).learning_rate == 5e-4
    assert SFTConfig.load(None, ["lora=true"]).learning_rate == 5e-4
    assert SFTConfig(lora=True, learning_rate=1e-3).learning_rate == 1e-3  # a rate set explicitly is kept
    assert GRPOConfig().learning_rate == 1e-6 and GRPOConfig(lora=True).learning_rate == 1e-4
    assert PPOConfig(lora=True).learning_rate == 1e-4
    saved = SFTConfig(lora=True).to_dict()  # a run's config.json records the rate it trained with
    assert saved["learning_rate"] == 5e-4 and SFTConfig.from_dict({**saved, "lora": False}).learning_rate == 5e-4
    res = CliRunner().invoke(get_app(), ["train", "sft", "--set", "lora=true", "--dry-run"])
    assert res.exit_code == 0 and json.loads(res.output)["learning_rate"] == 5e-4
    res = CliRunner().invoke(get_app(), ["train", "sft", "--help"], env={"COLUMNS": "300"})
    assert "5e-4 with lora=true" in " ".join(res.output.split())


def test_the_cpu_training_command_in_the_guide_is_a_valid_config() -> None:
    """docs/guides/cpu.md's command, as written, validates (--dry-run) to what its table describes."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "cpu.md").read_text(encoding="utf-8")
    [command] = re.findall(r"```bash\n(searchenv train .*?)\n```", doc, re.S)
    args = shlex.split(command.replace("\\\n", " "))[1:]
    res = CliRunner().invoke(get_app(), [*args, "--dry-run"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout[res.stdout.index("{"):])
    assert printed["train_layers"] == 6 and printed["reuse_frozen"] is True and printed["max_minutes"] == 30
