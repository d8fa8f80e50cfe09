"""Pieces every trainer shares: batched token log-probs, LoRA, schedules, checkpoints, metrics, data order.

A training sample is a token-id sequence with a mask of the same length: 1 on the policy's own
tokens (what it generated, or the demonstration's assistant turns), 0 on the prompt, the
environment's text (retrieved documents) and padding. Only masked-in tokens are scored.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import re
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.trainers.config import TrainConfig
from searchenv.corpus import atomic_write_lines
from searchenv.jsonsafe import iter_jsonl, loads

CHECKPOINT_NAME = "checkpoint.pt"
METRICS_NAME = "metrics.jsonl"
CONFIG_NAME = "config.json"
#: Name prefixes of the temporary files written next to the run folder's files (then renamed over them).
TEMP_PREFIXES = tuple(f".{name}." for name in (CHECKPOINT_NAME, METRICS_NAME, CONFIG_NAME))


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (damaged, holding unsafe objects, or not of this run).

    The message names the file and says what to do.
    """


# ---------------------------------------------------------------------------------------------
# Samples and batched forward passes
# ---------------------------------------------------------------------------------------------


@dataclass
class Sample:
    """One training sequence.

    Attributes:
        ids: Token ids (prompt, then the completion with environment text interleaved).
        mask: Same length; 1 on tokens the loss trains (the policy's own), 0 elsewhere.
        extras: Per-token or per-sequence data a trainer attaches (advantages, old log-probs, ...).
    """

    ids: list[int]
    mask: list[int]
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.mask):
            raise ValueError(f"ids ({len(self.ids)}) and mask ({len(self.mask)}) must have equal length")
        if self.mask and self.mask[0]:
            raise ValueError("the first token cannot be trained (nothing precedes it); mask[0] must be 0")

    @property
    def num_policy_tokens(self) -> int:
        """Tokens the loss trains."""
        return int(sum(self.mask))


