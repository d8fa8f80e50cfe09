"""Trainers on a tiny random Llama built in the test: log-probs, SFT, GRPO, PPO, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.devices import GenerationPath
from agents.trainers.callbacks import LambdaCallback
from agents.trainers.metrics import read_metrics
from agents.trainers.samples import Sample, forward_logprobs, pad_samples
from agents.trainers.sft import SFTConfig, messages_to_sample, train_sft
from tests.conftest import EXAMPLES
from tests.learning import demo_loss, margin
from tests.tiny_model import tiny_policy


def _params(policy: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}


def test_forward_logprobs_match_policy_token_logprobs() -> None:
    policy = tiny_policy(seed=1)
    seqs = [policy.encode("<search> where was Velora Quenn born </search>"), policy.encode("<answer> Karsk </answer>")]
    samples = [Sample(s, [0] * 3 + [1] * (len(s) - 3)) for s in seqs]
    out = forward_logprobs(policy.model, pad_samples(samples, 0), temperature=0.7)
    ref = policy.token_logprobs(seqs, [3, 3], temperature=0.7)
    for i, s in enumerate(seqs):
        torch.testing.assert_close(out.logprobs[i, 3 : len(s)], ref[i], atol=1e-5, rtol=1e-5)
        assert torch.all(out.logprobs[i, :3] == 0)


def test_messages_to_sample_masks_everything_but_assistant_turns() -> None:
    policy = tiny_policy(seed=0)
    msgs = [
        {"role": "system", "content": "Answer the question."},
        {"role": "user", "content": "Question: Where was Tobin Quenn born?"},
        {"role": "assistant", "content": "<search> Tobin Quenn </search>"},
        {"role": "tool", "content": "<information>Doc 1(Title: Karsk) Karsk</information>"},
        {"role": "assistant", "content": "<answer> Karsk </answer>"},
    ]
    s = messages_to_sample(policy, msgs)
    trained = policy.decode([t for t, m in zip(s.ids, s.mask, strict=True) if m])
    assert trained == "<search> Tobin Quenn </search><answer> Karsk </answer>"
    hidden = policy.decode([t for t, m in zip(s.ids, s.mask, strict=True) if not m])
    assert "<information>" in hidden and "Question:" in hidden


def _sft_cfg(tmp_path: Path, qa: Path, corpus: Path, **kw: Any) -> SFTConfig:
    base: dict[str, Any] = {
        "output_dir": str(tmp_path / "sft"),
        "task": str(qa),
        "corpus": str(corpus),
        "steps": 4,
        "batch_size": 2,
        "micro_batch_size": 2,
        "learning_rate": 3e-3,
        "num_demos": 4,
        "progress": False,
        "log_every": 0,
        "save_every": 2,
        "max_turns": 4,
    }
    base.update(kw)
    return SFTConfig(**base)


@pytest.mark.learning
def test_sft_lowers_demonstration_loss(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    """SFT lowers the loss of the demonstrations it trains on, measured on all of them before and after."""
    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, steps=8, save_every=0, lr_schedule="cosine", warmup_steps=1)
    policy = tiny_policy(seed=0)
    samples, _ = cfg.demonstrations(policy)
    before = demo_loss(policy, samples)
    out = train_sft(cfg, policy=policy)
    losses = [r["loss"] for r in read_metrics(cfg.output_dir)]
    assert len(losses) == 8
    margin("nats a token the demonstrations' loss fell by, after 8 SFT steps", before - demo_loss(policy, samples),
           1.0)
    assert out["last"]["demos_kept"] >= 3  # the oracle answers these questions correctly
    assert (Path(cfg.output_dir) / "checkpoint.pt").is_file()


def test_sft_resume_after_kill_matches_uninterrupted_run(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    full = _sft_cfg(tmp_path / "a", qa_file, corpus_file)
    p_full = train_sft(full, policy=tiny_policy(seed=0))["policy"]
    part = _sft_cfg(tmp_path / "b", qa_file, corpus_file)
    train_sft(part, policy=tiny_policy(seed=0), stop_after=3)  # "killed" after step 3 (checkpoints at 2, 3)
    p_res = train_sft(part, policy=tiny_policy(seed=0), resume=True)["policy"]
    a, b = _params(p_full), _params(p_res)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    steps = [r["step"] for r in read_metrics(part.output_dir)]
    assert steps == [1, 2, 3, 4]
    assert [r["loss"] for r in read_metrics(part.output_dir)] == [r["loss"] for r in read_metrics(full.output_dir)]


# ---------------------------------------------------------------------------------------------
# GRPO / PPO on a toy protocol: every turn is an answer (or a search), so a tiny random model's
# text is scored directly by a custom reward callable.
# ---------------------------------------------------------------------------------------------

from searchenv.protocols import Answer, Search, SearchR1Protocol, register_protocol  # noqa: E402
from searchenv.retrievers.base import RetrieverError  # noqa: E402

TARGET = "is"


class FreeAnswerProtocol(SearchR1Protocol):
    """Every turn is the final answer (its whole text)."""

    name = "toy-free-answer"

    def parse(self, text: str):  # type: ignore[no-untyped-def]
        return Answer(text.strip() or "-")


class AlwaysSearchProtocol(SearchR1Protocol):
    """Every turn searches its own text."""

    name = "toy-always-search"

    def parse(self, text: str):  # type: ignore[no-untyped-def]
        return Search((text.strip() or "-",))


register_protocol(FreeAnswerProtocol)
register_protocol(AlwaysSearchProtocol)


def toy_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    """1 when the answer contains the fixed string TARGET."""
    r = float(ctx.answer is not None and TARGET in ctx.answer)
    return r, {"toy": r}


class FailingRetriever:
    def search_batch(self, queries: list[str], k: int) -> list[list[Any]]:
        raise RetrieverError("index offline")


def _grpo_cfg(tmp_path: Path, qa: Path, corpus: Path, **kw: Any) -> Any:
    from agents.trainers.grpo import GRPOConfig

    base: dict[str, Any] = {
        "output_dir": str(tmp_path / "grpo"),
        "task": str(qa),
        "corpus": str(corpus),
        "protocol": "toy-free-answer",
        "max_turns": 1,
        "max_new_tokens": 4,
        "batch_size": 2,
        "group_size": 4,
        "micro_batch_size": 8,
        "learning_rate": 2e-2,
        "kl_coef": 0.0,
        "steps": 4,
        "save_every": 0,
        "progress": False,
        "log_every": 0,
    }
    base.update(kw)
    return GRPOConfig(**base)


def letter_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    """A quarter point per letter 'e' in the answer: most completions of a group differ in reward."""
    r = (ctx.answer or "").count("e") / 4
    return r, {"toy": r}


def _letter_score(policy: Any, corpus: Path) -> float:
    """The policy's expected letter reward, estimated on 256 sampled answers (64 a question, fixed seed)."""
    from agents.rollout import rollout

    batch = rollout(
        policy, EXAMPLES, "bm25", group_size=64, protocol="toy-free-answer", max_turns=1, reward=letter_reward,
        max_new_tokens=4, temperature=1.0, seed=7, env_kwargs={"corpus": corpus},
    )
    return sum(ep.episode_return for ep in batch) / len(batch)


