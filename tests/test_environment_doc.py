"""docs/guides/environment.md's first learning loop runs as written and learns what it says it learns."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "guides" / "environment.md"


def test_the_first_learning_loop_runs_as_written() -> None:
    section = DOC.read_text(encoding="utf-8").split("## Your first learning loop\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "the section has no python block"
    printed = re.search(r"print\(best\)\s+#\s*(.+)", block.group(1))
    assert printed is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), str(DOC), "exec"), {"__name__": "__doc_block__"})  # noqa: S102
    assert out.getvalue().strip() == printed.group(1).strip()
