"""Prompt sets: named, keyed collections of templates that strategies contribute to.

A prompt set is a name (``default``, ``compact``) plus its templates, keyed by template
name, and a few fixed texts (a separator, a marker), keyed by name. The shared steps
(solving, the forced answer, numbering candidates) come from :mod:`scaffolds.prompts.common`;
each strategy contributes its own templates per set it supports (its ``prompt_sets``), so
adding a strategy never edits this module.

>>> part = PromptSet.of("default", Template("hello", "Hi $problem."), marker="OK")
>>> part.template("hello").render(problem="Ada"), part.text("marker")
('Hi Ada.', 'OK')
>>> part.template("nope")
Traceback (most recent call last):
...
scaffolds.errors.NotFoundError: prompt set 'default' has no template 'nope'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scaffolds.errors import NotFoundError
from scaffolds.prompts.template import Template

__all__ = ["PromptSet"]


@dataclass(frozen=True, slots=True, eq=False)
class PromptSet:
    """One set's templates by name and fixed texts by key (both read-only)."""

    name: str
    templates: Mapping[str, Template] = field(default_factory=lambda: MappingProxyType({}))
    texts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, name: str, *templates: Template, **texts: str) -> PromptSet:
        """A set named ``name`` holding ``templates`` (keyed by their names) and ``texts``."""
        by_name = MappingProxyType({t.name: t for t in templates})
        return cls(name, by_name, MappingProxyType(dict(texts)))

    def template(self, key: str) -> Template:
        try:
            return self.templates[key]
        except KeyError:
            raise NotFoundError(
                f"prompt set {self.name!r} has no template {key!r}", param="prompt_set"
            ) from None

    def text(self, key: str) -> str:
        try:
            return self.texts[key]
        except KeyError:
            raise NotFoundError(
                f"prompt set {self.name!r} has no text {key!r}", param="prompt_set"
            ) from None

    def merged(self, *others: PromptSet) -> PromptSet:
        """This set with the templates and texts of ``others`` added (later ones win)."""
        if not others:
            return self  # read-only already: nothing to copy
        templates, texts = dict(self.templates), dict(self.texts)
        for other in others:
            templates.update(other.templates)
            texts.update(other.texts)
        return PromptSet(self.name, MappingProxyType(templates), MappingProxyType(texts))

    def replaced(self, *templates: Template, name: str | None = None) -> PromptSet:
        """A copy (optionally renamed) with ``templates`` put in place of those so named."""
        renamed = PromptSet(name or self.name, self.templates, self.texts)
        return renamed.merged(PromptSet.of(renamed.name, *templates))

    def candidates(self, texts: Sequence[str]) -> str:
        """Number and join candidate solutions the way this set's templates expect."""
        candidate = self.template("candidate")
        return self.text("candidate_separator").join(
            candidate.render(index=str(i), text=text) for i, text in enumerate(texts, start=1)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptSet):
            return NotImplemented
        return (self.name, dict(self.templates), dict(self.texts)) == (
            other.name,
            dict(other.templates),
            dict(other.texts),
        )

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.templates)), tuple(sorted(self.texts))))
