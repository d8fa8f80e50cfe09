"""docs/guides/extending.md: every section has a Python example, and each runs as written with its asserts holding.

Each ``python`` block starts with a ``# FILE.py`` line: the file a user saves it as. The blocks of a
section are saved under those names in one scratch folder and run there in order with
``python FILE.py``, as the page says to run them.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guides" / "extending.md"
TOPICS = ("A reward term", "A retriever kind", "An action protocol", "A task format", "An agent")


def sections() -> dict[str, list[str]]:
    """Each ``## `` section's title -> its ``python`` blocks, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    for part in re.split(r"(?m)^## ", text)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = re.findall(r"```python\n(.*?)```", body, re.S)
    return out


SECTIONS = sections()


def file_name(block: str) -> str:
    """The file a block is saved as, from its first line ``# FILE.py``.

    Raises:
        ValueError: If the first line names no Python file.
    """
    first = block.splitlines()[0] if block.strip() else ""
    match = re.fullmatch(r"# (\w+\.py)", first.strip())
    if match is None:
        raise ValueError(f"docs/guides/extending.md: a python block starts {first!r}, not '# FILE.py'")
    return match.group(1)


def test_every_section_has_a_python_block() -> None:
    assert SECTIONS, "docs/guides/extending.md has no ## sections"
    empty = [title for title, blocks in SECTIONS.items() if not blocks]
    assert not empty, f"sections of docs/guides/extending.md without a python block: {empty}"


def test_the_page_covers_the_five_extensions() -> None:
    assert set(TOPICS) <= set(SECTIONS), sorted(set(TOPICS) - set(SECTIONS))


@pytest.mark.parametrize("title", list(SECTIONS))
def test_each_block_names_its_file_and_asserts_what_it_claims(title: str) -> None:
    for block in SECTIONS[title]:
        file_name(block)
        tree = ast.parse(block)
        assert any(isinstance(node, ast.Assert) for node in ast.walk(tree)), f"{title}: a block asserts nothing"


@pytest.mark.parametrize("title", list(SECTIONS))
def test_each_example_runs_as_written(title: str, tmp_path: Path) -> None:
    blocks = SECTIONS[title]
    for block in blocks:
        (tmp_path / file_name(block)).write_text(block, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONOPTIMIZE"}  # keep asserts live
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env["SEARCHENV_CACHE"] = str(tmp_path / "cache")  # a built task or index stays in the scratch folder
    for block in blocks:
        ran = subprocess.run([sys.executable, file_name(block)], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
        assert ran.returncode == 0, f"{title}: {file_name(block)} failed:\n{ran.stderr[-3000:]}"
