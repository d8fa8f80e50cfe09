"""The house rules of the source tree: no import cycles, no file over 800 lines, folders not flat drawers.

Imports are read from the source (``ast``), lazy imports inside functions and ``TYPE_CHECKING``
blocks included: a cycle through a lazy import still ties two modules together. ``from a import b``
counts as an import of ``a.b`` when that is a module, else of ``a``.
"""

from __future__ import annotations

import ast
import re
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


def _folder_cycles(package: str) -> list[list[str]]:
    """Cycles between the folders (and top-level modules) of ``package``, lazy imports included.

    A module's folder is its first name under the package (``searchenv.retrievers.bm25`` is in
    ``retrievers``, ``searchenv.refiners`` is its own). Two folders that import each other are one
    concern split in two, even when neither module imports the other, and even when the import that
    closes the loop sits inside a function. Imports of the package's own ``__init__`` (the public API,
    at the top) are left out. Returns each strongly connected set of more than one folder, sorted.
    """
    mods = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        if name == package:
            continue
        mine = name.split(".")[1]
        graph.setdefault(mine, set())
        graph[mine] |= {t.split(".")[1] for t in _imports(name, path, mods) if t.startswith(package + ".")} - {mine}

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for w in graph.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    reached = {v: reach(v) for v in graph}
    comps = {tuple(sorted(w for w in graph if w in reached[v] and v in reached[w])) for v in graph if v in reached[v]}
    return sorted(list(c) for c in comps)


