"""The key/value cache of :class:`~agents.policies.hf.HFPolicy`: its shape and cost, buffers, the prefix store.

What a model's cache holds per token (:func:`kv_shapes`, :func:`kv_bytes_per_token`) is read off
its config here. Each decode step writes one position into a preallocated buffer per layer (no per-step copies),
and the key/values of finished sequences are kept in a :class:`_PrefixStore`, so a prompt that
extends one of them (an episode's next turn) only prefills its new tokens.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


@functools.cache
def _takes_cache(cls: Any) -> bool:
    """Whether ``cls.forward`` names its key/value cache ``cache`` (transformers 5.x), not ``past_key_values``."""
    try:
        return "cache" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


def cache_inputs(module: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` with ``past_key_values`` under the name ``module``'s forward takes.

    transformers 5.x calls the cache argument ``cache`` and warns that ``past_key_values`` goes away
    in 5.40; earlier releases (down to this package's lower bound) know only ``past_key_values``.
    """
    kind: Any = type(module)
    if "past_key_values" in inputs and _takes_cache(kind):
        inputs = dict(inputs)
        inputs["cache"] = inputs.pop("past_key_values")
    return inputs


def _text_config(model: Any) -> Any:
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def kv_shapes(model: Any) -> list[tuple[int, int]]:
    """``(key/value heads, head size)`` of each layer of ``model``'s key/value cache."""
    text_cfg = _text_config(model)
    heads = getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads
    dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
    return [(int(heads), int(dim))] * int(text_cfg.num_hidden_layers)


def kv_bytes_per_token(model: Any, dtype: torch.dtype) -> int | None:
    """Bytes of one token's keys and values over all layers of ``model`` in ``dtype``; None if its config won't say."""
    try:
        shapes = kv_shapes(model)
    except (AttributeError, TypeError, ZeroDivisionError):
        return None
    return sum(2 * heads * dim for heads, dim in shapes) * dtype.itemsize


def full_attention_only(model: Any) -> bool:
    """Whether every layer of ``model`` attends to every earlier position (no sliding window).

    The fixed-shape decode step builds its own full-attention mask over the whole buffer, in place
    of transformers' mask building, so it is only right for such models.
    """
    text_cfg = _text_config(model)
    layer_types = getattr(text_cfg, "layer_types", None) or []
    sliding = getattr(text_cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types)
    return not sliding


def _kv_layer_class() -> type:
    """A transformers cache layer over a preallocated buffer (built lazily: transformers is heavy)."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        """Keys/values in a ``[batch, heads, capacity, dim]`` buffer; appends write in place."""

        def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
            super().__init__()
            self.kbuf, self.vbuf, self.length = keys, values, length
            self.write_at: torch.Tensor | None = None
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self._views()

        def _views(self) -> None:
            self.keys = self.kbuf[:, :, : self.length]
            self.values = self.vbuf[:, :, : self.length]

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            """Nothing to do: the buffer exists from the start."""

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            """Write the new states after the current length and return views of everything so far.

            In fixed-shape mode (``write_at`` set to a one-element position tensor) the states are
            written at that column and the whole buffer is returned: the same shapes every step, and
            no Python integer that a captured CUDA graph would freeze.
            """
            if self.write_at is not None:
                self.kbuf.index_copy_(2, self.write_at, key_states)
                self.vbuf.index_copy_(2, self.write_at, value_states)
                return self.kbuf, self.vbuf
            n, q = self.length, key_states.shape[-2]
            if n + q > self.kbuf.shape[-2]:
                self.kbuf, self.vbuf = _grown(self.kbuf, n, n + q), _grown(self.vbuf, n, n + q)
            self.kbuf[:, :, n : n + q].copy_(key_states)
            self.vbuf[:, :, n : n + q].copy_(value_states)
            self.length = n + q
            self._views()
            return self.kbuf[:, :, : self.length], self.vbuf[:, :, : self.length]

        def get_seq_length(self) -> int:
            """Positions written so far (padding included)."""
            return int(self.length)

        def select_rows(self, rows: torch.Tensor) -> None:
            """Keep only ``rows`` of the batch (copies the used part of the buffer)."""
            n = self.length
            kb = self.kbuf.new_empty((len(rows), *self.kbuf.shape[1:]))
            vb = self.vbuf.new_empty((len(rows), *self.vbuf.shape[1:]))
            kb[:, :, :n] = self.kbuf[rows, :, :n]
            vb[:, :, :n] = self.vbuf[rows, :, :n]
            self.kbuf, self.vbuf = kb, vb
            self._views()

    return BufferLayer


def _grown(buf: torch.Tensor, used: int, need: int) -> torch.Tensor:
    new = buf.new_empty((*buf.shape[:2], max(need, int(need * 1.5)), buf.shape[3]))
    new[:, :, :used] = buf[:, :, :used]
    return new


_LAYER_CLASS: list[type] = []


def _buffer_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> Any:
    from transformers.cache_utils import Cache

    if not _LAYER_CLASS:
        _LAYER_CLASS.append(_kv_layer_class())
    return Cache(layers=[_LAYER_CLASS[0](k, v, length) for k, v in layers])


@dataclass
class _Entry:
    """One cached sequence: its token ids and per-layer keys/values ``[heads, len, dim]``."""

    ids: np.ndarray
    kv: list[tuple[torch.Tensor, torch.Tensor]]


class _PrefixStore:
    """The key/values of the previous call's sequences, searched by longest common prefix."""

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.fingerprint: tuple[Any, ...] | None = None
        self._mat: np.ndarray | None = None

    def clear(self) -> None:
        self.entries, self._mat = [], None

    def add(self, entry: _Entry) -> None:
        self.entries.append(entry)
        self._mat = None

    def match(self, prompt: np.ndarray) -> tuple[int, int]:
        """(entry index, reusable length) of the longest common prefix; (-1, 0) if none."""
        if not self.entries:
            return -1, 0
        if self._mat is None:
            width = max(len(e.ids) for e in self.entries)
            mat = np.full((len(self.entries), width), -1, dtype=np.int64)
            for i, e in enumerate(self.entries):
                mat[i, : len(e.ids)] = e.ids
            self._mat = mat
        k = min(len(prompt), self._mat.shape[1])
        if k == 0:
            return -1, 0
        eq = self._mat[:, :k] == prompt[:k]
        lcp = np.where(eq.all(axis=1), k, eq.argmin(axis=1))
        best = int(lcp.argmax())
        return (best, int(lcp[best])) if lcp[best] > 0 else (-1, 0)
