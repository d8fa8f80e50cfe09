"""The trained searcher: SmolLM2-135M-Instruct plus small LoRA adapters shipped with the package.

``benchmarks/learning.py`` trains cold-start SFT on oracle demonstrations and then GRPO, and
writes the adapters of that run here with :func:`agents.trainers.export.export_searcher`. A phase
trained as LoRA adapters ships them as they are; a phase that trained all weights ships its weight
change compressed into adapters of a given rank (a truncated SVD of each matrix's change, see
:func:`agents.trainers.export.low_rank_adapter`). :func:`load_searcher` rebuilds the policy: the
packaged base model, then each adapter merged in, in training order. The result generates as fast
as the base model.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from searchenv.errors import SearcherNotFoundError
from searchenv.utils.moved import renamed_names

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


def _publish(tmp: Path, out: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest`` into the finished folder ``tmp``, then move it to ``out``, replacing what is there whole."""
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
        _publish(tmp, out, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _published(path: str | os.PathLike[str]) -> Path:
    """The folder holding the searcher: ``path``, or its previous version (``.<name>.old``).

    The previous version is used only when an export was killed between moving the old folder
    aside and moving the new one in (see :func:`agents.trainers.export.export_searcher`).
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
            "python benchmarks/learning.py ... --lora --export-searcher (see docs/guides/training.md)"
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

    A compressed adapter (``compressed_from``, written by :func:`agents.trainers.export.low_rank_adapter`)
    has ``alpha == r``: its factors carry the whole change, at peft's scale 1.

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
        path: A folder written by :func:`agents.trainers.export.export_searcher` (default: the packaged searcher).
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

    from agents.policies.hf.loading import quiet_loading

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
    with warnings.catch_warnings(), quiet_loading():
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


__getattr__ = renamed_names(__name__, {"export_searcher": ("agents.trainers.export", "export_searcher"),
                                       "low_rank_adapter": ("agents.trainers.export", "low_rank_adapter")})
