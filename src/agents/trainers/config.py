"""Trainer configuration: shared fields, file loading (JSON/TOML) and ``key=value`` overrides.

No torch import here, so the CLI can show help and validate configs cheaply.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import tomllib

from agents.devices import GenerationSettings, check_device_name, check_dtype_name

C = TypeVar("C", bound="TrainConfig")

LR_SCHEDULES = ("constant", "linear", "cosine")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class TrainConfig:
    """Fields shared by every trainer. Each field's help text is in its ``metadata["help"]``."""

    output_dir: str = field(default="runs/train", metadata=_help("Run folder: metrics.jsonl, checkpoint, plots."))
    model: str = field(
        default="smollm2-135m",
        metadata=_help("Policy model: 'smollm2-135m' (packaged GGUF) or a local HF model folder."),
    )
    task: str = field(default="synthetic-1hop", metadata=_help("Task name or QA JSONL file to train on."))
    split: str = field(default="train", metadata=_help("Split of the task to train on."))
    corpus: str | None = field(default=None, metadata=_help("Corpus path (default: the task's own corpus)."))
    retriever: str = field(default="bm25", metadata=_help("Retriever kind or index folder."))
    protocol: str = field(default="search-r1", metadata=_help("Action protocol of the environment."))
    reward: str | dict[str, float] = field(
        default="default",
        metadata=_help("Reward preset name or {term: weight} dict (e.g. {outcome = 1, relevance = 0.2})."),
    )
    top_k: int = field(default=3, metadata=_help("Documents per search."))
    max_turns: int = field(default=4, metadata=_help("Turn budget per episode."))
    max_doc_chars: int = field(default=400, metadata=_help("Retrieved document text is cut to this length."))
    max_new_tokens: int = field(default=96, metadata=_help("Tokens generated per turn at most."))
    temperature: float = field(default=1.0, metadata=_help("Sampling temperature of training rollouts."))
    max_examples: int | None = field(
        default=None, metadata=_help("Use only the first N examples of the split (None: all).")
    )
    steps: int = field(default=100, metadata=_help("Training steps (one batch of data per step)."))
    max_minutes: float | None = field(
        default=None,
        metadata=_help("Stop once this many minutes of steps are spent (checkpointed there; a resumed run counts "
                       "its earlier steps); the schedule's end moves to the steps that fit, so a decay ends with "
                       "the time. None: only steps ends the run."),
    )
    learning_rate: float | None = field(
        default=None, metadata=_help("Peak learning rate (AdamW); unset: 1e-5, or 1e-4 with lora=true.")
    )
    weight_decay: float = field(default=0.0, metadata=_help("AdamW weight decay."))
    lr_schedule: str = field(default="constant", metadata=_help("constant | linear | cosine (after warmup)."))
    warmup_steps: int = field(default=0, metadata=_help("Linear warmup, in optimizer steps."))
    max_grad_norm: float | None = field(default=1.0, metadata=_help("Gradient clipping norm (None: off)."))
    micro_batch_size: int = field(
        default=4, metadata=_help("Sequences per forward/backward; gradients accumulate across micro-batches.")
    )
    lora: bool = field(default=False, metadata=_help("Train LoRA adapters (peft) instead of all weights."))
    lora_r: int = field(default=16, metadata=_help("LoRA rank."))
    lora_alpha: int = field(default=32, metadata=_help("LoRA alpha."))
    lora_dropout: float = field(default=0.0, metadata=_help("LoRA dropout."))
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"],
        metadata=_help("Module names LoRA adapts."),
    )
    train_layers: int | None = field(
        default=None,
        metadata=_help("Train only the last N decoder layers and the final norm (with lora: adapters only there); "
                       "the embeddings and the layers below stay frozen, so the backward pass stops at layer N "
                       "from the top. None: every layer."),
    )
    bf16: bool = field(
        default=False, metadata=_help("Run forward passes under bfloat16 autocast on the model's device type.")
    )
    device: str = field(
        default="auto",
        metadata=_help("Where the model trains: auto (a given policy stays where it is; a loaded one goes to "
                       "CUDA when available, else the CPU) | cpu | cuda | cuda:N | mps | xpu."),
    )
    dtype: str = field(
        default="float32",
        metadata=_help("Weights' dtype while training: float32 | bfloat16 | float16 (bfloat16 halves the memory "
                       "of weights, gradients and AdamW state; pair float32 with bf16=true for mixed precision)."),
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata=_help("Recompute each decoder layer's activations in the backward pass (less memory, about a "
                       "third more compute): lets 1-3B models train on one GPU."),
    )
    seed: int = field(default=0, metadata=_help("Seed of data order, sampling and initialisation."))
    save_every: int = field(default=50, metadata=_help("Write a checkpoint every N steps (0: only at the end)."))
    log_every: int = field(default=1, metadata=_help("Print a metrics line every N steps (0: never)."))
    progress: bool = field(default=True, metadata=_help("Show a progress bar."))
    threads: int | None = field(default=None, metadata=_help("torch CPU threads (None: leave as is)."))

    #: ``learning_rate`` when none is set: for all weights, and for LoRA adapters (which need a rate
    #: a much higher rate to learn in as many steps; ``benchmarks/learning.py`` holds the rates it
    #: used). Subclasses set their own.
    default_learning_rate: ClassVar[float] = 1e-5
    default_lora_learning_rate: ClassVar[float] = 1e-4
    #: Fields naming a file or folder: one that exists is made absolute when the config is built
    #: (a subclass without the field skips it).
    path_fields: ClassVar[tuple[str, ...]] = ("model", "init_from", "demos")

    def __post_init__(self) -> None:
        """Fill an unset ``learning_rate`` from ``lora``, then validate shared fields.

        Raises:
            ValueError: Naming the bad field, its value and the reason.
        """
        if self.learning_rate is None:
            self.learning_rate = self.default_lora_learning_rate if self.lora else self.default_learning_rate
        for name in self.path_fields:  # stored absolute: a run folder then resumes and chains from anywhere
            value = getattr(self, name, None)
            if isinstance(value, str) and value and os.path.exists(value):
                setattr(self, name, os.path.abspath(value))
        _positive_int(self, "top_k", "max_turns", "max_doc_chars", "max_new_tokens", "steps", "micro_batch_size")
        _positive_int(self, "lora_r", "lora_alpha")
        _non_negative_int(self, "warmup_steps", "save_every", "log_every", "seed")
        if self.max_examples is not None:
            _positive_int(self, "max_examples")
        if self.threads is not None:
            _positive_int(self, "threads")
        if self.train_layers is not None:
            _positive_int(self, "train_layers")
        if self.max_minutes is not None and (not _finite(self.max_minutes) or self.max_minutes <= 0):
            raise ValueError(f"max_minutes must be a positive number of minutes or None, got {self.max_minutes!r}")
        check_device_name(self.device)
        check_dtype_name(self.dtype)
        if not isinstance(self.temperature, int | float) or not 0.0 <= self.temperature <= 10.0:
            raise ValueError(f"temperature must be in [0, 10], got {self.temperature!r}")
        if not _finite(self.learning_rate) or self.peak_learning_rate <= 0:
            raise ValueError(f"learning_rate must be a positive number, got {self.learning_rate!r}")
        if not _finite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.max_grad_norm is not None and (not _finite(self.max_grad_norm) or self.max_grad_norm <= 0):
            raise ValueError(f"max_grad_norm must be positive or None, got {self.max_grad_norm!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if not self.output_dir:
            raise ValueError("output_dir must not be empty")
        if isinstance(self.reward, Mapping):
            for k, v in self.reward.items():
                if not _finite(v):
                    raise ValueError(f"reward weight for {k!r} must be a finite number, got {v!r}")
        elif not isinstance(self.reward, str):
            raise ValueError(f"reward must be a preset name or a dict of weights, got {self.reward!r}")

    @property
    def peak_learning_rate(self) -> float:
        """``learning_rate`` as ``__post_init__`` filled it in (a float)."""
        if self.learning_rate is None:  # only before __post_init__ has run
            raise ValueError("learning_rate is not set")
        return float(self.learning_rate)

    # ---- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build a config from a mapping, rejecting unknown keys.

        Raises:
            ValueError: For unknown keys or invalid values.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields: {unknown}; known: {sorted(names)}")
        hints = typing.get_type_hints(cls)
        return cls(**{k: _coerce(k, v, hints[k]) for k, v in data.items()})

    @classmethod
    def load(cls: type[C], path: str | Path | None = None, overrides: Sequence[str] = ()) -> C:
        """Read a JSON or TOML config file (optional) and apply ``key=value`` overrides.

        Override values are parsed as JSON when possible (``steps=10``, ``lora=true``,
        ``reward={"outcome": 1}``), else taken as strings (``task=synthetic-2hop``).

        Raises:
            ValueError: For a malformed override, an unknown key, or an invalid value.
            FileNotFoundError: If ``path`` does not exist.
        """
        data: dict[str, Any] = {}
        if path is not None:
            data.update(read_config_file(path))
        for item in overrides:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"override must look like key=value, got {item!r}")
            data[key] = parse_value(raw)
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data."""
        return dataclasses.asdict(self)


@dataclass
class RLConfig(TrainConfig):
    """Fields shared by the on-policy RL trainers (GRPO, PPO): batches, clipping, KL, loss averaging.

    Subclasses say how many episodes a step samples (:attr:`episodes_per_step`) and may change
    any default by declaring the field again.
    """

    batch_size: int = field(default=4, metadata=_help("Questions per step."))
    epochs: int = field(default=1, metadata=_help("Optimisation passes over each step's episodes."))
    minibatches: int = field(default=1, metadata=_help("Optimizer steps per pass (episodes split evenly)."))
    clip_low: float = field(default=0.2, metadata=_help("Lower clip epsilon of the ratio."))
    clip_high: float | None = field(default=None, metadata=_help("Upper clip epsilon (None: = clip_low)."))
    kl_coef: float = field(default=0.02, metadata=_help("Weight of the KL-to-reference term (0: no reference)."))
    kl_estimator: str = field(default="k3", metadata=_help("KL estimator: k1 | k2 | k3."))
    aggregation: str = field(
        default="token", metadata=_help("Loss averaging: token (over all policy tokens) | sequence.")
    )
    learning_rate: float | None = field(
        default=None,
        metadata=_help("Peak learning rate of the policy (AdamW); unset: 1e-6, or 1e-4 with lora=true."),
    )
    init_from: str | None = field(
        default=None, metadata=_help("Start from this run folder's checkpoint (e.g. an SFT run).")
    )
    generation_dtype: str | None = field(
        default=None,
        metadata=_help("Sample episodes from a copy of the weights in this dtype (bfloat16 | float16), refreshed "
                       "after every update; training and log-probs keep the weights' own dtype. float32: sample "
                       "from the weights themselves. auto or unset: the device's fastest path (a bfloat16 copy of "
                       "float32 weights on CUDA, the weights themselves elsewhere; "
                       "agents.devices.GenerationSettings)."),
    )
    decode: str = field(
        default="auto",
        metadata=_help("The rollouts' decode loop: static | dynamic (the same tokens for the same seeds) | auto "
                       "(static on CUDA, dynamic elsewhere)."),
    )
    cuda_graph: bool | None = field(
        default=None,
        metadata=_help("Run the static loop's decode steps with fixed shapes, captured in a CUDA graph on CUDA "
                       "(false: never). Unset: on CUDA."),
    )

    default_learning_rate: ClassVar[float] = 1e-6
    default_lora_learning_rate: ClassVar[float] = 1e-4

    @property
    def episodes_per_step(self) -> int:
        """Episodes sampled per step (``batch_size`` times the samples per question)."""
        return self.batch_size

    @property
    def generation(self) -> GenerationSettings:
        """How the rollouts generate: ``decode``, ``cuda_graph`` and ``generation_dtype`` as one value."""
        return GenerationSettings.from_options(decode=self.decode, cuda_graph=self.cuda_graph,
                                               generation_dtype=self.generation_dtype)

    def __post_init__(self) -> None:
        """Validate (see :class:`TrainConfig`).

        Raises:
            ValueError: Naming the bad field, its value and the reason.
        """
        from agents.trainers.losses import AGGREGATIONS, KL_ESTIMATORS

        super().__post_init__()
        _positive_int(self, "batch_size", "epochs", "minibatches")
        _ = self.generation  # checks decode, cuda_graph and generation_dtype
        if self.minibatches > self.episodes_per_step:
            raise ValueError(
                f"minibatches ({self.minibatches}) cannot exceed episodes per step ({self.episodes_per_step})"
            )
        if not _finite(self.clip_low) or not 0 < self.clip_low < 1:
            raise ValueError(f"clip_low must be in (0, 1), got {self.clip_low!r}")
        if self.clip_high is not None and (not _finite(self.clip_high) or self.clip_high <= 0):
            raise ValueError(f"clip_high must be positive or None, got {self.clip_high!r}")
        if not _finite(self.kl_coef) or self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.temperature == 0:
            raise ValueError(f"temperature must be > 0 for {type(self).__name__} (on-policy sampling needs variance)")


@dataclass
class ActorCriticConfig(RLConfig):
    """Fields shared by the RL trainers with a value head (PPO, MAPPO): samples per question, the value loss.

    A step samples ``samples_per_question`` episodes of each of its ``batch_size`` questions; the
    defaults: 8 questions, 2 epochs, 2 minibatches, no KL term.
    """

    batch_size: int = field(default=8, metadata=_help("Questions per step."))
    epochs: int = field(default=2, metadata=_help("Optimisation passes over each step's episodes."))
    minibatches: int = field(default=2, metadata=_help("Optimizer steps per pass (episodes split evenly)."))
    kl_coef: float = field(default=0.0, metadata=_help("Weight of the KL-to-reference term (0: no reference)."))
    samples_per_question: int = field(default=1, metadata=_help("Episodes sampled per question."))
    value_clip: float | None = field(default=0.2, metadata=_help("Value clipping range (None: no clipping)."))
    vf_coef: float = field(default=0.5, metadata=_help("Weight of the value loss."))
    value_learning_rate: float = field(default=1e-4, metadata=_help("Learning rate of the value head."))

    @property
    def episodes_per_step(self) -> int:
        """``batch_size`` questions x ``samples_per_question``."""
        return self.batch_size * self.samples_per_question

    def __post_init__(self) -> None:
        """Validate (see :class:`RLConfig`).

        Raises:
            ValueError: Naming the bad field, its value and the reason.
        """
        _positive_int(self, "samples_per_question")  # before RLConfig's checks, which use episodes_per_step
        super().__post_init__()
        if self.value_clip is not None and not self.value_clip > 0:
            raise ValueError(f"value_clip must be positive or None, got {self.value_clip!r}")
        if not self.vf_coef >= 0:
            raise ValueError(f"vf_coef must be >= 0, got {self.vf_coef!r}")
        if not self.value_learning_rate > 0:
            raise ValueError(f"value_learning_rate must be positive, got {self.value_learning_rate!r}")


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.json`` or ``.toml`` config file into a dict (TOML may nest fields under ``[train]``)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} does not exist")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".toml":
        data = tomllib.loads(text)
    elif p.suffix.lower() == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"config file must end in .json or .toml, got {p.name}")
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a table/object, got {type(data).__name__}")
    if set(data) == {"train"} and isinstance(data["train"], dict):
        data = data["train"]
    return data


def parse_value(raw: str) -> Any:
    """Parse an override value: JSON if it parses, ``none``/``null`` as None, else the string."""
    raw = raw.strip()
    if raw.lower() in ("none", "null"):
        return None
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def field_help(cls: type[TrainConfig]) -> list[tuple[str, str, str]]:
    """``(name, default, help)`` for every field of a config class."""
    out = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append((f.name, repr(default), f.metadata.get("help", "")))
    return out


# ---- helpers -------------------------------------------------------------------------------------
def _finite(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _positive_int(cfg: object, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _non_negative_int(cfg: object, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert override/file values to the field's type where unambiguous (int -> float, str -> number)."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    optional = origin in (typing.Union, types.UnionType) and type(None) in args
    if value is None:
        if optional:
            return None
        raise ValueError(f"{name} must not be None")
    base = [a for a in args if a is not type(None)] if optional else [hint]
    if len(base) == 1:
        t = base[0]
        if t is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if t is float and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {value!r}") from None
        if t is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if t is str and isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if t is bool and not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        if typing.get_origin(t) is list and not isinstance(value, list):
            if isinstance(value, str):
                return [s.strip() for s in value.split(",") if s.strip()]
            raise ValueError(f"{name} must be a list, got {value!r}")
    return value