@pytest.mark.learning
def test_grpo_raises_a_toy_reward(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    """GRPO raises the expected reward of a dense toy signal (a quarter point per letter 'e' in the answer).

    Estimated on 256 sampled answers before and after (the estimate's standard error is about 0.03).
    16 steps: after 12, every run seen (tiny models of seeds 0-4, native and portable arithmetic) had
    risen from at most 0.11 to 0.46 or more, while the first token's share of the letter, a proxy
    tried first, fell in two of them (the letter moved to later tokens).
    """
    from agents.trainers.grpo import train_grpo

    policy = tiny_policy(seed=0)
    before = _letter_score(policy, corpus_file)
    out = train_grpo(_grpo_cfg(tmp_path, qa_file, corpus_file, steps=16), policy=policy, reward=letter_reward)
    after = _letter_score(out["policy"], corpus_file)
    margin("expected letter reward of 4-token answers, after 16 GRPO steps", after, before + 0.25)
    recs = read_metrics(tmp_path / "grpo")
    assert len(recs) == 16
    assert {"reward_mean", "reward_std", "em", "searches", "kl", "clip_fraction", "entropy", "response_tokens",
            "zero_variance_groups", "infra_errors", "invalid_share"} <= set(recs[0])
    assert set(recs[0]["seconds"]) >= {"generation", "environment", "training", "total"}
    assert recs[0]["reward_terms"]["toy"]["mean"] == pytest.approx(recs[0]["reward_mean"])


@pytest.mark.parametrize("lora", [False, True])
def test_grpo_samples_from_a_bfloat16_copy_that_follows_every_update(
    tmp_path: Path, qa_file: Path, corpus_file: Path, lora: bool
) -> None:
    from agents.trainers.grpo import train_grpo

    policy = tiny_policy(seed=0)
    extra: dict[str, Any] = {"lora": True, "lora_r": 4} if lora else {}
    cfg = _grpo_cfg(tmp_path, qa_file, corpus_file, steps=2, generation_dtype="bfloat16", **extra)
    out = train_grpo(cfg, policy=policy, reward=toy_reward)["policy"]
    low = out._gen.held  # as the last update left it (reading generation_model would refresh it)
    assert low is not None and low is not out.model and next(low.parameters()).dtype == torch.bfloat16
    assert next(out.model.parameters()).dtype == torch.float32
    for (name, p), q in zip(out.model.named_parameters(), low.parameters(), strict=True):
        assert torch.equal(q, p.detach().to(torch.bfloat16)), name  # refreshed after the last update
    assert out._gen.refreshes >= 2  # once per update, by the trainer
    for field, value in (("generation_dtype", "int8"), ("decode", "fast"), ("cuda_graph", "yes")):
        with pytest.raises(ValueError, match=field):
            _grpo_cfg(tmp_path, qa_file, corpus_file, **{field: value})
    # float32: the weights themselves; the loop and the graph as told (the device no longer chooses them)
    told_cfg = _grpo_cfg(tmp_path / "told", qa_file, corpus_file, steps=1, generation_dtype="float32",
                         decode="static", cuda_graph=False)
    told = train_grpo(told_cfg, policy=tiny_policy(seed=0), reward=toy_reward)["policy"]
    assert told.generation_path() == GenerationPath(decode="static", fixed_shape_step=False, dtype=None)


def test_grpo_resume_after_kill_matches_uninterrupted_run(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.grpo import train_grpo

    kw = {"steps": 2, "batch_size": 2, "group_size": 2, "epochs": 2, "minibatches": 2, "kl_coef": 0.05,
          "max_new_tokens": 3}
    full = _grpo_cfg(tmp_path / "a", qa_file, corpus_file, **kw)
    p_full = train_grpo(full, policy=tiny_policy(seed=0), reward=toy_reward)["policy"]
    part = _grpo_cfg(tmp_path / "b", qa_file, corpus_file, **kw)
    train_grpo(part, policy=tiny_policy(seed=0), reward=toy_reward, stop_after=1)
    p_res = train_grpo(part, policy=tiny_policy(seed=0), reward=toy_reward, resume=True)["policy"]
    a, b = _params(p_full), _params(p_res)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    rewards = [r["reward_mean"] for r in read_metrics(part.output_dir)]
    assert rewards == [r["reward_mean"] for r in read_metrics(full.output_dir)]


def test_infra_error_episodes_are_dropped_and_counted(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.grpo import train_grpo

    cfg = _grpo_cfg(tmp_path, qa_file, corpus_file, protocol="toy-always-search", steps=1, kl_coef=0.1)
    policy = tiny_policy(seed=0)
    before = _params(policy)
    train_grpo(cfg, policy=policy, retriever=FailingRetriever())
    (rec,) = read_metrics(cfg.output_dir)
    assert rec["infra_errors"] == rec["episodes"] == 8
    assert rec["trained_episodes"] == 0
    for k, v in _params(policy).items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_grpo_with_lora_trains_only_adapters(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.grpo import train_grpo

    cfg = _grpo_cfg(tmp_path, qa_file, corpus_file, steps=1, lora=True, lora_r=4, kl_coef=0.1, group_size=2,
                    max_new_tokens=3)
    policy = tiny_policy(seed=0)
    base = {k: v.clone() for k, v in policy.model.state_dict().items()}
    out = train_grpo(cfg, policy=policy, reward=toy_reward)
    model = out["policy"].model
    assert hasattr(model, "peft_config")
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    merged = model.merge_and_unload().state_dict()
    assert set(merged) == set(base)


def test_ppo_token_rewards_and_a_few_steps(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.ppo import PPOConfig, token_rewards, train_ppo

    s = Sample([1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 0, 0, 1, 1],
               {"turn_ends": [2, 6], "turn_rewards": [0.2, 1.0], "return": 1.2})
    assert token_rewards(s).tolist() == [0.0, 0.2, 0.0, 1.0]

    cfg = PPOConfig(
        output_dir=str(tmp_path / "ppo"), task=str(qa_file), corpus=str(corpus_file), protocol="toy-free-answer",
        max_turns=1, max_new_tokens=4, batch_size=4, samples_per_question=2, micro_batch_size=8,
        learning_rate=1e-2, value_learning_rate=5e-2, steps=2, save_every=0, progress=False, log_every=0,
    )
    def length_reward(ctx: Any) -> tuple[float, dict[str, float]]:  # dense, so the value head has targets
        r = min(1.0, len(ctx.answer or "") / 8)
        return r, {"length": r}

    out = train_ppo(cfg, policy=tiny_policy(seed=0), reward=length_reward)
    recs = read_metrics(cfg.output_dir)
    assert len(recs) == 2
    assert all(r["vf_loss"] >= 0 for r in recs)
    assert recs[0]["reward_mean"] > 0
    assert recs[1]["value_mean"] != 0  # the zero-initialised value head learned from step 1
    assert float(out["value_head"].linear.weight.detach().abs().sum()) > 0


def test_sft_names_the_bad_line_of_a_demonstrations_file(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    demos = tmp_path / "demos.jsonl"
    demos.write_bytes(b'{"messages": []}\n{"messages": [\xff]}\n')
    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, demos=str(demos))
    with pytest.raises(ValueError, match=r"demos\.jsonl:2: not valid UTF-8"):
        train_sft(cfg, policy=tiny_policy(seed=0))


def _half_flat_reward(ctx: Any) -> tuple[float, dict[str, float]]:
    """No signal for q1 and q2 (always 0); a length-dependent reward, which sampling varies, for the others."""
    value = 0.0 if ctx.example.id in ("q1", "q2") else float(len(ctx.text) % 3)
    return value, {"toy": value}


def test_dynamic_sampling_keeps_only_groups_with_signal(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.grpo import GRPOConfig, train_grpo

    sizes: list[int] = []
    groups: list[int] = []
    cfg = _grpo_cfg(tmp_path, qa_file, corpus_file, steps=2, batch_size=2, group_size=4, dynamic_sampling=True,
                    max_sampling_rounds=4, max_new_tokens=6)
    train_grpo(cfg, policy=tiny_policy(seed=0), reward=_half_flat_reward,
               callbacks=[LambdaCallback(on_batch=lambda step, trained: sizes.append(len(trained)),
                                         on_step_end=lambda step, m: groups.append(m["groups"]))])
    recs = read_metrics(cfg.output_dir)
    for rec in recs:
        assert rec["zero_variance_groups"] == 0  # never a group without signal in the batch
        assert rec["groups"] == 2 and rec["dropped_groups"] >= 0 and 1 <= rec["sampling_rounds"] <= 4
    assert any(r["dropped_groups"] > 0 for r in recs)  # q1/q2 came up and were replaced
    assert all(0 < n <= 8 for n in sizes) and groups == [2, 2]  # at most 2 groups x 4 samples each step
    plain = _grpo_cfg(tmp_path / "plain", qa_file, corpus_file, steps=2, batch_size=2, group_size=4,
                      max_new_tokens=6)
    train_grpo(plain, policy=tiny_policy(seed=0), reward=_half_flat_reward)
    assert any(r["zero_variance_groups"] > 0 for r in read_metrics(plain.output_dir))  # without it they stay
    with pytest.raises(ValueError, match="max_sampling_rounds"):
        GRPOConfig(max_sampling_rounds=0)


def test_ppo_drops_and_counts_episodes_the_retriever_failed_in(tmp_path: Path, qa_file: Path,
                                                                corpus_file: Path) -> None:
    from agents.trainers.ppo import PPOConfig, train_ppo

    cfg = PPOConfig(
        output_dir=str(tmp_path / "ppo"), task=str(qa_file), corpus=str(corpus_file), protocol="toy-always-search",
        max_turns=1, max_new_tokens=4, batch_size=2, samples_per_question=2, micro_batch_size=8, steps=1,
        save_every=0, progress=False, log_every=0,
    )
    policy = tiny_policy(seed=0)
    before = _params(policy)
    train_ppo(cfg, policy=policy, retriever=FailingRetriever())
    (rec,) = read_metrics(cfg.output_dir)
    assert rec["infra_errors"] == 4
    for k, v in _params(policy).items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_sft_never_learns_from_a_demonstration_the_retriever_failed_in(tmp_path: Path, qa_file: Path,
                                                                       corpus_file: Path) -> None:
    from agents.trainers.sft import load_demos, oracle_transcripts

    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, successful_only=False, num_demos=3)
    records = oracle_transcripts(cfg, 3, FailingRetriever())
    assert all(r["metrics"]["infra_errors"] for r in records)
    demos = tmp_path / "demos.jsonl"
    good = oracle_transcripts(cfg, 2, None)
    demos.write_text("".join(json.dumps(r) + "\n" for r in good + records))
    samples, stats = load_demos(_sft_cfg(tmp_path, qa_file, corpus_file, demos=str(demos), successful_only=False),
                                tiny_policy(seed=0))
    assert len(samples) == 2 and stats["demos_kept"] == 2.0 and stats["demos_infra_errors"] == 3.0


def test_shuffled_minibatches_draw_one_permutation_per_pass_and_skip_empty_parts() -> None:
    import numpy as np

    from agents.trainers.rl_run import shuffled_minibatches

    items = ["a", "b", "c"]
    gen, ref = np.random.default_rng(7), np.random.default_rng(7)
    got = list(shuffled_minibatches(items, gen, 2, 4))
    want = []
    for _ in range(2):  # the draws the trainers made inline before: one permutation per pass
        want += [[items[i] for i in part] for part in np.array_split(ref.permutation(len(items)), 4) if len(part)]
    assert got == want and len(got) == 6 and all(got)
    assert gen.random() == ref.random()  # nothing else drawn


def test_add_kl_penalty_adds_the_weighted_aggregated_estimate() -> None:
    from agents.trainers.losses import add_kl_penalty, aggregate, kl_estimate

    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]])
    ref = torch.tensor([[-1.2, -1.5, -0.4], [-0.9, -0.2, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss = torch.tensor(0.25)
    same, zero = add_kl_penalty(loss, lp, None, mask, 0.1)
    assert same is loss and zero == 0.0
    out, kl = add_kl_penalty(loss, lp, ref, mask, 0.1, "k3", "sequence")
    want = aggregate(kl_estimate(lp, ref, "k3"), mask, "sequence")
    assert torch.equal(out, loss + 0.1 * want) and kl == float(want)


def test_ppo_and_mappo_configs_validate_their_value_settings_alike() -> None:
    from agents.trainers.mappo import MAPPOConfig
    from agents.trainers.ppo import PPOConfig

    for cls in (PPOConfig, MAPPOConfig):
        cfg = cls(batch_size=3, samples_per_question=2)
        assert cfg.episodes_per_step == 6 and (cfg.epochs, cfg.minibatches, cfg.kl_coef) == (2, 2, 0.0)
        for name, bad in (("value_clip", float("nan")), ("vf_coef", -1.0), ("value_learning_rate", 0.0)):
            with pytest.raises(ValueError, match=name):
                cls(**{name: bad})


@pytest.mark.parametrize("lora", [False, True])
def test_train_layers_trains_only_the_top_layers(tmp_path: Path, qa_file: Path, corpus_file: Path, lora: bool) -> None:
    """train_layers=1: the last decoder layer moves (with the final norm and the untied head, or as adapters there);
    the embeddings and the lower layers do not."""
    policy = tiny_policy(seed=0)
    before = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    last = max(int(k.split(".layers.")[1].split(".")[0]) for k in before if ".layers." in k)
    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, steps=2, save_every=0, train_layers=1, lora=lora, lora_r=4)
    model = train_sft(cfg, policy=policy)["policy"].model
    if lora:
        adapted = [n for n, _ in model.named_parameters() if ".lora_" in n]
        assert adapted and {int(n.split(".layers.")[1].split(".")[0]) for n in adapted} == {last}
        model = model.merge_and_unload()
    may_move = [f".layers.{last}."] if lora else [f".layers.{last}.", "model.norm.", "lm_head."]
    after = model.state_dict()
    moved = {k for k, v in before.items() if not torch.equal(after[k], v)}
    assert moved and all(any(m in k for m in may_move) for k in moved), sorted(moved)
    assert any(f".layers.{last}." in k for k in moved)
    with pytest.raises(ValueError, match="train_layers=99 but the model has"):
        train_sft(_sft_cfg(tmp_path / "big", qa_file, corpus_file, steps=1, train_layers=99),
                  policy=tiny_policy(seed=0))
    with pytest.raises(ValueError, match="train_layers must be a positive integer"):
        _sft_cfg(tmp_path, qa_file, corpus_file, train_layers=0)


def test_paths_are_stored_absolute(tmp_path: Path, qa_file: Path, corpus_file: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative model folder or demonstrations file is resolved once: the run folder works from anywhere."""
    (tmp_path / "models" / "mine").mkdir(parents=True)
    (tmp_path / "demos.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, model="models/mine", demos="demos.jsonl")
    assert cfg.model == str(tmp_path / "models" / "mine") and cfg.demos == str(tmp_path / "demos.jsonl")
    assert _sft_cfg(tmp_path, qa_file, corpus_file).model == "smollm2-135m"  # a name stays a name


def test_time_budget_fits_the_schedule_and_stops_when_no_step_fits() -> None:
    """Hand-computed: 10 s steps in a 1-minute budget of 100 planned steps end at step 6, the cosine with them."""
    from agents.trainers.optim import Schedule, TimeBudget

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, Schedule("cosine", 0, 100))
    budget = TimeBudget(1.0, 100)
    stops = [budget.after_step(step, 10.0, sched) for step in range(1, 7)]
    assert stops == [False] * 5 + [True] and sched.lr_lambdas[0].total == 6
    assert sched.state_dict()["lr_lambdas"] == [{"schedule": "cosine", "warmup": 0, "total": 6}]  # kept on resume
    resumed = TimeBudget(1.0, 100, spent=50.0, done=5)  # an interrupted run's 5 steps count
    assert resumed.after_step(6, 10.0, sched) is True
    assert TimeBudget(None, 100).after_step(1, 1e9, sched) is False  # no budget: only steps ends the run


def test_sft_stops_when_max_minutes_is_spent(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    cfg = _sft_cfg(tmp_path, qa_file, corpus_file, steps=50, save_every=0, lr_schedule="cosine",
                   max_minutes=1e-4)
    out = train_sft(cfg, policy=tiny_policy(seed=0))
    assert out["step"] == 1 and len(read_metrics(cfg.output_dir)) == 1
    assert torch.load(Path(cfg.output_dir) / "checkpoint.pt", weights_only=True)["step"] == 1
    again = train_sft(cfg, policy=tiny_policy(seed=0), resume=True)  # ended by its budget: no step more
    assert again["step"] == 1 and len(read_metrics(cfg.output_dir)) == 1
    with pytest.raises(ValueError, match="max_minutes must be a positive number"):
        _sft_cfg(tmp_path, qa_file, corpus_file, max_minutes=0)


def test_grpo_stops_when_max_minutes_is_spent(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.trainers.grpo import train_grpo

    cfg = _grpo_cfg(tmp_path, qa_file, corpus_file, steps=50, max_minutes=1e-4, lr_schedule="linear")
    out = train_grpo(cfg, policy=tiny_policy(seed=0), reward=toy_reward)
    assert out["step"] == 1 and len(read_metrics(cfg.output_dir)) == 1
    assert torch.load(Path(cfg.output_dir) / "checkpoint.pt", weights_only=True)["step"] == 1
    again = train_grpo(cfg, policy=tiny_policy(seed=0), reward=toy_reward, resume=True)
    assert again["step"] == 1 and len(read_metrics(cfg.output_dir)) == 1


def test_frozen_layers_reused_give_the_whole_models_logprobs(tmp_path: Path, qa_file: Path,
                                                              corpus_file: Path) -> None:
    """The state kept at the first trained layer, run through the trained layers only, scores what the whole
    model scores; SFT reusing it trains the same weights as SFT recomputing it."""
    from agents.trainers.frozen import FrozenLayers
    from agents.trainers.models import freeze_below, pad_token_id

    policy = tiny_policy(seed=0)
    cfg = _sft_cfg(tmp_path / "x", qa_file, corpus_file)
    samples, _ = cfg.demonstrations(policy)
    freeze_below(policy.model, 1)
    frozen = FrozenLayers(policy.model, 1)
    pad = pad_token_id(policy)
    for keys in ([0, 1], [1, 0], [1, 2]):  # computed, then reused (in another order and batch), then mixed
        mb = [samples[k] for k in keys]
        got = frozen.forward_logprobs(mb, keys, pad_samples(mb, pad), pad).logprobs
        want = forward_logprobs(policy.model, pad_samples(mb, pad)).logprobs
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (frozen.computed, frozen.reused) == (3, 3)
    runs = {}
    for reuse in (True, False):
        c = _sft_cfg(tmp_path / str(reuse), qa_file, corpus_file, steps=6, save_every=0, train_layers=1,
                     reuse_frozen=reuse)
        runs[reuse] = train_sft(c, policy=tiny_policy(seed=0))
    assert runs[True]["last"]["frozen_reused"] > 0 and "frozen_reused" not in runs[False]["last"]
    a, b = runs[True]["policy"].model.state_dict(), runs[False]["policy"].model.state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-3, atol=1e-4)


def test_sft_all_token_loss_trains_every_token_after_the_first(tmp_path: Path, qa_file: Path,
                                                               corpus_file: Path) -> None:
    policy = tiny_policy(seed=0)
    agent = _sft_cfg(tmp_path / "a", qa_file, corpus_file).demonstrations(policy)[0]
    every = _sft_cfg(tmp_path / "b", qa_file, corpus_file, loss_tokens="all").demonstrations(policy)[0]
    assert [s.ids for s in every] == [s.ids for s in agent]
    assert all(s.mask == [0] + [1] * (len(s.ids) - 1) for s in every)
    assert sum(s.num_policy_tokens for s in every) > 2 * sum(s.num_policy_tokens for s in agent)
    with pytest.raises(ValueError, match="loss_tokens must be 'agent' or 'all'"):
        _sft_cfg(tmp_path / "c", qa_file, corpus_file, loss_tokens="prompt")


def test_sft_corpus_phase_reads_no_held_out_evidence_and_resumes_exactly(tmp_path: Path) -> None:
    """corpus_steps: the first steps train on the task's passages, never a dev or test question's evidence."""
    from agents.trainers.sft import CorpusPassages
    from searchenv.tasks.registry import load_task

    def cfg(folder: str) -> SFTConfig:
        return SFTConfig(output_dir=str(tmp_path / folder), task="synthetic-2hop", steps=4, corpus_steps=2,
                         corpus_tokens=48, batch_size=2, micro_batch_size=2, num_demos=2, learning_rate=3e-3,
                         progress=False, log_every=0, save_every=1, max_turns=3, max_doc_chars=200)

    task = load_task("synthetic-2hop")
    held = {i for split in ("dev", "test") for ex in task.examples(split) for i in ex.evidence_ids}
    passages = CorpusPassages(cfg("probe"), tiny_policy(seed=0))
    assert held <= passages.excluded
    seen = {passages.docs[i].id for step in range(1, 200) for i in passages.batch(step)[0]}
    assert len(seen) > 300 and not seen & passages.excluded
    full = train_sft(cfg("full"), policy=tiny_policy(seed=0))["policy"]
    assert [r["phase"] for r in read_metrics(tmp_path / "full")] == ["corpus", "corpus", "demonstrations",
                                                                       "demonstrations"]
    train_sft(cfg("part"), policy=tiny_policy(seed=0), stop_after=1)  # killed inside the corpus phase
    resumed = train_sft(cfg("part"), policy=tiny_policy(seed=0), resume=True)["policy"]
    a, b = _params(full), _params(resumed)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    with pytest.raises(ValueError, match="must leave steps for the demonstrations"):
        SFTConfig(output_dir=str(tmp_path / "x"), task="synthetic-2hop", steps=2, corpus_steps=2)
