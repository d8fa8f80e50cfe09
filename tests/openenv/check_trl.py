"""TRL's GRPOTrainer against ``searchenv serve-openenv`` (run in .venv-openenv, which holds TRL and OpenEnv's client).

:class:`~agents.integrations.trl.server_env.SearchQAServerToolEnv` is TRL's ``environment_factory``
with each rollout a session of the server. Its tools answer what the in-process tool env answers for the
same calls, and its returns are the in-process returns; a GRPO step of the tiny model runs through it
as docs/serving/openenv.md shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DOCS, EXAMPLES
from tests.doc_blocks import wait_until_healthy
from tests.tiny_model import build_tiny_model

from agents.integrations.trl import SearchQAToolEnv
from agents.integrations.trl.server_env import SearchQAServerToolEnv
from searchenv.retrievers.bm25 import BM25Retriever
from searchenv.tasks import write_qa_jsonl

BIN = Path(sys.executable).parent
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    import socket

    root = tmp_path_factory.mktemp("trl-openenv")
    BM25Retriever.build(DOCS, root / "idx")
    write_qa_jsonl(root / "qa.jsonl", EXAMPLES)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([str(BIN / "searchenv"), "serve-openenv", "--task", str(root / "qa.jsonl"), "--index",
                             str(root / "idx"), "--split", "test", "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(proc, url)
    yield url, root
    proc.terminate()
    proc.wait(timeout=10)


def _calls(example: Any) -> list[tuple[str, str]]:
    subs = [("search", s.question) for s in example.decomposition[:2]] or [("search", example.question)]
    return [("answer", ""), *subs, ("search", "zzz"), ("answer", example.answers[0])]


def test_the_server_tool_env_answers_and_scores_as_in_process(served: tuple[str, Path]) -> None:
    url, root = served
    remote_factory = SearchQAServerToolEnv.factory(url, split="test")
    local_factory = SearchQAToolEnv.factory(list(EXAMPLES), retriever=BM25Retriever.load(root / "idx"),
                                            protocol="tools", top_k=3, max_turns=4, max_doc_chars=1500)
    assert [r["example_id"] for r in remote_factory.dataset()] == [r["example_id"] for r in local_factory.dataset()]
    answered = 0
    for example in EXAMPLES:
        remote, local = remote_factory(), local_factory()
        remote.reset(example_id=example.id)
        local.reset(example_id=example.id)
        for name, text in _calls(example):
            assert getattr(remote, name)(text) == getattr(local, name)(text), (example.id, name, text)
        assert remote.get_reward() == pytest.approx(local.get_reward())
        final = remote.final_info
        if final is not None:
            assert final["em"] == local.final_metrics["em"]
            answered += int(final["em"] == 1.0)
        remote._close()
    assert answered >= 2  # the scripted calls answer most questions right: the returns compared are not all zero


def test_a_grpo_step_runs_through_the_server(served: tuple[str, Path], tmp_path: Path) -> None:
    from importlib.resources import files

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    url, _ = served
    model, tokenizer = build_tiny_model(seed=0)
    tokenizer.chat_template = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()  # renders tool calls
    make_env = SearchQAServerToolEnv.factory(url, split="test")
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                      max_steps=1, logging_steps=1, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                      beta=0.0, max_completion_length=16, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, environment_factory=make_env,
                          train_dataset=Dataset.from_list(make_env.dataset() * 2))
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 1 and "rewards/SearchQAServerToolEnv/mean" in logs[0]  # the served env owns the reward
