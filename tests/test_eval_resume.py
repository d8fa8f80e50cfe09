"""``searchenv eval`` with a served model that is slow, fails or is killed: nothing finished is lost.

A stand-in chat-completions server (built here) answers each ``rag`` conversation from its
retrieved documents, deterministically, so runs can be compared: an evaluation killed with
SIGKILL half-way and run again continues from the episodes it saved and ends with the results of
an uninterrupted run; a request that times out fails its episode, not the run, and the message
names the settings to change; every finished batch prints a progress line.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from searchenv.corpus import Document, write_corpus
from searchenv.tasks import QAExample, write_qa_jsonl

pytest.importorskip("httpcore")

# Eight questions over eight one-fact passages, in FlashRAG's QA and corpus layouts.
PLACES = ["Ostrava", "Brno", "Plzen", "Liberec", "Olomouc", "Zlin", "Opava", "Kladno"]
DOCS = [Document(f"d{i}", f"Painter {i}", f"Painter {i} was born in {p}.") for i, p in enumerate(PLACES)]
QUESTIONS = [QAExample(f"q{i}", f"Where was Painter {i} born?", (p,), (f"d{i}",)) for i, p in enumerate(PLACES)]


class StandIn(http.server.BaseHTTPRequestHandler):
    """Chat completions: answers with the first birthplace in the last user message (the documents).

    Class attributes set per test: ``delay`` (seconds per request), ``hang`` (question substrings
    answered only after ``hang_seconds``), ``gate`` (requests wait for it once ``open_for`` were
    answered), ``questions`` (the question of every request answered, in order), ``served`` (the
    model name ``GET /v1/models`` lists).
    """

    delay = 0.0
    hang: tuple[str, ...] = ()
    hang_seconds = 0.0
    open_for = 10**9
    gate = threading.Event()
    questions: list[str] = []
    lock = threading.Lock()
    served = "m"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        payload = json.dumps({"object": "list", "data": [{"id": self.served, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        question = re.search(r"Question: (.*?\?)", messages[1]["content"])
        asked = question.group(1) if question else messages[1]["content"]
        with self.lock:
            turn = len(self.questions)
            self.questions.append(asked)
        if turn >= self.open_for:
            self.gate.wait(60)
        time.sleep(self.hang_seconds if any(h in asked for h in self.hang) else self.delay)
        place = re.search(r"born in (\w+)", messages[-1]["content"])
        text = f"<answer> {place.group(1) if place else 'unknown'} </answer>"
        payload = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                           "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 50, "completion_tokens": 6}}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client gave up (timeout) or was killed
            pass


@pytest.fixture()
def stand_in() -> Iterator[tuple[str, type[StandIn]]]:
    handler = type("Handler", (StandIn,), {"questions": [], "gate": threading.Event(), "lock": threading.Lock()})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        handler.gate.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    qa, corpus = tmp_path / "qa.jsonl", tmp_path / "corpus.jsonl"
    write_qa_jsonl(qa, QUESTIONS)
    write_corpus(corpus, DOCS)
    return qa, corpus


def _cmd(url: str, files: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    qa, corpus = files
    return [sys.executable, "-c", "from searchenv.cli import main; main()", "eval", "--agent", "rag",
            "--task", str(qa), "--corpus", str(corpus), "--retriever", "bm25", "--top-k", "1", "--n", "8",
            "--batch-size", "2", "--model-url", url, "--served-model", "m", "--api", "chat",
            "--concurrency", "2", "--out", str(out), *extra]


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def _results(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The row without timings and server counters (they differ run to run), and the transcripts."""
    [row] = json.loads((out / "results.json").read_text())["rows"]
    row = {k: v for k, v in row.items() if k not in ("seconds", "sec_per_q", "config")}
    lines = (out / "transcripts" / "rag__bm25.jsonl").read_text().splitlines()
    return row, [json.loads(x) for x in lines]


def _usage(out: Path) -> dict[str, float]:
    """The requests and tokens ``results.json`` reports the model server was asked for."""
    [row] = json.loads((out / "results.json").read_text())["rows"]
    return {k: row["config"]["model_usage"][k] for k in ("requests", "prompt_tokens", "completion_tokens")}