@dataclass
class Padded:
    """Right-padded batch of samples.

    Attributes:
        input_ids: ``[B, L]``.
        attention_mask: ``[B, L]`` (1 on real tokens).
        mask: ``[B, L]`` loss mask aligned with ``input_ids`` (token ``j`` is scored from position ``j-1``).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor


def pad_samples(samples: Sequence[Sample], pad_id: int) -> Padded:
    """Right-pad samples into tensors."""
    if not samples:
        raise ValueError("no samples to pad")
    length = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    att = torch.zeros((len(samples), length), dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.float32)
    for i, s in enumerate(samples):
        n = len(s.ids)
        ids[i, :n] = torch.tensor(s.ids, dtype=torch.long)
        att[i, :n] = 1
        mask[i, :n] = torch.tensor(s.mask, dtype=torch.float32)
    return Padded(ids, att, mask)


def pad_extra(samples: Sequence[Sample], key: str, length: int, fill: float = 0.0) -> torch.Tensor:
    """Stack a per-token float list ``sample.extras[key]`` (aligned with ``ids``) into ``[B, length]``."""
    out = torch.full((len(samples), length), fill, dtype=torch.float32)
    for i, s in enumerate(samples):
        v = s.extras[key]
        out[i, : len(v)] = torch.as_tensor(v, dtype=torch.float32)
    return out


def split_model(model: Any) -> tuple[Any, Any]:
    """Return ``(decoder, lm_head)`` of a causal LM (through peft wrappers) to compute logits only where needed."""
    if hasattr(model, "get_decoder") and hasattr(model, "get_output_embeddings"):
        return model.get_decoder(), model.get_output_embeddings()
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(inner, inner.base_model_prefix), inner.get_output_embeddings()


@dataclass
class ForwardOut:
    """Per-token outputs aligned with ``input_ids`` (column ``j`` is about token ``j``).

    Attributes:
        logprobs: ``[B, L]`` log-prob of token ``j`` given tokens ``< j`` (with gradient) where the
            loss mask is 1, and 0 elsewhere (not computed there).
        hidden: ``[B, L, H]`` last hidden state at position ``j - 1`` (the state before token ``j``), if
            asked for (for a value head).
    """

    logprobs: torch.Tensor
    hidden: torch.Tensor | None = None


_LOGIT_CHUNK = 1 << 24  # float32 logits per chunk (64 MB)


def _chunk_logprobs(head: Any, h: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = head(h).float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.logsumexp(-1)


def forward_logprobs(
    model: Any,
    batch: Padded,
    *,
    temperature: float = 1.0,
    want_hidden: bool = False,
    bf16: bool = False,
) -> ForwardOut:
    """One forward pass giving the log-probs of the masked-in tokens of a padded batch.

    The output head and log-softmax run only on masked-in positions (never on the prompt or on
    retrieved text), in chunks recomputed during backward, so the ``tokens x vocab`` logits are
    never all held at once.

    Args:
        model: A causal LM (transformers, possibly peft-wrapped).
        batch: From :func:`pad_samples`.
        temperature: Logits are divided by this (the sampling temperature; 0 or 1 mean none).
        want_hidden: Also return the hidden state before each token (for a value head).
        bf16: Run the decoder under bfloat16 autocast.

    Returns:
        A :class:`ForwardOut`.
    """
    from torch.utils.checkpoint import checkpoint

    decoder, head = split_model(model)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with ctx:
        hidden = decoder(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state
    rows, cols = torch.nonzero(batch.mask > 0, as_tuple=True)
    picked = hidden[rows, cols - 1]
    targets = batch.input_ids[rows, cols]
    vocab = int(getattr(head, "out_features", 0) or head.weight.shape[0])
    step = max(1, _LOGIT_CHUNK // max(1, vocab))
    parts = []
    for a in range(0, len(targets), step):
        h, t = picked[a : a + step], targets[a : a + step]
        with ctx:
            if torch.is_grad_enabled() and h.requires_grad:
                parts.append(checkpoint(_chunk_logprobs, head, h, t, temperature, use_reentrant=False))
            else:
                parts.append(_chunk_logprobs(head, h, t, temperature))
    lps = torch.cat(parts).float() if parts else hidden.new_zeros((0,), dtype=torch.float32)
    B, L = batch.input_ids.shape
    lp = torch.zeros(B, L, dtype=torch.float32).index_put((rows, cols), lps)
    hid = None
    if want_hidden:
        hid = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1).float()
    return ForwardOut(lp, hid)


def micro_batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    """Consecutive chunks of ``size`` samples."""
    for i in range(0, len(samples), size):
        yield list(samples[i : i + size])


# ---------------------------------------------------------------------------------------------
# Model setup
# ---------------------------------------------------------------------------------------------


def load_policy(cfg: TrainConfig) -> Any:
    """Load ``cfg.model``: ``smollm2-135m`` (the packaged GGUF) or a transformers model folder."""
    from agents.policies.hf import HFPolicy

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    return HFPolicy.from_pretrained(cfg.model)


def init_policy(cfg: TrainConfig, policy: Any = None, init_from: str | None = None) -> Any:
    """Load (or take) the policy, start it from ``init_from``'s weights, then :func:`prepare_model`."""
    if policy is None:
        policy = load_policy(cfg)
    elif cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    if init_from is not None:
        load_weights(policy, init_from)
    prepare_model(policy, cfg)
    return policy


