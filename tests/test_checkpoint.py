"""Run folders and checkpoints: no code from checkpoints, no silently lost runs, clear errors, no stale files.

Everything goes through the public paths: ``searchenv train ...`` (Typer's test runner), the
trainers' ``init_from``, :func:`agents.trainers.checkpoints.save_checkpoint` and
:meth:`agents.sb3.Controller.load`, on a tiny random model saved to a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from agents.trainers.checkpoints import CHECKPOINT_NAME, load_checkpoint, save_checkpoint, save_training_state
from agents.trainers.optim import make_optimizer, make_scheduler
from searchenv.cli import get_app
from tests.conftest import DOCS, EXAMPLES

runner = CliRunner()


class WritesMarker:
    """Unpickling this runs ``exec``, which writes ``marker``: what a crafted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",))


def write_malicious_checkpoint(run: Path, marker: Path) -> Path:
    """A ``checkpoint.pt`` shaped like ours whose model entry runs code when unpickled."""
    run.mkdir(parents=True, exist_ok=True)
    path = run / CHECKPOINT_NAME
    torch.save({"kind": "sft", "step": 1, "model": WritesMarker(marker), "lora": False, "config": {}}, path)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a tiny saved model, a QA file and its corpus."""
    from searchenv.corpus import write_corpus
    from searchenv.tasks import write_qa_jsonl
    from tests.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("world")
    model, tok = build_tiny_model(seed=0)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    write_qa_jsonl(root / "qa.jsonl", EXAMPLES)
    write_corpus(root / "corpus.jsonl", DOCS)
    return root


def sft_config(world: Path, run: Path, tmp: Path, **fields: Any) -> Path:
    """A TOML config for a 1-step SFT run into ``run``."""
    values = {
        "model": str(world / "model"), "task": str(world / "qa.jsonl"), "corpus": str(world / "corpus.jsonl"),
        "output_dir": str(run), "num_demos": 4, "batch_size": 2, "learning_rate": 1e-3, "save_every": 1,
        "steps": 1, "progress": False, "log_every": 0, **fields,
    }
    path = tmp / f"sft-{len(list(tmp.glob('sft-*.toml')))}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path


def train(kind: str, config: Path, *flags: str) -> Any:
    return runner.invoke(get_app(), ["train", kind, "-c", str(config), *flags])


def assert_clean_error(res: Any, *words: str) -> None:
    """Exit code 2, one ``error:`` line holding ``words``, no traceback, not Click's bare "Aborted."."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "error:" in res.output and "Traceback" not in res.output, res.output
    assert res.output.strip() != "Aborted!" and "Aborted" not in res.output, res.output
    for w in words:
        assert w in res.output, (w, res.output)


# ---------------------------------------------------------------------------------------------
# 1. Checkpoints never run code
# ---------------------------------------------------------------------------------------------


def test_resume_refuses_a_checkpoint_that_would_run_code(world: Path, tmp_path: Path) -> None:
    run, marker = tmp_path / "run", tmp_path / "marker"
    ckpt = write_malicious_checkpoint(run, marker)
    res = train("sft", sft_config(world, run, tmp_path, steps=2), "--resume")
    assert not marker.exists(), "loading the checkpoint ran code"
    assert_clean_error(res, str(ckpt), "refusing")


def test_init_from_refuses_a_checkpoint_that_would_run_code(world: Path, tmp_path: Path) -> None:
    evil, marker = tmp_path / "evil-run", tmp_path / "marker"
    ckpt = write_malicious_checkpoint(evil, marker)
    cfg = tmp_path / "grpo.toml"
    cfg.write_text(
        f'model = "{world / "model"}"\ntask = "{world / "qa.jsonl"}"\ncorpus = "{world / "corpus.jsonl"}"\n'
        f'output_dir = "{tmp_path / "grpo"}"\ninit_from = "{evil}"\nsteps = 1\nprogress = false\n'
    )
    res = train("grpo", cfg)
    assert not marker.exists(), "loading the checkpoint ran code"
    assert_clean_error(res, str(ckpt), "refusing")

    from agents.trainers.grpo import GRPOConfig, train_grpo
    from tests.tiny_model import tiny_policy

    with pytest.raises(ValueError, match="refusing"):
        train_grpo(GRPOConfig.load(cfg, [f"output_dir={tmp_path / 'grpo2'}"]), policy=tiny_policy(seed=0))
    assert not marker.exists()


