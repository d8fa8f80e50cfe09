"""Your own retriever: by module:Class and entry-point name in every command, docs/guides/your-retriever.md as written,
and retriever failures counted, never scored."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import searchenv  # noqa: F401  (registers SearchQA-v0)
from searchenv.cli import get_app
from searchenv.corpus import write_corpus
from searchenv.tasks import write_qa_jsonl
from tests.conftest import DOCS, EXAMPLES
from tests.doc_blocks import ROOT, bash_commands, code_blocks, free_port, python_blocks, wait_until_healthy

BENCH = ROOT / "tests" / "fixtures" / "bench" / "search-r1"
BIN = Path(sys.executable).parent


def _module() -> str:
    """docs/guides/your-retriever.md's worked example, as written."""
    return python_blocks("guides/your-retriever.md", "A worked example")[0]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with my_retriever.py, qa.jsonl, corpus.jsonl and data/search-r1, importable and the cwd."""
    (tmp_path / "my_retriever.py").write_text(_module(), encoding="utf-8")
    (tmp_path / "flaky_retriever.py").write_text(textwrap.dedent('''
        from my_retriever import KeywordRetriever
        from searchenv import RetrieverError

        class Flaky(KeywordRetriever):
            """Fails on a batch asking about a capital."""
            def search_batch(self, queries, k):
                if any("capital" in q.lower() for q in queries):
                    raise RetrieverError("flaky backend")
                return super().search_batch(queries, k)

        class Down:
            def search_batch(self, queries, k):
                raise RetrieverError("backend offline")

        class StringScores(KeywordRetriever):
            def search_batch(self, queries, k):
                from dataclasses import replace
                return [[replace(h, score=str(h.score)) for h in hits] for hits in super().search_batch(queries, k)]
        '''), encoding="utf-8")
    write_qa_jsonl(tmp_path / "qa.jsonl", EXAMPLES)
    write_corpus(tmp_path / "corpus.jsonl", DOCS)
    shutil.copytree(BENCH, tmp_path / "data" / "search-r1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_retriever", "flaky_retriever"):
        sys.modules.pop(name, None)
    return tmp_path


def _cli(*args: str) -> Any:
    return CliRunner().invoke(get_app(), list(args))


def _said(result: Any) -> str:
    """The command's output with rich's boxes and line wrapping taken out."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)


def _register_entry_point(site: Path, name: str, target: str) -> None:
    """What `pip install` of a package declaring the entry point leaves on sys.path."""
    info = site / "keyword_retriever-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keyword-retriever\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[searchenv.retrievers]\n{name} = {target}\n")


# ------------------------------------------------------------------------------------------ the docs


