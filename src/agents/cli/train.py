"""``searchenv train sft|grpo|ppo|mappo-sft|mappo`` and ``searchenv plot``.

Example::

    searchenv train grpo --config grpo.toml --set steps=50 --set output_dir=runs/grpo
    searchenv train grpo --resume --config runs/grpo/config.json
    searchenv train grpo --overwrite --config grpo.toml     # start runs/grpo over
    searchenv train grpo --config grpo.toml --report        # + runs/grpo/report.html: curves, episodes by step
    searchenv plot runs/grpo
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from agents.trainers.config import TrainConfig, field_help

_KINDS = ("sft", "grpo", "ppo", "mappo-sft", "mappo")
#: Questions ``--report`` plays at each sampled step (the first of the task's dev split where it has one).
REPORT_QUESTIONS = 5


def _config_class(kind: str) -> type[TrainConfig]:
    if kind == "sft":
        from agents.trainers.sft import SFTConfig

        return SFTConfig
    if kind == "grpo":
        from agents.trainers.grpo import GRPOConfig

        return GRPOConfig
    if kind == "mappo-sft":
        from agents.trainers.mappo_sft import MAPPOSFTConfig

        return MAPPOSFTConfig
    if kind == "mappo":
        from agents.trainers.mappo import MAPPOConfig

        return MAPPOConfig
    from agents.trainers.ppo import PPOConfig

    return PPOConfig


def _fields_epilog(kind: str) -> str:
    lines = [f"Config fields ({kind}), settable in the file or with --set key=value:", ""]
    for name, default, text in field_help(_config_class(kind)):
        lines.append(f"  {name} (default {default}): {text}")
    return "\n\n".join(lines)


def report_steps(steps: int) -> list[int]:
    """The steps ``--report`` samples episodes at: the first, the end of each quarter of the run, and the last."""
    return sorted({1, *(max(1, round(steps * quarter / 4)) for quarter in (1, 2, 3, 4))})


def run_training(
    kind: str, config: Path | None, overrides: list[str], resume: bool, dry_run: bool, overwrite: bool = False,
    report: bool = False,
) -> Any:
    """Build the config (file + overrides), then train (or only print the config with ``dry_run``).

    With ``report``, the run is trained in segments that end at :func:`report_steps` (each one stopped and
    resumed from its checkpoint, which continues the run exactly, so the trained model is the same), the
    policy of each segment's end plays :data:`REPORT_QUESTIONS` questions greedily into
    ``RUN_DIR/samples/step-<N>/`` (laid out as ``searchenv eval --out``), and ``RUN_DIR/report.html`` shows
    the learning curves and those episodes, the steps side by side on each question.

    Raises:
        typer.Exit: With code 2 for an invalid config, ``--resume`` with ``--overwrite``, a run folder
            that holds a run (without ``--resume`` or ``--overwrite``), ``--resume`` without a
            checkpoint, a damaged or unsafe checkpoint, or a bad line in a demonstrations file.
    """
    if resume and overwrite:
        typer.echo("error: --resume and --overwrite contradict each other: choose one", err=True)
        raise typer.Exit(2)
    cls = _config_class(kind)
    try:
        cfg = cls.load(config, overrides)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: invalid {kind} config: {exc}", err=True)
        raise typer.Exit(2) from None
    if dry_run:
        typer.echo(json.dumps(cfg.to_dict(), indent=2))
        return None
    from agents.devices import resolve_device

    try:
        resolve_device(cfg.device)  # an accelerator this machine lacks is refused before anything is loaded
    except ValueError as exc:
        typer.echo(f"error: invalid {kind} config: {exc}", err=True)
        raise typer.Exit(2) from None
    from agents.trainers.checkpoints import CheckpointError
    from searchenv.cli import data_warnings_to_stderr
    from searchenv.utils.jsonsafe import JSONInputError

    try:
        with data_warnings_to_stderr():
            out = _train_and_sample(kind, cfg, resume, overwrite) if report else \
                _train(kind, cfg, resume=resume, overwrite=overwrite)
    except (CheckpointError, JSONInputError, FileExistsError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps({"step": out["step"], "run_dir": out["run_dir"], "last": out["last"]}, default=str))
    if report:
        from rich.console import Console

        from agents.cli.report import write_page

        err = Console(stderr=True)
        err.print(f"wrote {write_page(Path(out['run_dir']), None, err)}", markup=False, highlight=False)
    return out


def _train_and_sample(kind: str, cfg: TrainConfig, resume: bool, overwrite: bool) -> dict[str, Any]:
    """Train in segments ending at :func:`report_steps`; after each, sample episodes with the segment's policy."""
    from agents.evaluation.report import SAMPLES_NAME, sample_dirs
    from agents.trainers.metrics import read_metrics
    from searchenv.utils.files import refuse_link

    run_dir = Path(cfg.output_dir)
    try:
        refuse_link(run_dir / SAMPLES_NAME, "output_dir")
    except ValueError as exc:  # before anything trains
        raise FileExistsError(str(exc)) from None
    had = resume and (run_dir / "metrics.jsonl").is_file()
    start = max((int(r["step"]) for r in read_metrics(run_dir)), default=0) if had else 0
    targets = [t for t in report_steps(cfg.steps) if t > start] or [cfg.steps]
    questions: tuple[list[Any], Any, str] | None = None
    out: dict[str, Any] = {}
    done = start
    for i, target in enumerate(targets):
        out = _train(kind, cfg, resume=resume or i > 0, overwrite=overwrite and i == 0,
                     stop_after=target if target < cfg.steps else None)
        if i == 0:  # the run folder is this run's now: episodes sampled past its checkpoint are another run's
            for step, folder in sample_dirs(run_dir):
                if step > start:
                    shutil.rmtree(folder)
        step = int(out["step"])
        if step <= done:  # nothing trained (a finished run, a spent budget)
            break
        if questions is None:
            questions = _report_questions(cfg)
        _sample(kind, cfg, out["policy"], step, questions, run_dir)
        done = step
        if step < target:  # the run ended early (max_minutes, a token budget)
            break
        if i + 1 < len(targets):
            out["policy"] = None  # the next segment loads its own from the checkpoint: one model in memory
    return out