def load_weights(policy: Any, run_dir: str | Path) -> None:
    """Replace the policy's weights by those of a run's checkpoint (LoRA runs are merged in).

    Raises:
        FileNotFoundError: If the run has no checkpoint.
        CheckpointError: If the checkpoint is damaged, unsafe, or does not fit the model.
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        raise FileNotFoundError(f"init_from: no {path}; point it at a run folder holding a checkpoint")
    _require(ckpt, path, ("model", "lora", "config"))
    try:
        _load_weights(policy, ckpt)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} does not fit the model {type(policy.model).__name__}: {exc}") from None


def load_trained_policy(run_dir: str | Path) -> Any:
    """The model a training run ended with, ready to generate: its base model with every phase's weights.

    A run started with ``init_from`` is followed back to its first phase (an SFT run, say), so a
    GRPO run trained as LoRA on top of LoRA SFT gets both sets of adapters, in training order.

    Args:
        run_dir: A run folder holding ``checkpoint.pt``.

    Returns:
        An :class:`agents.policies.hf.HFPolicy` in eval mode.

    Raises:
        FileNotFoundError: If a run of the chain has no checkpoint.
        CheckpointError: If a checkpoint is damaged or unsafe, the chain loops, or its phases
            were trained on different base models.
    """
    from agents.policies.hf import HFPolicy

    chain: list[tuple[Path, Mapping[str, Any]]] = []
    current: Path | None = Path(run_dir)
    while current is not None:
        if any(current.resolve() == seen.resolve() for seen, _ in chain):
            raise CheckpointError(f"{run_dir}: init_from loops back to {current}")
        ckpt = load_checkpoint(current)
        if ckpt is None:
            raise FileNotFoundError(f"{current / CHECKPOINT_NAME} does not exist: not a training run folder")
        _require(ckpt, current / CHECKPOINT_NAME, ("model", "lora", "config"))
        chain.append((current, ckpt["config"]))
        parent = ckpt["config"].get("init_from")
        current = Path(parent) if parent else None
    chain.reverse()
    models = {str(cfg.get("model")) for _, cfg in chain}
    if len(models) != 1:
        raise CheckpointError(f"{run_dir}: its phases were trained on different models ({', '.join(sorted(models))})")
    policy = HFPolicy.from_pretrained(models.pop())
    for folder, _ in chain:
        load_weights(policy, folder)
    policy.model.eval()
    return policy


def _load_weights(policy: Any, ckpt: Mapping[str, Any]) -> None:
    if not ckpt["lora"]:
        policy.model.load_state_dict(ckpt["model"])
        return
    from peft import LoraConfig, get_peft_model

    c = ckpt["config"]
    names = {n.rsplit(".", 1)[-1] for n, _ in policy.model.named_modules()}
    lcfg = LoraConfig(
        r=c["lora_r"],
        lora_alpha=c["lora_alpha"],
        lora_dropout=c["lora_dropout"],
        target_modules=[t for t in c["lora_target_modules"] if t in names],
    )
    wrapped = get_peft_model(policy.model, lcfg)
    missing = wrapped.load_state_dict(ckpt["model"], strict=False)
    if missing.unexpected_keys:
        raise ValueError(f"unexpected weights {missing.unexpected_keys[:3]}")
    policy.model = wrapped.merge_and_unload()


def prepare_model(policy: Any, cfg: TrainConfig) -> None:
    """Put the policy's model in training shape: float32 weights, LoRA adapters if ``cfg.lora``.

    The adapters' initial weights depend on ``cfg.seed`` only (not on the global random state).
    """
    model = policy.model
    model.float()
    if cfg.lora and not hasattr(model, "peft_config"):
        from peft import LoraConfig, get_peft_model

        names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = [t for t in cfg.lora_target_modules if t in names]
        if not targets:
            raise ValueError(f"lora_target_modules {cfg.lora_target_modules} match no module of the model")
        lcfg = LoraConfig(
            r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets
        )
        with torch.random.fork_rng(devices=[]):  # adapters drawn from cfg.seed alone; global state restored
            torch.manual_seed(cfg.seed)
            policy.model = get_peft_model(model, lcfg)
    policy.model.train()


def pad_token_id(policy: Any) -> int:
    """The tokenizer's pad id (else EOS, else 0); padded positions are masked anyway."""
    tok = policy.tokenizer
    pid = getattr(tok, "pad_token_id", None)
    if pid is None:
        pid = getattr(tok, "eos_token_id", None)
    return int(pid) if pid is not None else 0


def task_examples(cfg: TrainConfig, retriever: Any = None, split: str | None = None) -> tuple[list[Any], Any]:
    """The configured task's examples of ``split`` (default ``cfg.split``) and a retriever over its corpus.

    ``cfg.max_examples`` keeps only the first N.
    """
    from searchenv.env import SearchQAEnv

    env = SearchQAEnv(
        cfg.task,
        corpus=cfg.corpus,
        retriever=cfg.retriever if retriever is None else retriever,
        split=split or cfg.split,
    )
    examples = list(env.examples)
    if cfg.max_examples is not None:
        examples = examples[: cfg.max_examples]
    return examples, env.retriever


