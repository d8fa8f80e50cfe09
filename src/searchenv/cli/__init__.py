"""The ``searchenv`` command.

Commands live in small modules beside this one, each with a ``register(app)``
function. Packages built on searchenv (``agents`` adds ``eval``, ``train``,
``plot``) add commands through the ``searchenv.commands`` entry-point group, so
searchenv never imports them directly.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    name="searchenv",
    help="Search-and-reason environments for language-model agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules of this package that define commands; each has register(app).
_BUILTIN = (
    "searchenv.cli.index_cmds",
    "searchenv.cli.play_cmd",
    "searchenv.cli.tasks_cmds",
    "searchenv.cli.serve_cmds",
    "searchenv.cli.openenv_cmd",
    "searchenv.cli.mcp_cmd",
)
_registered = False


def _register_all() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    for mod_name in _BUILTIN:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name == mod_name:  # not written yet
                continue
            raise
        mod.register(app)
    for ep in entry_points(group="searchenv.commands"):
        ep.load()(app)


def main() -> None:
    """Run the command line."""
    _register_all()
    app()


def get_app() -> typer.Typer:
    """Return the app with every command registered (for tests with ``typer.testing``)."""
    _register_all()
    return app


def check_task_file(task: str, flag: str = "--task", exit_code: int = 2) -> bool:
    """Whether ``task`` names a QA file (:func:`searchenv.tasks.looks_like_file`); exit if it is missing.

    A missing file is reported as ``error: --task PATH: file not found`` (a mistyped
    ``my/qa.jsnl`` is not an unknown task name).

    Raises:
        typer.Exit: With ``exit_code`` when ``task`` looks like a file that does not exist.
    """
    from searchenv.tasks.qa_files import looks_like_file

    if not looks_like_file(task):
        return False
    if not Path(task).is_file():
        typer.echo(f"error: {flag} {task}: file not found", err=True)
        raise typer.Exit(code=exit_code)
    return True


@contextlib.contextmanager
def data_warnings_to_stderr() -> Iterator[None]:
    """Print each :class:`~searchenv.corpus.DataWarning` once, as ``warning: MESSAGE`` on stderr.

    Other warnings are shown as Python shows them.
    """
    from searchenv.corpus import DataWarning

    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always", DataWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            if not issubclass(category, DataWarning):
                shown(message, category, filename, lineno, file, line)
                return
            text = str(message)
            if text not in seen:
                seen.add(text)
                typer.echo(f"warning: {text}", err=True)

        warnings.showwarning = show
        yield
