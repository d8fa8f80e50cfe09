"""Where a model runs, in one place: device names, moving tensors there, autocast, weight dtypes.

Every model lives on one device. Code that hands tensors to a model moves them there with
:func:`to_device` (one call per batch, not per tensor), finds the device with :func:`model_device`,
and runs mixed precision with :func:`autocast`, which follows the device's type (``cuda`` or
``cpu``), never a hard-coded one. Loss math runs where the log-probs are (the model's device);
values go to the host only to be logged or stored.

Device names (the ``device`` setting of the trainers and ``--device`` of ``searchenv eval`` and
``searchenv train``): ``auto`` (CUDA when available, else the CPU; a policy handed to a trainer
stays where it is), ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``, ``xpu:N``.

How an in-process model generates (decode loop, fixed-shape step, generation dtype) is one
:class:`GenerationSettings` value, each part ``auto`` or given; what ``auto`` becomes on a device is
decided here (:func:`fast_generation`) and nowhere else.

Only :func:`check_device_name`, :func:`check_dtype_name` and making or merging a
:class:`GenerationSettings` work without torch (configs validate with them); everything else
imports torch when called.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

#: Weight dtypes a model can be loaded or trained in.
DTYPES = ("float32", "bfloat16", "float16")

_DEVICE_NAME = re.compile(r"^(auto|cpu|mps|(cuda|xpu)(:\d+)?)$")

T = TypeVar("T")


def check_device_name(name: object, field: str = "device") -> str:
    """Validate a device name without importing torch.

    Args:
        name: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu`` or ``xpu:N``.
        field: The setting's name, for the message.

    Returns:
        The name.

    Raises:
        ValueError: Naming the setting and the value, for anything else.
    """
    if not isinstance(name, str) or not _DEVICE_NAME.match(name):
        raise ValueError(f"{field} must be auto, cpu, cuda, cuda:N, mps, xpu or xpu:N, got {name!r}")
    return name


def check_dtype_name(name: object, field: str = "dtype") -> str:
    """Validate a weight dtype name (one of :data:`DTYPES`) without importing torch.

    Raises:
        ValueError: Naming the setting and the value.
    """
    if name not in DTYPES:
        raise ValueError(f"{field} must be one of {DTYPES}, got {name!r}")
    return str(name)


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """The torch device for a device name (``auto`` or None: CUDA when available, else the CPU).

    Raises:
        ValueError: For an unknown name, or an accelerator this machine does not have (the message
            says what is available).
    """
    import torch

    if isinstance(name, torch.device):
        return name
    spec = check_device_name("auto" if name is None else name)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r} asked for, but this machine has no CUDA GPU (or torch is a CPU "
                             "build); use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {spec!r} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                             "device(s)")
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError("device 'mps' asked for, but MPS is not available here; use --device cpu or auto")
    elif device.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ValueError(f"device {spec!r} asked for, but no XPU is available here; use --device cpu or auto")
    return device


def model_device(model: Any) -> torch.device:
    """The device of a model's parameters (the CPU for a model without any)."""
    import torch

    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """The torch dtype of a name of :data:`DTYPES` (a torch dtype is returned as is)."""
    import torch

    if isinstance(name, torch.dtype):
        return name
    return getattr(torch, check_dtype_name(name))


def to_device(obj: T, device: torch.device | str, *, non_blocking: bool = True) -> T:
    """``obj`` with every tensor in it on ``device``: a tensor, a dataclass, a list, tuple or dict of them.

    Tensors already there are returned as they are (no copy). Copies from the host are
    asynchronous on CUDA (``non_blocking``); a later operation on the device waits for them.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)  # type: ignore[return-value]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        moved = {f.name: to_device(getattr(obj, f.name), device, non_blocking=non_blocking)
                 for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **moved)
    if isinstance(obj, list | tuple):
        return type(obj)(to_device(x, device, non_blocking=non_blocking) for x in obj)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device, non_blocking=non_blocking) for k, v in obj.items()}  # type: ignore[return-value]
    return obj


@contextlib.contextmanager
def autocast(device: torch.device | str, enabled: bool, dtype: str | torch.dtype = "bfloat16") -> Iterator[None]:
    """Mixed precision on ``device``'s type (``cuda``, ``cpu``, ...), or nothing when not ``enabled``."""
    if not enabled:
        yield
        return
    import torch

    kind = torch.device(device).type
    with torch.autocast(kind, dtype=torch_dtype(dtype)):
        yield


