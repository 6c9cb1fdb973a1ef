"""Prepare a known model once: idempotent, safe to interrupt, safe to run twice at once.

The model is built in a hidden ``.NAME.partial-PID`` folder beside its final place, its
``PREPARED.json`` marker written inside, and the folder renamed into place in one step:
a folder without the marker is never at the final path. A lock file serializes
concurrent preparations of one model; the second finds it ready and does nothing.

>>> prepare_model("ponder-addition").name  # shipped: nothing to do
'ponder-addition'
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from scaffolds.models import (
    MARKER,
    KnownModel,
    ModelNotReadyError,
    get_model,
    model_status,
    models_home,
)

__all__ = ["prepare_model", "require_modules"]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def require_modules(name: str | KnownModel) -> None:
    """Raise :class:`~scaffolds.errors.MissingDependencyError` (one line naming the
    install command) when preparing a model (by name), or the base it is merged into,
    needs a module that is not installed; nothing when each is ready.

    ``ponder models prepare`` calls it first, so a missing extra is its exit 2;
    :func:`prepare_model` itself says it as the model's missing source (a server leaves
    such a model out).

    >>> require_modules("ponder-addition")  # shipped: nothing to prepare
    """
    model = get_model(name) if isinstance(name, str) else name
    chain = [model] + ([get_model(model.base)] if model.base is not None else [])
    for each in chain:
        if each.require is not None and not model_status(each).ready:
            each.require()


def prepare_model(name: str | KnownModel, say: Callable[[str], None] = lambda _: None) -> Path:
    """The ready folder of a model (by name), building it first if needed; ``say``
    hears each step (nothing, when the model was ready)."""
    model = get_model(name) if isinstance(name, str) else name
    name = model.name
    status = model_status(model)
    if status.ready:
        return status.path
    if model.base is not None:  # an adapter model: merged into its base, prepared first
        prepare_model(get_model(model.base), say)
    if model.prepare is None:
        raise ModelNotReadyError(f"model {name!r} is not ready ({status.detail})", param="model")
    if model.check_source is not None and (missing := model.check_source()):
        raise ModelNotReadyError(f"cannot prepare {name!r}: install {missing}", param="model")
    home = models_home()
    with _locked(home / f".{name}.lock"):
        if (status := model_status(model)).ready:  # prepared meanwhile by another process
            return status.path
        for stale in home.glob(f".{name}.partial-*"):  # left by an interrupted run
            shutil.rmtree(stale, ignore_errors=True)
        if status.path.exists():  # a folder without its marker: not ours to trust
            shutil.rmtree(status.path)
        partial = home / f".{name}.partial-{time.time_ns()}"
        try:
            model.prepare(partial, say)
            for item in partial.iterdir():  # readable by the engine's user (a container's)
                item.chmod(0o644)
            marker = {"model": name, "source": model.source, "prepared_at": time.time()}
            if model.fingerprint is not None:
                marker["fingerprint"] = model.fingerprint
            (partial / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            partial.rename(status.path)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    say(f"prepared {name} in {status.path}")
    return status.path