def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Parameters with ``requires_grad``."""
    return [p for p in module.parameters() if p.requires_grad]


def make_optimizer(params: Sequence[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over ``params``.

    Not the fused kernel: on CPU it is about 10x faster per step but resumed runs were then not
    bit-identical to uninterrupted ones.
    """
    return torch.optim.AdamW(list(params), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def load_optimizer_state(opt: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load an optimizer state dict, copying state tensors into freshly allocated memory.

    Tensors unpickled by ``torch.load`` may sit at other alignments than freshly allocated ones,
    which can change the vectorised arithmetic of fused kernels; fresh copies keep resumed runs
    bit-identical to uninterrupted ones.
    """
    opt.load_state_dict(dict(state))
    for st in opt.state.values():
        for k, v in list(st.items()):
            if isinstance(v, torch.Tensor):
                st[k] = v.clone()


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at optimizer step ``i`` (linear warmup, then the schedule).

    Args:
        schedule: ``constant``, ``linear`` (to 0 at ``total``) or ``cosine`` (to 0 at ``total``).
        warmup: Warmup steps.
        total: Total optimizer steps.
    """
    total = max(total, 1)

    def fn(i: int) -> float:
        if warmup and i < warmup:
            return (i + 1) / warmup
        if schedule == "constant":
            return 1.0
        frac = min(1.0, (i - warmup) / max(1, total - warmup))
        if schedule == "linear":
            return max(0.0, 1.0 - frac)
        return 0.5 * (1.0 + math.cos(math.pi * frac))

    return fn


def make_scheduler(
    opt: torch.optim.Optimizer, cfg: TrainConfig, total_optimizer_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR following :func:`lr_lambda`."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(cfg.lr_schedule, cfg.warmup_steps, total_optimizer_steps)
    )


# ---------------------------------------------------------------------------------------------
# Data order
# ---------------------------------------------------------------------------------------------


class DataOrder:
    """Deterministic endless order over ``n`` items: a fresh permutation per epoch from ``(seed, epoch)``.

    The whole state is the cursor (items handed out so far), so resuming needs only that number.
    """

    def __init__(self, n: int, seed: int, cursor: int = 0, shuffle: bool = True) -> None:
        if n < 1:
            raise ValueError(f"need at least one item, got n={n}")
        self.n, self.seed, self.cursor, self.shuffle = n, seed, cursor, shuffle
        self._perm_epoch = -1
        self._perm = np.arange(n)

    def _perm_for(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = (
                np.random.default_rng([self.seed, epoch]).permutation(self.n) if self.shuffle else np.arange(self.n)
            )
            self._perm_epoch = epoch
        return self._perm

    def take(self, k: int) -> list[int]:
        """The next ``k`` item indices (wrapping into a new epoch as needed)."""
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, self.n)
            out.append(int(self._perm_for(epoch)[pos]))
            self.cursor += 1
        return out


# ---------------------------------------------------------------------------------------------
# Checkpoints and metrics
# ---------------------------------------------------------------------------------------------


def model_state(model: torch.nn.Module, trainable_only: bool) -> dict[str, torch.Tensor]:
    """The model's state dict (only trainable tensors when ``trainable_only``, e.g. LoRA)."""
    if not trainable_only:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k in names}


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
        The run folder (created if needed), with ``config.json`` written atomically.

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
    atomic_write_lines(run / CONFIG_NAME, [json.dumps(cfg.to_dict(), indent=2)])
    return run


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
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    gen: np.random.Generator,
    order: DataOrder,
    extra: Mapping[str, torch.nn.Module] | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Load what :func:`save_training_state` wrote, if there is a checkpoint.

    Args:
        run_dir: The run folder.
        kind: The trainer resuming (``sft``, ``grpo``, ``ppo``); must be the one that wrote it.
        model: The policy model.
        optimizer: Its optimizer.
        scheduler: Its learning-rate scheduler.
        gen: The trainer's NumPy generator.
        order: The data order (its cursor is restored).
        extra: Modules saved under their key as ``**extra`` state dicts (e.g. ``value_head``).

    Returns:
        (the step to continue after, the checkpoint dict) or (0, None) when there is no checkpoint.

    Raises:
        CheckpointError: If the checkpoint is damaged, unsafe, of another trainer, or does not fit.
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        return 0, None
    modules = dict(extra or {})
    _require(ckpt, path, (*_STATE_KEYS, *modules))
    if ckpt["kind"] != kind:
        raise CheckpointError(
            f"{path} was written by `searchenv train {ckpt['kind']}`, not {kind}: resume it with that trainer, "
            "or start this one in another output_dir (init_from can start from that run's weights)"
        )
    try:
        loaded = model.load_state_dict(ckpt["model"], strict=False)
        if loaded.unexpected_keys:
            raise ValueError(f"unexpected weights {loaded.unexpected_keys[:3]}")
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


def rng_state(gen: np.random.Generator) -> dict[str, Any]:
    """Everything random a trainer owns: its NumPy generator (a dict of ints) and torch's CPU generator (a tensor)."""
    return {"numpy": gen.bit_generator.state, "torch": torch.get_rng_state()}


def restore_rng(gen: np.random.Generator, state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    gen.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"])


class MetricsLog:
    """Append-only JSONL of per-step metrics; on resume, lines past the resumed step are dropped.

    Lines up to the resumed step are complete (the checkpoint is written after them); what follows
    them, possibly a line torn by a kill, is dropped unread. The file is rewritten atomically.
    """

    def __init__(self, run_dir: str | Path, resume_step: int = 0) -> None:
        self.path = Path(run_dir) / METRICS_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept: list[str] = []
        if resume_step > 0 and self.path.is_file():
            with open(self.path, "rb") as fh:
                for lineno, raw in enumerate(fh, start=1):
                    if not raw.strip():
                        continue
                    record = loads(raw, f"{self.path}:{lineno}")
                    step = record.get("step", 0) if isinstance(record, dict) else None
                    if not isinstance(step, int):
                        raise ValueError(f"{self.path}:{lineno}: not a metrics record with an integer step")
                    if step <= resume_step:
                        kept.append(raw.decode("utf-8").rstrip("\n"))
                    if step >= resume_step:
                        break
        atomic_write_lines(self.path, kept)

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record."""
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(_jsonable(record)) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run's ``metrics.jsonl``.

    Raises:
        FileNotFoundError: If there is none.
        ValueError: Naming file and line, for a line that is not valid JSON.
    """
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {METRICS_NAME} in {run_dir}")
    return [record for _where, record in iter_jsonl(path)]


def last_record(run_dir: str | Path, step: int) -> dict[str, Any]:
    """The metrics record of ``step`` in the run's ``metrics.jsonl``, or ``{}`` if there is none.

    A resumed run starts with it as its last step's metrics, so a run resumed from its final
    checkpoint (nothing left to train) reports the same summary as the run that wrote it.
    """
    if step < 1 or not (Path(run_dir) / METRICS_NAME).is_file():
        return {}
    found = [r for r in read_metrics(run_dir) if r.get("step") == step]
    return dict(found[-1]) if found else {}


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class Timer:
    """Accumulates wall seconds per named phase: ``with timer("generation"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block under ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def progress_bar(total: int, initial: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar (a no-op object when disabled)."""
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std (0, 0 for no values)."""
    if not values:
        return 0.0, 0.0
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std())


# ---------------------------------------------------------------------------------------------
# Rollouts -> training samples
# ---------------------------------------------------------------------------------------------


@dataclass
class Episode:
    """One rolled-out episode in the shape trainers use.

    Attributes:
        sample: The token sequence and loss mask; ``extras`` holds ``return`` (sum of step rewards),
            ``turn_ends`` (index in ``ids`` of each turn's last generated token) and ``turn_rewards``.
        group: Index of the episode's example in the rollout (samples of one question share it).
        reward_terms: Episode totals per reward term.
        em: Exact match of the final answer.
        searches: Search turns.
        answered: Whether the agent answered.
        infra_error: The retriever failed during the episode (drop from the gradient).
        response_tokens: Tokens the policy generated.
        record: The rollout engine's :class:`~agents.rollout.EpisodeRecord` it came from.
    """

    sample: Sample
    group: int
    reward_terms: dict[str, float]
    em: float
    searches: int
    answered: bool
    infra_error: bool
    response_tokens: int
    record: Any = None


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Per-step rollout metrics: reward mean/std (total and per term), EM, searches, lengths."""
    returns = [e.sample.extras["return"] for e in episodes]
    mean, std = stats(returns)
    terms: dict[str, dict[str, float]] = {}
    names = sorted({k for e in episodes for k in e.reward_terms})
    for name in names:
        m, s = stats([e.reward_terms.get(name, 0.0) for e in episodes])
        terms[name] = {"mean": m, "std": s}
    return {
        "reward_mean": mean,
        "reward_std": std,
        "reward_terms": terms,
        "em": stats([e.em for e in episodes])[0],
        "searches": stats([float(e.searches) for e in episodes])[0],
        "answered": stats([float(e.answered) for e in episodes])[0],
        "response_tokens": stats([float(e.response_tokens) for e in episodes])[0],
    }


def run_rollouts(
    policy: Any,
    examples: Sequence[Any],
    retriever: Any,
    cfg: TrainConfig,
    *,
    group_size: int,
    seed: int,
    timer: Timer,
    reward: Any = None,
    starts: Sequence[Any] | None = None,
    protocol: Any = None,
    max_turns: int | None = None,
) -> list[Episode]:
    """Roll out ``group_size`` episodes per example with :func:`agents.rollout.rollout`.

    Episodes come back example-major (``Episode.group`` is the example's index). Generation and
    environment (retrieval included) seconds are added to ``timer`` under ``generation`` and
    ``environment``. ``starts`` (one per episode) begins episodes from :class:`~agents.rollout.ProbeStart`s;
    ``protocol`` and ``max_turns`` override the config's (closed-book episodes of a curriculum).
    """
    from agents.rollout import rollout

    batch = rollout(
        policy,
        list(examples),
        retriever,
        group_size=group_size,
        protocol=cfg.protocol if protocol is None else protocol,
        top_k=cfg.top_k,
        max_turns=cfg.max_turns if max_turns is None else max_turns,
        reward=cfg.reward if reward is None else reward,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        seed=seed,
        env_kwargs={"max_doc_chars": cfg.max_doc_chars},
        starts=starts,
    )
    st = batch.stats
    timer.seconds["generation"] = timer.seconds.get("generation", 0.0) + st.generation_seconds
    env_s = max(0.0, st.wall_seconds - st.generation_seconds)
    timer.seconds["environment"] = timer.seconds.get("environment", 0.0) + env_s
    return [episode_from_record(r) for r in batch]


def episode_from_record(rec: Any) -> Episode:
    """Convert an :class:`agents.rollout.EpisodeRecord` into an :class:`Episode`.

    Each turn's reward goes on that turn's last generated token (a turn with no tokens credits
    the latest earlier policy token).

    A REX-RAG probe episode (``rec.probe_span`` set) becomes the sequence the policy should learn
    to produce on its own: the probe's tokens are removed, so they are neither trained on nor seen
    as context, and ``extras["behavior_logprobs"]`` keeps each token's sampling log-prob (under
    the context *with* the probe, which is what generated it). A trainer uses those as the old
    log-probs, so the clipped ratio ``pi(token | no probe) / mu(token | probe)`` is the importance
    weight that corrects for the probe. ``extras["probe"]`` marks such samples.
    """
    prompt = list(rec.prompt_ids)
    completion, loss_mask, logprobs = list(rec.completion_ids), [int(m) for m in rec.loss_mask], list(rec.logprobs)
    cut = (0, 0) if rec.probe_span is None else rec.probe_span
    width = cut[1] - cut[0]
    if width:
        del completion[cut[0] : cut[1]], loss_mask[cut[0] : cut[1]], logprobs[cut[0] : cut[1]]

    def shifted(pos: int) -> int:  # a completion position after removing the probe
        return pos - width if pos >= cut[1] else pos

    ids = prompt + completion
    mask = [0] * len(prompt) + loss_mask
    turn_ends: list[int] = []
    last = -1
    for start, end in rec.turn_spans:
        if end > start:
            last = len(prompt) + shifted(end) - 1
        turn_ends.append(last)
    rewards = [float(r) for r in rec.rewards]
    totals: dict[str, float] = {}
    for terms in rec.reward_terms:
        for k, v in terms.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    info = rec.info
    sample = Sample(ids, mask, {"return": sum(rewards), "turn_ends": turn_ends, "turn_rewards": rewards})
    if rec.probe_span is not None:
        sample.extras.update(probe=True, probe_at=len(prompt) + cut[0],
                             behavior_logprobs=[0.0] * len(prompt) + [float(x) for x in logprobs])
    return Episode(
        sample=sample,
        group=int(rec.group),
        reward_terms=totals,
        em=float(info.get("em") or 0.0),
        searches=int(info.get("episode", {}).get("searches", 0)),
        answered=info.get("answer") is not None,
        infra_error=bool(rec.infra_error),
        response_tokens=int(sum(rec.loss_mask)),
        record=rec,
    )
