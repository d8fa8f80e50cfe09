"""MAPPO over the multi-agent RAG roles (MMOA-RAG) on the tiny model: masks, shared returns, resume, warm start, CLI."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agents.trainers.advantages import role_advantages
from agents.trainers.callbacks import LambdaCallback
from agents.trainers.mappo import MAPPOConfig, TeamEpisode, train_mappo
from agents.trainers.mappo_sft import MAPPOSFTConfig, role_samples
from agents.trainers.metrics import read_metrics
from agents.trainers.samples import forward_logprobs, pad_samples
from searchenv.multi_agent import ROLE_PROMPTS, ROLES
from tests.learning import demo_loss, margin
from tests.tiny_model import one_thread, tiny_policy


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with one_thread():
        yield


def _cfg(out: Path, qa: Path, corpus: Path, **kw: Any) -> MAPPOConfig:
    base: dict[str, Any] = {
        "output_dir": str(out), "task": str(qa), "corpus": str(corpus), "max_new_tokens": 5, "batch_size": 2,
        "epochs": 1, "minibatches": 1, "micro_batch_size": 8, "learning_rate": 1e-2, "value_learning_rate": 5e-2,
        "steps": 2, "save_every": 0, "progress": False, "log_every": 0, "top_k": 2, "max_doc_chars": 80,
    }
    base.update(kw)
    return MAPPOConfig(**base)


def _params(policy: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def test_role_advantages_hand_computed() -> None:
    adv, ret = role_advantages([1.0, 0.0], [[0.0, -0.5, 0.0], [-0.5, 0.0, -1.0]],
                               [[0.2, 0.1, 0.5], [0.0, -0.1, 0.3]])
    np.testing.assert_allclose(ret, [[1.0, 0.5, 1.0], [-0.5, 0.0, -1.0]])
    np.testing.assert_allclose(adv, [[0.8, 0.4, 0.5], [-0.5, 0.1, -1.3]])
    with pytest.raises(ValueError, match="shared must be"):
        role_advantages([1.0], [[0.0, 0.0]], [[0.0]])
    with pytest.raises(ValueError, match="finite"):
        role_advantages([math.nan], [[0.0]], [[0.0]])


def test_mappo_trains_every_role_and_only_its_own_tokens(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    policy = tiny_policy(seed=0)
    before = _params(policy)
    seen: list[list[TeamEpisode]] = []
    cfg = _cfg(tmp_path / "run", qa_file, corpus_file, epochs=2, minibatches=2, kl_coef=0.05)
    out = train_mappo(cfg, policy=policy, callbacks=[LambdaCallback(on_batch=lambda step, eps: seen.append(eps))])
    recs = read_metrics(cfg.output_dir)
    assert [r["step"] for r in recs] == [1, 2] and len(seen) == 2
    for rec in recs:
        for key in ("pg_loss", "vf_loss", "kl", "approx_kl", "clip_fraction", "reward_mean", "f1"):
            assert math.isfinite(rec[key]), key
        assert rec["trained_episodes"] == 2 and rec["updates"] == 4
        assert set(rec["roles"]) == set(ROLES)
        for role in ROLES:
            r = rec["roles"][role]
            assert r["tokens"] > 0 and math.isfinite(r["kl"]) and 0 <= r["clip_fraction"] <= 1
            assert r["reward"] == pytest.approx(rec["shared_reward"] + r["penalty"])
    assert recs[1]["value_mean"] != 0  # the zero-initialised value head learned from step 1
    assert any(not torch.equal(v, before[k]) for k, v in _params(out["policy"]).items())
    for episodes in seen:
        for ep in episodes:
            assert ep.roles == list(ROLES)
            assert set(ep.critic.mask) == {0}  # the critic's view is read, never trained as an action
            prefix = 0
            for role, turn, pos in zip(ep.roles, ep.turns, ep.positions, strict=True):
                n = turn.mask.index(1)
                prompt = policy.decode(turn.ids[:n])
                assert ROLE_PROMPTS[role].format(max_queries=4) in prompt  # the role's own prompt, masked out
                assert turn.mask == [0] * n + [1] * (len(turn.ids) - n)  # only the role's generated tokens
                assert turn.extras["advantages"][:n] == [0.0] * n
                assert len(set(turn.extras["advantages"][n:])) == 1  # one advantage per role decision
                assert ep.critic.ids[prefix : prefix + len(turn.ids)] == turn.ids and pos == prefix + n
                assert ep.critic.extras["value_mask"][pos] == 1.0
                assert ep.critic.extras["returns"][pos] == pytest.approx(turn.extras["role_return"])
                prefix += len(turn.ids)
            assert sum(ep.critic.extras["value_mask"]) == len(ROLES)


@pytest.mark.learning
def test_the_shared_return_reaches_every_roles_advantage(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    captured: dict[float, list[TeamEpisode]] = {}
    trained: dict[float, Any] = {}

    def run(value: float) -> dict[str, Any]:
        def shared(ctx: Any) -> tuple[float, dict[str, float]]:  # paid at the answer turn only
            r = value if ctx.terminated or ctx.truncated else 0.0
            return r, {"toy": r}

        cfg = _cfg(tmp_path / f"r{value}", qa_file, corpus_file, steps=1, whiten_advantages=False)
        keep = LambdaCallback(on_batch=lambda step, eps: captured.__setitem__(value, eps))
        trained[value] = train_mappo(cfg, policy=tiny_policy(seed=0), reward=shared, callbacks=[keep])["policy"]
        return read_metrics(cfg.output_dir)[0]

    low, high = run(0.0), run(1.0)
    assert high["shared_reward"] - low["shared_reward"] == pytest.approx(1.0)
    for a, b in zip(captured[0.0], captured[1.0], strict=True):
        assert [t.ids for t in a.turns] == [t.ids for t in b.turns]  # the same episodes, other rewards
        assert b.shared - a.shared == pytest.approx(1.0) and a.penalties == b.penalties
        for ta, tb, pen in zip(a.turns, b.turns, a.penalties, strict=True):
            assert tb.extras["raw_advantage"] - ta.extras["raw_advantage"] == pytest.approx(1.0)
            assert ta.extras["raw_advantage"] == pytest.approx(a.shared + pen - ta.extras["value"])
    for role in ROLES:
        assert high["roles"][role]["advantage"] - low["roles"][role]["advantage"] == pytest.approx(1.0)
        assert high["roles"][role]["reward"] - low["roles"][role]["reward"] == pytest.approx(1.0)
    # every role's advantage is positive in the high run: each role's own tokens became likelier
    assert all(t.extras["raw_advantage"] > 0 for e in captured[1.0] for t in e.turns)
    for j, role in enumerate(ROLES):
        turns = [e.turns[j] for e in captured[1.0]]
        with torch.no_grad():
            after = forward_logprobs(trained[1.0].model, pad_samples(turns, 0)).logprobs
        before = torch.tensor([t.extras["old_logprobs"] + [0.0] * (after.shape[1] - len(t.ids)) for t in turns])
        margin(f"log-likelihood the {role}'s own tokens gained in one step of positive advantages",
               float(after.sum()) - float(before.sum()), 0.0)


def test_train_roles_trains_one_role_the_others_act_frozen(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    seen: list[list[TeamEpisode]] = []
    cfg = _cfg(tmp_path / "run", qa_file, corpus_file, steps=1, train_roles=["selector"])
    train_mappo(cfg, policy=tiny_policy(seed=0),
                callbacks=[LambdaCallback(on_batch=lambda step, eps: seen.append(eps))])
    rec = read_metrics(cfg.output_dir)[0]
    assert rec["roles"]["selector"]["tokens"] > 0 and rec["policy_tokens"] == rec["roles"]["selector"]["tokens"]
    for role in ("rewriter", "generator"):
        assert rec["roles"][role]["tokens"] == 0 and rec["roles"][role]["pg_loss"] == 0
    for ep in seen[0]:
        assert ep.roles == list(ROLES)  # every role still acts
        for role, turn, pos in zip(ep.roles, ep.turns, ep.positions, strict=True):
            trained = role == "selector"
            assert (turn.num_policy_tokens > 0) == trained and ("old_logprobs" in turn.extras) == trained
            assert ep.critic.extras["value_mask"][pos] == float(trained)
    for bad in (["critic"], [], ["selector", "selector"]):
        with pytest.raises(ValueError, match="train_roles"):
            _cfg(tmp_path / "bad", qa_file, corpus_file, train_roles=bad)
    with pytest.raises(ValueError, match="train_roles"):
        _cfg(tmp_path / "bad", qa_file, corpus_file, roles=["selector", "generator"], train_roles=["rewriter"])
    assert _cfg(tmp_path / "ok", qa_file, corpus_file, train_roles=["generator", "rewriter"]).train_roles == [
        "rewriter", "generator"]


def test_mappo_resume_after_kill_matches_uninterrupted_run(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    kw = {"epochs": 2, "minibatches": 2, "kl_coef": 0.05}
    full = _cfg(tmp_path / "a", qa_file, corpus_file, **kw)
    out_full = train_mappo(full, policy=tiny_policy(seed=0))
    part = _cfg(tmp_path / "b", qa_file, corpus_file, **kw)
    train_mappo(part, policy=tiny_policy(seed=0), stop_after=1)
    out_res = train_mappo(part, policy=tiny_policy(seed=0), resume=True)
    a, b = _params(out_full["policy"]), _params(out_res["policy"])
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    for k, v in out_full["value_head"].state_dict().items():
        torch.testing.assert_close(out_res["value_head"].state_dict()[k], v, rtol=0, atol=0)
    keep = ("reward_mean", "pg_loss", "vf_loss", "roles")
    assert [{k: r[k] for k in keep} for r in read_metrics(part.output_dir)] == [
        {k: r[k] for k in keep} for r in read_metrics(full.output_dir)]


def _triples(messages: list[Any]) -> list[list[Any]]:
    return [messages[i : i + 3] for i in range(0, len(messages), 3)]


@pytest.mark.learning
def test_warm_start_learns_each_roles_oracle_output(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.mappo_sft import oracle_pipeline_episodes
    from agents.trainers.sft import train_sft

    policy = tiny_policy(seed=0)
    cfg = MAPPOSFTConfig(output_dir=str(tmp_path / "sft"), task=str(qa_file), corpus=str(corpus_file), steps=3,
                         batch_size=4, micro_batch_size=4, learning_rate=3e-3, num_demos=4, progress=False,
                         log_every=0, save_every=0, top_k=2)
    [episode, *_] = oracle_pipeline_episodes(cfg, 1)
    samples = role_samples(policy, episode["messages"])
    assert len(samples) == len(ROLES)
    for sample, (system, user, assistant) in zip(samples, _triples(episode["messages"]), strict=True):
        n = sample.mask.index(1)
        assert sample.ids[:n] == policy.chat_prompt_ids([system, user])  # what mmoa-llm prompts with
        assert sample.mask[n:] == [1] * (len(sample.ids) - n)
        assert sample.ids[-1] == policy.tokenizer.eos_token_id and policy.decode(sample.ids[n:]) == assistant["content"]
    with pytest.raises(ValueError, match="system, user, assistant"):
        role_samples(policy, episode["messages"][:2])
    oracle, counts = cfg.demonstrations(policy)
    demos = tmp_path / "episodes.jsonl"  # the transcripts `searchenv eval --agent mmoa-oracle` writes
    demos.write_text("".join(json.dumps(r) + "\n" for r in oracle_pipeline_episodes(cfg, 4)))
    from_file, file_counts = MAPPOSFTConfig(**{**cfg.to_dict(), "demos": str(demos)}).demonstrations(policy)
    assert [s.ids for s in from_file] == [s.ids for s in oracle] and file_counts == counts
    before = demo_loss(policy, oracle)
    out = train_sft(cfg, policy=policy)
    recs = read_metrics(cfg.output_dir)
    assert out["last"]["role_samples"] == 3 * out["last"]["demos_kept"] and out["last"]["demos_kept"] >= 3
    assert all(math.isfinite(r["loss"]) for r in recs)
    margin("nats a token the role demonstrations' loss fell by, after 3 SFT steps", before - demo_loss(policy, oracle),
           0.5)
    from agents.trainers.checkpoints import CheckpointError
    from agents.trainers.sft import SFTConfig

    with pytest.raises(CheckpointError, match="mappo-sft`, not sft"):  # a warm-start run resumes only as one
        plain = {k: v for k, v in cfg.to_dict().items() if k in SFTConfig.__dataclass_fields__ and k != "reward"}
        train_sft(SFTConfig(**plain), policy=tiny_policy(seed=0), resume=True)


def test_cli_trains_the_warm_start_then_mappo_from_it(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from typer.testing import CliRunner

    from agents.trainers.checkpoints import load_checkpoint
    from searchenv.cli import get_app
    from tests.tiny_model import build_tiny_model

    model_dir = tmp_path / "tiny"
    model, tokenizer = build_tiny_model(seed=0)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    common = ["--set", f"model={model_dir}", "--set", f"task={qa_file}", "--set", f"corpus={corpus_file}",
              "--set", "steps=1", "--set", "progress=false", "--set", "log_every=0", "--set", "top_k=2",
              "--set", "device=cpu"]
    runner = CliRunner()
    sft = runner.invoke(get_app(), ["train", "mappo-sft", *common, "--set", f"output_dir={tmp_path / 'sft'}",
                                    "--set", "num_demos=2", "--set", "batch_size=2"])
    assert sft.exit_code == 0, sft.output
    ckpt = load_checkpoint(tmp_path / "sft")
    assert ckpt is not None and ckpt["kind"] == "mappo-sft"
    rl = runner.invoke(get_app(), ["train", "mappo", *common, "--set", f"output_dir={tmp_path / 'rl'}",
                                   "--set", f"init_from={tmp_path / 'sft'}", "--set", "batch_size=2",
                                   "--set", "max_new_tokens=4", "--set", 'roles=["selector", "generator"]'])
    assert rl.exit_code == 0, rl.output
    last = json.JSONDecoder().raw_decode(rl.output[rl.output.index('{"step"'):])[0]["last"]
    assert set(last["roles"]) == {"selector", "generator"} and math.isfinite(last["pg_loss"])
    bad = runner.invoke(get_app(), ["train", "mappo", "--dry-run", "--set", 'roles=["rewriter"]'])
    assert bad.exit_code == 2 and "generator" in bad.output
    assert "value_learning_rate" in runner.invoke(get_app(), ["train", "mappo", "--help"]).output
