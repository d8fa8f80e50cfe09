"""Grouped-query attention without copying keys and values, for transformers models on the CPU.

Models such as SmolLM2 and Llama share each key/value head among several query heads. With a
padding mask (every batched rollout and training batch has one), transformers' ``sdpa`` attention
repeats the keys and values once per query head before calling
:func:`torch.nn.functional.scaled_dot_product_attention` (``repeat_kv``): for a batch of 32
episodes that is a fresh copy per layer and tensor, a large share of a rollout's prefill time on a
CPU when profiled. PyTorch's CPU kernels take the
grouped heads directly (``enable_gqa=True``), with the same result bit for bit in the forward pass.

:func:`use_grouped_sdpa` switches a model whose attention is ``sdpa`` to the attention function
registered here under :data:`GROUPED_SDPA`. It calls SDPA with ``enable_gqa=True`` when the model
runs on the CPU, has grouped heads, more than one query position and a mask; every other call is
passed unchanged to transformers' own ``sdpa`` function (on GPUs ``enable_gqa`` with a mask falls
back to a slower kernel, and single-token decoding is already handled there without copies).
Masks are built exactly as for ``sdpa``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: The name the attention function is registered under in transformers' attention interfaces.
GROUPED_SDPA = "searchenv_grouped_sdpa"


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over grouped key/value heads with no copies; transformers' ``sdpa`` otherwise.

    Args:
        module: The attention module (its ``num_key_value_groups`` says how many query heads share a
            key/value head).
        query: ``[batch, heads, q_len, dim]``.
        key: ``[batch, kv_heads, kv_len, dim]``.
        value: ``[batch, kv_heads, kv_len, dim]``.
        attention_mask: A boolean or additive mask broadcastable to ``[batch, heads, q_len, kv_len]``.
        dropout: Dropout probability on the attention weights.
        scaling: Softmax scale (default ``dim ** -0.5``).
        is_causal: Passed on to transformers' ``sdpa`` when this function does not handle the call.
        **kwargs: Passed on to transformers' ``sdpa`` (a soft-cap, a position bias or a paged cache
            always go there).

    Returns:
        ``(output [batch, q_len, heads, dim], None)``, as transformers' attention functions return.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    special = any(kwargs.get(k) is not None for k in ("softcap", "position_bias", "cache"))
    if (
        groups > 1
        and attention_mask is not None
        and query.shape[2] > 1
        and query.device.type == "cpu"
        and not special
        and not kwargs.get("output_attentions", False)
    ):
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    result: tuple[torch.Tensor, None] = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )
    return result


def _register() -> None:
    """Register :func:`grouped_sdpa_attention` and ``sdpa``'s mask builder under :data:`GROUPED_SDPA` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)


def use_grouped_sdpa(model: Any) -> bool:
    """Switch ``model`` from ``sdpa`` to :data:`GROUPED_SDPA` attention; other implementations are left alone.

    The switch changes no result of the forward pass and applies to the model object (and
    anything sharing its config, such as a LoRA wrapper or a deep copy made afterwards).

    Args:
        model: A transformers ``PreTrainedModel`` (or anything else, which is left unchanged).

    Returns:
        True if the model now uses :data:`GROUPED_SDPA`.
    """
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == GROUPED_SDPA:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    _register()
    model.set_attn_implementation(GROUPED_SDPA)
    return getattr(model.config, "_attn_implementation", None) == GROUPED_SDPA