def _report_questions(cfg: TrainConfig) -> tuple[list[Any], Any, str]:
    """The questions ``--report`` plays, their retriever and their split (held out where the task has a dev split)."""
    from agents.evaluation.evaluate import load_split

    split = cfg.split
    if split != "dev" and not Path(cfg.task).is_file():
        from searchenv.tasks.registry import load_task

        split = "dev" if "dev" in load_task(cfg.task).splits else split
    examples, retriever = load_split(cfg.task, split, cfg.retriever, corpus=cfg.corpus, n=REPORT_QUESTIONS)
    return examples, retriever, split


def _sample(kind: str, cfg: Any, policy: Any, step: int, questions: tuple[list[Any], Any, str],
            run_dir: Path) -> None:
    """Play the report's questions greedily with ``policy``; write them to ``RUN_DIR/samples/step-<step>/``."""
    import dataclasses

    from rich.console import Console

    from agents.evaluation.evaluate import evaluate, write_results
    from agents.evaluation.report import SAMPLES_NAME

    examples, retriever, split = questions
    env_kwargs: dict[str, Any]
    if kind in ("mappo", "mappo-sft"):  # one model plays every role of the multi-agent pipeline
        from agents.baselines.pipelines import make_pipeline

        agent: Any = make_pipeline("mmoa-llm", policy=policy, roles=cfg.roles, max_new_tokens=cfg.max_new_tokens)
        env_kwargs = cfg.episode_kwargs()
    else:
        from agents.baselines.llm import LLMAgent

        agent = LLMAgent("llm", policy, max_new_tokens=cfg.max_new_tokens, temperature=0.0)
        env_kwargs = {"max_doc_chars": cfg.max_doc_chars}
    result = evaluate(agent, task=examples, retriever=retriever, protocol=cfg.protocol, top_k=cfg.top_k,
                      max_turns=cfg.max_turns, reward=cfg.reward, batch_size=len(examples), seed=cfg.seed,
                      max_new_tokens=cfg.max_new_tokens, env_kwargs=env_kwargs, retriever_label=str(cfg.retriever))
    result = dataclasses.replace(result, agent=f"step {step}", task=str(cfg.task), split=split)
    write_results([result], run_dir / SAMPLES_NAME / f"step-{step:06d}")
    Console(stderr=True).print(f"step {step}: {len(examples)} {split} questions played for the report "
                               f"(EM {result.row.get('em', 0.0):.2f})", markup=False, highlight=False)


