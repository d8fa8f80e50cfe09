"""benchmarks/gpu/run.sh's prepared sequence for a lent GPU, smoke-tested on the CPU at toy size.

The `mixed` (the mixed-task SFT against the heuristic on every task) and `claims` (the papers' claims over
seeds) steps run through the script as a GPU call would run them, with ``DEVICE=cpu QUICK=1`` and a tiny
model folder as the start, so that a lease spends its minutes on measurements rather than on a broken script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_gpu_sequence_runs_the_mixed_task_and_claims_steps(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.tiny_model import tiny_model_folder

    folder = tiny_model_folder(tmp_path / "tiny")
    out = tmp_path / "out"
    results = ROOT / "benchmarks" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    env = {**os.environ, "DEVICE": "cpu", "QUICK": "1", "SKIP_INSTALL": "1", "OUT": str(out), "WHAT": "mixed claims",
           "PY": sys.executable, "START": str(folder), "RUNS_ROOT": str(tmp_path / "runs"),
           "STAGE": str(tmp_path / "stage")}
    done = subprocess.run(["bash", "benchmarks/gpu/run.sh", "main"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "failed: exit" not in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    mixed = json.loads((out / "cpu_mixed_smoke.json").read_text(encoding="utf-8"))
    assert [r["task"] for r in mixed["tasks"]] == ["synthetic-1hop", "synthetic-2hop", "synthetic-3hop",
                                                   "synthetic-4hop", "synthetic-comparison", "synthetic-mixed"]
    assert all(r["difference"]["n"] == 2 for r in mixed["tasks"])
    assert mixed["training"]["steps"] == 1
    claims = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    rows = claims["claims"]["r3rag-process"]["comparisons"]
    assert [r["metric"] for r in rows] == ["em", "train_em"] and all(r["seeds"] == 2 for r in rows)
    assert "| r3rag-process | R3-RAG | process vs outcome: em (higher) |" in (out / "claims_smoke.md").read_text()
    with tarfile.open(out / "claims_runs.tar") as tar:
        assert len([n for n in tar.getnames() if n.endswith("-s0.json") or n.endswith("-s1.json")]) == 4
    assert (out / "load.txt").read_text().count("load average") == 2
    # nothing of the smoke run lands in the committed results
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before
