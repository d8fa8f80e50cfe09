"""docs/guides/your-data.md runs as written: its ``bash`` blocks, in order, in a folder holding docs/examples/."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "guides" / "your-data.md"
PORTS = (8765, 8766)  # the doc's retrieval and model servers


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_doc_has_every_step() -> None:
    script = "\n".join(_blocks())
    for command in ("searchenv convert", "searchenv index", "searchenv eval-retrieval", "searchenv eval --agent",
                    "searchenv serve", "transformers serve", "--model-url", "searchenv split", "searchenv train sft",
                    "--model my/sft"):
        assert command in script, command


_METRIC_ROW = re.compile(r"(recall|all-evidence|answer-in-docs|chars-read)((?:\s+[\d.]+)+)")


def _metric_rows(text: str) -> list[tuple[str, ...]]:
    """Each metric row of a recall table (the doc's, or the command's with its box drawn) as (metric, values...)."""
    rows = []
    for line in text.replace("\u2502", " ").splitlines():
        m = _METRIC_ROW.search(line)
        if m:
            rows.append((m.group(1), *m.group(2).split()))
    return rows


def test_the_recall_table_is_what_eval_retrieval_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1's commands run in process; the doc's table shows every row the command prints, with its numbers."""
    import shlex

    from typer.testing import CliRunner

    from searchenv.cli import get_app

    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    monkeypatch.chdir(tmp_path)
    block = _blocks()[0].replace("\\\n", " ")
    printed = ""
    for line in block.splitlines():
        argv = shlex.split(line)
        assert argv[0] == "searchenv", line
        res = CliRunner().invoke(get_app(), argv[1:], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        printed = res.stdout
    doc = DOC.read_text(encoding="utf-8")
    shown = doc[doc.index("```text", doc.index("searchenv eval-retrieval")):]
    shown = shown[: shown.index("```", 7)]
    assert _metric_rows(shown) == _metric_rows(printed), printed


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow(minutes=2)
def test_your_data_walkthrough_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("openai")  # transformers serve needs it (the dev extra installs it)
    if shutil.which("curl") is None:
        pytest.skip("the doc waits for its servers with curl")
    busy = [p for p in PORTS if not _port_free(p)]
    if busy:
        pytest.skip(f"port(s) {busy} in use; the doc's servers listen there")
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    script = tmp_path / "walkthrough.sh"
    script.write_text("set -euo pipefail\n" + "\n".join(_blocks()), encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # any server the script left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out[-4000:]
    my = tmp_path / "my"
    qa = [json.loads(line) for line in (my / "qa.jsonl").read_text().splitlines()]
    assert len(qa) == 8 and all(len(q["metadata"]["evidence_ids"]) == 2 for q in qa)  # two supporting titles each
    rows = {r["agent"]: r for r in json.loads((my / "eval" / "results.json").read_text())["rows"]}
    # the numbers the doc quotes: the oracle looks up both supporting titles and finds both, every question
    assert (rows["oracle"]["em"], rows["oracle"]["evidence_recall"], rows["oracle"]["searches"]) == (1.0, 1.0, 2.0)
    assert rows["heuristic"]["em"] == 0.25 and rows["rag"]["em"] == 0.0
    oracle = [json.loads(line) for line in (my / "eval" / rows["oracle"]["transcripts"]).read_text().splitlines()]
    for question, episode in zip(qa, oracle, strict=True):
        searched = [m["content"] for m in episode["messages"] if m["role"] == "assistant"][:2]
        titles = question["metadata"]["evidence_titles"]
        assert all(f"<search> {t} </search>" in turn for t, turn in zip(titles, searched, strict=True)), searched
        assert episode["metrics"]["evidence_recall"] == 1.0
    [chat] = json.loads((my / "eval-chat" / "results.json").read_text())["rows"]
    assert chat["config"]["model_usage"]["requests"] == 4
    assert (my / "sft" / "checkpoint.pt").is_file()
    assert "4 requests" in out and "loading model my/sft" in out
    train = (my / "train.jsonl").read_text().splitlines()
    dev = (my / "dev.jsonl").read_text().splitlines()
    assert (len(train), len(dev)) == (6, 2)
    assert not {json.loads(x)["id"] for x in train} & {json.loads(x)["id"] for x in dev}
    sft = [json.loads(line) for line in (my / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert sft[-1]["demos_kept"] == 6.0 and sft[-1]["lr"] == 5e-4  # every demonstration kept; LoRA's own rate
    assert "SFT keeps" not in out and "not in index" not in out  # no DataWarning on the doc's own data
