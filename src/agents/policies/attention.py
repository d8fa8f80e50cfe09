"""Grouped-query attention without copying keys and values, for transformers models.

Models such as SmolLM2 and Llama share each key/value head among several query heads. With a
padding mask (every batched rollout and training batch has one), transformers' ``sdpa`` attention
repeats the keys and values once per query head before calling
:func:`torch.nn.functional.scaled_dot_product_attention` (``repeat_kv``): for a batch of 32
episodes that is a fresh copy per layer and tensor, a large share of a rollout's prefill time on a
CPU when profiled. PyTorch's CPU kernels take the
grouped heads directly (``enable_gqa=True``), with the same result bit for bit in the forward pass.

:func:`use_grouped_sdpa` switches a model whose attention is ``sdpa`` to the attention function
registered here under :data:`GROUPED_SDPA`. With grouped heads and a mask it attends without
copies:

- a single query position (a decode step), on any device: the query heads that share a key/value
  head become that head's query rows (``[batch, kv_heads, groups, dim]``), so SDPA runs on the
  key/value heads as they are, whatever the installed transformers version does (older releases
  call ``repeat_kv`` on the whole cache at every step once a padding mask is given);
- several query positions on the CPU: SDPA with ``enable_gqa=True`` (on GPUs ``enable_gqa`` with a
  mask falls back to a slower kernel, so prefill there goes to transformers' ``sdpa``).

Every other call is passed unchanged to transformers' own ``sdpa`` function. Masks are built
exactly as for ``sdpa``.
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
    if groups > 1 and not special and not kwargs.get("output_attentions", False) and _packable(
        query, key, attention_mask, groups
    ):
        return _packed_decode(query, key, value, attention_mask, dropout, scaling), None
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


def _packable(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, groups: int) -> bool:
    """Whether a call is one query position over grouped heads with a mask shared or given per head."""
    b, heads, q_len, _ = query.shape
    if q_len != 1 or key.shape[1] * groups != heads:
        return False
    return mask is None or (mask.dim() == 4 and mask.shape[2] == 1 and mask.shape[1] in (1, heads))


def _packed_decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
) -> torch.Tensor:
    """One query position: the query heads of each key/value head attend as that head's rows.

    Query head ``h`` uses key/value head ``h // groups`` (as ``repeat_kv`` lays them out), so a
    reshape of the queries to ``[batch, kv_heads, groups, dim]`` lines them up with the cache as it
    is. A mask shared by the heads (``[batch, 1, 1, kv_len]``) broadcasts over the rows; a per-head
    mask is reshaped the same way as the queries.
    """
    import torch

    b, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    rows = query.reshape(b, kv_heads, heads // kv_heads, dim)
    if mask is not None and mask.shape[1] != 1:
        mask = mask.reshape(b, kv_heads, heads // kv_heads, mask.shape[-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        rows, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling, is_causal=False
    )
    return out.reshape(b, heads, 1, dim).transpose(1, 2).contiguous()


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
