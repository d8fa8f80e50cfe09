"""benchmarks/claims.py: the statistics over seeds, the verdict rule, and a toy-size sweep run as documented."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seeds = _module("_seeds")


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert seeds.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert seeds.iqm([0.2, 0.9, 0.5, 0.4, 0.6]) == pytest.approx(0.5)  # five seeds: one trimmed at each end
    lo, hi = seeds.iqm_interval([0.2, 0.9, 0.5, 0.4, 0.6])
    assert 0.2 <= lo < 0.5 < hi <= 0.9


def test_probability_of_improvement_counts_ties_as_half() -> None:
    # pairs: 2>1, 2<3, 3>1, 3=3 -> (1 + 0 + 1 + 0.5) / 4
    assert seeds.probability_of_improvement([2, 3], [1, 3]) == pytest.approx(0.625)
    assert seeds.improvement_interval([5, 6, 7], [1, 2, 3]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="at least one run"):
        seeds.probability_of_improvement([], [1])


def test_seeds_needed_follows_the_power_formula() -> None:
    # d = 0.05, variances 0.005 and 0 -> s^2 = 0.0025 -> 2 * (1.96 + 0.84)^2 * 0.0025 / 0.0025 = 15.7
    assert seeds.seeds_needed([0.5, 0.6], [0.5, 0.5]) == 16
    assert seeds.seeds_needed([0.5, 0.5], [0.5, 0.5]) is None


@pytest.mark.parametrize(
    ("direction", "a", "b", "questions", "expected"),
    [
        ("higher", [0.60, 0.62, 0.65, 0.61, 0.63], [0.40, 0.42, 0.41, 0.43, 0.39], (0.10, 0.30), "held"),
        ("higher", [0.40, 0.42, 0.41, 0.43, 0.39], [0.60, 0.62, 0.65, 0.61, 0.63], (-0.30, -0.10), "refuted"),
        ("higher", [0.50, 0.55, 0.45, 0.52, 0.48], [0.49, 0.51, 0.50, 0.47, 0.53], (-0.05, 0.06), "unresolved"),
        # a strong seed difference the questions do not bear out stays unresolved
        ("higher", [0.60, 0.62, 0.65, 0.61, 0.63], [0.40, 0.42, 0.41, 0.43, 0.39], (-0.01, 0.30), "unresolved"),
        ("lower", [1.0, 1.1, 1.2, 1.0, 1.1], [2.0, 2.1, 1.9, 2.0, 2.2], (-1.1, -0.9), "held"),
        ("equal", [0.50, 0.51, 0.49, 0.50, 0.50], [0.50, 0.50, 0.51, 0.49, 0.50], (-0.02, 0.02), "held"),
        ("equal", [0.70, 0.71, 0.69, 0.70, 0.70], [0.50, 0.50, 0.51, 0.49, 0.50], (0.15, 0.25), "refuted"),
        ("equal", [0.50, 0.60, 0.40, 0.55, 0.45], [0.50, 0.50, 0.51, 0.49, 0.50], (-0.08, 0.07), "unresolved"),
    ],
)
def test_verdict_rule(direction: str, a: list[float], b: list[float], questions: tuple[float, float],
                      expected: str) -> None:
    q = {"mean": sum(questions) / 2, "ci_low": questions[0], "ci_high": questions[1]}
    out = seeds.verdict(direction, a, b, q)
    assert out["verdict"] == expected, out
    if expected == "unresolved":
        assert "seeds_needed" in out


def test_verdict_refuses_an_unknown_direction() -> None:
    with pytest.raises(ValueError, match="higher, lower or equal"):
        seeds.verdict("better", [1.0], [0.0], {"mean": 1.0, "ci_low": 1.0, "ci_high": 1.0})


@pytest.mark.slow
def test_a_toy_sweep_runs_reports_and_continues(tmp_path: Path) -> None:
    """The documented command at toy size: two seeds of R3-RAG's arms on a tiny model, the report, a rerun."""
    pytest.importorskip("transformers")
    from tests.tiny_model import tiny_model_folder

    folder = tiny_model_folder(tmp_path / "tiny")
    out, doc, results = tmp_path / "runs", tmp_path / "claims.md", tmp_path / "results"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "claims.py"), "--claim", "r3rag-process", "--seeds", "2",
           "--start", str(folder), "--steps", "1", "--batch", "2", "--group", "2", "--n-dev", "3",
           "--train-layers", "1", "--max-turns", "2", "--max-new-tokens", "6", "--threads", "1",
           "--out", str(out), "--doc", str(doc), "--results", str(results)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-3000:]
    finished = sorted(out.glob("*-s[0-9].json"))
    assert len(finished) == 4  # two arms x two seeds
    text = doc.read_text(encoding="utf-8")
    assert "| r3rag-process | R3-RAG | process vs outcome: em (higher) |" in text
    assert "| r3rag-process | R3-RAG | process vs outcome: train_em (higher) |" in text
    # a claim whose runs are not all finished is listed with the runs and time it still needs; runs with equal
    # settings are shared (its GRPO arm is r3rag-process's outcome arm): PPO's two seeds and the start remain
    assert "| rl-beyond-sft | Search-R1 / ReSearch | | | | | | | not reached: 3 runs still needed, about" in text
    assert "| research-second-hop | ReSearch / Search-R1 | | | | | | | not reached: its start (sft-1hop" in text
    data = json.loads((results / "claims.json").read_text(encoding="utf-8"))
    rows = data["claims"]["r3rag-process"]["comparisons"]
    assert [r["verdict"] in ("held", "refuted", "unresolved") for r in rows] == [True, True]
    assert all(r["seeds"] == 2 and len(r["a_seeds"]) == 2 for r in rows)
    assert (results / "claims_r3rag-process_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in (results / "claims_runs").iterdir()) == sorted(p.name for p in finished)
    stamps = {p: p.stat().st_mtime_ns for p in finished}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in finished} == stamps  # finished runs are not trained again
    assert '"run"' not in again.stdout
    # a claim with a start of its own builds it first (SFT of --base on 1-hop demonstrations), then runs its arms
    own = [*cmd[:2], "--claim", "research-second-hop", "--base", str(folder), "--start-steps", "1",
           "--start-demos", "2", *cmd[cmd.index("--seeds"):]]
    built = subprocess.run(own, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert built.returncode == 0, built.stderr[-3000:]
    rows = json.loads((results / "claims.json").read_text(encoding="utf-8"))["claims"]["research-second-hop"]
    assert [r["seeds"] for r in rows["comparisons"]] == [2]
    assert "Start: sft-1hop from" in doc.read_text(encoding="utf-8")
    # MMOA-RAG: its own warm start on the oracle pipeline's role turns, then MAPPO arms evaluated as the pipeline
    mmoa = [*own[:2], "--claim", "mmoa", *own[own.index("--base"):]]
    mmoa[mmoa.index("--seeds") + 1] = "1"
    ran = subprocess.run(mmoa, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = json.loads((results / "claims.json").read_text(encoding="utf-8"))["claims"]["mmoa"]["comparisons"]
    assert [(r["a"], r["b"], r["seeds"]) for r in rows] == [("joint", f"{role} only", 1)
                                                           for role in ("rewriter", "selector", "generator")]
    assert len(list(out.glob("synthetic-2hop-mappo-*-s0.json"))) == 4
    # the committed copies are enough to report on a machine that never had the run folders
    for p in out.iterdir():
        if p.is_file():
            p.unlink()
    report = subprocess.run([*cmd[:2], "--report", *cmd[cmd.index("--seeds"):]], capture_output=True, text=True,
                            timeout=600, cwd=ROOT)
    assert report.returncode == 0, report.stderr[-3000:]
    assert "| r3rag-process | R3-RAG | process vs outcome: em (higher) |" in doc.read_text(encoding="utf-8")
