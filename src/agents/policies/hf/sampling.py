"""Per-row random streams and sampling from logits (temperature, nucleus) by inverting the CDF.

Each prompt has its own generator, so a sample does not depend on what else is in the batch; the
static decode loop draws a row's uniforms for all steps up front from the same generator, which
gives exactly the values the dynamic loop draws one step at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def _row_generators(seed: int | Sequence[int] | None, n: int) -> list[torch.Generator]:
    """One torch generator per prompt: from ``(seed, i)``, from per-prompt seeds, or from fresh entropy."""
    import torch

    if seed is None:
        states = [np.random.SeedSequence().generate_state(2, np.uint32) for _ in range(n)]
    elif isinstance(seed, int) and not isinstance(seed, bool):
        states = [np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(2, np.uint32) for i in range(n)]
    elif isinstance(seed, Sequence) and not isinstance(seed, str):
        if len(seed) != n:
            raise ValueError(f"seed has {len(seed)} entries for {n} prompts")
        if any(isinstance(s, bool) or not isinstance(s, int | np.integer) for s in seed):
            raise ValueError(f"per-prompt seeds must be integers, got {list(seed)[:4]!r}")
        states = [np.random.SeedSequence(int(s) % (1 << 128)).generate_state(2, np.uint32) for s in seed]
    else:
        raise TypeError(f"seed must be None, an int or a sequence of ints, got {type(seed).__name__}")
    return [torch.Generator().manual_seed(int(s[0]) << 32 | int(s[1])) for s in states]


def _row_uniforms(generators: list[torch.Generator], steps: int) -> torch.Tensor:
    """``[rows, steps]`` uniforms: row ``i``'s draws for every step, from its own generator (on the CPU).

    ``torch.rand(steps, generator=g)`` yields exactly the values of ``steps`` successive
    ``torch.rand(1, generator=g)`` calls (checked in ``tests/test_hf_decode.py``), which is how the
    dynamic loop draws, one per step while the row is unfinished; extra draws past a row's end are
    never used, and each call makes fresh generators, so drawing them changes nothing.
    """
    import torch

    if not generators:
        return torch.zeros((0, steps))
    return torch.stack([torch.rand(steps, generator=g) for g in generators])


def _sample(
    logits: torch.Tensor, temperature: float, top_p: float, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row by inverse CDF with the row's own uniform draw; return (tokens, logprobs)."""
    import torch

    if temperature == 0:
        return _sample_uniform(logits, temperature, top_p, None)
    u = torch.cat([torch.rand(1, generator=g) for g in generators]).to(logits.device)
    return _sample_uniform(logits, temperature, top_p, u)


def _sample_uniform(
    logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row by inverse CDF at the row's uniform ``u`` (argmax at temperature 0)."""
    import torch

    if temperature == 0 or u is None:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    logp = torch.log_softmax(logits / temperature, -1)
    probs = logp.exp()
    if top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < top_p  # the token that crosses top_p stays
        pick = _invert_cdf((sorted_p * keep).cumsum(-1), u)
        tokens = order.gather(1, pick).squeeze(1)
    else:
        tokens = _invert_cdf(probs.cumsum(-1), u).squeeze(1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _invert_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first entry of each (unnormalised) CDF row above ``u * total``; shape ``[rows, 1]``."""
    import torch

    total = cdf[:, -1:]
    x = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).clamp_(max=cdf.shape[-1] - 1)
