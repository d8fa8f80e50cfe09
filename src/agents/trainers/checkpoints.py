"""Run folders and checkpoints: start or resume a run, save and restore everything a trainer needs.

Checkpoints are written atomically and read with ``torch.load(weights_only=True)`` onto the CPU;
loading a state dict then copies each tensor onto the device of the module it belongs to, so a
run trained on a GPU resumes there and evaluates on a CPU.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import re
import zipfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.trainers.config import TrainConfig
from agents.trainers.data import DataOrder
from agents.trainers.optim import load_optimizer_state
from searchenv.corpus import atomic_write_lines
from searchenv.errors import CheckpointError

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"
CONFIG_NAME = "config.json"
#: Name prefixes of the temporary files written next to the run folder's files (then renamed over them).
TEMP_PREFIXES = tuple(f".{name}." for name in (CHECKPOINT_NAME, METRICS_NAME, CONFIG_NAME))



def model_state(model: torch.nn.Module, trainable_only: bool) -> dict[str, torch.Tensor]:
    """Host copies of the model's state dict (only trainable tensors when ``trainable_only``, e.g. LoRA).

    Copies go to the CPU, so a checkpoint never pins accelerator memory and loads on any machine.
    """
    return {k: v.detach().to("cpu", copy=True) for k, v in _saved_entries(model, trainable_only).items()}


def _saved_entries(model: torch.nn.Module, trainable_only: bool) -> dict[str, torch.Tensor]:
    """The model's state dict entries a checkpoint holds (the model's own tensors, not copies)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad} if trainable_only else None
    return {k: v for k, v in model.state_dict().items() if names is None or k in names}


def start_run(cfg: TrainConfig, *, resume: bool, overwrite: bool) -> Path:
    """Check and prepare the run folder ``cfg.output_dir`` before anything is loaded; write its config.

    A folder that already holds a run (a checkpoint or metrics) is continued only with ``resume``
    and replaced only with ``overwrite`` (its checkpoint and metrics are deleted); ``resume``
    needs a checkpoint. Temporary files that killed runs left in the folder are removed.

    Args:
        cfg: The trainer config.
        resume: The caller will continue from the folder's checkpoint.
        overwrite: Replace a run already in the folder.

    Returns:
        The run folder (created if needed). A new run's ``config.json`` is written now
        (atomically); a resumed run's only once its checkpoint is known to fit
        (:func:`restore_training_state`), so a refused resume leaves the run's settings as they were.

    Raises:
        ValueError: If both ``resume`` and ``overwrite`` are set.
        FileNotFoundError: If ``resume`` is set and there is no checkpoint.
        FileExistsError: If the folder holds a run and neither flag is set.
    """
    run = Path(cfg.output_dir)
    ckpt = run / CHECKPOINT_NAME
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: choose one")
    if resume and not ckpt.is_file():
        raise FileNotFoundError(f"cannot resume: there is no {ckpt}; drop --resume to start a new run")
    held = [p.name for p in (ckpt, run / METRICS_NAME) if p.is_file() and p.stat().st_size > 0]
    if held and not resume and not overwrite:
        raise FileExistsError(
            f"{run} already holds a run ({', '.join(held)}): continue it with --resume, replace it with "
            "--overwrite, or choose another output_dir"
        )
    run.mkdir(parents=True, exist_ok=True)
    for p in run.iterdir():
        if p.name.startswith(TEMP_PREFIXES) and p.is_file():
            p.unlink(missing_ok=True)
    if overwrite:
        for name in (CHECKPOINT_NAME, METRICS_NAME):
            (run / name).unlink(missing_ok=True)
    if not resume:
        write_config(run, cfg)
    return run


def write_config(run: Path, cfg: TrainConfig) -> None:
    """Write the run's ``config.json`` atomically (what ``--config run/config.json --resume`` reads back)."""
    atomic_write_lines(run / CONFIG_NAME, [json.dumps(cfg.to_dict(), indent=2)])


def save_checkpoint(run_dir: str | Path, state: Mapping[str, Any]) -> Path:
    """Write ``state`` to ``run_dir/checkpoint.pt`` atomically (temporary file, fsync, rename).

    A crash mid-write leaves the previous checkpoint intact; an error removes the temporary file
    (a kill leaves it, and :func:`start_run` removes it).

    Raises:
        TypeError: Naming the entry, if ``state`` holds anything but tensors, numbers, strings,
            None, and dicts, lists and tuples of them (what :func:`load_checkpoint` accepts).
    """
    _check_plain(state)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    final = run / CHECKPOINT_NAME
    tmp = run / f".{CHECKPOINT_NAME}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            torch.save(dict(state), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


