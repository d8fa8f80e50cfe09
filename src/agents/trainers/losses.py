"""Loss functions for policy-gradient training of language policies: pure tensor functions.

Every function takes a ``mask`` (1 on the policy's own tokens, 0 on prompt, padding and
environment tokens such as retrieved documents) so masked tokens contribute neither to the loss
nor to its gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token", "sequence")


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask`` is 1 (masked entries are zeroed, not multiplied, so NaN/inf there is safe).

    Args:
        x: Values.
        mask: Same shape as ``x``; 1 keeps, 0 drops.
        dim: Reduce over this dimension, or everything when None.

    Returns:
        The sum.
    """
    _check_same_shape(x, mask)
    kept = torch.where(mask.bool(), x, torch.zeros_like(x))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1 (0 when nothing is kept).

    Args:
        x: Values.
        mask: Same shape as ``x``; 1 keeps, 0 drops.
        dim: Reduce over this dimension, or everything when None.

    Returns:
        The mean.
    """
    m = mask.to(x.dtype)
    count = m.sum() if dim is None else m.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of ``x`` over entries where ``mask`` is 1."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / std`` over masked entries; masked-out entries become 0."""
    mean = masked_mean(x, mask)
    std = masked_var(x, mask).clamp(min=0.0).sqrt()
    return torch.where(mask.bool(), (x - mean) / (std + eps), torch.zeros_like(x))


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str = "token") -> torch.Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar.

    Args:
        per_token: Loss per token, shape ``[B, T]``.
        mask: 1 on tokens that count.
        how: ``"token"``: mean over all kept tokens of the batch (DAPO / Dr. GRPO: long answers are
            not down-weighted); ``"sequence"``: mean per sequence, then over sequences (GRPO paper).

    Returns:
        The scalar loss.
    """
    if how == "token":
        return masked_mean(per_token, mask)
    if how == "sequence":
        if per_token.dim() != 2:
            raise ValueError(f"sequence aggregation needs a [B, T] loss, got shape {tuple(per_token.shape)}")
        per_seq = masked_mean(per_token, mask, dim=1)
        has = mask.to(per_token.dtype).sum(dim=1) > 0
        return per_seq[has].mean() if bool(has.any()) else per_seq.sum() * 0.0
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {how!r}")


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of :func:`clipped_policy_loss` (detached scalars).

    Attributes:
        clip_fraction: Share of kept tokens where the clipped term was the active one.
        approx_kl: Mean of ``k3`` between old and new policy over kept tokens.
        ratio_mean: Mean probability ratio over kept tokens.
    """

    clip_fraction: float
    approx_kl: float
    ratio_mean: float


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    aggregation: str = "token",
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO's clipped surrogate, per token: ``-min(rho * A, clip(rho, 1-eps_low, 1+eps_high) * A)``.

    ``rho = exp(logprobs - old_logprobs)``. Masked tokens (prompt, padding, environment text) add
    nothing to the loss and receive zero gradient.

    Args:
        logprobs: Log-probs of the taken tokens under the current policy, ``[B, T]`` (with gradient).
        old_logprobs: Log-probs under the policy that sampled them, ``[B, T]``.
        advantages: ``[B, T]`` or ``[B]`` (broadcast over tokens, as in GRPO).
        mask: 1 on the policy's own tokens.
        clip_low: Lower clip epsilon.
        clip_high: Upper clip epsilon (DAPO's clip-higher); defaults to ``clip_low``.
        aggregation: See :func:`aggregate`.

    Returns:
        The scalar loss and detached diagnostics.
    """
    _check_same_shape(logprobs, old_logprobs)
    _check_same_shape(logprobs, mask)
    if clip_low < 0 or (clip_high is not None and clip_high < 0):
        raise ValueError(f"clip epsilons must be >= 0, got {clip_low}, {clip_high}")
    hi = clip_low if clip_high is None else clip_high
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1).expand_as(logprobs)
    keep = mask.bool()
    log_ratio = torch.where(keep, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().to(logprobs.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + hi) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = aggregate(per_token, mask, aggregation)
    with torch.no_grad():
        was_clipped = (clipped < unclipped).to(logprobs.dtype)
        stats = PolicyLossStats(
            clip_fraction=float(masked_mean(was_clipped, mask)),
            approx_kl=float(masked_mean(kl_estimate(old_logprobs.detach(), logprobs.detach(), "k3"), mask)),
            ratio_mean=float(masked_mean(ratio, mask)),
        )
    return loss, stats


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of ``KL(pi || pi_ref)`` from samples of ``pi`` (Schulman, "Approximating KL").

    With ``log_r = ref_logprobs - logprobs``:

    - ``k1 = -log_r`` (unbiased, high variance, can be negative),
    - ``k2 = log_r ** 2 / 2`` (biased, low variance),
    - ``k3 = exp(log_r) - 1 - log_r`` (unbiased, always >= 0; GRPO's choice).

    Args:
        logprobs: Log-probs of sampled tokens under the trained policy.
        ref_logprobs: Log-probs of the same tokens under the reference policy.
        kind: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        The per-token estimate, same shape as the inputs.
    """
    _check_same_shape(logprobs, ref_logprobs)
    log_r = ref_logprobs - logprobs
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    if kind == "k3":
        # clamp keeps exp() finite for tokens the reference finds far likelier (masked later anyway)
        log_r = log_r.clamp(max=20.0)
        return torch.exp(log_r) - 1.0 - log_r
    raise ValueError(f"KL estimator must be one of {KL_ESTIMATORS}, got {kind!r}")


def add_kl_penalty(
    loss: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    mask: torch.Tensor,
    coef: float,
    estimator: str = "k3",
    aggregation: str = "token",
) -> tuple[torch.Tensor, float]:
    """``loss + coef * KL``, the KL to the reference estimated per token (:func:`kl_estimate`) and aggregated.

    Args:
        loss: The loss so far.
        logprobs: Log-probs of the taken tokens under the trained policy, ``[B, T]`` (with gradient).
        ref_logprobs: Their log-probs under the reference policy, or None for no KL term.
        mask: 1 on the tokens that count.
        coef: Weight of the KL term.
        estimator: See :func:`kl_estimate`.
        aggregation: See :func:`aggregate`.

    Returns:
        The loss with the KL term, and the KL (detached; 0.0, and ``loss`` itself, without a reference).
    """
    if ref_logprobs is None:
        return loss, 0.0
    kl = aggregate(kl_estimate(logprobs, ref_logprobs, estimator), mask, aggregation)
    return loss + coef * kl, float(kl.detach())


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None = 0.2,
) -> tuple[torch.Tensor, float]:
    """PPO value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)`` averaged over masked tokens.

    ``V_clip = old_V + clip(V - old_V, -clip_range, clip_range)``; with ``clip_range=None`` it is
    the plain squared error.

    Args:
        values: New value predictions (with gradient).
        old_values: Predictions at sampling time.
        returns: Targets.
        mask: 1 on tokens that count.
        clip_range: Value clipping range, or None for none.

    Returns:
        The scalar loss and the share of kept tokens where the clipped error was the larger one.
    """
    _check_same_shape(values, old_values)
    _check_same_shape(values, returns)
    err = (values - returns.detach()) ** 2
    if clip_range is None:
        return 0.5 * masked_mean(err, mask), 0.0
    if clip_range < 0:
        raise ValueError(f"clip_range must be >= 0 or None, got {clip_range}")
    old = old_values.detach()
    v_clip = old + torch.clamp(values - old, -clip_range, clip_range)
    err_clip = (v_clip - returns.detach()) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clip), mask)
    frac = float(masked_mean((err_clip > err).to(values.dtype), mask))
    return loss, frac


def _check_same_shape(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
