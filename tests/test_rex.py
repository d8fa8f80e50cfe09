"""REX-RAG probes: replayed turns, the inserted remark, its removal for training, importance weights."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agents.policies.hf import HFPolicy  # noqa: E402
from agents.rollout import ProbeStart, rollout  # noqa: E402
from agents.trainers.callbacks import LambdaCallback  # noqa: E402
from agents.trainers.episodes import episode_from_record  # noqa: E402
from agents.trainers.metrics import read_metrics  # noqa: E402
from agents.trainers.models import pad_token_id  # noqa: E402
from searchenv.retrievers.bm25 import BM25Retriever  # noqa: E402
from tests.tiny_model import build_tiny_model, one_thread  # noqa: E402

from .conftest import DOCS, EXAMPLES  # noqa: E402

REMARK = "<think> Wait, search again. </think>\n"


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    model, tokenizer = build_tiny_model(0)
    return HFPolicy(model, tokenizer)


@pytest.fixture(scope="module")
def bm25(tmp_path_factory: pytest.TempPathFactory) -> BM25Retriever:
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("rex") / "idx")


def _run(policy: HFPolicy, retriever: Any, seed: int, starts: Any = None) -> Any:
    return rollout(policy, [EXAMPLES[0]], retriever, max_turns=3, max_new_tokens=10, temperature=1.0, seed=seed,
                   starts=starts)[0]


def test_a_probe_replays_the_first_turns_then_inserts_the_remark(tiny: HFPolicy, bm25: BM25Retriever) -> None:
    source = _run(tiny, bm25, seed=1)
    assert len(source.turn_texts) == 3  # the random model never answers: three (invalid) turns
    probe = _run(tiny, bm25, seed=2, starts=[ProbeStart(source, 2, REMARK)])
    cut = source.turn_spans[2][0]  # two turns and the environment's replies to them
    assert probe.replayed_turns == 2 and probe.turn_texts[:2] == source.turn_texts[:2]
    assert probe.completion_ids[:cut] == source.completion_ids[:cut]
    assert probe.loss_mask[:cut] == source.loss_mask[:cut] and probe.logprobs[:cut] == source.logprobs[:cut]
    assert probe.probe_span == (cut, cut + len(tiny.encode(REMARK)))
    lo, hi = probe.probe_span
    assert probe.completion_ids[lo:hi] == tiny.encode(REMARK) and probe.loss_mask[lo:hi] == [0] * (hi - lo)
    assert len(probe.turn_texts) == 3 and probe.turn_spans[2][0] == hi  # then the policy goes on
    assert probe.rewards[:2] == source.rewards[:2]  # the environment saw the same turns
    fresh = _run(tiny, bm25, seed=2)
    assert fresh.probe_span is None and fresh.replayed_turns == 0
    with pytest.raises(ValueError, match="turns must be in"):
        ProbeStart(source, 3, REMARK)
    with pytest.raises(ValueError, match="probe_text"):
        ProbeStart(source, 1, "")
    with pytest.raises(ValueError, match="cannot replay an episode of"):
        rollout(tiny, [EXAMPLES[1]], bm25, max_turns=3, max_new_tokens=10, seed=3,
                starts=[ProbeStart(source, 1, REMARK)])


def test_probe_samples_drop_the_remark_and_weights_match_hand_computation(tiny: HFPolicy, bm25: BM25Retriever
                                                                          ) -> None:
    from agents.trainers.grpo import GRPOConfig, importance_weights

    source = _run(tiny, bm25, seed=1)
    probe = _run(tiny, bm25, seed=2, starts=[ProbeStart(source, 1, REMARK)])
    lo, hi = probe.probe_span
    ep = episode_from_record(probe)
    s = ep.sample
    n_prompt = len(probe.prompt_ids)
    assert s.ids == probe.prompt_ids + probe.completion_ids[:lo] + probe.completion_ids[hi:]
    assert s.mask == [0] * n_prompt + probe.loss_mask[:lo] + probe.loss_mask[hi:]
    assert s.extras["probe"] and s.extras["probe_at"] == n_prompt + lo
    behavior = s.extras["behavior_logprobs"]
    assert behavior[n_prompt:] == probe.logprobs[:lo] + probe.logprobs[hi:]
    # turn ends still point at each turn's last generated token
    assert [s.ids[t] for t in s.extras["turn_ends"]] == [g[-1] for g in probe.generated_ids]

    # hand computation: mu(token | remark) from the whole record, pi(token | no remark) from the sample
    with torch.no_grad():
        with_remark = tiny.token_logprobs([probe.input_ids], [1])[0]
        without = tiny.token_logprobs([s.ids], [1])[0]
    trained = [i for i, m in enumerate(s.mask) if m]
    full_pos = [i if i < n_prompt + lo else i + (hi - lo) for i in trained]  # the same tokens in the record
    mu = [float(with_remark[p - 1]) for p in full_pos]
    pi = [float(without[i - 1]) for i in trained]
    assert mu == pytest.approx([behavior[i] for i in trained], abs=1e-4)  # sampling log-probs are mu's
    expected = [math.exp(a - b) for a, b in zip(pi, mu, strict=True)]
    s.extras["old_logprobs"] = behavior
    cfg = GRPOConfig(bf16=False, temperature=1.0, micro_batch_size=4)
    (weights,) = importance_weights([s], tiny.model, cfg, pad_token_id(tiny))
    assert weights == pytest.approx(expected, rel=1e-3)
    before = [j for j, i in enumerate(trained) if i < n_prompt + lo]
    assert before and all(weights[j] == pytest.approx(1.0, rel=1e-3) for j in before)  # replayed: same context
    after = [j for j, i in enumerate(trained) if i >= n_prompt + lo]
    assert after and any(abs(weights[j] - 1.0) > 1e-3 for j in after)  # the remark changed the context


def _cfg(tmp_path: Path, qa: Path, corpus: Path, **kw: Any) -> Any:
    from agents.trainers.grpo import GRPOConfig

    base: dict[str, Any] = {"output_dir": str(tmp_path / "grpo"), "task": str(qa), "corpus": str(corpus),
                            "max_turns": 2, "max_new_tokens": 6, "batch_size": 2, "group_size": 2,
                            "micro_batch_size": 8, "learning_rate": 1e-3, "steps": 2, "save_every": 0,
                            "progress": False, "log_every": 0, "bf16": False}
    base.update(kw)
    return GRPOConfig(**base)


def test_grpo_probes_every_dead_end_and_trains_probes_without_the_remark(tmp_path: Path, qa_file: Path,
                                                                           corpus_file: Path) -> None:
    from agents.policies.hf import HFPolicy as Policy
    from agents.trainers.grpo import GRPOConfig, train_grpo

    model, tokenizer = build_tiny_model(0)
    seen: list[Any] = []
    cfg = _cfg(tmp_path, qa_file, corpus_file, rex_probes=3, rex_prompts=(REMARK,))

    def reward(ctx: Any) -> tuple[float, dict[str, float]]:  # nothing is ever right: every group is a dead end
        value = float(len(ctx.text) % 2)  # ... but returns vary, so probes can carry signal
        return value, {"toy": value}

    train_grpo(cfg, policy=Policy(model, tokenizer), reward=reward,
               callbacks=[LambdaCallback(on_batch=lambda step, batch: seen.append(batch))])
    for rec in read_metrics(cfg.output_dir):
        assert rec["probe_groups"] == 2 and rec["probe_episodes"] == 6
        assert rec["generated_tokens"] > rec["episodes"]  # the probes' new tokens are counted too
    remark = tokenizer.encode(REMARK, add_special_tokens=False)
    probes = [s for trained in seen for s in trained if s.extras.get("probe")]
    assert probes  # some probe differed from its group and was trained
    for s in probes:
        assert s.extras["old_logprobs"] == s.extras["behavior_logprobs"]
        at = s.extras["probe_at"]
        assert s.ids[at : at + len(remark)] != remark  # the remark is not in what is trained
    off = _cfg(tmp_path / "off", qa_file, corpus_file)
    train_grpo(off, policy=Policy(*build_tiny_model(0)), reward=reward)
    assert all(r["probe_groups"] == 0 for r in read_metrics(off.output_dir))
    with pytest.raises(ValueError, match="rex_probes"):
        GRPOConfig(rex_probes=-1)
    with pytest.raises(ValueError, match="rex_prompts"):
        GRPOConfig(rex_prompts=())


# ------------------------------------------------------------------------------ UR2 curriculum


def test_difficulty_cache_is_stale_by_age_and_round_trips(tmp_path: Path) -> None:
    from agents.trainers.curriculum import DIFFICULTY_FILE, DifficultyCache

    cache = DifficultyCache()
    assert cache.stale(["a", "b", "a"], step=1, refresh=3) == ["a", "b"]
    cache.update({"a": 0.75, "b": 0.0}, step=1)
    assert cache.stale(["a", "b", "c"], step=3, refresh=3) == ["c"]
    assert cache.stale(["a", "b"], step=4, refresh=3) == ["a", "b"]
    cache.save(tmp_path)
    again = DifficultyCache.load(tmp_path)
    assert again.entries == {"a": (0.75, 1), "b": (0.0, 1)} and again.rate("a") == 0.75
    assert DifficultyCache.load(tmp_path / "none").entries == {}
    (tmp_path / DIFFICULTY_FILE).write_text('{"a": "high"}')
    with pytest.raises(ValueError, match="malformed difficulty cache"):
        DifficultyCache.load(tmp_path)


def test_ur2_routes_by_the_cached_closed_book_estimate(tmp_path: Path, qa_file: Path, corpus_file: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import agents.trainers.curriculum as curriculum
    from agents.policies.hf import HFPolicy as Policy
    from agents.trainers.grpo import GRPOConfig, train_grpo

    known = {"q0": 1.0, "q1": 0.0, "q2": 0.75, "q3": 0.25}  # what the policy "knows" closed-book
    calls: list[tuple[int, list[str]]] = []

    def fake_estimate(policy: Any, examples: Any, retriever: Any, cfg: Any, **kw: Any) -> dict[str, float]:
        calls.append((len(calls), [ex.id for ex in examples]))
        return {ex.id: known[ex.id] for ex in examples}

    monkeypatch.setattr(curriculum, "estimate_closed_book", fake_estimate)
    model, tokenizer = build_tiny_model(0)
    seen: list[list[Any]] = []
    cfg = _cfg(tmp_path, qa_file, corpus_file, curriculum="ur2", closed_book_threshold=0.5, difficulty_refresh=2,
               steps=3, batch_size=4, kl_coef=0.001)  # a KL term keeps every sample in the trained list
    train_grpo(cfg, policy=Policy(model, tokenizer), reward=lambda ctx: (0.0, {}),
               callbacks=[LambdaCallback(on_batch=lambda step, batch: seen.append(batch))])
    by_question = {ex.question: ex.id for ex in EXAMPLES}
    for trained in seen:
        for s in trained:
            text = tokenizer.decode(s.ids)
            qid = next(q for question, q in by_question.items() if question in text)
            closed = curriculum.CLOSED_BOOK_PROMPT in text
            assert closed == (known[qid] >= 0.5)  # easy: closed-book prompt; hard: the protocol's
            if closed:
                assert text.count("<|im_start|>assistant") == 1  # one turn, no retrieval
    assert [r["closed_book_groups"] for r in read_metrics(cfg.output_dir)] == [2, 2, 2]
    # estimated at step 1, cached at step 2, estimated again at step 3 (two steps old)
    assert [sorted(ids) for _, ids in calls] == [["q0", "q1", "q2", "q3"]] * 2
    assert (Path(cfg.output_dir) / curriculum.DIFFICULTY_FILE).is_file()
    with pytest.raises(ValueError, match="curriculum"):
        GRPOConfig(curriculum="ur3")
    with pytest.raises(ValueError, match="closed_book_threshold"):
        GRPOConfig(closed_book_threshold=1.5)


def test_a_token_budget_stops_grpo_and_holds_across_resume(tmp_path: Path, qa_file: Path, corpus_file: Path) -> None:
    from agents.policies.hf import HFPolicy as Policy
    from agents.trainers.grpo import GRPOConfig, train_grpo

    def reward(ctx: Any) -> tuple[float, dict[str, float]]:
        value = float(len(ctx.text) % 2)
        return value, {"toy": value}

    cfg = _cfg(tmp_path, qa_file, corpus_file, steps=50, max_generated_tokens=60, save_every=1)
    out = train_grpo(cfg, policy=Policy(*build_tiny_model(0)), reward=reward)
    recs = read_metrics(cfg.output_dir)
    spent = [r["generated_tokens"] for r in recs]
    assert out["step"] == len(recs) < 50 and sum(spent) >= 60 and sum(spent[:-1]) < 60
    again = train_grpo(cfg, policy=Policy(*build_tiny_model(0)), reward=reward, resume=True)
    assert again["step"] == out["step"] and len(read_metrics(cfg.output_dir)) == len(recs)  # nothing more
    # resumed at its end, it reports the last step as the run that trained it did
    assert again["last"]["step"] == out["step"] and again["last"]["reward_mean"] == out["last"]["reward_mean"]
    with pytest.raises(ValueError, match="max_generated_tokens"):
        GRPOConfig(max_generated_tokens=0)


def test_ur2_schedule_moves_the_share_of_hard_questions(tmp_path: Path, qa_file: Path, corpus_file: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import agents.trainers.curriculum as curriculum
    from agents.policies.hf import HFPolicy as Policy
    from agents.trainers.curriculum import DifficultyCache, scheduled_share, select_by_share
    from agents.trainers.grpo import GRPOConfig, train_grpo

    assert [scheduled_share((0.0, 1.0), s, 5) for s in (1, 3, 5)] == [0.0, 0.5, 1.0]
    cache = DifficultyCache({"e1": (1.0, 0), "e2": (0.9, 0), "h1": (0.0, 0), "h2": (0.1, 0)})
    ids = ["h1", "e1", "h2", "e2"]
    assert select_by_share(ids, cache, 0.5, 2, 1.0) == [0, 2] and select_by_share(ids, cache, 0.5, 2, 0.0) == [1, 3]
    assert select_by_share(["h1", "e1"], cache, 0.5, 2, 1.0) == [0, 1]  # one hard only: filled with an easy one

    known = {"q0": 1.0, "q1": 0.0, "q2": 0.75, "q3": 0.25}
    monkeypatch.setattr(curriculum, "estimate_closed_book",
                        lambda policy, examples, *a, **k: {ex.id: known[ex.id] for ex in examples})
    cfg = _cfg(tmp_path, qa_file, corpus_file, curriculum="ur2", hard_share=(1.0, 0.0), curriculum_pool=2,
               batch_size=2, steps=2)
    train_grpo(cfg, policy=Policy(*build_tiny_model(0)), reward=lambda ctx: (0.0, {}))
    assert [r["closed_book_groups"] for r in read_metrics(cfg.output_dir)] == [0, 2]  # hard first, then easy
    with pytest.raises(ValueError, match="hard_share is a schedule of the ur2 curriculum"):
        GRPOConfig(hard_share=(0.5, 0.5))
    with pytest.raises(ValueError, match="hard_share must be two numbers"):
        GRPOConfig(curriculum="ur2", hard_share=(0.5, 2.0))
