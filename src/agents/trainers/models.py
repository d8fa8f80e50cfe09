"""The policy model of a training run: loading, LoRA, weights from earlier runs, trainable parameters."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from agents.devices import GenerationSettings, model_device, resolve_device, torch_dtype
from agents.trainers.checkpoints import (
    CHECKPOINT_NAME,
    CheckpointError,
    _require,
    check_state_dict,
    load_checkpoint,
)
from agents.trainers.config import TrainConfig


def load_policy(model: str | None, device: str | torch.device | None = "auto") -> Any:
    """Load a language model (offline): the one loader of the eval, bench and train commands.

    Args:
        model: A packaged model name, a ``.gguf`` file, a transformers model folder, or a
            training run folder (``searchenv train``: its base model with the trained weights of
            every phase); None for the packaged SmolLM2-135M-Instruct.
        device: Where the model runs (see :mod:`agents.devices`; ``auto``: CUDA when available).
            A run trained on a GPU loads here too: checkpoints are read onto the host first.

    Returns:
        An :class:`agents.policies.hf.HFPolicy`.

    Raises:
        ValueError: For an unknown device name or an accelerator this machine lacks.
    """
    from agents.policies.hf import HFPolicy

    where = resolve_device(device)
    if model is None:
        return HFPolicy.smollm2(device=where)
    if (Path(model) / CHECKPOINT_NAME).is_file():
        return load_trained_policy(model, device=where)
    return HFPolicy.from_pretrained(model, device=where)


def init_policy(cfg: TrainConfig, policy: Any = None, init_from: str | None = None) -> Any:
    """Load (or take) the policy, start it from ``init_from``'s weights, then :func:`prepare_model`.

    A policy handed in stays on its device under ``device = "auto"`` and is moved to any other
    ``cfg.device``; a loaded one goes to ``cfg.device`` (``auto``: CUDA when available).
    """
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    if policy is None:
        policy = load_policy(cfg.model, cfg.device)
    else:
        if cfg.device != "auto":
            target = resolve_device(cfg.device)
            if model_device(policy.model) != target:
                policy.model.to(target)
    if init_from is not None:
        load_weights(policy, init_from)
    prepare_model(policy, cfg)
    told = getattr(cfg, "generation", None)  # the RL configs' decode, cuda_graph and generation_dtype
    if told is not None and told != GenerationSettings():  # a part not auto replaces the policy's own
        policy.generation = policy.generation.overridden_by(told)  # a copy is built at the first rollout
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
        _load_weights(policy, ckpt, path)
    except CheckpointError:
        raise
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} does not fit the model {type(policy.model).__name__}: {exc}") from None


def load_trained_policy(run_dir: str | Path, device: str | torch.device | None = None) -> Any:
    """The model a training run ended with, ready to generate: its base model with every phase's weights.

    A run started with ``init_from`` is followed back to its first phase (an SFT run, say), so a
    GRPO run trained as LoRA on top of LoRA SFT gets both sets of adapters, in training order.

    Checkpoints are read onto the host and copied onto the model's device, so a run trained on a
    GPU evaluates on a CPU and the other way round.

    Args:
        run_dir: A run folder holding ``checkpoint.pt``.
        device: Where the model goes (a device name, see :mod:`agents.devices`; None: ``auto``).

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
    policy = HFPolicy.from_pretrained(models.pop(), device=resolve_device(device))
    for folder, _ in chain:
        load_weights(policy, folder)
    policy.model.eval()
    return policy


def _load_weights(policy: Any, ckpt: Mapping[str, Any], path: Path) -> None:
    """Load (or merge) a checkpoint's weights: exactly the model's (or its adapters') tensors, all finite.

    A refused LoRA checkpoint leaves the model as it was (the adapter layers are taken out again).
    """
    if not ckpt["lora"]:
        check_state_dict(path, "model", ckpt["model"], policy.model.state_dict(), same_dtype=False)
        policy.model.load_state_dict(ckpt["model"])
        return
    from peft import LoraConfig, get_peft_model

    from agents.policies.hf.loading import quiet_loading

    c = ckpt["config"]
    names = {n.rsplit(".", 1)[-1] for n, _ in policy.model.named_modules()}
    lcfg = LoraConfig(
        r=c["lora_r"],
        lora_alpha=c["lora_alpha"],
        lora_dropout=c["lora_dropout"],
        target_modules=[t for t in c["lora_target_modules"] if t in names],
    )
    with quiet_loading():
        wrapped = get_peft_model(policy.model, lcfg)
    adapters = {k: v for k, v in wrapped.state_dict().items() if ".lora_" in k}
    try:
        check_state_dict(path, "model", ckpt["model"], adapters, same_dtype=False)
    except CheckpointError:
        policy.model = wrapped.unload()
        raise
    wrapped.load_state_dict(ckpt["model"], strict=False)
    policy.model = wrapped.merge_and_unload()