_PLAIN_TYPES = (str, bytes, int, float, bool, type(None))


def _check_plain(state: Mapping[str, Any]) -> None:
    stack: list[tuple[Any, str]] = [(state, "")]
    while stack:
        value, where = stack.pop()
        if type(value) in (dict, OrderedDict):
            stack.extend((v, f"{where}[{k!r}]") for k, v in value.items())
            stack.extend((k, f"{where} key {k!r}") for k in value)
        elif type(value) in (list, tuple, torch.Size):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif not isinstance(value, torch.Tensor) and type(value) not in _PLAIN_TYPES:
            raise TypeError(
                f"checkpoint entry state{where} is a {type(value).__module__}.{type(value).__name__}; a checkpoint "
                "holds only tensors, numbers, strings, None and dicts, lists and tuples of them"
            )


def save_training_state(
    run_dir: str | Path,
    kind: str,
    step: int,
    *,
    model: torch.nn.Module,
    cfg: Any,
    optimizer: Any,
    scheduler: Any,
    gen: np.random.Generator,
    cursor: int,
    **extra: Any,
) -> Path:
    """Checkpoint everything a trainer needs to resume exactly (see :func:`save_checkpoint`).

    Args:
        run_dir: The run folder.
        kind: ``sft``, ``grpo`` or ``ppo``.
        step: The last completed step.
        model: The policy model (only trainable tensors are saved when ``cfg.lora``).
        cfg: The trainer config (``lora`` and ``to_dict()`` are used).
        optimizer: Its optimizer.
        scheduler: Its learning-rate scheduler.
        gen: The trainer's NumPy generator (saved with torch's CPU generator).
        cursor: Position in the data order.
        **extra: More state, e.g. ``value_head`` (a state dict).

    Returns:
        The checkpoint path.
    """
    state = {
        "kind": kind,
        "step": step,
        "model": model_state(model, trainable_only=cfg.lora),
        "lora": cfg.lora,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(gen),
        "cursor": cursor,
        "config": cfg.to_dict(),
        **extra,
    }
    return save_checkpoint(run_dir, state)