def test_the_folder_cycle_finder_finds_a_cycle_closed_by_a_lazy_import(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """No module imports itself back, but one folder does, through an import inside a function."""
    pkg = tmp_path / "toy"
    for folder in ("sub", "other"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from toy.other import b\n")
    (pkg / "sub" / "c.py").write_text("X = 1\n")
    (pkg / "other" / "b.py").write_text("def f():\n    from toy.sub.c import X\n    return X\n")
    (pkg / "leaf.py").write_text("from toy.sub import a\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert _cycles("toy") == []
    assert _folder_cycles("toy") == [["other", "sub"]]
    (pkg / "other" / "b.py").write_text("X = 2\n")
    assert _folder_cycles("toy") == []


@pytest.mark.parametrize("package", ["searchenv", "agents"])
def test_no_import_cycles_between_folders(package: str) -> None:
    """The folders of a package use each other without a cycle, counting imports inside functions."""
    assert _folder_cycles(package) == []


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


# ---- layers: imports point down only ---------------------------------------------------------------

#: Each package's layers, top first (docs/reference/architecture.md): a module may import its own layer and those below.
#: Within the parts layer the folders use each other (without a cycle, which the cycle test holds).
LAYERS: dict[str, list[set[str]]] = {
    "searchenv": [
        {"cli", "serving", "integrations", "multi_agent"},
        {"env", "vector", "make", "idle_envs"},
        {"protocols", "rewards", "retrievers", "tasks", "refiners", "retrieval_quality"},
        {"spaces", "actions", "metrics", "corpus", "encoders", "utils", "step_info", "client_view", "info", "errors"},
    ],
    "agents": [
        {"cli", "integrations"},
        {"trainers", "evaluation", "sb3"},
        {"rollout", "baselines", "policies", "data"},
        {"devices"},
    ],
}


def _layer(package: str, module: str) -> int:
    """The layer index of ``module``'s folder (0 is the top); the package's own ``__init__`` is the top.

    A layer names folders and top-level modules only: a module that does not fit its folder's layer
    moves, it is not carved out.
    """
    rest = module.removeprefix(package).lstrip(".")
    if not rest:
        return 0
    for i, layer in enumerate(LAYERS[package]):
        if rest.split(".")[0] in layer:
            return i
    raise AssertionError(f"{module} is in no layer of {package}: add it to LAYERS and docs/reference/architecture.md")


def test_layers_name_folders_not_modules_inside_them() -> None:
    assert [name for layers in LAYERS.values() for layer in layers for name in layer if "." in name] == []


def _with_packages(imported: set[str], known: dict[str, Path]) -> set[str]:
    """``imported`` plus every package whose ``__init__`` importing them runs (``a.b.c`` runs ``a`` and ``a.b``)."""
    out = set(imported)
    for name in imported:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in known)
    return out


@pytest.mark.parametrize("package", ["searchenv", "agents"])
def test_imports_point_down_the_layers(package: str) -> None:
    mods = _modules(package)
    upward = []
    for name, path in mods.items():
        if name == package:
            continue
        mine = _layer(package, name)
        for target in _imports(name, path, mods):
            if target.startswith(package + ".") and _layer(package, target) < mine:
                upward.append(f"{name} -> {target}")
    assert upward == []


@pytest.mark.parametrize("package", ["searchenv", "agents"])
def test_no_import_cycles_through_package_inits(package: str) -> None:
    """Importing ``a.b.c`` runs ``a.b``'s ``__init__``: a cycle through it is a cycle."""
    mods = _modules(package)
    graph = {m: _with_packages(_imports(m, p, mods), mods) - {m} for m, p in mods.items()}
    seen: dict[str, int] = {}
    cycles: list[str] = []

    def visit(v: str, path: list[str]) -> None:
        seen[v] = 1
        for w in sorted(graph[v]):
            if w == package or v.startswith(w + "."):
                continue  # a module's own parent packages are imported before it, not by it
            if seen.get(w) == 1:
                cycles.append(" -> ".join([*path[path.index(w):], w]))
            elif w not in seen:
                visit(w, [*path, w])
        seen[v] = 2

    for v in sorted(graph):
        if v not in seen:
            visit(v, [v])
    assert cycles == []


def test_nothing_in_searchenv_imports_agents() -> None:
    mods = {**_modules("searchenv"), **_modules("agents")}
    found = [f"{n} -> {t}" for n, p in _modules("searchenv").items() for t in _imports(n, p, mods)
             if t == "agents" or t.startswith("agents.")]
    assert found == []


def test_docs_architecture_names_every_module() -> None:
    """Each module's name appears in docs/reference/architecture.md's layout (a newcomer finds every file there)."""
    text = (SRC.parent / "docs" / "reference" / "architecture.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    missing = [str(p.relative_to(SRC)) for package in ("searchenv", "agents") for p in _modules(package).values()
               if p.name != "__init__.py" and p.stem not in layout]
    assert missing == []


def test_docs_pages_are_short_indexed_and_the_readme_a_front_door() -> None:
    """Every docs page at most 20 KB and listed in docs/README.md; the README at most 15 KB."""
    docs = SRC.parent / "docs"
    pages = sorted(p for p in docs.rglob("*.md") if p.name != "README.md")
    big = {str(p.relative_to(docs)): p.stat().st_size for p in pages if p.stat().st_size > 20_000}
    assert big == {}
    index = (docs / "README.md").read_text(encoding="utf-8")
    assert [str(p.relative_to(docs)) for p in pages if f"({p.relative_to(docs)})" not in index] == []
    assert (SRC.parent / "README.md").stat().st_size <= 15_000


#: The kinds of docs page, each a folder of docs/.
DOC_KINDS = ("guides", "reference", "serving", "engines", "results")


def test_docs_pages_live_in_their_kind_folder_with_one_naming_style() -> None:
    """Every page but the index sits in a kind's folder, and page names use ``-``, never ``_``."""
    docs = SRC.parent / "docs"
    pages = sorted(p.relative_to(docs) for p in docs.rglob("*.md") if p != docs / "README.md")
    assert [str(p) for p in pages if p.parts[0] not in DOC_KINDS] == []
    assert [str(p) for p in pages if "_" in p.stem] == []
    assert all((docs / kind).is_dir() for kind in DOC_KINDS)


#: Mentions of an issue that stay: a command quoted exactly as it was run (its label is in the results file).
_HISTORY_KEPT = {("docs/reference/security-servers.md", "before issue 42")}


def test_change_history_lives_in_the_changelog() -> None:
    """The source, docs and README say how things are; what changed, and for which issue, is in CHANGELOG.md."""
    root = SRC.parent
    pattern = re.compile(r"(?:before |after |for |in |\()?\bissues? #?\d+", re.IGNORECASE)
    files = [*SRC.rglob("*.py"), *(root / "docs").rglob("*.md"), *(root / "benchmarks").glob("*.py"),
             root / "README.md"]
    found = []
    for path in files:
        rel = str(path.relative_to(root))
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if any(rel == f and kept in line for f, kept in _HISTORY_KEPT):
                continue
            found += [f"{rel}:{lineno}: {m.group(0)}" for m in pattern.finditer(line)]
    assert (root / "CHANGELOG.md").is_file()
    assert found == []
