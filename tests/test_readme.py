"""Every Python snippet of the README runs as written and prints what its comments say it prints."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def expected_output(block: str) -> list[str]:
    """The comment after each top-level ``print(...)`` statement, in order."""
    lines = block.splitlines()
    out = []
    for node in ast.parse(block).body:
        call = getattr(node, "value", None)
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "print":
            last = lines[(node.end_lineno or node.lineno) - 1]
            comment = re.search(r"\)\s+# (.*)$", last)
            if comment is None:
                raise ValueError(f"README: print on line {node.lineno} of its block says nothing of its output")
            out.append(comment.group(1).strip())
    return out


def test_the_readme_has_python_snippets_that_say_what_they_print() -> None:
    assert BLOCKS and all(expected_output(b) for b in BLOCKS)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_readme_snippet_prints_what_it_says(index: int, tmp_path: Path) -> None:
    block = BLOCKS[index]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    ran = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == expected_output(block)