@pytest.mark.slow
def test_docs_example_runs_as_written_in_python_and_every_command(work: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = python_blocks("guides/your-retriever.md", "A worked example")[2]
    ran = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert re.search(r"\['d\d+'", ran.stdout), ran.stdout  # the keyword hits' ids
    port, server = free_port(), None
    outputs = []
    try:
        for command in bash_commands("guides/your-retriever.md", "Use it everywhere"):
            command = command.replace("8000", str(port))
            if command.endswith("&"):
                server = subprocess.Popen(["bash", "-c", f"exec {command.rstrip('&')}"], cwd=work, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                wait_until_healthy(server, f"http://127.0.0.1:{port}")
                continue
            done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
            outputs.append(done.stdout)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    assert "oracle" in outputs[0] and "heuristic" in outputs[0]
    assert "my_retriever:KeywordRetriever" in outputs[1] and "recall" in outputs[1]
    keyword = json.loads((work / "runs" / "bench-keyword" / "card.json").read_text())
    served = json.loads((work / "runs" / "bench-served" / "card.json").read_text())
    assert keyword["settings"]["index_kind"] == "my_retriever:KeywordRetriever"
    assert served["settings"]["index"] == f"http://127.0.0.1:{port}"  # the URL kept whole
    assert served["settings"]["index_kind"] == "server (KeywordRetriever)"
    # the same retriever over the same corpus, in process and served: the same episodes
    assert served["average"]["em"] == keyword["average"]["em"] and served["average"]["n"] == keyword["average"]["n"]


# ------------------------------------------------------------------- by name, in each command


def test_module_class_in_gym_make_eval_and_eval_retrieval(work: Path) -> None:
    from my_retriever import KeywordRetriever

    env = gym.make("SearchQA-v0", task="qa.jsonl", corpus="corpus.jsonl", retriever="my_retriever:KeywordRetriever")
    assert isinstance(env.unwrapped.retriever, KeywordRetriever)
    result = _cli("eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "my_retriever:KeywordRetriever", "--retriever-option", "min_overlap=2",
                  "--n", "3", "--out", "run")
    assert result.exit_code == 0, result.output
    (row,) = json.loads((work / "run" / "results.json").read_text())["rows"]
    assert row["retriever"] == "my_retriever:KeywordRetriever" and row["n"] == 3
    result = _cli("eval-retrieval", "--retriever", "my_retriever:KeywordRetriever", "--retriever-option",
                  "corpus=corpus.jsonl", "--qa", "qa.jsonl", "--k", "1", "--json", "quality.json")
    assert result.exit_code == 0, result.output
    (quality,) = json.loads((work / "quality.json").read_text())["results"]
    assert quality["name"] == "my_retriever:KeywordRetriever"


@pytest.mark.slow
def test_the_named_retriever_section_installs_and_runs_as_written(work: Path) -> None:
    """"Give it a name": its pyproject.toml, `pip install -e .` and the command, run as written.

    The install goes into a throwaway virtual environment that sees this one's packages (a .pth
    file), so the suite's own environment is left as it was.
    """
    toml = code_blocks("guides/your-retriever.md", "Give it a name", "toml")[0]
    (work / "pyproject.toml").write_text(toml, encoding="utf-8")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    suite_sites = [p for p in sys.path if p.endswith("site-packages")]
    (site / "searchenv_suite.pth").write_text(f"import site; list(map(site.addsitedir, {suite_sites!r}))\n")
    script = (BIN / "searchenv").read_text(encoding="utf-8").split("\n", 1)[1]
    (venv / "bin" / "searchenv").write_text(f"#!{venv / 'bin' / 'python'}\n{script}", encoding="utf-8")
    (venv / "bin" / "searchenv").chmod(0o755)
    (venv / "bin" / "pip").write_text(f"#!/bin/sh\nexec {venv / 'bin' / 'python'} -m pip \"$@\"\n", encoding="utf-8")
    (venv / "bin" / "pip").chmod(0o755)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": ""}
    env.pop("VIRTUAL_ENV", None)
    outputs = []
    for command in bash_commands("guides/your-retriever.md", "Give it a name"):
        done = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert list(site.glob("my_retriever-0.1.0.dist-info")), "pip did not install the package into the throwaway venv"
    assert "heuristic" in outputs[-1] and "EM" in outputs[-1], outputs[-1]


def test_an_entry_point_name_in_gym_make_eval_bench_and_eval_retrieval(work: Path) -> None:
    _register_entry_point(work, "keyword", "my_retriever:KeywordRetriever")
    from searchenv.retrievers.custom import entry_point_names

    assert "keyword" in entry_point_names()
    env = gym.make("SearchQA-v0", task="qa.jsonl", corpus="corpus.jsonl", retriever="keyword")
    assert type(env.unwrapped.retriever).__name__ == "KeywordRetriever"
    result = _cli("eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "keyword", "--n", "2")
    assert result.exit_code == 0, result.output
    result = _cli("eval-retrieval", "--retriever", "keyword", "--retriever-option", "corpus=corpus.jsonl",
                  "--qa", "qa.jsonl", "--k", "1")
    assert result.exit_code == 0, result.output
    result = _cli("bench", "search-r1", "--data", "data/search-r1", "--agent", "heuristic", "--retriever", "keyword",
                  "--set", "nq", "--out", "bench")
    assert result.exit_code == 0, result.output
    settings = json.loads((work / "bench" / "card.json").read_text())["settings"]
    assert settings["index_kind"] == "keyword"
    # built over the suite's corpus (it takes corpus=): the card names that corpus, as an index's card does
    from searchenv.corpus import corpus_fingerprint, iter_corpus

    assert settings["corpus_fingerprint"] == corpus_fingerprint(iter_corpus(work / settings["corpus"]))


@pytest.mark.slow
def test_serve_by_entry_point_name_answers_as_in_process(work: Path) -> None:
    _register_entry_point(work, "keyword", "my_retriever:KeywordRetriever")
    from my_retriever import KeywordRetriever

    from searchenv.retrievers.remote import remote_from_url

    port = free_port()
    paths = [str(work), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    server = subprocess.Popen([str(BIN / "searchenv"), "serve", "--retriever", "keyword", "--retriever-option",
                               "corpus=corpus.jsonl", "--port", str(port)], cwd=work, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_healthy(server, f"http://127.0.0.1:{port}")
        queries = ["Tobin Quenn born", "Karsk country", "nothing matches zzz"]
        remote = remote_from_url(f"http://127.0.0.1:{port}").search_batch(queries, 2)
        local = KeywordRetriever("corpus.jsonl").search_batch(queries, 2)
        assert [[(h.doc_id, h.score) for h in hits] for hits in remote] == \
               [[(h.doc_id, pytest.approx(h.score)) for h in hits] for hits in local]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_bad_names_and_options_are_refused_with_the_reason(work: Path) -> None:
    from my_retriever import KeywordRetriever

    with pytest.raises(TypeError, match="is the class my_retriever.KeywordRetriever, not an instance"):
        gym.make("SearchQA-v0", task="qa.jsonl", corpus="corpus.jsonl", retriever=KeywordRetriever)
    result = _cli("eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "no_such_module:Thing", "--n", "1")
    assert result.exit_code == 2 and "cannot import module 'no_such_module'" in _said(result)
    result = _cli("eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "my_retriever:KeywordRetriever", "--retriever-option", "colour=3", "--n", "1")
    assert result.exit_code == 2 and "options ['colour', 'corpus'] do not fit" in _said(result)
    result = _cli("eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "bm25", "--retriever-option", "k1=1.2", "--n", "1")
    assert result.exit_code == 2 and "module:Class" in _said(result)
    result = _cli("bench", "search-r1", "--data", "data/search-r1", "--agent", "heuristic",
                  "--retriever", "nothing-registered", "--out", "b")
    assert result.exit_code == 2 and "entry-point name" in _said(result)


def test_a_score_that_is_not_a_number_is_named_as_such(work: Path) -> None:
    env = gym.make("SearchQA-v0", task="qa.jsonl", corpus="corpus.jsonl", retriever="flaky_retriever:StringScores")
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<search> Tobin Quenn born </search>")
    assert info["infra_error"] and "a score that is not a number" in info["new_text"]


# -------------------------------------------------------------------- failures are never a score


def test_a_dead_server_stops_eval_and_bench_naming_it(work: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _cli("eval", "--agent", "heuristic", "--task", "synthetic-2hop", "--retriever", url, "--n", "20")
    assert result.exit_code == 2
    assert f"retriever {url} failed on every search (20 searches in the first 20 episodes)" in _said(result)
    result = _cli("bench", "search-r1", "--data", "data/search-r1", "--agent", "heuristic", "--index", url,
                  "--out", "b")
    assert result.exit_code == 2 and url in _said(result) and "http:/1" not in _said(result)


def test_a_retriever_that_fails_on_every_call_stops_the_run(work: Path) -> None:
    result = _cli("eval", "--agent", "heuristic", "--task", "qa.jsonl", "--corpus", "corpus.jsonl",
                  "--retriever", "flaky_retriever:Down", "--n", "3")
    assert result.exit_code == 2
    assert "retriever flaky_retriever:Down failed on every search" in _said(result)
    assert "backend offline" in _said(result)


def test_episodes_with_retriever_failures_are_counted_not_scored(work: Path) -> None:
    from flaky_retriever import Flaky

    from agents.evaluation.evaluate import evaluate

    flaky = Flaky("corpus.jsonl")
    # one episode per batch: a failed search_batch call fails every episode of its round
    scored = evaluate("oracle", task=EXAMPLES, retriever=flaky, infra_errors="score", batch_size=1)
    excluded = evaluate("oracle", task=EXAMPLES, retriever=flaky, batch_size=1)
    hit = excluded.row["infra_error_ids"]
    assert hit and excluded.row["infra_errors"] == len(hit) == scored.row["infra_errors"]
    assert excluded.row["n"] == len(EXAMPLES) - len(hit) and scored.row["n"] == len(EXAMPLES)
    assert {e.example_id for e in excluded.scored_episodes} == {e.id for e in EXAMPLES} - set(hit)
    assert len(excluded.episodes) == len(EXAMPLES)  # every transcript kept
    args = ["eval", "--agent", "oracle", "--task", "qa.jsonl", "--corpus", "corpus.jsonl", "--retriever",
            "flaky_retriever:Flaky", "--n", str(len(EXAMPLES)), "--batch-size", "1"]
    result = _cli(*args, "--out", "run")
    assert result.exit_code == 4, result.output
    assert f"{len(hit)} of {len(EXAMPLES)} episodes" in _said(result) and "Infra errors" in _said(result)
    (row,) = json.loads((work / "run" / "results.json").read_text())["rows"]
    assert row["infra_errors"] == len(hit) and row["n"] == len(EXAMPLES) - len(hit)
    result = _cli(*args, "--score-infra-errors")
    assert result.exit_code == 0 and "warning: the retriever failed in some episodes" in _said(result)


def test_bench_counts_retriever_failures_and_exits_4(work: Path) -> None:
    args = ["bench", "search-r1", "--data", "data/search-r1", "--agent", "heuristic", "--set", "nq", "--set",
            "hotpotqa", "--batch-size", "1"]
    clean = _cli(*args, "--retriever", "my_retriever:KeywordRetriever", "--out", "clean")
    assert clean.exit_code == 0, clean.output
    result = _cli(*args, "--retriever", "flaky_retriever:Flaky", "--out", "flaky")
    assert (work / "flaky" / "card.json").is_file(), result.output
    card = json.loads((work / "flaky" / "card.json").read_text())
    assert card["average"]["infra_errors"] == card["sets"]["nq"]["infra_errors"] == 1  # "capital city of australia"
    assert result.exit_code == 4 and "failed in 1 episodes (nq 1)" in _said(result)
    assert card["average"]["n"] + 1 == json.loads((work / "clean" / "card.json").read_text())["average"]["n"]
    transcript = (work / "flaky" / "transcripts" / "nq.jsonl").read_text().splitlines()
    assert len(transcript) == 2  # the failed episode's transcript is kept


def test_the_worked_example_runs_in_an_empty_folder_with_the_data_it_writes(tmp_path: Path) -> None:
    """docs/guides/your-retriever.md needs nothing but itself: the retriever, the two files it writes, then its use."""
    module, make_data, use = python_blocks("guides/your-retriever.md", "A worked example")
    (tmp_path / "my_retriever.py").write_text(module, encoding="utf-8")
    for script in (make_data, use):
        ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "SEARCHENV_CACHE": str(tmp_path / "cache")})
        assert ran.returncode == 0, ran.stderr[-3000:]
    assert "'d3'" in ran.stdout, ran.stdout  # the keyword retriever found Tobin Quenn's document