def prepare_model(policy: Any, cfg: TrainConfig) -> None:
    """Put the policy's model in training shape: ``cfg.dtype`` weights, LoRA, frozen layers, gradient checkpointing.

    LoRA adapters are added if ``cfg.lora`` (on the last ``cfg.train_layers`` layers only, when set),
    layers below the last ``cfg.train_layers`` are frozen otherwise, gradient checkpointing is switched on if
    ``cfg.gradient_checkpointing``, and the model is left in training mode.

    The adapters' initial weights depend on ``cfg.seed`` only (not on the global random state, nor on
    the device: they are drawn on the host, then moved next to the layer they adapt).
    """
    model = policy.model
    model.to(dtype=torch_dtype(cfg.dtype))
    if cfg.lora and not hasattr(model, "peft_config"):
        from peft import LoraConfig, get_peft_model

        from agents.policies.hf.loading import quiet_loading

        names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = [t for t in cfg.lora_target_modules if t in names]
        if not targets:
            raise ValueError(f"lora_target_modules {cfg.lora_target_modules} match no module of the model")
        top = top_layer_indices(model, cfg.train_layers) if cfg.train_layers is not None else None
        lcfg = LoraConfig(
            r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets,
            layers_to_transform=top,
        )
        with torch.random.fork_rng(devices=[]):  # adapters drawn from cfg.seed alone; global state restored
            torch.manual_seed(cfg.seed)
            with quiet_loading():
                policy.model = get_peft_model(model, lcfg)
    elif cfg.train_layers is not None and not cfg.lora:
        freeze_below(model, cfg.train_layers)
    if cfg.gradient_checkpointing:
        # transformers 5.x names it activation checkpointing (the old name warns that it goes away in v6)
        new = getattr(policy.model, "activation_checkpointing_enable", None)
        old = getattr(policy.model, "gradient_checkpointing_enable", None)
        if new is not None:
            new(activation_checkpointing_kwargs={"use_reentrant": False})
        elif old is not None and getattr(policy.model, "supports_gradient_checkpointing", True):
            old(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            raise ValueError(f"gradient_checkpointing: {type(model).__name__} does not support it; set it to false")
    policy.model.train()


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder's list of layers (``model.model.layers`` for Llama-like models, through peft wrappers).

    Raises:
        ValueError: If the model keeps no ``layers`` list in its decoder.
    """
    from agents.trainers.samples import split_model

    decoder, _head = split_model(model)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        raise ValueError(f"train_layers: {type(model).__name__} keeps no list of decoder layers (decoder.layers); "
                         "unset train_layers to train every layer")
    return layers


def top_layer_indices(model: torch.nn.Module, n: int) -> list[int]:
    """Indices of the last ``n`` decoder layers.

    Raises:
        ValueError: If the model has fewer than ``n`` layers.
    """
    total = len(decoder_layers(model))
    if n > total:
        raise ValueError(f"train_layers={n} but the model has {total} decoder layers")
    return list(range(total - n, total))


def freeze_below(model: torch.nn.Module, n: int) -> None:
    """Train only the last ``n`` decoder layers, the final norm and an output head of its own.

    Embeddings and every layer below stay frozen (an output head tied to the embeddings stays frozen
    with them), so autograd stops at the lowest trained layer: the backward pass costs ``n`` layers.

    Raises:
        ValueError: If the model has no decoder layer list or fewer than ``n`` layers.
    """
    from agents.trainers.samples import split_model

    layers = decoder_layers(model)
    top = top_layer_indices(model, n)
    decoder, head = split_model(model)
    keep = {id(p) for i in top for p in layers[i].parameters()}
    norm = getattr(decoder, "norm", None)
    if isinstance(norm, torch.nn.Module):
        keep |= {id(p) for p in norm.parameters()}
    embedded = {id(p) for p in decoder.get_input_embeddings().parameters()}
    keep |= {id(p) for p in head.parameters() if id(p) not in embedded}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)


def pad_token_id(policy: Any) -> int:
    """The tokenizer's pad id (else EOS, else 0); padded positions are masked anyway."""
    tok = policy.tokenizer
    pid = getattr(tok, "pad_token_id", None)
    if pid is None:
        pid = getattr(tok, "eos_token_id", None)
    return int(pid) if pid is not None else 0



def trainable_parameters(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Parameters with ``requires_grad``."""
    return [p for p in module.parameters() if p.requires_grad]


def refresh_generation_copy(policy: Any) -> None:
    """After an optimizer step: bring the policy's generation copy of the weights up to date now.

    A policy built with ``generation_dtype`` samples from a low-precision copy of the weights
    (:class:`~agents.policies.hf.HFPolicy`); its ``generate`` refreshes the copy itself when the
    weights changed, so this only does that work at the end of the update rather than at the
    start of the next rollout. Nothing happens for a policy without a copy.
    """
    refresh = getattr(policy, "refresh_generation_weights", None)
    if refresh is not None:
        refresh()