def test_training_state_round_trips_exactly_through_a_weights_only_load(tmp_path: Path) -> None:
    """Optimizer, scheduler, RNG states, config and extra state come back equal, with only safe types."""
    from agents.trainers.ppo import PPOConfig, ValueHead

    cfg = PPOConfig(output_dir=str(tmp_path), reward={"outcome": 1.0, "relevance": 0.2}, lr_schedule="cosine",
                    warmup_steps=1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = make_optimizer(model.parameters(), cfg)
    sched = make_scheduler(opt, cfg, 10)
    for _ in range(3):
        model(torch.randn(2, 4)).square().sum().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    gen = np.random.default_rng(5)
    gen.random(3)
    head = ValueHead(3)
    path = save_training_state(tmp_path, "ppo", 3, model=model, cfg=cfg, optimizer=opt, scheduler=sched,
                               gen=gen, cursor=7, value_head=head.state_dict())
    raw = torch.load(path, map_location="cpu", weights_only=True)  # must not need pickled objects
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and raw.keys() == ckpt.keys()
    assert (ckpt["kind"], ckpt["step"], ckpt["cursor"], ckpt["lora"]) == ("ppo", 3, 7, False)
    assert ckpt["config"] == json.loads(json.dumps(cfg.to_dict())) == cfg.to_dict()
    assert ckpt["scheduler"] == sched.state_dict()
    assert ckpt["rng"]["numpy"] == gen.bit_generator.state
    assert torch.equal(ckpt["rng"]["torch"], torch.get_rng_state())
    saved, live = ckpt["optimizer"], opt.state_dict()
    assert saved["param_groups"] == live["param_groups"]
    assert saved["state"].keys() == live["state"].keys()
    for i, st in live["state"].items():
        assert saved["state"][i].keys() == st.keys()
        for k, v in st.items():
            assert torch.equal(saved["state"][i][k], v) and saved["state"][i][k].dtype == v.dtype
    for k, v in {**model.state_dict()}.items():
        assert torch.equal(ckpt["model"][k], v)
    assert all(torch.equal(ckpt["value_head"][k], v) for k, v in head.state_dict().items())


# ---------------------------------------------------------------------------------------------
# 14. An existing run is never silently replaced; --resume needs a checkpoint
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rerun_refuses_an_existing_run_and_overwrite_replaces_it(world: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = sft_config(world, run, tmp_path)
    assert train("sft", cfg).exit_code == 0
    before = {name: (run / name).read_bytes() for name in (CHECKPOINT_NAME, "metrics.jsonl", "config.json")}

    res = train("sft", sft_config(world, run, tmp_path, seed=3))
    assert_clean_error(res, str(run), "--resume", "--overwrite")
    assert {name: (run / name).read_bytes() for name in before} == before  # nothing touched

    res = train("sft", cfg, "--resume", "--overwrite")
    assert_clean_error(res, "--resume", "--overwrite")

    res = train("sft", sft_config(world, run, tmp_path, seed=3), "--overwrite")
    assert res.exit_code == 0, res.output
    assert json.loads((run / "config.json").read_text())["seed"] == 3
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (run / CHECKPOINT_NAME).read_bytes() != before[CHECKPOINT_NAME]


def test_resume_without_a_checkpoint_refuses_instead_of_starting_over(world: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = train("sft", sft_config(world, run, tmp_path), "--resume")
    assert_clean_error(res, str(run / CHECKPOINT_NAME))
    assert not (run / "metrics.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# 15. Temporary files of killed runs do not pile up
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_stale_temporary_files_of_killed_runs_are_removed_on_start(world: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    # what kill -9 during a checkpoint, metrics or config write leaves behind
    stale = [run / f".{CHECKPOINT_NAME}.{pid}.tmp" for pid in (4242, 4243, 4244)]
    stale += [run / ".metrics.jsonl.x1y2z3", run / ".config.json.abcdef"]
    for p in stale:
        p.write_bytes(b"\0" * 1000)
    keep = run / "notes.txt"
    keep.write_text("mine")
    res = train("sft", sft_config(world, run, tmp_path, steps=2), "--resume")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in run.iterdir()) == sorted([CHECKPOINT_NAME, "config.json", "metrics.jsonl",
                                                            "notes.txt"])


@pytest.mark.slow
def test_resume_after_a_kill_mid_metrics_line_drops_the_torn_line(world: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    with open(run / "metrics.jsonl", "a") as fh:  # a kill while step 2's line was being written
        fh.write('{"step": 2, "loss": 0.5, "polic')
    res = train("sft", sft_config(world, run, tmp_path, steps=2), "--resume")
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_failed_checkpoint_write_leaves_no_temporary_file_and_the_old_checkpoint(tmp_path: Path) -> None:
    """A write that fails part-way (here: the file-size limit, as on a full disk) cleans up after itself."""
    import subprocess
    import sys

    save_checkpoint(tmp_path, {"kind": "sft", "step": 1, "w": torch.ones(2)})
    script = (
        "import resource, signal, sys, torch\n"
        "from agents.trainers.checkpoints import save_checkpoint\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
        "try:\n"
        "    save_checkpoint(sys.argv[1], {'kind': 'sft', 'step': 2, 'w': torch.ones(1_000_000)})\n"
        "except Exception as exc:  # OSError or torch's RuntimeError\n"
        "    sys.exit(f'failed: {exc}')\n"
    )
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "failed: " in res.stderr, res.stderr
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_NAME]
    assert torch.load(tmp_path / CHECKPOINT_NAME, weights_only=True)["step"] == 1


def test_a_checkpoint_holding_other_objects_is_refused_before_writing(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, {"kind": "sft", "step": 1, "w": torch.ones(2)})
    with pytest.raises(TypeError, match=r"state\['rng'\]\['numpy'\] is a numpy.float64"):
        save_checkpoint(tmp_path, {"kind": "sft", "step": 2, "rng": {"numpy": np.float64(0.5)}})
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_NAME]
    assert torch.load(tmp_path / CHECKPOINT_NAME, weights_only=True)["step"] == 1


# ---------------------------------------------------------------------------------------------
# 16. A damaged checkpoint is named, with what to do
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_damaged_checkpoint_is_named_with_what_to_do(world: Path, tmp_path: Path, damage: str) -> None:
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    ckpt = run / CHECKPOINT_NAME
    data = ckpt.read_bytes()
    damaged = {"empty": b"", "truncated": data[: len(data) // 2], "garbage": b"\x80\x04not a checkpoint"}
    ckpt.write_bytes(damaged[damage])
    res = train("sft", sft_config(world, run, tmp_path, steps=2), "--resume")
    assert_clean_error(res, str(ckpt), "damaged", "--overwrite")


def test_resume_refuses_a_checkpoint_of_another_trainer(world: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    cfg = tmp_path / "grpo.toml"
    cfg.write_text(
        f'model = "{world / "model"}"\ntask = "{world / "qa.jsonl"}"\ncorpus = "{world / "corpus.jsonl"}"\n'
        f'output_dir = "{run}"\nsteps = 2\nprogress = false\n'
    )
    res = train("grpo", cfg, "--resume")
    assert_clean_error(res, str(run / CHECKPOINT_NAME), "sft")


@pytest.mark.slow
def test_a_lora_ppo_run_resumes_exactly(tmp_path: Path) -> None:
    """The value head (extra state) and LoRA-only weights come back through the weights-only checkpoint.

    Two runs of one seed start from the same adapters, whatever the global random state.
    """
    from agents.trainers.ppo import PPOConfig, train_ppo
    from searchenv.corpus import write_corpus
    from searchenv.tasks import write_qa_jsonl
    from tests.test_trainers import toy_reward
    from tests.tiny_model import tiny_policy

    write_qa_jsonl(tmp_path / "qa.jsonl", EXAMPLES)
    write_corpus(tmp_path / "corpus.jsonl", DOCS)

    def cfg(name: str) -> PPOConfig:
        return PPOConfig(
            output_dir=str(tmp_path / name), task=str(tmp_path / "qa.jsonl"), corpus=str(tmp_path / "corpus.jsonl"),
            protocol="toy-free-answer", max_turns=1, max_new_tokens=3, batch_size=2, samples_per_question=2,
            micro_batch_size=4, minibatches=2, learning_rate=1e-2, steps=2, save_every=0, progress=False,
            log_every=0, lora=True, lora_r=2,
        )

    full = train_ppo(cfg("a"), policy=tiny_policy(seed=0), reward=toy_reward)
    train_ppo(cfg("b"), policy=tiny_policy(seed=0), reward=toy_reward, stop_after=1)
    resumed = train_ppo(cfg("b"), policy=tiny_policy(seed=0), reward=toy_reward, resume=True)
    for a, b in ((full["policy"].model, resumed["policy"].model), (full["value_head"], resumed["value_head"])):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for k in sa:
            torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0)


def test_a_finished_sft_run_resumed_reports_its_last_step(world: Path, tmp_path: Path) -> None:
    from agents.trainers.sft import SFTConfig, train_sft

    cfg = SFTConfig(model=str(world / "model"), task=str(world / "qa.jsonl"), corpus=str(world / "corpus.jsonl"),
                    output_dir=str(tmp_path / "run"), num_demos=4, batch_size=2, steps=2, save_every=1,
                    progress=False, log_every=0)
    out = train_sft(cfg)
    again = train_sft(cfg, resume=True)  # nothing left to train
    assert again["step"] == out["step"] == 2
    assert again["last"]["step"] == 2 and again["last"]["loss"] == pytest.approx(out["last"]["loss"])


# ---------------------------------------------------------------------------------------------
# issue 31: 3. A refused resume keeps the run's settings; a checkpoint's step must be a count
# ---------------------------------------------------------------------------------------------


def test_a_refused_resume_leaves_the_run_config_as_it_was(world: Path, tmp_path: Path) -> None:
    # before: start_run wrote the refused settings over config.json before the checkpoint was read
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    config = run / "config.json"
    before = config.read_text()
    other = tmp_path / "grpo.toml"
    other.write_text(
        f'model = "{world / "model"}"\ntask = "{world / "qa.jsonl"}"\ncorpus = "{world / "corpus.jsonl"}"\n'
        f'output_dir = "{run}"\nsteps = 32\nprogress = false\n'
    )
    assert_clean_error(train("grpo", other, "--resume"), "sft")  # another trainer's checkpoint: refused
    run_ckpt = run / CHECKPOINT_NAME
    good = run_ckpt.read_bytes()
    run_ckpt.write_bytes(good[: len(good) // 2])
    assert_clean_error(train("sft", sft_config(world, run, tmp_path, steps=32), "--resume"), "damaged")
    assert config.read_text() == before
    run_ckpt.write_bytes(good)
    res = train("sft", config, "--resume")  # the documented command still works (its one step is done)
    assert res.exit_code == 0, res.output
    assert json.loads(config.read_text())["steps"] == 1


@pytest.mark.slow
def test_a_checkpoint_with_a_negative_step_is_refused(world: Path, tmp_path: Path) -> None:
    # before: a safe-typed checkpoint with "step": -5 resumed and trained steps -4..2
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path)).exit_code == 0
    ckpt = load_checkpoint(run)
    assert ckpt is not None
    for key, value in (("step", -5), ("cursor", -1), ("step", True)):
        save_checkpoint(run, {**ckpt, key: value})
        res = train("sft", sft_config(world, run, tmp_path, steps=2), "--resume")
        assert_clean_error(res, str(run / CHECKPOINT_NAME), f"{key} = {value!r}", "non-negative integer")
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]


# ---------------------------------------------------------------------------------------------
# issue 42: 10. A checkpoint is checked against the run that resumes it
# ---------------------------------------------------------------------------------------------


def _small_run(tmp_path: Path, *, lora: bool = False, steps: int = 2) -> dict[str, Any]:
    """A small model trained ``steps`` AdamW steps and checkpointed; ``lora`` freezes its first layer.

    Returns what :func:`restore_training_state` needs to resume it into a fresh model.
    """
    from agents.trainers.data import DataOrder
    from agents.trainers.sft import SFTConfig

    cfg = SFTConfig(output_dir=str(tmp_path / "run"), lora=lora, learning_rate=1e-2, save_every=1)

    def fresh() -> dict[str, Any]:
        gen = torch.Generator().manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(generator=gen)
        if lora:
            model[0].requires_grad_(False)
        opt = make_optimizer([p for p in model.parameters() if p.requires_grad], cfg)
        return {"cfg": cfg, "model": model, "optimizer": opt, "scheduler": make_scheduler(opt, cfg, 10),
                "gen": np.random.default_rng(0), "order": DataOrder(5, 0)}

    live = fresh()
    for _ in range(steps):
        live["model"](torch.ones(2, 4)).square().sum().backward()
        live["optimizer"].step()
        live["scheduler"].step()
        live["optimizer"].zero_grad()
    save_training_state(cfg.output_dir, "sft", max(steps, 1), cursor=2, **{k: live[k] for k in
                        ("model", "cfg", "optimizer", "scheduler", "gen")})
    return {"run": Path(cfg.output_dir), "fresh": fresh, "live": live}


def _tamper(run: Path, change: Any) -> None:
    ckpt = load_checkpoint(run)
    assert ckpt is not None
    change(ckpt)
    save_checkpoint(run, ckpt)


def _resume(small: dict[str, Any], **extra: Any) -> Any:
    from agents.trainers.checkpoints import restore_training_state

    return restore_training_state(small["run"], kind="sft", **small["fresh"](), **extra)


def test_a_good_checkpoint_still_resumes_exactly(tmp_path: Path) -> None:
    for lora in (False, True):
        small = _small_run(tmp_path / str(lora), lora=lora)
        from agents.trainers.checkpoints import restore_training_state

        into = small["fresh"]()
        step, _ = restore_training_state(small["run"], kind="sft", **into)
        assert step == 2 and into["order"].cursor == 2
        for a, b in zip(into["model"].parameters(), small["live"]["model"].parameters(), strict=True):
            assert torch.equal(a, b)


def test_a_step_without_an_optimizer_step_still_resumes(tmp_path: Path) -> None:
    """A GRPO step whose groups all lacked signal takes no optimizer step: no Adam moments yet, rightly."""
    from agents.trainers.checkpoints import restore_training_state

    small = _small_run(tmp_path, steps=0)
    assert load_checkpoint(small["run"])["optimizer"]["state"] == {}  # type: ignore[index]
    assert restore_training_state(small["run"], kind="sft", **small["fresh"]())[0] == 1


def _drop_half(ckpt: dict[str, Any]) -> None:
    ckpt["model"] = dict(list(ckpt["model"].items())[: len(ckpt["model"]) // 2])


def _extra_key(ckpt: dict[str, Any]) -> None:
    ckpt["model"]["0.weight_extra"] = torch.zeros(3, 4)


MODEL_DAMAGE = {
    # before: load_state_dict(strict=False) resumed these silently, the absent tensors from the base weights
    "empty": (lambda c: c.update(model={}), r"model does not fit this run's model: 4 of its 4 tensors missing"),
    "half": (_drop_half, r"model does not fit .* 2 of its 4 tensors missing \('1.weight', '1.bias'\)"),
    "unexpected": (_extra_key, r"1 unexpected \('0.weight_extra'\)"),
    "shape": (lambda c: c["model"].update({"1.bias": torch.zeros(3)}),
              r"model\['1.bias'\] is torch.float32 \(3,\), this run's model has torch.float32 \(2,\)"),
    "dtype": (lambda c: c["model"].update({"1.bias": c["model"]["1.bias"].double()}), r"is torch.float64 \(2,\)"),
    # before: NaN weights resumed and every later loss was NaN (logged as null)
    "nan": (lambda c: c["model"]["0.weight"].__setitem__((0, 0), float("nan")),
            r"model\['0.weight'\] holds 1 NaN or infinite values \(of 12\)"),
    "inf": (lambda c: c["model"]["1.bias"].fill_(float("inf")), r"model\['1.bias'\] holds 2 NaN or infinite"),
}


@pytest.mark.parametrize("damage", sorted(MODEL_DAMAGE))
def test_resume_refuses_model_weights_that_do_not_fit(tmp_path: Path, damage: str) -> None:
    from agents.trainers.checkpoints import CheckpointError

    small = _small_run(tmp_path)
    change, message = MODEL_DAMAGE[damage]
    _tamper(small["run"], change)
    with pytest.raises(CheckpointError, match=message) as err:
        _resume(small)
    assert str(small["run"] / CHECKPOINT_NAME) in str(err.value)


def test_a_lora_resume_refuses_missing_adapter_weights(tmp_path: Path) -> None:
    from agents.trainers.checkpoints import CheckpointError

    small = _small_run(tmp_path, lora=True)
    _tamper(small["run"], lambda c: c["model"].pop("1.weight"))
    with pytest.raises(CheckpointError, match=r"1 of its 2 tensors missing \('1.weight'\)"):
        _resume(small)


def _first_state(ckpt: dict[str, Any]) -> dict[str, Any]:
    return dict(ckpt["optimizer"]["state"][0])


OPTIMIZER_DAMAGE = {
    # before: a truncated exp_avg loaded and the first step crashed with a traceback
    "truncated": (lambda c: c["optimizer"]["state"][0].update(exp_avg=c["optimizer"]["state"][0]["exp_avg"][:1]),
                  r"optimizer state\[0\]\['exp_avg'\] has shape \(1, 4\), its parameter \(3, 4\)"),
    # before: an emptied optimizer state resumed silently (Adam restarted from zero moments)
    "emptied": (lambda c: c["optimizer"].update(state={}),
                r"optimizer state has nothing for parameter 0 \(shape \(3, 4\)\) though the optimizer has taken"),
    "lacking": (lambda c: c["optimizer"]["state"][1].pop("exp_avg_sq"), r"state\[1\] lacks \['exp_avg_sq'\]"),
    "nan": (lambda c: c["optimizer"]["state"][2]["exp_avg"].fill_(float("nan")),
            r"optimizer state\[2\]\['exp_avg'\] holds 6 NaN"),
    "negative": (lambda c: c["optimizer"]["state"][3]["exp_avg_sq"].fill_(-1.0), r"\['exp_avg_sq'\] holds negative"),
    "stray": (lambda c: c["optimizer"]["state"].update({9: _first_state(c)}), r"parameters 9 that no group lists"),
    "groups": (lambda c: c["optimizer"]["param_groups"][0]["params"].pop(), r"group 0 has 3 parameters, this run's"),
    "betas": (lambda c: c["optimizer"]["param_groups"][0].update(betas=(0.5, 0.5)), r"group 0 has betas = \(0.5"),
    "lr": (lambda c: c["optimizer"]["param_groups"][0].update(lr=float("nan")), r"group 0 has lr = nan"),
    "scheduler": (lambda c: c["scheduler"].update(base_lrs=[1.0]), r"scheduler holds base_lrs = \[1.0\]"),
}


@pytest.mark.parametrize("damage", sorted(OPTIMIZER_DAMAGE))
def test_resume_refuses_optimizer_state_that_does_not_fit(tmp_path: Path, damage: str) -> None:
    from agents.trainers.checkpoints import CheckpointError

    small = _small_run(tmp_path)
    change, message = OPTIMIZER_DAMAGE[damage]
    _tamper(small["run"], change)
    with pytest.raises(CheckpointError, match=message) as err:
        _resume(small)
    assert str(small["run"] / CHECKPOINT_NAME) in str(err.value)


def test_resume_refuses_an_extra_module_that_does_not_fit(tmp_path: Path) -> None:
    """PPO's value head goes through the same checks (here: NaN)."""
    from agents.trainers.checkpoints import CheckpointError

    small = _small_run(tmp_path)
    head = torch.nn.Linear(3, 1)
    _tamper(small["run"], lambda c: c.update(value_head={k: torch.full_like(v, float("nan"))
                                                         for k, v in head.state_dict().items()}))
    with pytest.raises(CheckpointError, match=r"value_head\['weight'\] holds 3 NaN"):
        _resume(small, extra={"value_head": head})


@pytest.mark.parametrize(("field", "value"), [("learning_rate", 0.5), ("batch_size", 3), ("num_demos", 7),
                                              ("model", "other-model"), ("seed", 4), ("lora_r", 8)])
def test_resume_refuses_a_changed_setting_naming_it(tmp_path: Path, field: str, value: Any) -> None:
    # before: the checkpoint's config was never compared; the run resumed under the new settings
    from agents.trainers.checkpoints import CheckpointError

    small = _small_run(tmp_path)
    saved = load_checkpoint(small["run"])["config"][field]  # type: ignore[index]
    into = small["fresh"]()
    into["cfg"] = type(into["cfg"])(**{**into["cfg"].to_dict(), field: value})
    from agents.trainers.checkpoints import restore_training_state

    with pytest.raises(CheckpointError, match=rf"{field} = {saved!r} saved, {value!r} now"):
        restore_training_state(small["run"], kind="sft", **into)


def test_resume_may_change_where_it_runs_and_how_far_it_goes(tmp_path: Path) -> None:
    from agents.trainers.checkpoints import CheckpointError, restore_training_state

    small = _small_run(tmp_path)
    into = small["fresh"]()
    into["cfg"] = type(into["cfg"])(**{**into["cfg"].to_dict(), "steps": 99, "save_every": 3, "threads": 1,
                                       "micro_batch_size": 1, "progress": False})
    assert restore_training_state(small["run"], kind="sft", **into)[0] == 2
    # but not the length of a schedule that depends on it
    cosine = _small_run(tmp_path / "cosine")
    _tamper(cosine["run"], lambda c: c["config"].update(lr_schedule="cosine"))
    into = cosine["fresh"]()
    into["cfg"] = type(into["cfg"])(**{**into["cfg"].to_dict(), "lr_schedule": "cosine", "steps": 99})
    with pytest.raises(CheckpointError, match=r"steps = 60 saved, 99 now"):
        restore_training_state(cosine["run"], kind="sft", **into)


def test_resume_on_another_model_is_refused_and_config_json_kept(world: Path, tmp_path: Path) -> None:
    """Through the CLI: adapters trained on model A are not resumed on model B of the same shapes."""
    # before: exit 0, and config.json was rewritten to name model B
    from tests.tiny_model import build_tiny_model

    other = tmp_path / "model_b"
    model, tok = build_tiny_model(seed=1)
    model.save_pretrained(other)
    tok.save_pretrained(other)
    run = tmp_path / "run"
    assert train("sft", sft_config(world, run, tmp_path, lora=True, lora_r=2)).exit_code == 0
    config = run / "config.json"
    before = config.read_text()
    res = train("sft", sft_config(world, run, tmp_path, lora=True, lora_r=2, steps=2, model=str(other)), "--resume")
    assert_clean_error(res, str(run / CHECKPOINT_NAME), f"model = '{world / 'model'}' saved, '{other}' now")
    res = train("sft", sft_config(world, run, tmp_path, lora=True, lora_r=2, steps=2, learning_rate=0.5),
                "--resume")
    assert_clean_error(res, "learning_rate = 0.001 saved, 0.5 now")
    assert config.read_text() == before
    res = train("sft", sft_config(world, run, tmp_path, lora=True, lora_r=2, steps=2), "--resume")
    assert res.exit_code == 0, res.output


def _lora_checkpoint(run: Path) -> dict[str, Any]:
    """A LoRA "run" of the tiny model (r=2 on q_proj, v_proj) saved as the trainers save it."""
    from peft import LoraConfig, get_peft_model

    from tests.tiny_model import build_tiny_model

    model = get_peft_model(build_tiny_model(0)[0], LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    state = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    config = {"lora_r": 2, "lora_alpha": 4, "lora_dropout": 0.0, "lora_target_modules": ["q_proj", "v_proj"]}
    ckpt = {"kind": "sft", "step": 1, "model": state, "lora": True, "config": config}
    save_checkpoint(run, ckpt)
    return ckpt


@pytest.mark.parametrize("damage", ["half", "nan"])
def test_init_from_refuses_adapters_that_do_not_fit(tmp_path: Path, damage: str) -> None:
    # before: half the adapters were merged (the rest silently absent); NaN adapters were merged
    from agents.trainers.checkpoints import CheckpointError
    from agents.trainers.models import load_weights
    from tests.tiny_model import tiny_policy

    ckpt = _lora_checkpoint(tmp_path / "run")
    keys = sorted(ckpt["model"])
    if damage == "half":
        ckpt["model"] = {k: ckpt["model"][k] for k in keys[: len(keys) // 2]}
    else:
        ckpt["model"][keys[0]][0, 0] = float("nan")
    save_checkpoint(tmp_path / "run", ckpt)
    policy = tiny_policy(seed=0)
    message = r"tensors missing" if damage == "half" else r"holds 1 NaN or infinite values"
    with pytest.raises(CheckpointError, match=message):
        load_weights(policy, tmp_path / "run")
    assert not any("lora" in n for n, _ in policy.model.named_modules())  # the adapter layers were taken out
    # a good one still merges
    _lora_checkpoint(tmp_path / "good")
    load_weights(policy, tmp_path / "good")


def test_init_from_refuses_full_weights_that_are_not_finite(tmp_path: Path) -> None:
    # before: NaN weights were loaded and every later loss was NaN
    from agents.trainers.checkpoints import CheckpointError
    from agents.trainers.models import load_weights
    from tests.tiny_model import tiny_policy

    state = {k: v.clone() for k, v in tiny_policy(seed=1).model.state_dict().items()}
    state["model.norm.weight"][3] = float("inf")
    save_checkpoint(tmp_path / "run", {"kind": "sft", "step": 1, "model": state, "lora": False, "config": {}})
    with pytest.raises(CheckpointError, match=r"model\['model.norm.weight'\] holds 1 NaN or infinite"):
        load_weights(tiny_policy(seed=0), tmp_path / "run")
