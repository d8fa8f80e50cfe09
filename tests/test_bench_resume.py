"""``searchenv bench`` killed with SIGKILL half-way through a suite continues where it stopped.

The model is the stand-in chat server of ``test_eval_resume`` (it answers from the retrieved
documents, deterministically), so a resumed run can be compared with an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from searchenv.corpus import write_corpus
from searchenv.tasks import write_qa_jsonl

pytest.importorskip("httpcore")

from tests.test_eval_resume import DOCS, QUESTIONS, StandIn, stand_in  # noqa: E402, F401


def _data(tmp_path: Path) -> Path:
    """The eight questions as two sets of the search-r1 layout (nq: four, triviaqa: four) and the corpus."""
    data = tmp_path / "data"
    write_qa_jsonl(data / "nq" / "test.jsonl", QUESTIONS[:4])
    write_qa_jsonl(data / "triviaqa" / "test.jsonl", QUESTIONS[4:])
    write_corpus(data / "wiki-18.jsonl", DOCS)
    return data


def _cmd(url: str, data: Path, out: Path) -> list[str]:
    return [sys.executable, "-c", "from searchenv.cli import main; main()", "bench", "search-r1", "--data", str(data),
            "--set", "nq", "--set", "triviaqa", "--agent", "rag", "--model-url", url, "--served-model", "m",
            "--api", "chat", "--top-k", "1", "--batch-size", "2", "--concurrency", "2", "--out", str(out),
            "--index-root", str(out.parent / "idx")]


def _card(out: Path) -> dict[str, Any]:
    card = json.loads((out / "card.json").read_text())
    return {"sets": card["sets"], "average": card["average"], "settings": card["settings"]}


@pytest.mark.slow
def test_a_bench_killed_half_way_continues_from_its_saved_episodes(
    stand_in: tuple[str, type[StandIn]], tmp_path: Path  # noqa: F811 - the imported fixture
) -> None:
    url, handler = stand_in
    data = _data(tmp_path)
    whole = subprocess.run(_cmd(url, data, tmp_path / "whole"), capture_output=True, text=True, timeout=120,
                           env=os.environ.copy())
    assert whole.returncode == 0, whole.stderr
    assert len(handler.questions) == 8 and "8/8" in whole.stderr  # the progress bar's last state

    # Killed while triviaqa's second batch waits on the server: nq and triviaqa's first batch are saved.
    handler.questions.clear()
    handler.open_for = 6
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(url, data, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=os.environ.copy())
    deadline = time.monotonic() + 60
    while len(handler.questions) < 8:  # the last batch's requests are in, waiting at the gate
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended early"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not (out / "card.json").exists()
    [saved] = list((out / "checkpoints" / "triviaqa").glob("*.jsonl"))
    assert len(saved.read_text().splitlines()) == 1 + 2  # settings + the first batch
    handler.gate.set()
    handler.questions.clear()

    again = subprocess.run(_cmd(url, data, out), capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert again.returncode == 0, again.stderr
    assert sorted(handler.questions) == [q.question for q in QUESTIONS[6:]]  # only the rest was asked
    assert "resuming" in again.stderr
    assert _card(out) == _card(tmp_path / "whole")  # the numbers and settings of an uninterrupted run
    assert _card(out)["average"]["em"] == 1.0
    assert not list((out / "checkpoints").rglob("*.jsonl"))
