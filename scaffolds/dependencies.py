"""Optional dependencies: which extra of ``pyproject.toml`` brings each module, and the
one check that turns a missing one into :class:`~scaffolds.errors.MissingDependencyError`.

Ponder's core installs with few dependencies; serving, the batch eval client, training
and the in-process engines each need an extra. Code that needs one calls :func:`require`
before it imports it; a module that is not installed raises ``MissingDependencyError``,
whose message is one line naming the install command. The ``ponder`` command catches it
once, at its top (``clients/cli.py``), prints that line and exits 2.

>>> EXTRAS["train"].install
"pip install -e '.[train]'"
>>> require("eval", "ponder eval", modules=("json",))  # installed: nothing happens
>>> try:
...     require("train", "ponder train sft", modules=("no_such_module_xyz",))
... except MissingDependencyError as err:
...     print(err)
ponder train sft needs no_such_module_xyz, which is not installed: pip install -e '.[train]'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from scaffolds.errors import MissingDependencyError

__all__ = ["EXTRAS", "Extra", "installed", "require"]


@dataclass(frozen=True)
class Extra:
    """An extra of ``pyproject.toml``: its name and the modules it makes importable.

    >>> Extra("eval", ("openai",)).install
    "pip install -e '.[eval]'"
    """

    name: str
    modules: tuple[str, ...]

    @property
    def install(self) -> str:
        """The command that installs the extra, run in a clone of the repository."""
        return f"pip install -e '.[{self.name}]'"


EXTRAS: Mapping[str, Extra] = MappingProxyType(
    {
        extra.name: extra
        for extra in (
            Extra(
                "server",
                (
                    "fastapi",
                    "uvicorn",
                    "pydantic_settings",
                    "prometheus_client",
                    "yaml",
                    "sqlalchemy",
                    "aiosqlite",
                ),
            ),
            Extra("postgres", ("asyncpg",)),
            Extra("eval", ("openai", "matplotlib")),
            Extra("hub", ("datasets",)),
            Extra("local", ("torch", "transformers", "gguf", "accelerate")),
            Extra("vllm", ("vllm",)),
            Extra(
                "train",
                ("torch", "transformers", "trl", "peft", "datasets", "accelerate"),
            ),
        )
    }
)
"""Each extra by name (``tests/clients/test_missing_dependency.py`` checks them against
pyproject.toml)."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (found, not imported).

    >>> installed("json"), installed("no_such_module_xyz")
    (True, False)
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails, or a broken module spec
        return False


def require(extra: str, purpose: str, modules: Sequence[str] | None = None) -> None:
    """Raise :class:`MissingDependencyError` unless ``modules`` (by default all of the
    ``extra``'s) are installed; the message says that ``purpose`` needs the first one
    missing, and the command that installs ``extra``."""
    wanted = EXTRAS[extra]
    for module in wanted.modules if modules is None else modules:
        if not installed(module):
            raise MissingDependencyError(
                f"{purpose} needs {module}, which is not installed: {wanted.install}",
                module=module,
                install=wanted.install,
            )
