"""Loss functions against hand-computed numbers; masked tokens get no gradient."""

from __future__ import annotations

import math

import pytest
import torch

from agents.trainers.losses import (
    aggregate,
    clipped_policy_loss,
    kl_estimate,
    masked_mean,
    masked_sum,
    masked_whiten,
    value_loss,
)


def test_masked_mean_and_sum_ignore_masked_entries_even_if_nan() -> None:
    x = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 0.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_sum(x, m).item() == 6.0
    assert masked_mean(x, m).item() == 2.0
    torch.testing.assert_close(masked_mean(x, m, dim=1), torch.tensor([1.5, 3.0]))
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0


def test_masked_whiten() -> None:
    x = torch.tensor([1.0, 3.0, 100.0])
    out = masked_whiten(x, torch.tensor([1, 1, 0]))
    torch.testing.assert_close(out, torch.tensor([-1.0, 1.0, 0.0]), atol=1e-6, rtol=0)


def test_aggregation_token_vs_sequence() -> None:
    per_token = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(per_token, mask, "token").item() == pytest.approx(2.0)
    assert aggregate(per_token, mask, "sequence").item() == pytest.approx(2.25)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(per_token, mask, "median")


def test_clipped_policy_loss_hand_computed_positive_advantage() -> None:
    logp = torch.tensor([[math.log(1.5), math.log(0.5)]])
    old = torch.zeros(1, 2)
    loss, stats = clipped_policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_low=0.2)
    # ratio 1.5 -> min(1.5, 1.2) = 1.2 ; ratio 0.5 -> min(0.5, 0.8) = 0.5
    assert loss.item() == pytest.approx(-(1.2 + 0.5) / 2)
    assert stats.clip_fraction == pytest.approx(0.5)
    assert stats.ratio_mean == pytest.approx(1.0)


def test_clipped_policy_loss_negative_advantage_and_clip_higher() -> None:
    logp = torch.tensor([[math.log(0.5), math.log(1.5)]])
    adv = torch.tensor([[-1.0, 1.0]])
    loss, stats = clipped_policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), 0.2, clip_high=0.28)
    # token 0: min(-0.5, -0.8) = -0.8 -> +0.8 ; token 1: min(1.5, 1.28) = 1.28 -> -1.28
    assert loss.item() == pytest.approx((0.8 - 1.28) / 2)
    assert stats.clip_fraction == pytest.approx(1.0)


def test_policy_loss_gives_zero_gradient_through_masked_tokens() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0]])  # zeros: prompt / retrieved documents
    adv = torch.tensor([1.0, -2.0])
    loss, _ = clipped_policy_loss(logp, logp.detach() - 0.1, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.all(grad[mask == 0] == 0)
    assert torch.all(grad[mask == 1] != 0)


def test_kl_estimators_hand_computed() -> None:
    logp = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))
    assert kl_estimate(logp, logp, "k3").item() == 0.0
    with pytest.raises(ValueError, match="k1"):
        kl_estimate(logp, ref, "k4")


def test_k3_is_unbiased_for_categorical() -> None:
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    true_kl = float((p * (p / q).log()).sum())
    lp, lq = p.log(), q.log()
    expected_k3 = float((p * kl_estimate(lp, lq, "k3")).sum())
    expected_k1 = float((p * kl_estimate(lp, lq, "k1")).sum())
    assert expected_k3 == pytest.approx(true_kl, abs=1e-6)
    assert expected_k1 == pytest.approx(true_kl, abs=1e-6)


def test_value_loss_with_clipping_hand_computed() -> None:
    values = torch.tensor([1.0, 0.0, 5.0])
    old = torch.tensor([0.5, 0.5, 0.0])
    returns = torch.tensor([2.0, 0.0, 0.0])
    mask = torch.tensor([1, 1, 0])
    loss, frac = value_loss(values, old, returns, mask, clip_range=0.2)
    # token 0: max((1-2)^2, (0.7-2)^2) = 1.69 ; token 1: max(0, 0.3^2) = 0.09
    assert loss.item() == pytest.approx(0.5 * (1.69 + 0.09) / 2)
    assert frac == pytest.approx(1.0)
    plain, _ = value_loss(values, old, returns, mask, clip_range=None)
    assert plain.item() == pytest.approx(0.5 * (1.0 + 0.0) / 2)


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="shape"):
        clipped_policy_loss(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3))
