"""The house rules of the source tree: no import cycles, no file over 800 lines, folders not flat drawers.

Imports are read from the source (``ast``), lazy imports inside functions and ``TYPE_CHECKING``
blocks included: a cycle through a lazy import still ties two modules together. ``from a import b``
counts as an import of ``a.b`` when that is a module, else of ``a``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 800


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    out: dict[str, Path] = {}
    for path in sorted((SRC / package).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # import a.b.c of a non-module attribute: the nearest module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _cycles(package: str) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    mods = _modules(package)
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("import toy.a\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert _cycles("toy") == [["toy.a", "toy.sub.b"]]


@pytest.mark.parametrize("package", ["searchenv", "agents"])
def test_no_import_cycles(package: str) -> None:
    assert _cycles(package) == []


@pytest.mark.parametrize("package", ["searchenv", "agents"])
def test_no_source_file_over_800_lines(package: str) -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in _modules(package).values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_agents_has_folders_not_flat_modules() -> None:
    top = sorted(p.name for p in (SRC / "agents").glob("*.py"))
    assert top == ["__init__.py", "devices.py"]
