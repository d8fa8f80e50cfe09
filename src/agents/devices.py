"""Where a model runs, in one place: device names, moving tensors there, autocast, weight dtypes.

Every model lives on one device. Code that hands tensors to a model moves them there with
:func:`to_device` (one call per batch, not per tensor), finds the device with :func:`model_device`,
and runs mixed precision with :func:`autocast`, which follows the device's type (``cuda`` or
``cpu``), never a hard-coded one. Loss math runs where the log-probs are (the model's device);
values go to the host only to be logged or stored.

Device names (the ``device`` setting of the trainers and ``--device`` of ``searchenv eval`` and
``searchenv train``): ``auto`` (CUDA when available, else the CPU; a policy handed to a trainer
stays where it is), ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``, ``xpu:N``.

Only :func:`check_device_name` and :func:`check_dtype_name` work without torch (configs validate
with them); everything else imports torch when called.
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


#: What ``generation_dtype`` may be set to where a reference agent's model is loaded.
GENERATION_DTYPES = ("auto", "float32", "bfloat16")
#: What a decode loop may be set to: ``auto`` (:func:`fast_generation` chooses) or one of the loops.
DECODE_SETTINGS = ("auto", "static", "dynamic")


@dataclasses.dataclass(frozen=True)
class GenerationPath:
    """How :class:`~agents.policies.hf.HFPolicy` generates on a kind of device when left to choose.

    Attributes:
        decode: ``"static"`` or ``"dynamic"``, the decode loop.
        cuda_graph: Whether the fixed-shape step is captured in a CUDA graph.
        dtype: The generation copy's dtype for float32 weights, or None (the model's own weights).
    """

    decode: str
    cuda_graph: bool
    dtype: str | None


#: The fastest path ``benchmarks/gpu_decode.py`` has measured on a GPU (docs/guides/gpu.md); on a CUDA
#: device it is every caller's default.
CUDA_GENERATION = GenerationPath(decode="static", cuda_graph=True, dtype="bfloat16")
#: Elsewhere: the dynamic loop (it drops finished rows; no graphs to replay) from the model's own weights.
#: A bfloat16 copy on a CPU is opted into where its answers were measured (:func:`generation_dtype_for`).
HOST_GENERATION = GenerationPath(decode="dynamic", cuda_graph=False, dtype=None)


def fast_generation(device: torch.device | str) -> GenerationPath:
    """The generation path :class:`~agents.policies.hf.HFPolicy` takes on ``device`` when left to choose."""
    import torch

    return CUDA_GENERATION if torch.device(device).type == "cuda" else HOST_GENERATION


def native_bfloat16(device: torch.device | str) -> bool:
    """Whether ``device`` multiplies bfloat16 in hardware: a CPU with AVX512-BF16 or AMX.

    Only the CPU is answered from its flags: where the packaged searcher's answers in bfloat16 were
    measured (``benchmarks/searcher_cpu.py``). Other devices answer False until they are measured.
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

    On a CUDA device an episode's cost is its key/value cache (two tensors per layer of
    ``key/value heads x head size`` numbers per token, in the generation dtype); ``memory_share`` of the
    free memory goes to them. Elsewhere, or where the model's shape is not known, the answer is
    :data:`HOST_EPISODES_IN_FLIGHT`.

    Args:
        policy: The agent's model (an object with ``model`` and ``device``), or None.
        episodes: Episodes to run (on CUDA the answer is at most this, and at least 1).
        tokens_per_episode: An episode's longest context (prompt, every turn and every reply).
        memory_share: The share of free device memory the key/values may take.
    """
    device = getattr(policy, "device", None)
    config = getattr(getattr(policy, "model", None), "config", None)
    if device is None or config is None:  # no model (a scripted agent): torch need not even be installed
        return HOST_EPISODES_IN_FLIGHT
    import torch

    if not isinstance(device, torch.device) or device.type != "cuda":
        return HOST_EPISODES_IN_FLIGHT
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    if not (layers and kv_heads and head_dim):
        return HOST_EPISODES_IN_FLIGHT
    copy = getattr(policy, "generation_dtype", None)
    dtype = copy if copy is not None else next(policy.model.parameters()).dtype
    per_token = 2 * layers * kv_heads * head_dim * dtype.itemsize
    free, _ = torch.cuda.mem_get_info(device)
    fit = int(memory_share * free // (per_token * max(1, tokens_per_episode)))
    return max(1, min(episodes, fit))


def generation_dtype_for(name: str, device: torch.device | str) -> str | None:
    """The generation copy's dtype for a setting of :data:`GENERATION_DTYPES` on ``device``.

    ``auto`` is :func:`fast_generation`'s dtype on a CUDA device (``bfloat16``), ``bfloat16`` on a
    CPU where :func:`native_bfloat16` holds, else the model's own weights (None); ``float32`` is
    always the model's own weights.

    Raises:
        ValueError: For a name outside :data:`GENERATION_DTYPES`.
    """
    if name not in GENERATION_DTYPES:
        raise ValueError(f"generation_dtype must be one of {', '.join(GENERATION_DTYPES)}, got {name!r:.40}")
    if name == "auto":
        return fast_generation(device).dtype or ("bfloat16" if native_bfloat16(device) else None)
    return None if name == "float32" else name