@pytest.mark.slow
def test_an_evaluation_killed_half_way_continues_from_its_saved_episodes(
    stand_in: tuple[str, type[StandIn]], files: tuple[Path, Path], tmp_path: Path
) -> None:
    url, handler = stand_in
    whole = _run(_cmd(url, files, tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    # progress: one line per finished batch of episodes
    for done in (2, 4, 6, 8):
        assert f"rag / bm25: {done}/8 episodes" in whole.stderr, whole.stderr
    assert len(handler.questions) == 8
    assert _results(tmp_path / "whole")[0]["em"] == 1.0

    # The same run, killed (SIGKILL) while its third batch waits on the server.
    handler.questions.clear()
    handler.open_for = 4
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(url, files, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=os.environ.copy())
    saved = out / "checkpoints" / "rag__bm25.jsonl"
    deadline = time.monotonic() + 60
    while not (saved.is_file() and len(saved.read_text().splitlines()) >= 5):  # settings + 4 episodes
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or saved nothing"
        time.sleep(0.05)
    while len(handler.questions) < 6:  # the third batch's requests are in, waiting
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not (out / "results.json").exists()
    handler.gate.set()
    handler.questions.clear()

    again = _run(_cmd(url, files, out))
    assert again.returncode == 0, again.stderr
    assert "resuming rag / bm25 from 4 saved episodes" in again.stderr, again.stderr
    assert sorted(handler.questions) == [q.question for q in QUESTIONS[4:]]  # only the rest was asked
    assert _results(out) == _results(tmp_path / "whole")
    assert not saved.exists()  # a complete run leaves no checkpoint
    # the model usage adds up over both processes (the killed batch's requests went with it)
    assert _usage(out) == _usage(tmp_path / "whole") == {"requests": 8, "prompt_tokens": 400,
                                                         "completion_tokens": 48}


@pytest.mark.slow
def test_a_request_that_times_out_fails_its_episode_not_the_run(
    stand_in: tuple[str, type[StandIn]], files: tuple[Path, Path], tmp_path: Path
) -> None:
    url, handler = stand_in
    handler.hang, handler.hang_seconds = ("Painter 5 ",), 3.0
    out = tmp_path / "run"
    res = _run(_cmd(url, files, out, "--request-timeout", "1"))
    assert res.returncode == 3, res.stderr
    err = " ".join(res.stderr.split())
    assert "1 of 8 episodes failed" in err and "no answer within 1 s" in err, err
    assert "--request-timeout" in err and "--concurrency" in err and "rerun" in err, err
    row, episodes = _results(out)
    assert row["n"] == 7 and row["failed"] == 1
    assert [e["example_id"] for e in episodes] == ["q0", "q1", "q2", "q3", "q4", "q6", "q7"]
    failed = json.loads((out / "results.json").read_text())["rows"][0]["failures"]
    assert [f["example_id"] for f in failed] == ["q5"] and "no answer within 1 s" in failed[0]["error"]
    assert len((out / "checkpoints" / "rag__bm25.jsonl").read_text().splitlines()) == 1 + 7

    # Once the server keeps up, a rerun asks only for the failed episode and completes the run.
    handler.hang = ()
    handler.questions.clear()
    again = _run(_cmd(url, files, out))
    assert again.returncode == 0, again.stderr
    assert handler.questions == ["Where was Painter 5 born?"]
    clean = _run(_cmd(url, files, tmp_path / "clean"))
    assert clean.returncode == 0, clean.stderr
    assert _results(out) == _results(tmp_path / "clean")


@pytest.mark.slow
def test_saved_episodes_of_other_settings_are_refused(
    stand_in: tuple[str, type[StandIn]], files: tuple[Path, Path], tmp_path: Path
) -> None:
    url, handler = stand_in
    handler.hang, handler.hang_seconds = ("Painter 5 ",), 3.0
    out = tmp_path / "run"
    assert _run(_cmd(url, files, out, "--request-timeout", "1")).returncode == 3
    res = _run(_cmd(url, files, out, "--max-turns", "3"))
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert "rag__bm25.jsonl" in err and "max_turns" in err and "another --out" in err, err


@pytest.mark.slow
def test_saved_episodes_of_another_served_model_or_server_are_refused(
    stand_in: tuple[str, type[StandIn]], files: tuple[Path, Path], tmp_path: Path
) -> None:
    url, handler = stand_in
    handler.served = "model-a"  # no --served-model: the name is the one /v1/models lists
    handler.hang, handler.hang_seconds = ("Painter 5 ",), 3.0
    out = tmp_path / "run"

    def cmd(at: str) -> list[str]:
        whole = _cmd(at, files, out, "--request-timeout", "1")
        i = whole.index("--served-model")
        return whole[:i] + whole[i + 2:]

    assert _run(cmd(url)).returncode == 3
    saved = out / "checkpoints" / "rag__bm25.jsonl"
    before = saved.read_bytes()
    handler.hang = ()
    handler.questions.clear()
    handler.served = "model-b"  # another model behind the same address
    res = _run(cmd(url))
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert 'served_model_name: "model-a" there, "model-b" now' in err and "another --out" in err, err
    handler.served = "model-a"  # the same name at another address
    res = _run(cmd(url.replace("127.0.0.1", "localhost")))
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert "model_server:" in err and "model_url:" in err and "localhost" in err, err
    assert handler.questions == [] and saved.read_bytes() == before  # nothing run, nothing rewritten
    assert _run(cmd(url)).returncode == 0  # the run's own model and address continue it


def test_the_episode_log_drops_a_torn_last_line_and_names_bad_lines(tmp_path: Path) -> None:
    from agents.baselines import EpisodeResult
    from agents.evaluation.episode_log import EpisodeLog

    path = tmp_path / "ck" / "rag__bm25.jsonl"
    log = EpisodeLog(path, {"agent": "rag", "top_k": (1,)})
    rec = EpisodeResult("q0", "Where?", ["Ostrava"], "Ostrava", [{"role": "user", "content": "q"}], [], {"em": 1.0})
    failed = EpisodeResult("q1", "Where?", ["Brno"], None, [], [], {}, "model server timed out")
    log.append([(0, rec), (1, failed)])  # a failed episode is not saved: the next run tries it again
    with path.open("ab") as f:
        f.write(b'{"position": 2, "episode": {"exam')  # killed while writing
    assert EpisodeLog(path, {"agent": "rag", "top_k": [1]}).load() == {0: rec}
    assert path.read_bytes().endswith(b"}\n")  # the torn line is gone, so appends stay whole lines
    with pytest.raises(ValueError, match=r"rag__bm25.jsonl holds episodes of a run with other settings "
                                         r"\(top_k: \[1\] there, \[3\] now\)"):
        EpisodeLog(path, {"agent": "rag", "top_k": [3]}).load()
    with path.open("a") as f:
        f.write('{"position": -1, "episode": {}}\n')
    with pytest.raises(ValueError, match=r"rag__bm25.jsonl, line 3, field 'position'"):
        log.load()


def test_the_episode_log_adds_up_the_model_usage_saved_with_its_batches(tmp_path: Path) -> None:
    from agents.baselines import EpisodeResult
    from agents.evaluation.episode_log import EpisodeLog

    path = tmp_path / "ck" / "rag__bm25.jsonl"
    log = EpisodeLog(path, {"agent": "rag"})
    recs = [EpisodeResult(f"q{i}", "Where?", ["Brno"], "Brno", [], [], {"em": 1.0}) for i in range(3)]
    failed = EpisodeResult("q9", "Where?", ["Brno"], None, [], [], {}, "model server timed out")
    assert log.append([(0, recs[0]), (1, recs[1])], usage={"requests": 2, "prompt_tokens": 100})
    assert not log.append([(9, failed)], usage={"requests": 5})  # nothing saved: that usage is the caller's still
    assert log.append([(2, recs[2])], usage={"requests": 1, "prompt_tokens": 50})
    again = EpisodeLog(path, {"agent": "rag"})
    assert sorted(again.load()) == [0, 1, 2]
    assert again.usage == {"requests": 3, "prompt_tokens": 150}
    with path.open("a") as f:
        f.write('{"position": 3, "episode": {}, "usage": {"requests": -1}}\n')
    with pytest.raises(ValueError, match=r"rag__bm25.jsonl, line 5, field 'usage': expected an object of "
                                         r"non-negative numbers"):
        again.load()