def describe(device: torch.device | str) -> str:
    """A device in words for logs and benchmark tables (the GPU's name on CUDA)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return f"{dev} ({torch.cuda.get_device_name(dev)})"
    return str(dev)


#: The decode loops of :class:`~agents.policies.hf.HFPolicy` (the same tokens for the same seeds):
#: ``static`` keeps every row in a fixed-shape batch and reads tokens to the host every few steps;
#: ``dynamic`` reads every token and drops finished rows.
DECODE_LOOPS = ("static", "dynamic")
#: What :attr:`GenerationSettings.decode` takes: ``auto`` (the device chooses) or a loop.
DECODE_SETTINGS = ("auto", *DECODE_LOOPS)
#: What :attr:`GenerationSettings.dtype` takes: ``auto`` (the device chooses) or a weight dtype.
GENERATION_DTYPES = ("auto", *DTYPES)


@dataclasses.dataclass(frozen=True)
class GenerationPath:
    """How a model generates, every part decided: what :meth:`GenerationSettings.resolve` answers.

    Attributes:
        decode: ``"static"`` or ``"dynamic"``, the decode loop.
        fixed_shape_step: Whether the static loop runs each step over the whole key/value buffer with
            the same tensor shapes every step (captured in a CUDA graph on a CUDA device, run eagerly
            elsewhere); False with the dynamic loop.
        dtype: The dtype of the copy of the weights generation runs from (``"bfloat16"`` or
            ``"float16"``), or None: no copy, the model's own weights.
    """

    decode: str
    fixed_shape_step: bool
    dtype: str | None


#: The fastest path ``benchmarks/gpu_decode.py`` has measured on a GPU (docs/guides/gpu.md): on a CUDA
#: device, what every part left to ``auto`` becomes (the bfloat16 copy for float32 weights).
CUDA_GENERATION = GenerationPath(decode="static", fixed_shape_step=True, dtype="bfloat16")
#: Elsewhere: the dynamic loop (it drops finished rows; no graphs to replay) from the model's own weights.
HOST_GENERATION = GenerationPath(decode="dynamic", fixed_shape_step=False, dtype=None)


def fast_generation(device: torch.device | str) -> GenerationPath:
    """The path a model on ``device`` takes when every part of its :class:`GenerationSettings` is ``auto``."""
    import torch

    return CUDA_GENERATION if torch.device(device).type == "cuda" else HOST_GENERATION


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """How an in-process model generates: each part ``"auto"`` (its device chooses) or given.

    One value, checked here when it is made, for every place that says how a model generates:
    :class:`~agents.policies.hf.HFPolicy` (``policy.generation``), the RL trainers' ``decode``,
    ``cuda_graph`` and ``generation_dtype`` fields, and ``searchenv eval``'s ``--decode``,
    ``--cuda-graph`` and ``--generation-dtype`` (:meth:`from_options` maps those older names).
    What each ``auto`` becomes is decided by :meth:`resolve` from where the model is when asked (a
    model a trainer moves to a GPU takes the GPU's path at its next call): on a CUDA device
    :data:`CUDA_GENERATION`, elsewhere :data:`HOST_GENERATION`.

    Attributes:
        decode: ``auto``, ``static`` or ``dynamic`` (:data:`DECODE_LOOPS`).
        fixed_shape_step: ``auto``, True or False: whether the static loop's steps run with fixed
            shapes (see :class:`GenerationPath`); ``auto`` is on for a CUDA device.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``: ``bfloat16`` or ``float16``
            generate from a copy of the weights in that dtype (training and log-probs keep the
            weights); ``float32`` from the model's own weights, no copy; ``auto`` a bfloat16 copy of
            float32 weights on a CUDA device, the model's own weights elsewhere.

    Raises:
        ValueError: When made with a value outside those, naming the part.
    """

    decode: str = "auto"
    fixed_shape_step: str | bool = "auto"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.decode, str) or self.decode not in DECODE_SETTINGS:
            raise ValueError(f"decode must be auto, static or dynamic, got {self.decode!r:.40}")
        step = self.fixed_shape_step
        if not (isinstance(step, bool) or (isinstance(step, str) and step == "auto")):
            raise ValueError(f"fixed_shape_step (cuda_graph) must be auto, true or false, got {step!r:.40}")
        if not isinstance(self.dtype, str) or self.dtype not in GENERATION_DTYPES:
            raise ValueError(
                f"dtype (generation_dtype) must be auto, float32, bfloat16 or float16, got {self.dtype!r:.40}")

    @classmethod
    def from_options(cls, *, decode: str = "auto", cuda_graph: bool | None = None,
                     generation_dtype: str | None = None) -> GenerationSettings:
        """The settings from the options by their older names (the RL configs' fields, ``evaluate``'s arguments).

        ``cuda_graph`` is :attr:`fixed_shape_step` and ``generation_dtype`` is :attr:`dtype`; None
        (unset) is ``auto`` for both.
        """
        return cls(decode=decode, fixed_shape_step="auto" if cuda_graph is None else cuda_graph,
                   dtype="auto" if generation_dtype is None else generation_dtype)

    def resolve(self, device: torch.device | str, weights_dtype: Any) -> GenerationPath:
        """What a model on ``device`` whose weights are ``weights_dtype`` (a torch dtype) generates with now."""
        fast = fast_generation(device)
        decode = fast.decode if self.decode == "auto" else self.decode
        step = fast.fixed_shape_step if self.fixed_shape_step == "auto" else bool(self.fixed_shape_step)
        if self.dtype == "auto":
            dtype = fast.dtype if str(weights_dtype).removeprefix("torch.") == "float32" else None
        else:
            dtype = None if self.dtype == "float32" else self.dtype
        return GenerationPath(decode=decode, fixed_shape_step=step and decode == "static", dtype=dtype)

    def overridden_by(self, other: GenerationSettings) -> GenerationSettings:
        """These settings with each part that ``other`` gives (not ``auto``) taken from ``other``.

        What a trainer or ``evaluate`` does with the settings it was given and a policy handed to it:
        a part left ``auto`` there keeps the policy's own.
        """
        given = {f.name: getattr(other, f.name) for f in dataclasses.fields(other)
                 if not (isinstance(getattr(other, f.name), str) and getattr(other, f.name) == "auto")}
        return dataclasses.replace(self, **given)


def native_bfloat16(device: torch.device | str) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware: a CPU with AVX512-BF16 or AMX.

    Only the CPU is answered from its flags: where the packaged searcher's answers in bfloat16 were
    measured (``benchmarks/searcher_cpu.py``), so the searcher asks for a bfloat16 copy there. Other
    devices answer False until they are measured.
    """
    import torch

    if torch.device(device).type != "cpu":
        return False
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


#: Episodes in flight where the model's device does not say how many fit (the CPU, a served model).
HOST_EPISODES_IN_FLIGHT = 32


def episodes_in_flight(policy: Any, episodes: int, tokens_per_episode: int, *, memory_share: float = 0.5) -> int:
    """How many episodes to run at once: all that fit a CUDA device's free memory, else a fixed number.

    On a CUDA device an episode's cost is its key/value cache, which the policy states
    (``policy.kv_bytes_per_token()``: bytes per token over every layer, None if unknown);
    ``memory_share`` of the free memory goes to them. Elsewhere, or where the policy does not say,
    the answer is :data:`HOST_EPISODES_IN_FLIGHT`.

    Args:
        policy: The agent's model (an object with ``device`` and ``kv_bytes_per_token``), or None.
        episodes: Episodes to run (on CUDA the answer is at most this, and at least 1).
        tokens_per_episode: An episode's longest context (prompt, every turn and every reply).
        memory_share: The share of free device memory the key/values may take.
    """
    device = getattr(policy, "device", None)
    kv_bytes_per_token = getattr(policy, "kv_bytes_per_token", None)
    if device is None or kv_bytes_per_token is None:  # no model (a scripted agent): torch need not be installed
        return HOST_EPISODES_IN_FLIGHT
    import torch

    if not isinstance(device, torch.device) or device.type != "cuda":
        return HOST_EPISODES_IN_FLIGHT
    per_token = kv_bytes_per_token()
    if not per_token:
        return HOST_EPISODES_IN_FLIGHT
    free, _ = torch.cuda.mem_get_info(device)
    fit = int(memory_share * free // (per_token * max(1, tokens_per_episode)))
    return max(1, min(episodes, fit))
