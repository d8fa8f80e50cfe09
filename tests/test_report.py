"""``searchenv report``: one self-contained HTML page of a run, safe with hostile transcripts, tested in a browser."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agents.evaluation import report as report_mod
from agents.evaluation.report import ReportError, embed_json, read_embedded, write_report
from searchenv.cli import get_app

HOSTILE_QUESTION = "Who wrote <script>alert(1)</script> and <b>bold</b>?"
HOSTILE_DOC = "text </script><script>window.__pwned = 2</script> <!-- and <img src=x onerror=\"window.__pwned=3\">"
HOSTILE_OUTPUT = "<think> <img src=x onerror=\"window.__pwned=4\"> </think>\n<answer> <svg onload=alert(5)> </answer>"
RAW = ("<script>alert(1)</script>", "<script>window.__pwned", "<img src=x", "<svg onload", "<b>bold</b>")


def _episode(i: int, *, em: float, question: str | None = None, doc: str | None = None,
             output: str | None = None, invalid: str | None = None, infra: bool = False) -> dict[str, Any]:
    """One transcript record as ``searchenv eval`` writes it (Search-R1 tags)."""
    doc_text = doc if doc is not None else f"Ada Lovelace wrote note {i}."
    question = question if question is not None else f"Question {i}: who wrote note {i}?"
    answer = "Ada Lovelace" if em else "Charles Babbage"
    first = f"<think> look up note {i} </think>\n<search> note {i} </search>"
    return {
        "example_id": f"q{i}",
        "question": question,
        "gold": ["Ada Lovelace"],
        "answer": answer,
        "messages": [
            {"role": "system", "content": "Answer the question."},
            {"role": "user", "content": f"Question: {question}"},
            {"role": "assistant", "content": first},
            {"role": "tool", "content": f"<information>Doc 1(Title: Note {i}) {doc_text}\n"
                                        f"Doc 2(Title: Other) {'x' * 40}</information>"},
            {"role": "assistant", "content": output if output is not None else f"<answer> {answer} </answer>"},
        ],
        "steps": [
            {"turn": 1, "action_type": "search", "invalid_reason": invalid, "queries": [f"note {i}"],
             "doc_ids": [f"note{i}", "other"], "reward": 0.0, "reward_terms": {"outcome": 0.0, "format": 0.0},
             "generated_tokens": 0, "infra_error": infra},
            {"turn": 2, "action_type": "answer", "invalid_reason": None, "queries": [], "doc_ids": [],
             "reward": em, "reward_terms": {"outcome": em, "format": 0.0}, "generated_tokens": 0, "infra_error": False},
        ],
        "metrics": {"em": em, "f1": em, "contains": em, "evidence_recall": 1.0, "searches": 1, "queries": 1,
                    "turns": 2, "invalid_turns": int(invalid is not None), "opens": 0, "answered": True,
                    "return": em, "generated_tokens": 0, "infra_errors": int(infra)},
        "evidence_ids": [f"note{i}"],
    }


def _run(tmp_path: Path, runs: dict[str, list[dict[str, Any]]], name: str = "run") -> Path:
    """A run folder as ``searchenv eval --out`` lays it out: results.json and transcripts/*.jsonl."""
    out = tmp_path / name
    (out / "transcripts").mkdir(parents=True)
    rows = []
    for agent, episodes in runs.items():
        rel = f"transcripts/{agent}__bm25.jsonl"
        (out / rel).write_text("".join(json.dumps(e) + "\n" for e in episodes), encoding="utf-8")
        em = sum(e["metrics"]["em"] for e in episodes) / len(episodes)
        rows.append({"agent": agent, "retriever": "bm25", "task": "notes", "split": "dev", "seconds": 0.1,
                     "config": {"max_doc_chars": 40, "top_k": 2}, "n": len(episodes), "em": em, "f1": em,
                     "em_ci": [max(0.0, em - 0.1), min(1.0, em + 0.1)], "transcripts": rel})
    (out / "results.json").write_text(json.dumps({"rows": rows}, indent=2), encoding="utf-8")
    return out


def _two_agents(tmp_path: Path, n: int = 6) -> Path:
    good = [_episode(i, em=1.0) for i in range(n)]
    mixed = [_episode(i, em=float(i % 2 == 0), invalid="no_action" if i == 1 else None, infra=i == 3)
             for i in range(n)]
    return _run(tmp_path, {"oracle": good, "heuristic": mixed})


def _hostile(tmp_path: Path) -> Path:
    episodes = [_episode(0, em=0.0, question=HOSTILE_QUESTION, doc=HOSTILE_DOC, output=HOSTILE_OUTPUT),
                _episode(1, em=1.0)]
    return _run(tmp_path, {"llm": episodes}, name="hostile")


def test_the_page_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _two_agents(tmp_path)
    (run / "report.html").write_text("old page", encoding="utf-8")

    def broken(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(report_mod.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_report(run)
    assert (run / "report.html").read_text(encoding="utf-8") == "old page"  # untouched
    assert sorted(p.name for p in run.iterdir()) == ["report.html", "results.json", "transcripts"]  # no temp left
    monkeypatch.undo()
    renamed: list[tuple[str, str]] = []
    real = os.replace
    monkeypatch.setattr(report_mod.os, "replace", lambda a, b: (renamed.append((str(a), str(b))), real(a, b)))
    path = write_report(run)
    assert path == run / "report.html" and renamed and renamed[-1][1] == str(path)
    assert Path(renamed[-1][0]).parent == run and Path(renamed[-1][0]).name.startswith(".report.html.")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_page_loads_nothing_from_the_network(tmp_path: Path) -> None:
    page = write_report(_two_agents(tmp_path)).read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "", page, flags=re.DOTALL)  # the tags, not the script
    attrs = re.findall(r"""\b(?:src|href|action)\s*=\s*["']?([^"'\s>]*)""", markup, flags=re.IGNORECASE)
    assert all(a.startswith("data:") for a in attrs), attrs
    assert "default-src 'none'" in page  # the Content-Security-Policy forbids any other source


def test_the_embedded_data_round_trips(tmp_path: Path) -> None:
    run = _two_agents(tmp_path)
    data = read_embedded(write_report(run).read_text(encoding="utf-8"))
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert data["rows"] == results["rows"]
    for got, row in zip(data["runs"], results["rows"], strict=True):
        lines = (run / row["transcripts"]).read_text(encoding="utf-8").splitlines()
        assert got["episodes"] == [json.loads(x) for x in lines]
        assert (got["agent"], got["retriever"], got["max_doc_chars"]) == (row["agent"], "bm25", 40)
    assert data["curves"] is None


def test_hostile_text_is_only_embedded_escaped(tmp_path: Path) -> None:
    run = _hostile(tmp_path)
    page = write_report(run).read_text(encoding="utf-8")
    for raw in RAW:
        assert raw not in page, raw
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data element and the page's script
    assert "<!--" not in page
    data = read_embedded(page)
    first = data["runs"][0]["episodes"][0]
    assert first["question"] == HOSTILE_QUESTION and HOSTILE_DOC in first["messages"][3]["content"]
    assert first["messages"][4]["content"] == HOSTILE_OUTPUT
    assert json.loads(embed_json({"x": "</script><!-- \u2028 &"})) == {"x": "</script><!-- \u2028 &"}
    assert json.loads(embed_json({"x": [float("nan"), 1.5, {"y": float("inf")}]})) == {"x": [None, 1.5, {"y": None}]}


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(get_app(), ["report", *args])


def test_report_command_writes_the_page(tmp_path: Path) -> None:
    run = _two_agents(tmp_path)
    result = _invoke(str(run))
    assert result.exit_code == 0, result.output
    assert (run / "report.html").is_file()
    other = tmp_path / "elsewhere" / "page.html"
    assert _invoke(str(run), "--out", str(other)).exit_code == 0 and other.is_file()


def _broken(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A bad run folder, and what the error must name."""
    run = _two_agents(tmp_path)
    results = run / "results.json"
    if case == "no folder":
        return tmp_path / "nowhere", "nowhere is not a folder"
    if case == "no results":
        results.unlink()
        return run, "results.json not found"
    if case == "bad json":
        results.write_text('{"rows": [\n  {"agent": }\n]}', encoding="utf-8")
        return run, "results.json"
    if case == "rows":
        results.write_text('{"rows": {}}', encoding="utf-8")
        return run, "results.json, field 'rows'"
    if case == "agent":
        results.write_text('{"rows": [{"retriever": "bm25"}]}', encoding="utf-8")
        return run, "rows[0], field 'agent'"
    if case == "missing transcript":
        (run / "transcripts" / "oracle__bm25.jsonl").unlink()
        return run, "rows[0], field 'transcripts'"
    if case == "escaping transcript":
        data = json.loads(results.read_text(encoding="utf-8"))
        data["rows"][0]["transcripts"] = "../elsewhere.jsonl"
        results.write_text(json.dumps(data), encoding="utf-8")
        return run, "leads out of the run folder"
    if case == "bad line":
        path = run / "transcripts" / "heuristic__bm25.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n", encoding="utf-8")
        return run, "heuristic__bm25.jsonl:2"
    if case == "bad field":
        path = run / "transcripts" / "heuristic__bm25.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines()
        record = json.loads(lines[2])
        record["messages"] = "hello"
        path.write_text("\n".join([*lines[:2], json.dumps(record), *lines[3:]]) + "\n", encoding="utf-8")
        return run, "heuristic__bm25.jsonl:3, field 'messages'"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["no folder", "no results", "bad json", "rows", "agent", "missing transcript",
                                  "escaping transcript", "bad line", "bad field"])
def test_a_bad_run_folder_is_named_with_exit_code_2(tmp_path: Path, case: str) -> None:
    run, named = _broken(tmp_path, case)
    result = _invoke(str(run))
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, ReportError)
    assert not (run / "report.html").exists()


def test_a_link_in_place_of_the_page_is_refused(tmp_path: Path) -> None:
    run = _two_agents(tmp_path)
    target = tmp_path / "target.html"
    target.write_text("keep", encoding="utf-8")
    (run / "report.html").symlink_to(target)
    result = _invoke(str(run))
    assert result.exit_code == 2 and "symbolic link" in result.output
    assert target.read_text(encoding="utf-8") == "keep"


def test_a_training_run_gets_its_learning_curves(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    root = tmp_path / "grpo"
    for seed in (0, 1):
        (root / f"arm-seed{seed}").mkdir(parents=True)
        lines = [json.dumps({"step": s, "reward_mean": 0.1 * s + 0.05 * seed, "em": 0.1 * s, "kl": 0.01 * s})
                 for s in range(1, 6)]
        (root / f"arm-seed{seed}" / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = _invoke(str(root))
    assert result.exit_code == 0, result.output
    data = read_embedded((root / "report.html").read_text(encoding="utf-8"))
    assert data["curves"].startswith("data:image/png;base64,") and data["rows"] == []


def test_a_bad_metrics_line_is_named(tmp_path: Path) -> None:
    run = tmp_path / "sft"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n', encoding="utf-8")
    result = _invoke(str(run))
    assert result.exit_code == 2 and "metrics.jsonl:2" in " ".join(result.output.split()), result.output


def test_a_link_in_place_of_results_is_refused(tmp_path: Path) -> None:
    run = _two_agents(tmp_path)
    (run / "results.json").rename(tmp_path / "results.json")
    (run / "results.json").symlink_to(tmp_path / "results.json")
    result = _invoke(str(run))
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output


def test_eval_report_flag_writes_the_page(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    out = tmp_path / "ev"
    args = ["eval", "--agent", "oracle", "--agent", "heuristic", "--task", str(qa_file), "--corpus",
            str(corpus_file), "--n", "3", "--out", str(out), "--report"]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 0, result.output
    data = read_embedded((out / "report.html").read_text(encoding="utf-8"))
    assert [r["agent"] for r in data["runs"]] == ["oracle", "heuristic"]
    assert all(e.get("evidence_ids") for r in data["runs"] for e in r["episodes"])  # gold evidence is marked
    assert CliRunner().invoke(get_app(), args[:-3] + ["--report"]).exit_code == 2  # --report needs --out


def test_bench_report_flag_shows_the_sets_and_the_settings_that_make_cards_comparable(tmp_path: Path) -> None:
    fixtures = Path(__file__).parent / "fixtures" / "bench" / "search-r1"
    out = tmp_path / "bench"
    args = ["bench", "search-r1", "--data", str(fixtures), "--agent", "heuristic", "--out", str(out), "--index-root",
            str(tmp_path / "idx"), "--set", "nq", "--set", "hotpotqa", "--report"]
    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text(encoding="utf-8"))
    data = read_embedded((out / "report.html").read_text(encoding="utf-8"))
    assert [r["set"] for r in data["rows"]] == ["nq", "hotpotqa", "average"]
    assert data["rows"][-1]["em"] == card["average"]["em"] and data["rows"][0]["em"] == card["sets"]["nq"]["em"]
    assert data["settings"] == card["settings"] and {"index_hash", "top_k", "sampling"} <= set(data["comparable"])
    for run, name in zip(data["runs"], ["nq", "hotpotqa"], strict=True):
        lines = (out / "transcripts" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert (run["label"], run["scope"]) == (name, name) and run["episodes"] == [json.loads(x) for x in lines]
    assert CliRunner().invoke(get_app(), ["report", str(out)]).exit_code == 0  # the same page, from the folder


def test_a_bench_card_that_is_not_one_is_named(tmp_path: Path) -> None:
    run = tmp_path / "bench"
    (run / "transcripts").mkdir(parents=True)
    (run / "card.json").write_text('{"searchenv_card": 99}', encoding="utf-8")
    result = _invoke(str(run))
    assert result.exit_code == 2 and "card.json: field 'searchenv_card'" in " ".join(result.output.split())


def _train(tmp_path: Path, qa_file: Path, corpus_file: Path, out: Path, *extra: str) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("matplotlib")
    from tests.tiny_model import tiny_model_folder

    model = tmp_path / "tiny"
    if not model.exists():
        tiny_model_folder(model)
    sets = {"model": model, "task": qa_file, "corpus": corpus_file, "output_dir": out, "steps": 4, "batch_size": 2,
            "micro_batch_size": 2, "learning_rate": 3e-3, "num_demos": 4, "progress": "false", "log_every": 0,
            "save_every": 0, "max_new_tokens": 8, "device": "cpu"}
    args = ["train", "sft", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], *extra]
    return CliRunner().invoke(get_app(), args)


def test_train_report_flag_samples_episodes_at_several_steps_without_changing_the_run(
        tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    plain, reported = tmp_path / "plain", tmp_path / "reported"
    first = _train(tmp_path, qa_file, corpus_file, plain)
    assert first.exit_code == 0, first.output
    (reported / "samples" / "step-000003").mkdir(parents=True)  # another run's: replaced
    second = _train(tmp_path, qa_file, corpus_file, reported, "--report")
    assert second.exit_code == 0, second.output
    losses = [[r["loss"] for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())]
              for d in (plain, reported)]
    assert len(losses[0]) == 4 and losses[0] == losses[1]  # stopped and resumed at each sampled step: the same run
    data = read_embedded((reported / "report.html").read_text(encoding="utf-8"))
    assert data["curves"].startswith("data:image/png;base64,")
    assert [r["agent"] for r in data["rows"]] == ["step 1", "step 2", "step 3", "step 4"]
    assert sorted(p.name for p in (reported / "samples").iterdir()) == [f"step-00000{i}" for i in (1, 2, 3, 4)]
    ids = [[e["example_id"] for e in run["episodes"]] for run in data["runs"]]
    assert len(ids[0]) == 4 and all(x == ids[0] for x in ids)  # the same questions at every step, side by side
    assert all(e["messages"][2]["role"] == "assistant" for run in data["runs"] for e in run["episodes"])
    assert data["title"].endswith("sampled at steps 1, 2, 3, 4") and data["runs"][0]["retriever"] == "bm25"


def test_the_readmes_picture_of_the_page_is_a_small_png() -> None:
    root = Path(__file__).resolve().parents[1]
    assert "](docs/report.png)" in (root / "README.md").read_text(encoding="utf-8")
    picture = (root / "docs" / "report.png").read_bytes()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n") and len(picture) < 150_000


# ---- in a real browser ------------------------------------------------------------------------------------------

def _find_chromium() -> str | None:
    """The Chromium that ``make`` found or installed (tools/chromium.py: SEARCHENV_CHROMIUM, else Debian's)."""
    spec = importlib.util.spec_from_file_location("chromium_tool", Path(__file__).parents[1] / "tools" / "chromium.py")
    if spec is None or spec.loader is None:
        raise AssertionError("tools/chromium.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: str | None = module.find_chromium()
    return found


@pytest.fixture(scope="module")
def browser() -> Any:
    """Headless Chromium (Debian's package) driven by Playwright, or a skip saying which is missing.

    Playwright launches the executable found on this machine (``executable_path``): it downloads no browser.
    """
    chromium = _find_chromium()
    if chromium is None:
        pytest.skip("no Chromium for the browser test: make installs Debian's where apt-get can run (python "
                    "tools/chromium.py says why not), or set SEARCHENV_CHROMIUM")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed for the browser test (it comes with searchenv[dev])")
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        except Exception as exc:  # noqa: BLE001 - a browser that cannot start here is a skip, with its reason
            pytest.skip(f"Chromium at {chromium} did not start: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()


def _open(browser: Any, path: Path) -> tuple[Any, list[str], list[str], float]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    t0 = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return page, errors, dialogs, time.perf_counter() - t0


def test_the_page_works_in_a_browser(browser: Any, tmp_path: Path) -> None:
    page, errors, dialogs, _ = _open(browser, write_report(_two_agents(tmp_path)))
    assert page.inner_text("#page-info").endswith("6 of 6 questions")
    headers = page.locator("table.results th")
    headers.nth(3).click()  # EM, highest first
    assert page.locator("table.results tbody tr").first.inner_text().startswith("oracle")
    headers.nth(3).click()
    assert page.locator("table.results tbody tr").first.inner_text().startswith("heuristic")
    assert "[0.400, 0.600]" in page.inner_text("table.results")  # the interval beside the heuristic's EM
    page.check("#filter-wrong")
    assert page.locator(".group").count() == 3  # q1, q3, q5: the heuristic's wrong answers
    assert sorted(page.locator(".group").evaluate_all("els => els.map(e => e.dataset.id)")) == ["q1", "q3", "q5"]
    page.uncheck("#filter-wrong")
    page.check("#filter-invalid")
    assert page.locator(".group").count() == 1
    page.uncheck("#filter-invalid")
    page.check("#filter-infra")
    assert page.locator(".group").evaluate_all("els => els.map(e => e.dataset.id)") == ["q3"]
    page.uncheck("#filter-infra")
    page.fill("#search", "note 4")
    assert page.locator(".group").count() == 1
    page.fill("#search", "")
    assert page.locator(".episode").count() == 0  # drawn on demand
    page.locator(".group .head").first.click()
    assert page.locator(".episode").count() == 2  # both agents, side by side
    page.locator(".group .head").nth(1).press("Enter")  # the keyboard opens one too
    assert page.locator(".episode").count() == 4
    page.locator(".group .head").nth(1).click()
    assert page.locator(".episode").count() == 2
    text = page.inner_text(".group >> nth=0")
    assert "gold evidence" in text and "cut here" in text and "look up note 0" in text and "outcome" in text
    # the README's picture: SEARCHENV_REPORT_SCREENSHOT=docs/report.png pytest tests/test_report.py -k works_in
    shot = Path(os.environ.get("SEARCHENV_REPORT_SCREENSHOT") or tmp_path / "report.png")
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 0
    assert errors == [] and dialogs == []


def test_hostile_text_runs_nothing_in_a_browser(browser: Any, tmp_path: Path) -> None:
    page, errors, dialogs, _ = _open(browser, write_report(_hostile(tmp_path)))
    page.locator(".group .head").first.click()
    page.locator(".episode details").evaluate_all("els => els.forEach(e => { e.open = true; })")
    body = page.inner_text("body")
    assert "<script>alert(1)</script>" in body and "<img src=x onerror" in body and "<svg onload=alert(5)>" in body
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("#report script, #report img, #report svg, #report b").count() == 0
    assert dialogs == [] and errors == []


def test_ten_thousand_episodes_open_quickly(browser: Any, tmp_path: Path) -> None:
    episodes = [_episode(i, em=float(i % 3 != 0)) for i in range(10_000)]
    path = write_report(_run(tmp_path, {"big": episodes}, name="big"))
    page, errors, _, seconds = _open(browser, path)
    assert page.inner_text("#page-info") == "page 1 of 400 · 10000 of 10000 questions"
    assert page.locator(".group").count() == 25
    page.check("#filter-wrong")
    assert page.inner_text("#page-info").endswith("3334 of 10000 questions")
    assert seconds < 3.0, f"{path.stat().st_size / 1e6:.1f} MB page took {seconds:.2f} s to open"
    assert errors == []


def test_a_bench_page_shows_its_settings_and_keeps_sets_apart_in_a_browser(browser: Any, tmp_path: Path) -> None:
    run = _run(tmp_path, {"nq": [_episode(i, em=1.0) for i in range(3)],
                          "hotpotqa": [_episode(i, em=0.0) for i in range(2)]}, name="bench")
    sets = {name: {"n": n, "failed": 0, "em": em, "invalid_by_code": {}, "unanswered": 0}
            for name, n, em in (("nq", 3, 1.0), ("hotpotqa", 2, 0.0))}
    for name in sets:  # the bench layout: transcripts/<set>.jsonl
        (run / "transcripts" / f"{name}__bm25.jsonl").rename(run / "transcripts" / f"{name}.jsonl")
    (run / "results.json").unlink()
    card = {"searchenv_card": 1, "suite": "search-r1", "description": "<b>seven</b> QA sets",
            "settings": {"suite": "search-r1", "top_k": 3, "agent": "heuristic", "sampling": {"seed": 0},
                         "max_doc_chars": 40}, "sets": sets, "average": {"n": 5, "failed": 0, "em": 0.5}}
    (run / "card.json").write_text(json.dumps(card), encoding="utf-8")
    page, errors, dialogs, _ = _open(browser, write_report(run))
    assert [t.split("\t")[0] for t in page.locator("table.results tbody tr").all_inner_texts()] == \
        ["nq", "hotpotqa", "average"]
    settings = page.inner_text("table.settings")
    assert "\u2605 top_k\t3" in settings and '{"seed":0}' in settings
    assert "<b>seven</b> QA sets" in page.inner_text("body")  # the description is text
    assert page.inner_text("#page-info").endswith("5 of 5 questions")  # q0 and q1 of each set stay apart
    page.locator(".group .head").first.click()
    assert page.locator(".episode h3").all_inner_texts() == ["nq"]
    assert errors == [] and dialogs == []
