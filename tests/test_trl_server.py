"""TRL's vllm_mode="server": the rollout adapter through TRL's real VLLMClient.

vLLM needs a GPU, so the server is the one stand-in: a small HTTP server speaking vLLM's
OpenAI-compatible completions format (token-id prompts, ``return_token_ids``, sampled-token
log-probs as ``token_id:<id>`` strings, stop strings kept in the output) and generating with a
tiny real model in this process. Everything on the client side is TRL's and this package's code.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from agents.integrations.trl import SearchQARollout  # noqa: E402
from agents.policies.hf import HFPolicy  # noqa: E402
from agents.policies.vllm import VLLMServerPolicy  # noqa: E402
from agents.rollout import RolloutEngine  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    model, tokenizer = build_tiny_model(0)
    return HFPolicy(model, tokenizer)


@pytest.fixture(scope="module")
def server(tiny: HFPolicy) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._send({"data": [{"id": "tiny"}]} if self.path.startswith("/v1/models") else {})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append(body)
            with one_thread():
                gens = tiny.generate(body["prompt"], stop=body.get("stop") or (), max_new_tokens=body["max_tokens"],
                                     temperature=body["temperature"], top_p=body["top_p"], seed=body.get("seed"))
            self._send({"choices": [{
                "prompt_token_ids": list(p), "token_ids": list(g.token_ids),
                "logprobs": {"tokens": [f"token_id:{t}" for t in g.token_ids],
                             "token_logprobs": list(g.logprobs or []), "top_logprobs": [None] * len(g.token_ids)},
            } for p, g in zip(body["prompt"], gens, strict=True)]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    httpd.shutdown()


def _client(url: str) -> Any:
    """TRL's client; its constructor refuses to run without vLLM installed, which its HTTP calls never use."""
    import trl.generation.vllm_client as vc

    real = vc.is_vllm_available
    vc.is_vllm_available = lambda: True  # type: ignore[assignment]
    try:
        return vc.VLLMClient(base_url=url, connection_timeout=10)
    finally:
        vc.is_vllm_available = real


def test_server_policy_sends_token_ids_and_stop_strings_and_keeps_the_servers_tokens(tiny: HFPolicy, server) -> None:  # type: ignore[no-untyped-def]
    url, requests = server
    policy = VLLMServerPolicy(_client(url), tiny.tokenizer)
    prompts = [tiny.encode("Question: where is Karsk?"), tiny.encode("<search> x")]
    with one_thread():
        want = tiny.generate(prompts, stop=("</search>",), max_new_tokens=12, temperature=0.0)
    got = policy.generate(prompts, stop=("</search>",), max_new_tokens=12, temperature=0.0, seed=[1, 2])
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert all(g.logprobs is not None and len(g.logprobs) == len(g.token_ids) for g in got)
    sent = requests[-1]
    assert sent["prompt"] == prompts and sent["stop"] == ["</search>"] and sent["include_stop_str_in_output"]
    assert sent["return_token_ids"] and isinstance(sent["seed"], int) and sent["logprobs"] == 0
    assert all(g.finish_reason in {"stop", "eos", "length"} for g in got)
    assert policy.generate([], max_new_tokens=4) == []


def test_rollouts_through_the_server_are_token_exact(tiny: HFPolicy, server, make_env) -> None:  # type: ignore[no-untyped-def]
    url, _ = server
    policy = VLLMServerPolicy(_client(url), tiny.tokenizer)
    env = make_env(max_turns=2)
    batch = RolloutEngine(policy, env, max_new_tokens=10, temperature=1.0).run(EXAMPLES[:2], group_size=2, seed=3)
    for rec in batch:
        pieces: list[int] = []
        for t, (start, _end) in enumerate(rec.turn_spans):
            assert pieces == rec.completion_ids[:start]
            pieces.extend(rec.generated_ids[t])
            if t < len(rec.env_ids):
                pieces.extend(rec.env_ids[t])
        assert pieces == rec.completion_ids  # generated ids as the server sampled them, replies encoded once
        for start, end in rec.turn_spans:
            assert all(m == 1 for m in rec.loss_mask[start:end])


def test_the_rollout_adapter_picks_the_server_policy_for_one_process(tiny: HFPolicy, server) -> None:  # type: ignore[no-untyped-def]
    url, _ = server
    client = _client(url)
    trainer = SimpleNamespace(use_vllm=True, vllm_mode="server", processing_class=tiny.tokenizer,
                              vllm_generation=SimpleNamespace(vllm_client=client),
                              accelerator=SimpleNamespace(num_processes=1))
    rollout = SearchQARollout.__new__(SearchQARollout)
    with rollout._policy(trainer) as policy:
        assert isinstance(policy, VLLMServerPolicy) and policy.client is client
    trainer.accelerator.num_processes = 2
    with pytest.raises(ValueError, match="needs one training process"), rollout._policy(trainer):
        pass
    trainer.vllm_mode = "remote"
    with pytest.raises(ValueError, match="'colocate' or 'server'"), rollout._policy(trainer):
        pass
