"""Training samples (token ids + loss mask), padded batches, and batched log-probs of a model.

A training sample is a token-id sequence with a mask of the same length: 1 on the policy's own
tokens (what it generated, or the demonstration's assistant turns), 0 on the prompt, the
environment's text (retrieved documents) and padding. Only masked-in tokens are scored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agents.devices import autocast, model_device, to_device


@dataclass
class Sample:
    """One training sequence.

    Attributes:
        ids: Token ids (prompt, then the completion with environment text interleaved).
        mask: Same length; 1 on tokens the loss trains (the policy's own), 0 elsewhere.
        extras: Per-token or per-sequence data a trainer attaches (advantages, old log-probs, ...).
    """

    ids: list[int]
    mask: list[int]
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.mask):
            raise ValueError(f"ids ({len(self.ids)}) and mask ({len(self.mask)}) must have equal length")
        if self.mask and self.mask[0]:
            raise ValueError("the first token cannot be trained (nothing precedes it); mask[0] must be 0")

    @property
    def num_policy_tokens(self) -> int:
        """Tokens the loss trains."""
        return int(sum(self.mask))


@dataclass
class Padded:
    """Right-padded batch of samples.

    Attributes:
        input_ids: ``[B, L]``.
        attention_mask: ``[B, L]`` (1 on real tokens).
        mask: ``[B, L]`` loss mask aligned with ``input_ids`` (token ``j`` is scored from position ``j-1``).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor


def pad_samples(samples: Sequence[Sample], pad_id: int, device: torch.device | str | None = None) -> Padded:
    """Right-pad samples into tensors, built on the host and moved to ``device`` in one go.

    Args:
        samples: The samples.
        pad_id: Token id of the padding (masked out anyway).
        device: Where the batch goes (the model's device: see :func:`agents.devices.model_device`);
            None keeps it on the CPU.
    """
    if not samples:
        raise ValueError("no samples to pad")
    length = max(len(s.ids) for s in samples)
    ids = np.full((len(samples), length), pad_id, dtype=np.int64)
    att = np.zeros((len(samples), length), dtype=np.int64)
    mask = np.zeros((len(samples), length), dtype=np.float32)
    for i, s in enumerate(samples):
        n = len(s.ids)
        ids[i, :n] = s.ids
        att[i, :n] = 1
        mask[i, :n] = s.mask
    padded = Padded(torch.from_numpy(ids), torch.from_numpy(att), torch.from_numpy(mask))
    return padded if device is None else to_device(padded, device)


def pad_extra(
    samples: Sequence[Sample], key: str, length: int, fill: float = 0.0, device: torch.device | str | None = None
) -> torch.Tensor:
    """Stack a per-token float list ``sample.extras[key]`` (aligned with ``ids``) into ``[B, length]`` on ``device``."""
    out = np.full((len(samples), length), fill, dtype=np.float32)
    for i, s in enumerate(samples):
        v = s.extras[key]
        out[i, : len(v)] = v
    tensor = torch.from_numpy(out)
    return tensor if device is None else to_device(tensor, device)


def split_model(model: Any) -> tuple[Any, Any]:
    """Return ``(decoder, lm_head)`` of a causal LM (through peft wrappers) to compute logits only where needed."""
    if hasattr(model, "get_decoder") and hasattr(model, "get_output_embeddings"):
        return model.get_decoder(), model.get_output_embeddings()
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(inner, inner.base_model_prefix), inner.get_output_embeddings()


@dataclass
class ForwardOut:
    """Per-token outputs aligned with ``input_ids`` (column ``j`` is about token ``j``).

    Attributes:
        logprobs: ``[B, L]`` log-prob of token ``j`` given tokens ``< j`` (with gradient) where the
            loss mask is 1, and 0 elsewhere (not computed there).
        hidden: ``[B, L, H]`` last hidden state at position ``j - 1`` (the state before token ``j``), if
            asked for (for a value head).
    """

    logprobs: torch.Tensor
    hidden: torch.Tensor | None = None


_LOGIT_CHUNK = 1 << 24  # float32 logits per chunk (64 MB)


def _chunk_logprobs(head: Any, h: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(h).float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(-1)


def forward_logprobs(
    model: Any,
    batch: Padded,
    *,
    temperature: float = 1.0,
    want_hidden: bool = False,
    bf16: bool = False,
) -> ForwardOut:
    """One forward pass giving the log-probs of the masked-in tokens of a padded batch.

    The output head and log-softmax run only on masked-in positions (never on the prompt or on
    retrieved text), in chunks recomputed during backward, so the ``tokens x vocab`` logits are
    never all held at once.

    Args:
        model: A causal LM (transformers, possibly peft-wrapped).
        batch: From :func:`pad_samples`.
        temperature: Logits are divided by this (the sampling temperature; 0 or 1 mean none).
        want_hidden: Also return the hidden state before each token (for a value head).
        bf16: Run the decoder under bfloat16 autocast (on the model's device type).

    Returns:
        A :class:`ForwardOut` on the model's device (a batch elsewhere is moved there first).
    """
    decoder, head = split_model(model)
    device = model_device(model)
    batch = to_device(batch, device)
    with autocast(device, bf16):
        hidden = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state
    return logprobs_from_hidden(hidden, head, batch, temperature=temperature, want_hidden=want_hidden, bf16=bf16)


def logprobs_from_hidden(
    hidden: torch.Tensor,
    head: Any,
    batch: Padded,
    *,
    temperature: float = 1.0,
    want_hidden: bool = False,
    bf16: bool = False,
) -> ForwardOut:
    """The second half of :func:`forward_logprobs`: the output head on the masked-in positions of ``hidden``.

    Args:
        hidden: The decoder's last hidden state ``[B, L, H]`` for ``batch`` (on the model's device).
        head: The output head.
        batch: The padded batch, on the same device.
        temperature: As in :func:`forward_logprobs`.
        want_hidden: As in :func:`forward_logprobs`.
        bf16: As in :func:`forward_logprobs`.
    """
    from torch.utils.checkpoint import checkpoint

    device = hidden.device
    rows, cols = torch.nonzero(batch.mask > 0, as_tuple=True)
    picked = hidden[rows, cols - 1]
    targets = batch.input_ids[rows, cols]
    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    step = max(1, _LOGIT_CHUNK // max(1, vocab))
    parts = []
    for a in range(0, len(targets), step):
        h, t = picked[a : a + step], targets[a : a + step]
        with autocast(device, bf16):
            if torch.is_grad_enabled() and h.requires_grad:
                parts.append(checkpoint(_chunk_logprobs, head, h, t, temperature, use_reentrant=False))
            else:
                parts.append(_chunk_logprobs(head, h, t, temperature))
    lps = torch.cat(parts).float() if parts else hidden.new_zeros((0,), dtype=torch.float32)
    B, L = batch.input_ids.shape
    lp = torch.zeros(B, L, dtype=torch.float32, device=device).index_put((rows, cols), lps)
    hid = None
    if want_hidden:
        hid = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1).float()
    return ForwardOut(lp, hid)


def mean_nll(model: Any, samples: Sequence[Sample], pad_id: int) -> float:
    """Mean negative log-likelihood per trained token of ``samples`` under ``model`` (no gradient).

    Scored one sample at a time (no padding work); what SFT lowers, measured on chosen samples.
    """
    total, tokens = 0.0, 0
    with torch.no_grad():
        for s in samples:
            total -= float(forward_logprobs(model, pad_samples([s], pad_id)).logprobs.sum())
            tokens += s.num_policy_tokens
    return total / max(tokens, 1)


def micro_batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    """Consecutive chunks of ``size`` samples."""
    for i in range(0, len(samples), size):
        yield list(samples[i : i + size])
