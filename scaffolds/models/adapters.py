"""Models that are a known base plus a LoRA adapter, merged into a servable folder.

An adapter folder holds peft's ``adapter_config.json`` and ``adapter_model.safetensors``
(what ``ponder train sft --lora`` saves) plus Ponder's ``ponder_adapter.json`` naming the
model and its base. Adapters are found in ``scaffolds/models/adapters/NAME/`` (shipped
with Ponder) and in ``$PONDER_HOME/models/adapters/NAME/`` (registered by ``ponder models
prepare NAME --adapter PATH``). Each becomes a :class:`KnownModel` that serves like its
base (prompt set, aliases, context, sampling defaults); preparing it prepares the base,
then writes the merged weights (``W + alpha/r * B @ A``, in float32) as an ordinary
transformers folder, which any engine serves. vLLM can also serve the adapter itself
on the base (``--enable-lora --lora-modules NAME=DIR``).

>>> [m.name for m in adapter_models(Path("/nonexistent"))]
[]
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from scaffolds.dependencies import require
from scaffolds.models.known import KnownModel, ModelPreparationError

__all__ = [
    "ADAPTER_INFO",
    "adapter_digest",
    "adapter_models",
    "merge_lora",
    "register_adapter",
]

ADAPTER_INFO = "ponder_adapter.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
UNSUPPORTED = ("use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "lora_bias")


def _lora_config(adapter: Path) -> dict[str, object]:
    """The adapter's peft config, refused (naming the field) if merging it needs more
    than ``W + scale * B @ A`` on linear layers."""
    path = adapter / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelPreparationError(f"{path}: {exc}", param="adapter") from None
    if config.get("peft_type") != "LORA":
        raise ModelPreparationError(f"{path}: not a LoRA adapter", param="adapter")
    for key in UNSUPPORTED:
        if config.get(key):
            raise ModelPreparationError(f"{path}: {key} is not supported", param="adapter")
    if config.get("fan_in_fan_out"):
        raise ModelPreparationError(f"{path}: fan_in_fan_out is not supported", param="adapter")
    return dict(config)


def merge_lora(base: Path, adapter: Path, target: Path, say: Callable[[str], None]) -> None:
    """Write ``base`` with ``adapter`` merged into it to ``target`` (float32 safetensors,
    the base's tokenizer and generation config)."""
    require("local", "merging a LoRA adapter into its base", modules=("torch", "transformers"))
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = _lora_config(adapter)
    r, alpha = int(config["r"]), float(config["lora_alpha"])  # type: ignore[call-overload,arg-type]
    scale = alpha / (math.sqrt(r) if config.get("use_rslora") else r)
    say(f"merging {adapter} into {base} (scale {scale:g})")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    modules = dict(model.named_modules())
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    merged = 0
    for key, lora_a in weights.items():
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removesuffix(".lora_A.weight").removeprefix("base_model.model.")
        lora_b = weights.get(key.replace(".lora_A.", ".lora_B."))
        module = modules.get(name)
        if lora_b is None or module is None or not isinstance(module, torch.nn.Linear):
            raise ModelPreparationError(
                f"{adapter}: {key} matches no linear layer of {base}", param="adapter"
            )
        with torch.no_grad():
            module.weight += scale * (lora_b.float() @ lora_a.float())
        merged += 1
    if not merged:
        raise ModelPreparationError(f"{adapter}: no LoRA weights found", param="adapter")
    say(f"merged {merged} layers; writing {target}")
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(base).save_pretrained(target)
    for extra in ("chat_template.jinja",):  # kept as the base has it
        if (base / extra).exists() and not (target / extra).exists():
            shutil.copy(base / extra, target / extra)


@functools.lru_cache(maxsize=64)
def _digest_of(path: Path, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # only the cache key: a rewritten file is hashed again
    return hashlib.sha256(path.read_bytes()).hexdigest()


def adapter_digest(folder: Path) -> str:
    """A short hash of an adapter's weights and config: it names what a merged folder was
    made from, so one merged from an older adapter of the same name is made again.

    >>> adapter_digest(Path("/nonexistent"))
    'missing'
    """
    parts = []
    for file in ADAPTER_FILES:
        path = folder / file
        try:
            stat = path.stat()
        except OSError:
            return "missing"
        parts.append(_digest_of(path, stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def _adapter_model(
    folder: Path, bases: Mapping[str, KnownModel], folder_of: Callable[[KnownModel], Path]
) -> KnownModel | None:
    try:
        info = json.loads((folder / ADAPTER_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = bases.get(str(info.get("base")))
    if base is None or not NAME.match(str(info.get("name", ""))):
        return None
    return dataclasses.replace(
        base,
        name=str(info["name"]),
        description=str(info.get("description") or f"{base.name} with LoRA adapter {folder}"),
        prompts=str(info.get("prompts") or base.prompts),
        shipped=None,
        source=f"{base.name} + the LoRA adapter in {folder}",
        fingerprint=adapter_digest(folder),
        prepare=functools.partial(merge_lora, folder_of(base), folder),
        check_source=None,
        require=None,  # merge_lora says what it needs itself
        base=base.name,
        verifies=str(info["verifies"]) if info.get("verifies") else None,
    )


def adapter_models(
    *roots: Path,
    bases: Mapping[str, KnownModel] | None = None,
    folder_of: Callable[[KnownModel], Path] = lambda model: Path(model.name),
) -> list[KnownModel]:
    """The adapter models in each of ``roots`` (folders of adapter folders) whose base is
    one of ``bases`` (``folder_of(base)``: where the base's files are once prepared;
    :func:`scaffolds.models.prepare.prepare_model` prepares the base first); folders
    that are not adapters are skipped."""
    found: list[KnownModel] = []
    for root in roots:
        if not root.is_dir():
            continue
        for folder in sorted(root.iterdir()):
            if (model := _adapter_model(folder, bases or {}, folder_of)) is not None:
                found.append(model)
    return found


def register_adapter(
    adapter: Path,
    name: str,
    base: KnownModel,
    root: Path,
    *,
    prompts: str | None = None,
    replace: bool = False,
) -> Path:
    """Copy ``adapter`` into ``root/name`` with its ``ponder_adapter.json``; the same
    adapter registered again is a no-op, another one under a taken name an error unless
    ``replace`` (a model merged from the old one is then merged again when prepared)."""
    if not NAME.match(name):
        raise ModelPreparationError(
            f"adapter name {name!r}: use lowercase letters, digits, '.', '_' and '-'",
            param="name",
        )
    for file in ADAPTER_FILES:
        if not (adapter / file).is_file():
            raise ModelPreparationError(f"{adapter}: {file} is missing", param="adapter")
    _lora_config(adapter)
    folder = root / name
    if folder.exists():
        same = all((folder / f).read_bytes() == (adapter / f).read_bytes() for f in ADAPTER_FILES)
        if not same and not replace:
            raise ModelPreparationError(
                f"an adapter named {name!r} is registered already ({folder}); pick another name",
                param="name",
            )
        if same:
            return folder
    partial = root / f".{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for file in ADAPTER_FILES:
        shutil.copy(adapter / file, partial / file)
    info = {"name": name, "base": base.name, "prompts": prompts or base.prompts}
    (partial / ADAPTER_INFO).write_text(json.dumps(info, indent=2) + "\n")
    if folder.exists():  # replaced: the old one moves aside first, then goes
        old = root / f".{name}.replaced"
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
        partial.rename(folder)
        shutil.rmtree(old)
    else:
        partial.rename(folder)
    return folder
