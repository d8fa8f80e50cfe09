"""A second device on a CPU-only machine, for tests: tensors tagged as living on a virtual accelerator.

No GPU runs the tests, yet the trainers must never hand a model a tensor that lives elsewhere (on
CUDA that is ``RuntimeError: Expected all tensors to be on the same device``). :class:`VirtualDevice`
is a ``TorchFunctionMode`` that pretends the model lives on ``cuda:0``:

- the tensors of a module placed with :meth:`VirtualDevice.place`, anything made from them, anything
  moved there (``.to(device)``, ``.cuda()``), anything created with ``device=`` that device, and the
  gradients of its parameters are *on the device*; every other tensor is on the host (``cpu``);
- ``tensor.device`` reports the virtual device for tensors on it, so code finds the model's device
  as it would on a GPU;
- an operation mixing tensors of both sides raises, as CUDA does (a 0-dim host tensor may join
  device tensors, as CUDA allows for CPU scalars; copies and ``__setitem__`` may cross sides);
- ``.numpy()`` of a device tensor raises, as it does for a CUDA tensor.

Everything really runs on the CPU, so values are real and a whole training step runs. Which side a
tensor is on is kept per tensor object, weakly (a view made by an operation inherits its input's
side; so does a parameter whose ``.data`` is replaced). Torch picks multi-tensor
("foreach") kernels for AdamW and gradient clipping when parameters report CUDA;
:func:`host_kernels` keeps the CPU's single-tensor kernels, so a checked run is bit-identical to
the same run without the check.

    vd = VirtualDevice()
    vd.place(policy.model)
    with vd:
        train_sft(cfg, policy=policy)     # raises where a host tensor reaches the model
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary

_MOVES = {"to", "cpu", "cuda"}
_CROSSING = {"copy_", "__setitem__", "__set__", "set_", "_has_compatible_shallow_copy_type"}  # may mix sides
_HOST = torch.device("cpu")


class DeviceMismatch(RuntimeError):
    """A host tensor and a device tensor met in one operation."""


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _name(func: Callable[..., Any]) -> str:
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    base = getattr(func, "__name__", repr(func))
    return f"{getattr(owner, '__name__', '')}.{base}".lstrip(".") if owner is not None else base


class VirtualDevice(TorchFunctionMode):
    """Tag tensors as living on a virtual accelerator and refuse operations that mix sides.

    Args:
        device: The device tensors on the virtual side report (default ``cuda:0``).
    """

    def __init__(self, device: str = "cuda:0") -> None:
        super().__init__()
        self.device = torch.device(device)
        self._on: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        #: Operations checked, and host tensors seen reaching a module placed on the device.
        self.checked = 0

    # ---- tags ------------------------------------------------------------------------------
    def on_device(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is on the virtual device."""
        return bool(self._on.get(t, False))

    def _tag(self, out: Any, on: bool) -> None:
        for t in _tensors(out):
            self._on[t] = on

    def place(self, module: torch.nn.Module) -> torch.nn.Module:
        """Put every parameter and buffer of ``module`` on the virtual device (no copy)."""
        for t in (*module.parameters(), *module.buffers()):
            self._tag(t, True)
        return module

    # ---- the mode --------------------------------------------------------------------------
    def __enter__(self) -> VirtualDevice:
        # ``nn.Parameter(t)`` makes its tensor without a torch function: it lives where ``t`` does
        # (a generation copy of the weights built from device tensors is on the device).
        made = torch.nn.Parameter.__new__

        def new_parameter(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
            out = made(cls, data, requires_grad)
            if isinstance(data, torch.Tensor):
                self._tag(out, self.on_device(data))
            return out

        self._parameter_patch = mock.patch.object(torch.nn.Parameter, "__new__", new_parameter)
        self._parameter_patch.start()
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._parameter_patch.stop()

    def _is_virtual(self, dev: Any) -> bool:
        if isinstance(dev, torch.Tensor):
            return self.on_device(dev)
        if isinstance(dev, str | torch.device):
            d = torch.device(dev)
            return d.type == self.device.type and (d.index is None or d.index == self.device.index)
        return False

    def _target(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool | None, tuple, dict]:
        """Where a move sends its tensor (None: nowhere new), and the call's arguments made real (CPU)."""
        if name == "cpu":
            return False, args, kwargs
        if name == "cuda":
            return True, args[:1], {k: v for k, v in kwargs.items() if k == "non_blocking"}
        real_args, target = list(args), None
        for i, a in enumerate(args[1:], start=1):
            if isinstance(a, str | torch.device):
                target = self._is_virtual(a)
                real_args[i] = _HOST
            elif isinstance(a, torch.Tensor):
                target = self.on_device(a)
        kw = dict(kwargs)
        if "device" in kw and kw["device"] is not None:
            target = self._is_virtual(kw["device"])
            kw["device"] = _HOST
        return target, tuple(real_args), kw

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        self_tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name == "__set__" and self_tensor is not None and len(args) > 1 and isinstance(args[1], torch.Tensor):
            self._tag(self_tensor, self.on_device(args[1]))  # param.data = other: the param moves with it
            return func(*args, **kwargs)
        if name == "__deepcopy__" and self_tensor is not None:  # its memo holds tensors of both sides
            out = func(*args, **kwargs)
            self._tag(out, self.on_device(self_tensor))
            return out
        if name == "__get__" and self_tensor is not None:  # a property: .device, .grad, .data, ...
            out = func(*args, **kwargs)
            prop = getattr(func, "__self__", None)
            prop_name = getattr(prop, "__name__", "")
            if prop_name == "device":
                return self.device if self.on_device(self_tensor) else out
            if isinstance(out, torch.Tensor):
                self._tag(out, self.on_device(self_tensor))
            return out
        if name == "numpy" and self_tensor is not None and self.on_device(self_tensor):
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() first")
        if name in _MOVES and self_tensor is not None:
            target, real_args, real_kwargs = self._target(name, args, kwargs)
            out = func(*real_args, **real_kwargs)
            if target is None:
                target = self.on_device(self_tensor)
            elif isinstance(out, torch.Tensor) and target != self.on_device(self_tensor) and out is self_tensor:
                with torch._C.DisableTorchFunction():
                    out = out.clone()  # a real copy, so the two sides hold different storage
            self._tag(out, target)
            return out
        created_on: bool | None = None
        if "device" in kwargs and kwargs["device"] is not None:  # a factory: torch.zeros(..., device=...)
            created_on = self._is_virtual(kwargs["device"])
            kwargs["device"] = _HOST
        ins = list(_tensors((args, kwargs)))
        dev = [t for t in ins if self.on_device(t)]
        if name not in _CROSSING and dev:
            host = [t for t in ins if not self.on_device(t) and t.dim() > 0]
            if host:
                shapes = ", ".join(str(tuple(t.shape)) for t in host[:3])
                raise DeviceMismatch(
                    f"{_name(func)}: tensors on {self.device} and on cpu (shapes {shapes}) in one operation; "
                    "on a GPU this raises 'Expected all tensors to be on the same device'"
                )
        self.checked += 1
        out = func(*args, **kwargs)
        if name in _CROSSING:
            return out
        on = created_on if created_on is not None else bool(dev)
        self._tag(out, on)
        return out


@contextlib.contextmanager
def host_kernels() -> Iterator[None]:
    """Keep AdamW and gradient clipping on the kernels the CPU uses (no foreach paths for 'CUDA' tensors)."""
    with mock.patch("torch.optim.adam._default_to_fused_or_foreach", lambda *a, **k: (False, False)), \
            mock.patch("torch.nn.utils.clip_grad._has_foreach_support", lambda *a, **k: False):
        yield
