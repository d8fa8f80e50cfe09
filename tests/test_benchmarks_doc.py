"""docs/reference/benchmarks.md shows the card ``searchenv bench`` prints for the command as written; the README names
it."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchenv.cli import get_app

ROOT = Path(__file__).resolve().parents[1]
SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle", r"\*\*average\*\*")
_ROW = re.compile(rf"^\| (?:{'|'.join(SETS)}) \|.*\|$", re.M)


def _rows(text: str) -> list[str]:
    return _ROW.findall(text)


def test_the_docs_card_is_what_the_command_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (ROOT / "docs" / "reference" / "benchmarks.md").read_text(encoding="utf-8")
    [command] = re.findall(r"```bash\n(searchenv bench .*?)\n```", doc, re.S)
    shutil.copytree(ROOT / "tests" / "fixtures" / "bench", tmp_path / "tests" / "fixtures" / "bench")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(get_app(), shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    printed = _rows(result.stdout)
    assert len(printed) == 8 and _rows(doc) == printed
    assert _rows((tmp_path / "runs" / "bench-fixtures" / "card.md").read_text()) == printed
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert command in readme
    for line in ("| corpus_fingerprint |", "| index_hash |", "published, not measured here"):
        assert line in doc.lower() or line in doc
