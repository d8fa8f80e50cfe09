"""One callback protocol for every trainer: SFT, GRPO, PPO and MAPPO call the same hooks in the same order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.trainers.callbacks import Callbacks, LambdaCallback, TrainerCallback
from agents.trainers.metrics import read_metrics
from tests.test_trainers import letter_reward  # registers the toy protocols too
from tests.tiny_model import one_thread, tiny_policy


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


class Recorder(TrainerCallback):
    """Records each hook it receives, by name, with what it was given."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.batches: list[list[Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.summary: Mapping[str, Any] | None = None

    def on_train_begin(self, kind: str, policy: Any) -> None:
        self.events.append(("on_train_begin", kind))
        self.policy = policy

    def on_batch(self, step: int, batch: Sequence[Any]) -> None:
        self.events.append(("on_batch", step))
        self.batches.append(list(batch))

    def on_step_end(self, step: int, metrics: Mapping[str, Any]) -> None:
        self.events.append(("on_step_end", step))
        self.metrics.append(dict(metrics))

    def on_train_end(self, summary: Mapping[str, Any]) -> None:
        self.events.append(("on_train_end",))
        self.summary = summary


def _length_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    r = min(1.0, len(ctx.answer or "") / 8)
    return r, {"length": r}


def _common(out: Path, qa: Path, corpus: Path) -> dict[str, Any]:
    return {"output_dir": str(out), "task": str(qa), "corpus": str(corpus), "steps": 2, "save_every": 0,
            "progress": False, "log_every": 0, "micro_batch_size": 8}


def test_every_trainer_calls_the_same_hooks_in_the_same_order(tmp_path: Path, qa_file: Path,
                                                              corpus_file: Path) -> None:
    from agents.trainers.grpo import GRPOConfig, train_grpo
    from agents.trainers.mappo import MAPPOConfig, train_mappo
    from agents.trainers.ppo import PPOConfig, train_ppo
    from agents.trainers.sft import SFTConfig, train_sft

    toy = {"protocol": "toy-free-answer", "max_turns": 1, "max_new_tokens": 4}
    runs = {
        "sft": lambda cb, **kw: train_sft(SFTConfig(**_common(tmp_path / "sft", qa_file, corpus_file), batch_size=2,
                                                    num_demos=4, max_turns=4), policy=tiny_policy(seed=0),
                                          callbacks=cb, **kw),
        "grpo": lambda cb, **kw: train_grpo(GRPOConfig(**_common(tmp_path / "grpo", qa_file, corpus_file), **toy,
                                                       batch_size=2, group_size=2, kl_coef=0.001),
                                            policy=tiny_policy(seed=0), reward=letter_reward, callbacks=cb, **kw),
        "ppo": lambda cb, **kw: train_ppo(PPOConfig(**_common(tmp_path / "ppo", qa_file, corpus_file), **toy,
                                                    batch_size=2, samples_per_question=2),
                                          policy=tiny_policy(seed=0), reward=_length_reward, callbacks=cb, **kw),
        "mappo": lambda cb, **kw: train_mappo(MAPPOConfig(**_common(tmp_path / "mappo", qa_file, corpus_file),
                                                          max_new_tokens=5, batch_size=2, epochs=1, minibatches=1,
                                                          top_k=2, max_doc_chars=80),
                                              policy=tiny_policy(seed=0), callbacks=cb, **kw),
    }
    legacy: dict[str, list[tuple[Any, ...]]] = {"grpo": [], "mappo": []}
    old_hooks = {  # the hooks the protocol replaces still work, with a warning
        "grpo": {"on_step": lambda step, trained, m, p: legacy["grpo"].append((step, trained, m, p))},
        "mappo": {"on_episodes": lambda step, eps: legacy["mappo"].append((step, eps))},
    }
    seen: dict[str, Recorder] = {}
    for kind, train in runs.items():
        rec = seen[kind] = Recorder()
        if kind in old_hooks:
            with pytest.warns(DeprecationWarning, match=f"train_{kind}\\({next(iter(old_hooks[kind]))}="):
                out = train([rec], **old_hooks[kind])
        else:
            out = train([rec])
        assert rec.events == [("on_train_begin", kind), ("on_batch", 1), ("on_step_end", 1), ("on_batch", 2),
                              ("on_step_end", 2), ("on_train_end",)], kind
        assert rec.policy is out["policy"] and rec.summary is out
        assert rec.metrics == read_metrics(Path(out["run_dir"])) and all(rec.batches), kind
    sft_batch, grpo_batch, ppo_batch, mappo_batch = (seen[k].batches[0] for k in runs)
    assert all(s.num_policy_tokens for s in sft_batch)
    assert all("advantage" in s.extras for s in grpo_batch)
    assert all("advantages" in s.extras and "returns" in s.extras for s in ppo_batch)
    assert all("advantages" in t.extras for e in mappo_batch for t in e.turns)
    # GRPO's on_step: after the step, its trained samples, metrics and the policy; MAPPO's on_episodes: the batch
    grpo = seen["grpo"]
    assert [(s, t, m) for s, t, m, _ in legacy["grpo"]] == list(zip((1, 2), grpo.batches, grpo.metrics, strict=True))
    assert all(p is grpo.policy for *_, p in legacy["grpo"])
    assert legacy["mappo"] == list(zip((1, 2), seen["mappo"].batches, strict=True))


def test_lambda_callbacks_call_what_they_are_given_and_callbacks_refuse_other_objects() -> None:
    calls: list[tuple[Any, ...]] = []
    both = Callbacks([LambdaCallback(on_batch=lambda step, batch: calls.append(("batch", step, len(batch)))),
                      LambdaCallback(on_step_end=lambda step, m: calls.append(("end", step, m["loss"])))])
    both.on_train_begin("sft", None)
    both.on_batch(1, [1, 2])
    both.on_step_end(1, {"loss": 0.5})
    both.on_train_end({})
    assert calls == [("batch", 1, 2), ("end", 1, 0.5)]
    with pytest.raises(TypeError, match="TrainerCallback"):
        Callbacks([lambda step: None])  # type: ignore[list-item]
