"""``searchenv train sb3-ppo``: train the PPO search controller and compare it with fixed policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def sb3_ppo(
    task: Annotated[str, typer.Option(help="Task name (e.g. synthetic-mixed) or QA JSONL file.")] = "synthetic-mixed",
    corpus: Annotated[
        str | None, typer.Option(help="Corpus JSONL, needed when --task is a file.")
    ] = None,
    retriever: Annotated[str, typer.Option(help="Retriever: bm25, dense or an index folder.")] = "bm25",
    search_cost: Annotated[
        float, typer.Option(help="Reward = exact match - cost per search (frugal preset: 0.1).", min=0.0)
    ] = 0.1,
    timesteps: Annotated[int, typer.Option(help="PPO environment steps.", min=1)] = 60_000,
    n_envs: Annotated[int, typer.Option(help="Environment copies per rollout.", min=1)] = 8,
    n_steps: Annotated[int, typer.Option(help="Steps per environment copy per PPO rollout.", min=1)] = 128,
    batch_size: Annotated[int, typer.Option(help="PPO minibatch size.", min=1)] = 256,
    ent_coef: Annotated[float, typer.Option(help="PPO entropy bonus.", min=0.0)] = 0.05,
    learning_rate: Annotated[float, typer.Option(help="Adam learning rate.", min=0.0)] = 1e-3,
    encoder: Annotated[str, typer.Option(help="Question encoder: minilm (packaged, offline) or hashing.")] = "minilm",
    embed_dim: Annotated[int, typer.Option(help="Reduced question-embedding dimension.", min=0)] = 16,
    reduction: Annotated[str, typer.Option(help="Embedding reduction: pca or random.")] = "pca",
    max_turns: Annotated[int, typer.Option(help="Turn budget per question.", min=1)] = 6,
    top_k: Annotated[int, typer.Option(help="Documents per search.", min=1)] = 3,
    train_split: Annotated[str, typer.Option(help="Split to train on.")] = "train",
    eval_split: Annotated[str, typer.Option(help="Held-out split to evaluate on.")] = "dev",
    eval_limit: Annotated[int | None, typer.Option(help="Evaluate on the first N held-out questions.", min=1)] = None,
    seed: Annotated[int, typer.Option(help="Seed of PPO and the environments.")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Folder to save the controller and eval.json into.")
    ] = None,
    verbose: Annotated[int, typer.Option(help="stable-baselines3 verbosity (0, 1, 2).", min=0, max=2)] = 0,
) -> None:
    """Train a PPO macro-action controller (stable-baselines3) and compare it with fixed policies.

    The controller chooses per step: search the question, search a next-hop reformulation,
    answer with the span extracted from retrieved documents, or answer without retrieval. It is
    evaluated on held-out questions against always-answer, search-once/twice/thrice policies.
    """
    try:
        from agents.sb3.controller import ControllerConfig, compare_with_fixed, train_controller
    except ModuleNotFoundError as exc:  # stable-baselines3 / torch missing
        typer.echo(f"error: {exc}; install the rl extra: pip install 'searchenv[rl]'", err=True)
        raise typer.Exit(2) from None
    if out is not None:  # before training: nothing is written through a link under --out
        from agents.sb3.controller import SAVED_FILES
        from searchenv.utils.files import refuse_link

        try:
            for name in (*SAVED_FILES, "eval.json"):
                refuse_link(out / name)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    try:
        config = ControllerConfig(
            task=task,
            corpus=corpus,
            retriever=retriever,
            search_cost=search_cost,
            total_timesteps=timesteps,
            n_envs=n_envs,
            n_steps=n_steps,
            batch_size=batch_size,
            ent_coef=ent_coef,
            learning_rate=learning_rate,
            encoder=encoder,
            embed_dim=embed_dim,
            reduction=reduction,
            max_turns=max_turns,
            top_k=top_k,
            train_split=train_split,
            eval_split=eval_split,
            seed=seed,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"training PPO on {task} ({train_split}), search cost {search_cost}, {timesteps} steps ...", err=True)
    controller = train_controller(config, verbose=verbose)
    report = compare_with_fixed(controller, limit=eval_limit)
    _print_table(report)
    if out is not None:
        from searchenv.corpus import atomic_write_lines

        controller.save(out)
        atomic_write_lines(out / "eval.json", json.dumps(report, indent=2).splitlines())
        typer.echo(f"saved controller and eval.json to {out}", err=True)


def _print_table(report: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    split, cost = report["split"], report["search_cost"]
    table = Table(title=f"held-out split {split!s}, search cost {cost}")
    for col in ("policy", "mean reward ± 95% CI", "accuracy (EM)", "searches", "ppo − policy (paired 95% CI)"):
        table.add_column(col)
    vs = report["vs_fixed"]
    policies = report["policies"]
    if not isinstance(vs, dict) or not isinstance(policies, list):
        raise TypeError("malformed report")
    for p in policies:
        d = vs.get(p["policy"])
        diff = "" if d is None else f"{d['mean']:+.3f} ± {d['ci95']:.3f}" + (" ✓" if d["beats"] else "")
        table.add_row(
            p["policy"],
            f"{p['mean_reward']:.3f} ± {p['reward_ci95']:.3f}",
            f"{p['accuracy']:.3f}",
            f"{p['mean_searches']:.2f}",
            diff,
        )
    Console().print(table)


def register_train(train_app: typer.Typer) -> None:
    """Add ``sb3-ppo`` to the ``searchenv train`` group."""
    train_app.command("sb3-ppo")(sb3_ppo)
