"""One module, ``searchenv.errors``, holds every public error of ``searchenv`` and ``agents``; old paths still work."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

import searchenv.errors as errors

SRC = Path(__file__).resolve().parents[1] / "src"
_BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                       if isinstance(value, type) and issubclass(value, BaseException)}


def _base_name(node: ast.expr) -> str:
    """``ValueError`` for ``ValueError``, ``HTTPError`` for ``httpx.HTTPError``, else ``""``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _public_exceptions_defined() -> dict[str, str]:
    """Public class name -> the file defining it, for every exception class (any depth) in src/searchenv and src/agents.

    Read from the source, so no optional dependency is needed: a class is an exception when a base is
    a built-in exception, another class found here, or a name ending in Error, Exception or Warning.
    """
    classes: list[tuple[str, list[str], str]] = []
    for package in ("searchenv", "agents"):
        for path in sorted((SRC / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.ClassDef):
                    classes.append((node.name, [_base_name(b) for b in node.bases], str(path.relative_to(SRC))))
    known = set(_BUILTIN_EXCEPTIONS)
    grew = True
    while grew:
        grew = False
        for name, bases, _ in classes:
            if name not in known and any(b in known or b.endswith(("Error", "Exception", "Warning")) for b in bases):
                known.add(name)
                grew = True
    return {name: where for name, _, where in classes if name in known and not name.startswith("_")}


def test_every_name_in_errors_is_an_exception_class_defined_there() -> None:
    assert errors.__all__ == sorted(errors.__all__)
    for name in errors.__all__:
        value = getattr(errors, name)
        assert isinstance(value, type) and issubclass(value, Exception), name
        assert value.__module__ == "searchenv.errors", name


def test_every_public_exception_in_the_source_is_defined_in_errors_and_exported() -> None:
    found = _public_exceptions_defined()
    assert {name: where for name, where in found.items() if where != "searchenv/errors.py"} == {}
    assert sorted(found) == sorted(errors.__all__)


@pytest.mark.parametrize(("module", "name"), [
    ("searchenv.retrievers.base", "RetrieverError"),
    ("searchenv.retrievers", "RetrieverError"),
    ("searchenv.retrievers.index.metadata", "StaleIndexError"),
    ("searchenv.retrievers.index.metadata", "IndexIntegrityError"),
    ("searchenv.retrievers", "IndexIntegrityError"),
    ("searchenv.corpus", "CorpusFormatError"),
    ("searchenv.corpus", "DataWarning"),
    ("searchenv.utils.jsonsafe", "JSONInputError"),
    ("searchenv", "RetrieverError"),
    ("agents.evaluation.report", "ReportError"),
    ("agents.evaluation.bench", "BenchDataError"),
    ("agents.baselines.searcher", "SearcherNotFoundError"),
    ("agents.policies.base", "GenerationError"),
    ("agents.policies.openai_compat", "ModelServerError"),
    ("agents.policies.openai_compat", "ModelRequestsError"),
    ("agents.trainers.checkpoints", "CheckpointError"),
])
def test_the_old_import_paths_give_the_same_classes(module: str, name: str) -> None:
    if module.startswith("agents.") and importlib.util.find_spec("torch") is None:
        pytest.skip("agents needs torch")
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_errors_keep_their_families_and_messages() -> None:
    assert issubclass(errors.StaleIndexError, errors.RetrieverError)
    assert issubclass(errors.ModelRequestsError, errors.ModelServerError)
    assert issubclass(errors.ModelRequestsError, errors.GenerationError)
    failed = errors.ModelRequestsError("1 of 2 failed", ["kept", None], [None, "timeout"])
    assert failed.results == ["kept", None] and failed.errors == [None, "timeout"] and failed.http_status is None
    assert issubclass(errors.BadTaskRequest, ValueError)
    assert str(errors.BadTaskRequest("no split 'x'")) == "no split 'x'"
    unknown = errors.UnknownNameError("unknown agent 'x'; known: a, b")
    assert isinstance(unknown, KeyError) and isinstance(unknown, ValueError)
    assert str(unknown) == "unknown agent 'x'; known: a, b"  # not KeyError's quoted repr