def _train(kind: str, cfg: TrainConfig, *, resume: bool, overwrite: bool,
           stop_after: int | None = None) -> dict[str, Any]:
    """Run the trainer of ``kind`` on ``cfg`` (stopping, checkpointed, after ``stop_after`` steps when given)."""
    if kind in ("sft", "mappo-sft"):  # the warm start is SFT on the oracle pipeline's role turns
        from agents.trainers.sft import SFTConfig, train_sft

        if not isinstance(cfg, SFTConfig):  # pragma: no cover - by construction
            raise TypeError("expected SFTConfig")
        return train_sft(cfg, resume=resume, overwrite=overwrite, stop_after=stop_after)
    if kind == "mappo":
        from agents.trainers.mappo import MAPPOConfig, train_mappo

        if not isinstance(cfg, MAPPOConfig):  # pragma: no cover
            raise TypeError("expected MAPPOConfig")
        return train_mappo(cfg, resume=resume, overwrite=overwrite, stop_after=stop_after)
    if kind == "grpo":
        from agents.trainers.grpo import GRPOConfig, train_grpo

        if not isinstance(cfg, GRPOConfig):  # pragma: no cover
            raise TypeError("expected GRPOConfig")
        return train_grpo(cfg, resume=resume, overwrite=overwrite, stop_after=stop_after)
    from agents.trainers.ppo import PPOConfig, train_ppo

    if not isinstance(cfg, PPOConfig):  # pragma: no cover
        raise TypeError("expected PPOConfig")
    return train_ppo(cfg, resume=resume, overwrite=overwrite, stop_after=stop_after)


def _make_command(kind: str) -> Any:
    def command(
        config: Annotated[
            Path | None, typer.Option("--config", "-c", help="JSON or TOML config file (fields listed below).")
        ] = None,
        set_: Annotated[
            list[str] | None, typer.Option("--set", "-s", help="Override a field: key=value (repeatable).")
        ] = None,
        resume: Annotated[
            bool, typer.Option("--resume", help="Continue from the run folder's checkpoint, exactly.")
        ] = False,
        overwrite: Annotated[
            bool,
            typer.Option("--overwrite", help="Replace the run already in the run folder (its checkpoint and metrics)."),
        ] = False,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and print the config, then stop.")] = False,
        device: Annotated[
            str | None,
            typer.Option("--device", help="Where the model trains (the config's device field, set last): auto, "
                         "cpu, cuda, cuda:N, mps, xpu."),
        ] = None,
        report: Annotated[
            bool,
            typer.Option("--report", help="Also write RUN_DIR/report.html: the learning curves, and "
                         f"{REPORT_QUESTIONS} questions played by the model at the first step, each quarter of the "
                         "run and the last (RUN_DIR/samples/), side by side (searchenv report RUN_DIR)."),
        ] = False,
    ) -> None:
        overrides = list(set_ or []) + ([f"device={device}"] if device is not None else [])
        run_training(kind, config, overrides, resume, dry_run, overwrite, report)

    command.__doc__ = {
        "sft": "Cold-start supervised fine-tuning on oracle (or JSONL) demonstrations.",
        "grpo": "GRPO: group-relative advantages, clipped surrogate on policy tokens, KL to a reference.",
        "ppo": "PPO with a value head, token-level GAE, outcome + per-search process rewards.",
        "mappo-sft": "MAPPO's warm start: SFT of one model on every role's turns of the mmoa-oracle pipeline.",
        "mappo": "MAPPO (MMOA-RAG): one model as rewriter, selector, generator; shared F1 reward, central value.",
    }[kind]
    return command


def plot_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folder(s) holding metrics.jsonl.")],
    out: Annotated[Path | None, typer.Option(help="PNG path (default RUN_DIR/learning_curves.png).")] = None,
    smooth: Annotated[int, typer.Option(help="Moving-average window in steps.", min=1)] = 1,
    label: Annotated[list[str] | None, typer.Option(
        help="Legend label of each run, in order (repeat the option). Runs with the same label are seeds of one "
             "arm, drawn as their mean inside a band from lowest to highest.")] = None,
) -> None:
    """Draw the learning curves of one or more runs to a PNG (seeds of one arm as a band)."""
    from agents.trainers.plot import plot_runs

    try:
        path = plot_runs(run_dirs, out, labels=label or None, smooth=smooth)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))


class _FieldsEpilogCommand(TyperCommand):
    """A ``train`` command whose help lists its config fields, built only when help is shown.

    The config classes live beside their trainers, which import torch; building the list at
    registration would make every ``searchenv`` command (``--help``, ``tasks``) import torch.
    """

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Fill the epilog with the config fields, then format as usual."""
        if self.name in _KINDS and not self.epilog:
            self.epilog = _fields_epilog(self.name)
        super().format_help(ctx, formatter)


def register_train(train_app: typer.Typer) -> None:
    """Add ``sft``, ``grpo``, ``ppo``, ``mappo-sft`` and ``mappo`` to the ``train`` group."""
    for kind in _KINDS:
        train_app.command(name=kind, cls=_FieldsEpilogCommand)(_make_command(kind))


def register_plot(app: typer.Typer) -> None:
    """Add the top-level ``plot`` command."""
    app.command(name="plot")(plot_command)
