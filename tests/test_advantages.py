"""Advantage estimators against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.trainers.advantages import discounted_returns, gae, group_advantages

REWARDS = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def test_group_scaling_matches_hand_computation() -> None:
    out = group_advantages(REWARDS, GROUPS, scale="group", eps=0.0 + 1e-12)
    std = np.sqrt(0.75 * 0.25)  # 0.4330127
    expected = [0.25 / std, -0.75 / std, 0.25 / std, 0.25 / std, 0, 0, 0, 0]
    np.testing.assert_allclose(out.advantages, expected, atol=1e-6)
    np.testing.assert_allclose(out.advantages[:4], [0.57735, -1.73205, 0.57735, 0.57735], atol=1e-5)
    assert out.zero_variance_groups == 1
    assert out.num_groups == 2
    np.testing.assert_allclose(out.group_mean, [0.75] * 4 + [0.0] * 4)


def test_no_scaling_is_mean_centred_only() -> None:
    out = group_advantages(REWARDS, GROUPS, scale="none")
    np.testing.assert_allclose(out.advantages, [0.25, -0.75, 0.25, 0.25, 0, 0, 0, 0])


def test_batch_scaling_divides_by_batch_std() -> None:
    out = group_advantages(REWARDS, GROUPS, scale="batch", eps=0.0)
    batch_std = np.sqrt(0.375 * 0.625)  # 0.4841229
    np.testing.assert_allclose(out.advantages[:2], [0.25 / batch_std, -0.75 / batch_std])
    assert out.advantages[1] == pytest.approx(-1.549193, abs=1e-6)


def test_unequal_groups_in_any_order() -> None:
    out = group_advantages([3.0, 1.0, 5.0], [7, 2, 7], scale="none")
    np.testing.assert_allclose(out.advantages, [-1.0, 0.0, 1.0])
    assert out.zero_variance_groups == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rewards": [1.0, 2.0], "group_ids": [0]}, "equal length"),
        ({"rewards": [1.0, float("nan")], "group_ids": [0, 0]}, "finite"),
        ({"rewards": [1.0], "group_ids": [0], "scale": "median"}, "scale"),
        ({"rewards": [1.0], "group_ids": [0], "eps": -1.0}, "eps"),
    ],
)
def test_group_advantages_rejects_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        group_advantages(**kwargs)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=2, max_size=12), st.integers(1, 4))
def test_group_advantages_sum_to_zero_per_group(rewards: list[float], n_groups: int) -> None:
    groups = [i % n_groups for i in range(len(rewards))]
    out = group_advantages(rewards, groups, scale="group")
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        assert abs(out.advantages[idx].sum()) < 1e-6


def test_gae_monte_carlo_when_gamma_and_lambda_are_one() -> None:
    adv, ret = gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv, [0.5, 0.4, 0.3])
    np.testing.assert_allclose(ret, [1.0, 1.0, 1.0])


def test_gae_hand_computed_with_discount() -> None:
    # t=2: d=1-0.7=0.3 -> A=0.3; t=1: d=0.9*0.7-0.6=0.03 -> A=0.03+0.45*0.3=0.165;
    # t=0: d=0.9*0.6-0.5=0.04 -> A=0.04+0.45*0.165=0.11425
    adv, ret = gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.7], gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [0.11425, 0.165, 0.3])
    np.testing.assert_allclose(ret, [0.61425, 0.765, 1.0])


def test_gae_lambda_zero_is_one_step_td_and_bootstraps() -> None:
    adv, _ = gae([0.2, 0.0], [1.0, 2.0], gamma=0.5, lam=0.0, last_value=4.0)
    np.testing.assert_allclose(adv, [0.2 + 0.5 * 2.0 - 1.0, 0.0 + 0.5 * 4.0 - 2.0])


def test_gae_process_reward_mid_trajectory() -> None:
    # a search turn earning 0.3 on its last token, then the outcome 1 on the final token
    adv, ret = gae([0.0, 0.3, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, [1.3, 1.3, 1.0, 1.0])
    np.testing.assert_allclose(adv, ret)


@pytest.mark.parametrize(("gamma", "lam"), [(1.5, 1.0), (1.0, -0.1)])
def test_gae_rejects_bad_coefficients(gamma: float, lam: float) -> None:
    with pytest.raises(ValueError):
        gae([1.0], [0.0], gamma=gamma, lam=lam)


def test_gae_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="equal length"):
        gae([1.0, 2.0], [0.0])


def test_discounted_returns() -> None:
    np.testing.assert_allclose(discounted_returns([1.0, 0.0, 2.0], gamma=0.5), [1.5, 1.0, 2.0])