def restore_training_state(
    run_dir: str | Path,
    *,
    kind: str,
    cfg: TrainConfig,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    gen: np.random.Generator,
    order: DataOrder,
    extra: Mapping[str, torch.nn.Module] | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Load what :func:`save_training_state` wrote, if there is a checkpoint; then write ``cfg`` as the run's config.

    The config is written only after everything loaded and fits, so a refused resume (another
    trainer's checkpoint, a damaged or misfitting one) leaves ``config.json`` as it was.

    Args:
        run_dir: The run folder.
        kind: The trainer resuming (``sft``, ``grpo``, ``ppo``); must be the one that wrote it.
        cfg: The settings the run continues with.
        model: The policy model.
        optimizer: Its optimizer.
        scheduler: Its learning-rate scheduler.
        gen: The trainer's NumPy generator.
        order: The data order (its cursor is restored).
        extra: Modules saved under their key as ``**extra`` state dicts (e.g. ``value_head``).

    Returns:
        (the step to continue after, the checkpoint dict) or (0, None) when there is no checkpoint.

    Raises:
        CheckpointError: If the checkpoint is damaged, unsafe, of another trainer, does not fit,
            or holds a step or data position that is not a non-negative integer.
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        write_config(Path(run_dir), cfg)
        return 0, None
    modules = dict(extra or {})
    _require(ckpt, path, (*_STATE_KEYS, *modules))
    if ckpt["kind"] != kind:
        raise CheckpointError(
            f"{path} was written by `searchenv train {ckpt['kind']}`, not {kind}: resume it with that trainer, "
            "or start this one in another output_dir (init_from can start from that run's weights)"
        )
    for key in ("step", "cursor"):
        value = ckpt[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"checkpoint {path} holds {key} = {value!r:.40}, not a non-negative integer: "
                                  f"{_TO_DO}")
    check_resume_config(path, ckpt["config"], cfg)
    if ckpt["lora"] is not cfg.lora:
        raise CheckpointError(f"checkpoint {path} holds lora = {ckpt['lora']!r:.40}, this run lora = {cfg.lora}: "
                              f"{_TO_DO}")
    check_state_dict(path, "model", ckpt["model"], _saved_entries(model, trainable_only=cfg.lora))
    _check_scheduler_state(path, ckpt["scheduler"], scheduler)
    # the scheduler steps with the optimizer: past its first step, every parameter has Adam moments
    # (a GRPO step whose groups all lacked signal takes no optimizer step)
    check_optimizer_state(path, ckpt["optimizer"], optimizer, stepped=ckpt["scheduler"]["last_epoch"] > 0)
    for key, module in modules.items():
        check_state_dict(path, key, ckpt[key], module.state_dict())
    try:
        model.load_state_dict(ckpt["model"], strict=not cfg.lora)
        load_optimizer_state(optimizer, ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        restore_rng(gen, ckpt["rng"])
        for key, module in modules.items():
            module.load_state_dict(ckpt[key])
        order.cursor = int(ckpt["cursor"])
        step = int(ckpt["step"])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(
            f"{path} does not fit this run ({exc}); resume with the run's own settings (model, lora), "
            "or start over with --overwrite"
        ) from None
    write_config(Path(run_dir), cfg)
    return step, ckpt


_STATE_KEYS = ("kind", "step", "model", "lora", "optimizer", "scheduler", "rng", "cursor", "config")
_TO_DO = (
    "replace it with a good copy, or do without it (start the run over with --overwrite, or give init_from "
    "another run)"
)


def load_checkpoint(run_dir: str | Path) -> dict[str, Any] | None:
    """Read ``run_dir/checkpoint.pt``, or None when there is none.

    Only tensors, numbers, strings, None and containers of them are unpickled
    (``torch.load(weights_only=True)``); a file that is not a torch archive is not unpickled at all.

    Raises:
        CheckpointError: Naming the file, for a damaged file or one holding other objects (which
            could run code when unpickled).
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    if not zipfile.is_zipfile(path):
        size = path.stat().st_size
        what = "an empty file" if size == 0 else f"{size} bytes, not a complete checkpoint archive"
        raise CheckpointError(f"checkpoint {path} is damaged ({what}): {_TO_DO}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        asks = f" (it asks for {found.group(1)})" if found else ""
        raise CheckpointError(
            f"refusing to load checkpoint {path}: it is damaged or holds objects other than tensors, numbers, "
            f"strings and containers{asks}, and unpickling those could run code. This project never writes "
            f"such checkpoints; {_TO_DO}"
        ) from None
    except Exception as exc:  # torch raises RuntimeError, EOFError, ValueError, ... on a damaged archive
        raise CheckpointError(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc}): {_TO_DO}") from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(ckpt).__name__}, not a dict: {_TO_DO}")
    return ckpt


def _require(ckpt: Mapping[str, Any], path: Path, keys: Sequence[str]) -> None:
    missing = [k for k in keys if k not in ckpt]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {missing}: {_TO_DO}")


# ---- does a checkpoint fit the run that resumes it? ----------------------------------------------

#: Settings a resumed run may change: where it runs and is written, what it logs and how often it
#: checkpoints, how each batch is split into forward passes (the same sums), and how far it goes
#: (``steps`` only while nothing depends on it: a constant learning rate and no curriculum schedule).
#: Every other setting decides what the run learns and must be the one the checkpoint was trained with.
RESUME_MAY_CHANGE = frozenset({
    "output_dir", "device", "threads", "progress", "log_every", "save_every", "micro_batch_size",
    "gradient_checkpointing", "steps", "max_generated_tokens", "decode", "cuda_graph",
})
_FIT_TO_DO = "resume with the run's own settings (model, lora), or start over with --overwrite"


def check_resume_config(path: Path, saved: Any, cfg: Any) -> None:
    """Refuse to resume ``cfg`` from a checkpoint (``path``) whose saved config ``saved`` differs from it.

    Every field of ``cfg`` is compared except :data:`RESUME_MAY_CHANGE` (and ``steps`` stays
    compared when the learning-rate schedule or ``hard_share`` depends on it). A field missing from
    ``saved`` (a checkpoint older than the field) counts as that field's default. Paths naming the
    same file or folder are the same setting.

    Raises:
        CheckpointError: Naming the file and every differing field with its saved and new value.
    """
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"checkpoint {path} holds config = {saved!r:.40}, not a dict: {_TO_DO}")
    now = cfg.to_dict()
    steps_matter = now.get("lr_schedule", "constant") != "constant" or now.get("hard_share") is not None
    changed = []
    for f in dataclasses.fields(cfg):
        if f.name in RESUME_MAY_CHANGE and not (f.name == "steps" and steps_matter):
            continue
        if f.name in saved:
            old = saved[f.name]
        elif f.default_factory is not dataclasses.MISSING:
            old = f.default_factory()
        else:
            old = f.default
        if not _same_setting(old, now[f.name]):
            changed.append(f"{f.name} = {_short(old)} saved, {_short(now[f.name])} now")
    if changed:
        keep = ", ".join(sorted(RESUME_MAY_CHANGE))
        raise CheckpointError(
            f"checkpoint {path} was trained with other settings than this run: {'; '.join(changed)}. Resume with "
            f"the run's own settings (--config {path.parent / CONFIG_NAME} --resume; only {keep} may change), or "
            "start a new run in another output_dir (or replace this one with --overwrite)"
        )


def _same_setting(a: Any, b: Any) -> bool:
    a, b = _plain(a), _plain(b)
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str) and a and b:
        try:
            return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
        except OSError:
            return False
    return False


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists (a config read from JSON or TOML holds lists)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _short(value: Any) -> str:
    """``repr(value)``, whole up to 240 characters; longer, its start and its end (where paths differ)."""
    text = repr(value)
    return text if len(text) <= 240 else text[:117] + "..." + text[-120:]


def _few(keys: Sequence[Any]) -> str:
    return ", ".join(repr(k) for k in list(keys)[:3]) + (", ..." if len(keys) > 3 else "")


def check_state_dict(
    path: Path, entry: str, saved: Any, expected: Mapping[str, torch.Tensor], *, same_dtype: bool = True
) -> None:
    """Check the state dict ``saved`` (the checkpoint's ``entry``) against the tensors it will replace.

    The keys must be exactly those of ``expected`` (none missing, none unexpected), each tensor of
    the same shape and dtype (with ``same_dtype=False``: floating point where the model's is, as
    loading casts it), and every floating-point value finite.

    Raises:
        CheckpointError: Naming the file, the entry and the first key that does not fit.
    """
    if not isinstance(saved, Mapping) or not all(isinstance(v, torch.Tensor) for v in saved.values()):
        raise CheckpointError(f"checkpoint {path}: {entry} is not a dict of tensors: {_TO_DO}")
    missing = [k for k in expected if k not in saved]
    unexpected = [k for k in saved if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path}: {entry} does not fit this run's model: {len(missing)} of its {len(expected)} "
            f"tensors missing ({_few(missing)}), {len(unexpected)} unexpected ({_few(unexpected)}); {_FIT_TO_DO}"
        )
    for key, want in expected.items():
        got = saved[key]
        dtype_fits = got.dtype == want.dtype or (
            not same_dtype and got.is_floating_point() == want.is_floating_point())
        if got.shape != want.shape or not dtype_fits:
            raise CheckpointError(
                f"checkpoint {path}: {entry}[{key!r}] is {got.dtype} {tuple(got.shape)}, this run's model has "
                f"{want.dtype} {tuple(want.shape)}; {_FIT_TO_DO}"
            )
        _check_finite(path, f"{entry}[{key!r}]", got)


def _check_finite(path: Path, where: str, value: torch.Tensor) -> None:
    if value.is_floating_point() or value.is_complex():
        bad = int((~torch.isfinite(value)).sum())
        if bad:
            raise CheckpointError(
                f"checkpoint {path}: {where} holds {bad} NaN or infinite values (of {value.numel()}): {_TO_DO}"
            )


#: Optimizer settings of a parameter group that decide its updates (compared where both sides have them).
_GROUP_SETTINGS = ("initial_lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")


def check_optimizer_state(path: Path, saved: Any, optimizer: torch.optim.Optimizer, *, stepped: bool) -> None:
    """Check an optimizer state dict against the optimizer it will be loaded into.

    The parameter groups must match in number, size and settings, and their learning rates be
    finite. Each parameter's state must be complete (Adam's ``step``, ``exp_avg``, ``exp_avg_sq``),
    every tensor of its parameter's shape (scalars aside), finite, and second moments non-negative.
    With ``stepped`` (the optimizer has taken a step) every parameter must have a state.

    Raises:
        CheckpointError: Naming the file, the group or parameter index and the entry.
    """
    where = f"checkpoint {path}: optimizer"
    if not isinstance(saved, Mapping) or not isinstance(saved.get("state"), Mapping) \
            or not isinstance(saved.get("param_groups"), list):
        raise CheckpointError(f"{where} is not an optimizer state dict (state, param_groups): {_TO_DO}")
    groups = optimizer.param_groups
    if len(saved["param_groups"]) != len(groups):
        raise CheckpointError(f"{where} has {len(saved['param_groups'])} parameter groups, this run's has "
                              f"{len(groups)}; {_FIT_TO_DO}")
    params: dict[Any, tuple[torch.Tensor, Mapping[str, Any]]] = {}
    for i, (old, new) in enumerate(zip(saved["param_groups"], groups, strict=True)):
        if not isinstance(old, Mapping) or not isinstance(old.get("params"), list) \
                or len(old["params"]) != len(new["params"]):
            size = len(old["params"]) if isinstance(old, Mapping) and isinstance(old.get("params"), list) else "no"
            raise CheckpointError(f"{where} group {i} has {size} parameters, this run's has {len(new['params'])}; "
                                  f"{_FIT_TO_DO}")
        for name in _GROUP_SETTINGS:
            if name in old and name in new and not _same_setting(old[name], new[name]):
                raise CheckpointError(f"{where} group {i} has {name} = {_short(old[name])}, this run "
                                      f"{_short(new[name])}; {_FIT_TO_DO}")
        lr = old.get("lr")
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr) or lr < 0:
            raise CheckpointError(f"{where} group {i} has lr = {lr!r:.40}, not a finite rate: {_TO_DO}")
        params.update((pid, (p, old)) for pid, p in zip(old["params"], new["params"], strict=True))
    state = saved["state"]
    stray = [k for k in state if k not in params]
    if stray:
        raise CheckpointError(f"{where} state holds parameters {_few(stray)} that no group lists; {_FIT_TO_DO}")
    adam = isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW)
    for pid, (param, group) in params.items():
        st = state.get(pid)
        if st is None:
            if stepped:
                raise CheckpointError(f"{where} state has nothing for parameter {pid} (shape {tuple(param.shape)}) "
                                      f"though the optimizer has taken steps: {_TO_DO}")
            continue
        if not isinstance(st, Mapping):
            raise CheckpointError(f"{where} state[{pid}] is not a dict: {_TO_DO}")
        need = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())
        lacking = sorted(need - set(st)) if adam else []
        if lacking:
            raise CheckpointError(f"{where} state[{pid}] lacks {lacking}: {_TO_DO}")
        for key, value in st.items():
            entry = f"optimizer state[{pid}][{key!r}]"
            if isinstance(value, torch.Tensor):
                if value.dim() > 0 and value.shape != param.shape:
                    raise CheckpointError(f"checkpoint {path}: {entry} has shape {tuple(value.shape)}, its parameter "
                                          f"{tuple(param.shape)}: {_TO_DO}")
                _check_finite(path, entry, value)
                if key in ("exp_avg_sq", "max_exp_avg_sq", "step") and bool((value < 0).any()):
                    raise CheckpointError(f"checkpoint {path}: {entry} holds negative values: {_TO_DO}")
            elif isinstance(value, float) and not math.isfinite(value):
                raise CheckpointError(f"checkpoint {path}: {entry} = {value}, not finite: {_TO_DO}")


def _check_scheduler_state(path: Path, saved: Any, scheduler: Any) -> None:
    """The scheduler's saved base rates must be this run's, its position a non-negative count."""
    where = f"checkpoint {path}: scheduler"
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"{where} is not a state dict: {_TO_DO}")
    last = saved.get("last_epoch")
    if isinstance(last, bool) or not isinstance(last, int) or last < 0:
        raise CheckpointError(f"{where} holds last_epoch = {last!r:.40}, not a non-negative integer: {_TO_DO}")
    base = getattr(scheduler, "base_lrs", None)
    if base is not None and not _same_setting(saved.get("base_lrs"), base):
        raise CheckpointError(f"{where} holds base_lrs = {_short(saved.get('base_lrs'))}, this run "
                              f"{_short(base)}; {_FIT_TO_DO}")


def rng_state(gen: np.random.Generator) -> dict[str, Any]:
    """Everything random a trainer owns: NumPy's generator, torch's CPU and (in use) CUDA generators.

    The NumPy state is a dict of ints, torch's CPU state a tensor; the CUDA states are kept where CUDA
    is in use (dropout on a GPU draws from them).
    """
    state: dict[str, Any] = {"numpy": gen.bit_generator.state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(gen: np.random.Generator, state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` saved (CUDA generators only where this machine has as many GPUs)."""
    gen.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
