"""Capturing the fixed-shape decode step as a graph, and the per-bucket slots kept across ``generate`` calls.

A captured step is anything with ``out`` (the output tensor, overwritten by every replay) and
``replay()``. :func:`capture_cuda` makes one from a ``torch.cuda.CUDAGraph`` (two warm-up calls on
a side stream, then the capture). Where a CUDA graph cannot run (the CPU tests), :class:`StandInGraph`
is a real stand-in with the same contract: it runs the step once when captured (to own the output
buffer, as the capture's memory pool does) and re-runs it into that buffer on ``replay()``. It also
records the storage pointer of every tensor the step reads (weights, key/value buffers, the static
inputs) and refuses to replay if one moved: a real graph would read memory that is no longer
those tensors. So a CPU test of the lifecycle also checks what makes reuse safe on a GPU.

A :class:`SlotCache` keeps, per bucket ``(rows, capacity, dtype, device)``, the buffers a
fixed-shape step works on (key/value buffers, mask, token, position and column tensors) and its
captured graph, for the next call with the same bucket; the least recently used bucket is dropped
past ``size``. Rows and capacities are rounded up (:func:`row_bucket`, :func:`capacity_bucket`) so
calls of nearby shapes share one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

#: Capacities are rounded up to a multiple of this many positions.
CAPACITY_STEP = 128


def row_bucket(rows: int) -> int:
    """Rows rounded up: a power of two up to 64, then a multiple of 64."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    if rows <= 64:
        return 1 << (rows - 1).bit_length()
    return -(-rows // 64) * 64


def capacity_bucket(capacity: int) -> int:
    """Key/value positions rounded up to a multiple of :data:`CAPACITY_STEP`."""
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
    return -(-capacity // CAPACITY_STEP) * CAPACITY_STEP


class CapturedStep(Protocol):
    """A captured decode step: ``replay()`` recomputes ``out`` from the step's static inputs."""

    out: torch.Tensor

    def replay(self) -> None:
        """Run the step again; its result overwrites :attr:`out`."""


#: ``capture(forward, reads, device) -> CapturedStep``; ``reads`` are the tensors the step reads.
Capture = Callable[[Callable[[], "torch.Tensor"], Sequence["torch.Tensor"], "torch.device"], CapturedStep]


def capture_cuda(
    forward: Callable[[], torch.Tensor], reads: Sequence[torch.Tensor], device: torch.device
) -> CapturedStep:  # pragma: no cover - needs a CUDA device
    """Capture ``forward`` in a ``torch.cuda.CUDAGraph`` after two warm-up calls on a side stream.

    Raises:
        RuntimeError: If something in the step cannot be captured (a host sync, say).
    """
    import torch

    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up: the writes are the step's own, repeated by the replay
            forward()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward()
    return _CudaStep(graph, out)


class _CudaStep:  # pragma: no cover - needs a CUDA device
    def __init__(self, graph: Any, out: torch.Tensor) -> None:
        self.graph, self.out = graph, out

    def replay(self) -> None:
        self.graph.replay()


class StandInGraph:
    """A stand-in for a CUDA graph where none can run: same contract, and it checks pointers.

    Attributes:
        out: The output buffer, written by the capture and overwritten by each replay.
        replays: How many times :meth:`replay` ran.
    """

    #: Every stand-in captured so far in this process (tests read their counts).
    captured: list[StandInGraph] = []

    def __init__(
        self, forward: Callable[[], torch.Tensor], reads: Sequence[torch.Tensor], device: torch.device
    ) -> None:
        self.forward = forward
        self.reads = list(reads)
        self.pointers = [t.data_ptr() for t in self.reads]
        self.device = device
        self.out = forward().clone()
        self.replays = 0
        StandInGraph.captured.append(self)

    @classmethod
    def capture(
        cls, forward: Callable[[], torch.Tensor], reads: Sequence[torch.Tensor], device: torch.device
    ) -> StandInGraph:
        """A :data:`Capture` that makes stand-ins."""
        return cls(forward, reads, device)

    def replay(self) -> None:
        """Re-run the step into :attr:`out`.

        Raises:
            RuntimeError: If a tensor the step read at capture has moved to other storage.
        """
        moved = [i for i, (t, p) in enumerate(zip(self.reads, self.pointers, strict=True)) if t.data_ptr() != p]
        if moved:
            raise RuntimeError(f"stale graph: {len(moved)} tensors it reads moved since the capture")
        self.out.copy_(self.forward())
        self.replays += 1


class SlotCache:
    """Up to ``size`` per-bucket slots (least recently used dropped first), for one set of weights.

    ``weights`` is a key of the weights' storage (see :func:`weights_key`): a slot's graph reads the
    weights where they were at capture, so a different key drops every slot.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.weights: tuple[Any, ...] | None = None
        self.evictions = 0

    def get(self, key: tuple[Any, ...], weights: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """The slot for ``key`` (built if missing), now the most recently used."""
        if weights != self.weights:
            self.clear()
            self.weights = weights
        slot = self.slots.get(key)
        if slot is None:
            while len(self.slots) >= self.size:
                self.slots.popitem(last=False)
                self.evictions += 1
            slot = build()
            self.slots[key] = slot
        self.slots.move_to_end(key)
        return slot

    def clear(self) -> None:
        """Drop every slot (buffers and graphs)."""
        self.slots.clear()
        self.weights = None


def weights_key(model: Any) -> tuple[Any, ...]:
    """Where ``model``'s parameters and buffers live: a captured graph is valid while this is unchanged."""
    return (id(model), *(t.data_ptr() for t in model.parameters()), *(t.data_ptr() for t in model.buffers()))
