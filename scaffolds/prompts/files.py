"""Prompt files: a served model's own wording, loaded from YAML or TOML.

A model trained on a paper's exact prompts is served with them: a prompt file maps
template names to texts with ``$placeholders`` (``string.Template``: write a literal
dollar sign as ``$$``) and may set the prompt set's fixed texts::

    templates:
      rc_summary: |
        Summarize the attempt at $problem. Earlier summary: $summary. Attempt: $attempt
    texts:
      rc_no_summary: ""

The same in TOML has a ``[templates]`` and a ``[texts]`` table. Loading only reads the
file; :mod:`scaffolds.spec.prompt_files` checks it against the prompt set and the
scaffolds a model serves.

>>> loaded = PromptFile(Path("p.toml"), {"solve": Template("solve", "Q: $problem")}, {})
>>> loaded.as_set("default").template("solve").render(problem="1+1")
'Q: 1+1'
>>> try:
...     load_prompt_file("no/such/prompts.yaml")
... except PromptFileError as err:
...     print(err)
prompt file no/such/prompts.yaml: cannot be read (No such file or directory)
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from scaffolds.errors import PromptFileError
from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

__all__ = ["PromptFile", "load_prompt_file"]

_SECTIONS = ("templates", "texts")


@dataclass(frozen=True, slots=True)
class PromptFile:
    """One loaded prompt file: its path, its templates (checked for malformed
    placeholders) and its fixed texts."""

    path: Path
    templates: Mapping[str, Template]
    texts: Mapping[str, str]

    def as_set(self, name: str) -> PromptSet:
        """Its templates and texts as a part of prompt set ``name``."""
        return PromptSet(name, self.templates, self.texts)

    def error(self, message: str, param: str | None = None) -> PromptFileError:
        """An error about this file (the message starts with its path)."""
        return PromptFileError(f"prompt file {self.path}: {message}", param=param)


def load_prompt_file(path: str | Path) -> PromptFile:
    """Read a YAML (``.yaml``, ``.yml``) or TOML (``.toml``) prompt file; an unreadable or
    malformed one raises :class:`PromptFileError` naming it (and the template)."""
    path = Path(path)
    blank = PromptFile(path, {}, {})
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise blank.error(f"cannot be read ({exc.strerror or exc})") from None
    try:
        data: Any = tomllib.loads(raw) if path.suffix == ".toml" else yaml.safe_load(raw)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "YAML"
        raise blank.error(f"is not valid {kind}: {exc}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise blank.error("must hold a mapping with 'templates' and 'texts'")
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise blank.error(f"unknown section {unknown[0]!r} (known: templates, texts)")
    sections = {key: _strings(blank, data.get(key) or {}, key) for key in _SECTIONS}
    templates: dict[str, Template] = {}
    for name, text in sections["templates"].items():
        try:
            templates[name] = Template(name, text)
        except ValueError:
            raise blank.error(
                f"template {name!r} has a malformed placeholder (write a literal $ as $$)"
            ) from None
    return PromptFile(path, MappingProxyType(templates), MappingProxyType(sections["texts"]))


def _strings(file: PromptFile, section: Any, key: str) -> dict[str, str]:
    if not isinstance(section, dict):
        raise file.error(f"'{key}' must map names to texts")
    for name, text in section.items():
        if not isinstance(text, str):
            raise file.error(f"{key[:-1]} {name!r} must be a text (got {type(text).__name__})")
    return {str(name): text for name, text in section.items()}
