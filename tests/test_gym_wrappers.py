"""Gymnasium's own wrappers and vector modes over SearchQA-v0, on their default arguments."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import gymnasium.wrappers as W
import gymnasium.wrappers.vector as V
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import searchenv  # noqa: F401  (registers SearchQA-v0)
from searchenv.spaces import UnicodeText

TASK = "synthetic-2hop"
SEARCH, ANSWER = "<search>who founded the orchard</search>", "<answer>nobody</answer>"


def make(**kwargs: Any) -> gym.Env:
    return gym.make("SearchQA-v0", task=TASK, **kwargs)


def play(env: gym.Env, actions: list[str], seed: int = 0) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
    """Step ``actions`` in order from ``reset(seed)``, resetting after each episode end."""
    env.reset(seed=seed)
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, float(reward), term, trunc, info))
        if term or trunc:
            env.reset()
    return out


# Wrappers that apply to any observation and action space, built on their default arguments (those
# that need a function get the identity).
ANY_SPACE: dict[str, Callable[[], gym.Env]] = {
    "RecordEpisodeStatistics": lambda: W.RecordEpisodeStatistics(make()),
    "TimeLimit": lambda: W.TimeLimit(make(), max_episode_steps=2),
    "Autoreset": lambda: W.Autoreset(make()),
    "OrderEnforcing": lambda: W.OrderEnforcing(make()),
    "PassiveEnvChecker": lambda: W.PassiveEnvChecker(make()),
    "TransformReward": lambda: W.TransformReward(make(), lambda r: 2 * r),
    "ClipReward": lambda: W.ClipReward(make(), -1.0, 1.0),
    "NormalizeReward": lambda: W.NormalizeReward(make()),
    "StickyAction": lambda: W.StickyAction(make(), 0.25),
    "RepeatAction": lambda: W.RepeatAction(make(), 2),
    "DelayObservation": lambda: W.DelayObservation(make(), 1),
    "FrameStackObservation": lambda: W.FrameStackObservation(make(), 2),
    "TimeAwareObservation": lambda: W.TimeAwareObservation(make(max_episode_steps=3), flatten=False),
    "RenderCollection": lambda: W.RenderCollection(make(render_mode="ansi")),
    "TransformObservation": lambda: W.TransformObservation(make(), lambda o: o, None),
    "TransformAction": lambda: W.TransformAction(make(), lambda a: a, None),
}


@pytest.mark.parametrize("name", sorted(ANY_SPACE))
def test_each_space_agnostic_wrapper_runs_episodes(name: str) -> None:
    env = ANY_SPACE[name]()
    steps = play(env, [SEARCH, ANSWER, SEARCH, SEARCH, ANSWER, ANSWER])
    assert any(term or trunc for _, _, term, trunc, _ in steps)
    for obs, reward, *_ in steps:
        assert env.observation_space.contains(obs), name
        assert np.isfinite(reward)
    env.close()


# Wrappers written for arrays or pictures: Gymnasium itself refuses a text space or an ``ansi`` render.
NUMERIC_OR_PICTURES: dict[str, Callable[[], gym.Env]] = {
    "FlattenObservation": lambda: W.FlattenObservation(make()),
    "NormalizeObservation": lambda: W.NormalizeObservation(make()),
    "MaxAndSkipObservation": lambda: W.MaxAndSkipObservation(make(), 2),
    "RecordVideo": lambda: W.RecordVideo(make(render_mode="ansi"), "unused-video-folder"),
    "HumanRendering": lambda: W.HumanRendering(make(render_mode="ansi")),
}


@pytest.mark.parametrize("name", sorted(NUMERIC_OR_PICTURES))
def test_array_and_picture_wrappers_refuse_a_text_env_at_construction(name: str) -> None:
    with pytest.raises((ValueError, NotImplementedError, TypeError)):
        NUMERIC_OR_PICTURES[name]()


def test_record_episode_statistics_on_default_arguments_keeps_the_summary() -> None:
    env = W.RecordEpisodeStatistics(make())
    steps = play(env, [SEARCH, ANSWER])
    info = steps[-1][4]
    assert info["episode"]["l"] == 2
    assert info["episode"]["r"] == pytest.approx(sum(r for _, r, *_ in steps))
    assert info["summary"]["return"] == pytest.approx(info["episode"]["r"])
    assert info["summary"]["searches"] == 1


def test_the_old_summary_key_still_reads_with_a_deprecation_warning() -> None:
    env = make()
    info = play(env, [ANSWER])[-1][4]
    assert "episode" not in info and "summary" in info
    with pytest.warns(DeprecationWarning, match=r'info\["summary"\]'):
        old = info["episode"]
    assert old == info["summary"]
    with pytest.raises(KeyError):
        info["no-such-key"]


@pytest.mark.parametrize("how", ["gym.make", "TimeLimit"])
def test_a_time_limit_from_outside_still_hands_over_outcome_and_summary(how: str) -> None:
    env = make(max_episode_steps=2) if how == "gym.make" else W.TimeLimit(make(), 2)
    steps = play(env, [SEARCH, SEARCH])
    _, _, term, trunc, info = steps[-1]
    assert (term, trunc) == (False, True)
    assert info["em"] == 0.0 and info["f1"] == 0.0 and info["answer"] is None and info["gold_answers"]
    assert info["summary"]["turns"] == 2 and info["summary"]["searches"] == 2
    assert info["summary"]["answered"] is False and info["summary"]["return"] == pytest.approx(
        sum(r for _, r, *_ in steps))


def test_every_step_holds_the_episode_so_far() -> None:
    env = make()
    env.reset(seed=0)
    gold = env.unwrapped.example.answers[0]
    _, _, _, _, first = env.step(SEARCH)
    assert first["answer"] is None and first["summary"]["searches"] == 1 and first["summary"]["answered"] is False
    _, _, term, _, last = env.step(f"<answer>{gold}</answer>")
    assert term and last["em"] == 1.0 and last["summary"]["answered"] is True and last["summary"]["turns"] == 2


def test_max_turns_ends_episodes_without_a_truncated_by() -> None:
    steps = play(make(max_turns=2), [SEARCH, SEARCH])
    assert steps[-1][3] and "truncated_by" not in steps[-1][4] and steps[-1][4]["summary"]["turns"] == 2


def vector(mode: str | None, **kwargs: Any) -> gym.vector.VectorEnv:
    extra = {} if mode is None else {"vectorization_mode": mode}
    return gym.make_vec("SearchQA-v0", num_envs=2, task=TASK, **extra, **kwargs)


ACTIONS = [[SEARCH, ANSWER], [ANSWER, SEARCH], [SEARCH, SEARCH], [ANSWER, ANSWER]]


def vector_play(envs: gym.vector.VectorEnv) -> list[tuple[Any, ...]]:
    envs.reset(seed=3)
    out = []
    for actions in ACTIONS:
        obs, rewards, term, trunc, infos = envs.step(actions)
        assert envs.observation_space.contains(obs)
        out.append((obs, rewards.tolist(), term.tolist(), trunc.tolist(), infos))
    envs.close()
    return out


@pytest.mark.slow
def test_async_make_vec_with_shared_memory_matches_the_batched_vector_env() -> None:
    batched = vector_play(vector(None))
    for mode in ("sync", "async"):
        other = vector_play(vector(mode))
        for (o1, r1, t1, u1, i1), (o2, r2, t2, u2, i2) in zip(batched, other, strict=True):
            assert (o1, r1, t1, u1) == (o2, r2, t2, u2), mode
            assert list(i1["em"]) == list(i2["em"]) and list(i1["_summary"]) == list(i2["_summary"])


def test_unicode_text_round_trips_through_shared_memory() -> None:
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    space = UnicodeText(12)
    memory = create_shared_memory(space, n=3)
    values = ["", "<search>ü</search>"[:12], "a\ud800b中\n"]
    for i, value in enumerate(values):
        write_to_shared_memory(space, i, value, memory)
    view = read_from_shared_memory(space, memory, n=3)
    assert view == tuple(values) and copy.deepcopy(view) == tuple(values) and type(copy.deepcopy(view)) is tuple
    write_to_shared_memory(space, 0, "new", memory)
    assert view[0] == "new"  # a live view, as AsyncVectorEnv expects
    with pytest.raises(ValueError, match="not in UnicodeText"):
        write_to_shared_memory(space, 0, "x" * 13, memory)


@pytest.mark.parametrize("mode", [None, "sync"])
def test_make_vec_max_episode_steps_truncates_with_the_summary(mode: str | None) -> None:
    envs = vector(mode, max_episode_steps=1)
    envs.reset(seed=0)
    _, _, term, trunc, infos = envs.step([SEARCH, SEARCH])
    assert trunc.tolist() == [True, True] and not term.any()
    assert infos["_summary"].tolist() == [True, True] and infos["summary"]["searches"].tolist() == [1, 1]
    envs.close()


VECTOR_WRAPPERS: dict[str, Callable[[gym.vector.VectorEnv], gym.vector.VectorEnv]] = {
    "RecordEpisodeStatistics": lambda e: V.RecordEpisodeStatistics(e),
    "TransformReward": lambda e: V.TransformReward(e, lambda r: 2 * r),
    "ClipReward": lambda e: V.ClipReward(e, -1.0, 1.0),
    "NormalizeReward": lambda e: V.NormalizeReward(e),
    "DictInfoToList": lambda e: V.DictInfoToList(e),
    "VectorizeTransformReward": lambda e: V.VectorizeTransformReward(e, W.ClipReward, min_reward=-1, max_reward=1),
    "TransformObservation": lambda e: V.TransformObservation(e, lambda o: o, None),
    "TransformAction": lambda e: V.TransformAction(e, lambda a: a, None),
}


@pytest.mark.parametrize("name", sorted(VECTOR_WRAPPERS))
def test_each_vector_wrapper_runs_on_the_vector_env(name: str) -> None:
    envs = VECTOR_WRAPPERS[name](vector(None))
    envs.reset(seed=0)
    for actions in ACTIONS:
        obs, rewards, *_ = envs.step(actions)
        assert len(obs) == 2 and np.isfinite(rewards).all()
    envs.close()


def test_vector_record_episode_statistics_counts_each_episode() -> None:
    envs = V.RecordEpisodeStatistics(vector(None))
    envs.reset(seed=0)
    envs.step([SEARCH, ANSWER])
    _, rewards, term, _, infos = envs.step([ANSWER, SEARCH])
    assert term.tolist() == [True, False]
    assert infos["_episode"].tolist() == [True, False] and infos["episode"]["l"][0] == 2
    assert infos["summary"]["turns"][0] == 2 and infos["_summary"].tolist() == [True, False]  # 1 was reset
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the wrapper's own key: no deprecation path taken
        assert infos["episode"]["r"].shape == (2,)


def test_check_env_passes_on_every_sub_environment_of_the_vector_env() -> None:
    envs = vector(None)
    for sub in envs.unwrapped.envs:
        check_env(sub, skip_render_check=True)
    obs, _ = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    assert envs.single_observation_space.contains(obs[0])
