"""``searchenv report RUN_DIR``: one self-contained HTML page of a run (results, episodes, learning curves).

Example::

    searchenv eval --agent oracle --agent heuristic --task synthetic-2hop --n 50 --out runs/ev
    searchenv report runs/ev        # -> runs/ev/report.html, opens in any browser, offline
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer


def curves_png(run_dir: Path) -> bytes | None:
    """The learning curves of the training run(s) in ``run_dir`` as PNG bytes, or None when it has none.

    Seeds of one arm (sub-folders ``NAME-seed0``, ``NAME-seed1``, ...) are drawn as a band
    (:func:`agents.trainers.plot.plot_runs`).

    Raises:
        ReportError: Naming the file and line, for a ``metrics.jsonl`` line that is not JSON.
    """
    from agents.evaluation.report import training_dirs

    dirs, labels = training_dirs(run_dir)
    if not dirs:
        return None
    from agents.evaluation.report import METRICS_NAME, ReportError
    from searchenv.utils.jsonsafe import iter_jsonl

    for folder in dirs:  # a line that is not JSON is named (file and line), not drawn around
        try:
            for _ in iter_jsonl(folder / METRICS_NAME):
                pass
        except ValueError as exc:
            raise ReportError(str(exc)) from None
    if importlib.util.find_spec("matplotlib") is None:  # it comes with the rl extra
        if (run_dir / "results.json").exists():
            return None  # the page goes without curves
        raise ReportError(f"{run_dir} holds a training run; drawing its learning curves needs matplotlib "
                          "(pip install 'searchenv[rl]')")
    from agents.trainers.plot import plot_runs

    fd, tmp = tempfile.mkstemp(prefix=".report-curves.", suffix=".png")
    os.close(fd)
    try:
        plot_runs(dirs, tmp, labels=labels)
        return Path(tmp).read_bytes()
    except ValueError:  # metrics without a plottable series: the page goes without curves
        return None
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_page(run_dir: Path, out: Path | None, err: Any) -> Path:
    """Write the report page of ``run_dir``; on a bad run folder print the reason and exit with code 2.

    Raises:
        typer.Exit: With code 2, the reason (file, line, field) printed, for a folder the page cannot be built from.
    """
    from agents.evaluation.report import ReportError, write_report

    try:
        curves = curves_png(run_dir) if run_dir.is_dir() else None
        return write_report(run_dir, out, curves_png=curves)
    except (ReportError, OSError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder: searchenv eval --out, or a training run's folder.")],
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="HTML file to write (default RUN_DIR/report.html).")] = None,
) -> None:
    """Write one self-contained HTML page of a run: results table, episodes as conversations, learning curves.

    The page loads nothing from the network. Exit status: 0 written; 2 a run folder the page cannot be built
    from (the file, line and field named).
    """
    from rich.console import Console

    err = Console(stderr=True)
    path = write_page(run_dir, out, err)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add ``report`` to the ``searchenv`` app."""
    app.command("report")(report_command)
