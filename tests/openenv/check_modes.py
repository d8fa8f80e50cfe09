"""``serve-openenv --mode evaluation``: no reward, reward term or metric before the episode ends (run in .venv-openenv).

Under presets that pay for relevance to the gold evidence (``process``, ``shaped``) a step's reward tells a
client which documents are evidence; in evaluation mode every observation before the last carries no
reward and no terms, and the last carries the episode's return. Training mode is unchanged. The mode
is in the manifest and ``/metadata``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openenv.cli._validation import validate_running_environment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.serialization import serialize_observation
from starlette.testclient import TestClient
from tests.conftest import DOCS, EXAMPLES

from searchenv.client_view import ANSWER_DERIVED_KEYS
from searchenv.integrations.openenv import SearchQAEnvironment, SearchQAService, create_app, settings_from_environ
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import write_qa_jsonl

BIN = Path(sys.executable).parent
BASE = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("modes")
    BM25Retriever.build(DOCS, root / "idx")
    write_qa_jsonl(root / "qa.jsonl", EXAMPLES)
    return {"root": root, "index": root / "idx", "qa": root / "qa.jsonl"}


def _episode(service: SearchQAService, example: Any, protocol: str) -> list[dict[str, Any]]:
    """Searches (each hop, an open under tools-browse), then the gold answer: every observation as OpenEnv sends it."""
    session = SearchQAEnvironment(service)
    sent = [serialize_observation(session.reset(example_id=example.id))]
    calls: list[tuple[str, Any]] = [("search", {"query": sub.question}) for sub in example.decomposition[:2]]
    calls.insert(0, ("search", {"query": example.question}))
    if protocol == "tools-browse":
        calls.append(("open", {"doc": 1}))
    for name, arguments in [*calls, ("answer", {"answer": example.answers[0]})]:
        sent.append(serialize_observation(session.step(CallToolAction(tool_name=name, arguments=arguments))))
        if sent[-1]["done"]:
            break
    session.close()
    return sent


@pytest.mark.parametrize("protocol", ["tools", "tools-browse"])
@pytest.mark.parametrize("reward", ["default", "process", "shaped", "frugal"])
def test_evaluation_mode_shows_no_reward_before_the_end_and_the_return_at_the_end(
        world: dict[str, Path], protocol: str, reward: str) -> None:
    retriever = BM25Retriever.load(world["index"])
    common = {"retriever": retriever, "split": "test", "protocol": protocol, "reward": reward, "max_turns": 6}
    training = SearchQAService(world["qa"], **common)  # type: ignore[arg-type]
    evaluation = SearchQAService(world["qa"], mode="evaluation", **common)  # type: ignore[arg-type]
    paid_before_the_end = 0
    for example in EXAMPLES:
        trained, evaluated = _episode(training, example, protocol), _episode(evaluation, example, protocol)
        assert len(trained) == len(evaluated) and evaluated[-1]["done"] is True
        for sent in evaluated[1:-1]:
            assert sent["reward"] is None and sent["observation"]["reward_terms"] == {}, sent
            shown = set(sent["observation"]["metadata"])
            assert not shown & (ANSWER_DERIVED_KEYS | {"reward_terms", "reward_signals"}), shown
        paid_before_the_end += sum(bool(s["reward"]) for s in trained[1:-1])
        total = sum(float(s["reward"]) for s in trained[1:])
        last = evaluated[-1]
        assert last["reward"] == pytest.approx(total)  # the return, as a client adding up training rewards gets
        assert sum(last["observation"]["reward_terms"].values()) == pytest.approx(total)
        assert last["observation"]["metadata"]["summary"]["return"] == pytest.approx(total)
        assert last["observation"]["metadata"]["em"] == trained[-1]["observation"]["metadata"]["em"]
        # training mode is as it was: every step's reward and terms
        for sent in trained[1:]:
            assert sent["reward"] is not None
            assert sum(sent["observation"]["reward_terms"].values()) == pytest.approx(sent["reward"])
    if reward in ("process", "shaped"):
        assert paid_before_the_end > 0  # what evaluation mode holds back: relevance paid on search steps


def test_the_mode_is_in_metadata_the_manifest_and_the_variables(world: dict[str, Path]) -> None:
    retriever = BM25Retriever.load(world["index"])
    for mode in ("training", "evaluation"):
        service = SearchQAService(world["qa"], retriever=retriever, split="test", mode=mode, max_turns=4)
        with TestClient(create_app(service), base_url=BASE) as client:
            assert f"mode: {mode}" in client.get("/metadata").json()["description"]
        low, high = service.reward_range
        assert (low, high) == ((-0.1, 1.0) if mode == "training" else (-0.4, 1.0 * 4))
    with pytest.raises(ValueError, match="mode must be one of training, evaluation, got 'eval'"):
        SearchQAService(world["qa"], retriever=retriever, split="test", mode="eval")
    assert settings_from_environ({"SEARCHQA_MODE": "evaluation"})["mode"] == "evaluation"
    assert settings_from_environ({})["mode"] == "training"
    with pytest.raises(ValueError, match="SEARCHQA_MODE: mode must be one of training, evaluation"):
        settings_from_environ({"SEARCHQA_MODE": "bench"})
    out = world["root"] / "pkg"
    out.mkdir()
    done = subprocess.run([str(BIN / "searchenv"), "serve-openenv", "--task", str(world["qa"]), "--index",
                           str(world["index"]), "--mode", "evaluation", "--max-turns", "4", "--manifest",
                           str(out / "openenv.yaml")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = json.loads((out / "openenv.yaml").read_text())
    assert written["mode"] == "evaluation" and written["validation"]["reward"]["range"] == [-0.4, 4.0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_evaluation_server_passes_openenvs_validator_and_shows_nothing_over_the_websocket(
        world: dict[str, Path]) -> None:
    import asyncio

    import websockets

    port = _free_port()
    proc = subprocess.Popen([str(BIN / "searchenv"), "serve-openenv", "--task", str(world["qa"]), "--index",
                             str(world["index"]), "--split", "test", "--mode", "evaluation", "--reward", "process",
                             "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        report = validate_running_environment(url)
        assert report["passed"], json.dumps(report["criteria"], indent=1)

        async def play() -> list[dict[str, Any]]:
            async with websockets.connect(url.replace("http", "ws") + "/ws") as ws:
                seen = []
                for message in ({"type": "reset", "data": {"example_id": EXAMPLES[1].id}},
                                {"type": "step", "data": {"type": "call_tool", "tool_name": "search",
                                                          "arguments": {"query": EXAMPLES[1].question}}},
                                {"type": "step", "data": {"type": "call_tool", "tool_name": "answer",
                                                          "arguments": {"answer": EXAMPLES[1].answers[0]}}}):
                    await ws.send(json.dumps(message))
                    seen.append(json.loads(await ws.recv())["data"])
                return seen

        _, search, answer = asyncio.run(play())
        assert search["reward"] is None and search["observation"]["reward_terms"] == {}
        assert answer["done"] is True and answer["reward"] >= 1.0  # the outcome and the search's relevance
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_over_post_mcp_an_evaluation_session_shows_no_reward_before_the_end(world: dict[str, Path]) -> None:
    service = SearchQAService(world["qa"], retriever=BM25Retriever.load(world["index"]), split="test",
                              reward="process", mode="evaluation")
    example = EXAMPLES[1]

    def rpc(client: TestClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = client.post("/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).json()
        assert "result" in answer, answer
        return dict(answer["result"])

    with TestClient(create_app(service), base_url=BASE) as client:
        session = rpc(client, "openenv/session/create", {})["session_id"]
        with client.websocket_connect(f"ws://127.0.0.1:8000/ws?session_id={session}") as ws:
            ws.send_text(json.dumps({"type": "reset", "data": {"example_id": example.id}}))
            assert json.loads(ws.receive_text())["type"] == "observation"
        searched = rpc(client, "tools/call", {"session_id": session, "name": "search",
                                              "arguments": {"query": example.question}})
        text = json.dumps(searched)
        assert searched.get("reward") is None, text[:2000]
        assert '"reward_terms": {}' in text or "reward_terms" not in text, text[:2000]
        assert "relevance" not in text and '"em"' not in text, text[:2000]
        answered = rpc(client, "tools/call", {"session_id": session, "name": "answer",
                                              "arguments": {"answer": example.answers[0]}})
        assert "relevance" in json.dumps(answered)  # the episode's terms, at the end
