"""A low-precision copy of a model's weights used only for generation (sampling), refreshed in place.

Training and log-prob scoring keep the float32 master weights; :class:`GenerationWeights` holds a
second module with the same structure whose floating-point parameters are a ``bfloat16`` (or
``float16``) copy. Buffers (rotary frequencies and the like) are shared with the master, not
converted, exactly as a model loaded in ``bfloat16`` keeps them in float32.

The copy follows the master by version: :meth:`GenerationWeights.model` compares the master's
parameter version counters (every in-place update, an optimizer step or ``load_state_dict``,
bumps them) with those seen at the last refresh and copies the values over in place when they
differ. In place matters: the copy's tensors keep their storage, so a CUDA graph captured over
them stays valid and replays with the new values. A change of the master's structure (another
model object, parameters moved to another device or replaced) rebuilds the copy, with new
storage; the graph cache notices that through the weights' pointers (``HFPolicy._step_for``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _structure(model: Any) -> tuple[Any, ...]:
    """What a rebuild depends on: the model object, its parameter objects, their devices and shapes."""
    return (id(model), tuple((id(p), p.device, tuple(p.shape)) for p in model.parameters()))


def _versions(model: Any) -> tuple[int, ...]:
    return tuple(p._version for p in model.parameters())


class GenerationWeights:
    """A ``dtype`` copy of ``master`` for generation, kept current by version counters.

    Args:
        dtype: The copy's floating-point dtype (``torch.bfloat16`` or ``torch.float16``).

    Attributes:
        refreshes: In-place refreshes done (after the master changed).
        builds: Copies built (the first use, or after the master's structure changed).
    """

    def __init__(self, dtype: torch.dtype) -> None:
        import torch

        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"generation_dtype must be bfloat16 or float16, got {dtype!r}")
        self.dtype = dtype
        self._copy: Any = None
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._structure: tuple[Any, ...] | None = None
        self._versions: tuple[int, ...] | None = None
        self.refreshes = 0
        self.builds = 0

    def model(self, master: Any) -> Any:
        """The generation copy of ``master``, rebuilt or refreshed first if ``master`` changed."""
        structure = _structure(master)
        if self._copy is None or structure != self._structure:
            self._build(master)
            self._structure = structure
        elif _versions(master) != self._versions:
            self.refresh(master)
        return self._copy

    def refresh(self, master: Any) -> bool:
        """Copy the master's current values into the copy in place; False if there is no copy to refresh.

        Trainers may call this right after an optimizer step; :meth:`model` also does it whenever
        the master's version counters moved, so a forgotten call never samples from stale weights.
        """
        import torch

        if self._copy is None or _structure(master) != self._structure:
            return False
        with torch.no_grad():
            for src, dst in self._pairs:
                dst.copy_(src)
        self._versions = _versions(master)
        self.refreshes += 1
        return True

    def _build(self, master: Any) -> None:
        import torch

        self.drop()
        memo: dict[int, Any] = {}
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for p in master.parameters():
                if id(p) in memo:
                    continue
                if p.is_floating_point():
                    low = torch.nn.Parameter(p.detach().to(self.dtype), requires_grad=False)
                    pairs.append((p, low))
                else:
                    low = torch.nn.Parameter(p.detach().clone(), requires_grad=False)
                memo[id(p)] = low
            for b in master.buffers():
                memo[id(b)] = b  # shared, in their own dtype (as a model loaded in bfloat16 keeps them)
            self._copy = copy.deepcopy(master, memo)
        self._copy.eval()
        self._pairs = pairs
        self._versions = _versions(master)
        self.builds += 1

    def drop(self) -> None:
        """Free the copy."""
        self._copy, self._pairs, self._structure, self._versions = None, [], None, None

    @property
    def held(self) -> Any:
        """The copy if one is built, else None (nothing held)."""
        return self._copy
