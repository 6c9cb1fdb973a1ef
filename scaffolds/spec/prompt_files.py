"""A served model's prompt files, checked against its prompt set and its scaffolds.

:func:`prompt_set_with_files` is the model's run prompt set: the shared templates of its
set with every prompt file's templates and texts put in place of Ponder's own (later
files win). It is checked once, when the server starts: a template or text the set does
not have, a placeholder the step does not offer, or one the step's own template uses and
the file's leaves out (but for :data:`NUMBERING_FIELDS`), is a :class:`PromptFileError`
naming the file, the template and the placeholder. :func:`check_scaffold_templates`
checks that a scaffold whose templates a file sets finds every template it needs there
(RC's ``template="one"`` needs ``rc_reasoning`` and ``rc_summary``), at start for the
model's default and aliases, and for each request's spec.

>>> from pathlib import Path
>>> from scaffolds.errors import PromptFileError
>>> from scaffolds.prompts import Template
>>> from scaffolds.prompts.files import PromptFile
>>> from scaffolds.strategies import RC
>>> def summary(text):
...     return PromptFile(Path("rc.yaml"), {"rc_summary": Template("rc_summary", text)}, {})
>>> try:
...     prompt_set_with_files("default", [summary("$problem $oops")])
... except PromptFileError as err:
...     print(err.message.replace(" (it", "\\n(it"))
prompt file rc.yaml: template 'rc_summary' has an unknown placeholder $oops
(it may use $attempt, $problem, $summary)
>>> try:
...     check_scaffold_templates([summary("$problem $summary $attempt")], RC(template="one"), "")
... except PromptFileError as err:
...     print(err.message.replace(", which", ",\\nwhich"))
prompt file rc.yaml: sets rc_summary for rc(template="one"),
which also needs template 'rc_reasoning': no prompt file sets it
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from scaffolds.prompts import PROMPT_SET_NAMES, PromptSet, common_prompts
from scaffolds.prompts.files import PromptFile
from scaffolds.spec.registry import Registry, default_registry, get_prompt_set
from scaffolds.strategies.base import Strategy

__all__ = ["NUMBERING_FIELDS", "check_scaffold_templates", "prompt_set_with_files"]

NUMBERING_FIELDS = frozenset({"count", "index"})
"""Placeholders that only number things (how many candidates, which one this is): a
file may leave them out (RSA's reference prompt never says how many solutions it shows)."""


def prompt_set_with_files(
    name: str, files: Sequence[PromptFile], registry: Registry | None = None
) -> PromptSet:
    """Prompt set ``name``'s shared templates with ``files`` put in place, each file
    checked against the whole set (every registered strategy's part of it)."""
    registry = registry if registry is not None else default_registry()
    whole = get_prompt_set(name, registry)
    offered = _offered_fields(registry)
    for file in files:
        for key in file.texts:
            if key not in whole.texts:
                known = ", ".join(sorted(whole.texts))
                raise file.error(f"unknown text {key!r} (prompt set {name!r} has: {known})")
        for key, template in file.templates.items():
            if key not in whole.templates:
                raise file.error(f"unknown template {key!r} (prompt set {name!r} has no such step)")
            allowed, needed = offered[key], whole.templates[key].fields
            if extra := sorted(template.fields - allowed):
                may = ", ".join(f"${f}" for f in sorted(allowed)) or "none"
                raise file.error(
                    f"template {key!r} has an unknown placeholder ${extra[0]} (it may use {may})"
                )
            if missing := sorted(needed - template.fields - NUMBERING_FIELDS):
                raise file.error(
                    f"template {key!r} lacks the placeholder ${missing[0]}, which the step "
                    f"fills (Ponder's own {key!r} uses it: leaving it out drops that text)"
                )
    return common_prompts(name).merged(*(file.as_set(name) for file in files))


def check_scaffold_templates(files: Sequence[PromptFile], strategy: Strategy, where: str) -> None:
    """Every strategy in ``strategy`` whose templates a file sets finds each template it
    needs (:meth:`~scaffolds.strategies.base.Strategy.needed_templates`) in the files;
    otherwise a :class:`PromptFileError` (``param``: ``where``) naming the file, the
    scaffold and the template."""
    set_by = {key: file for file in files for key in file.templates}
    for part in _walk(strategy):
        needed = part.needed_templates()
        touched = sorted(needed & set_by.keys())
        missing = sorted(needed - set_by.keys())
        if touched and missing:
            file = set_by[touched[0]]
            raise file.error(
                f"sets {', '.join(touched)} for {part}, which also needs template "
                f"{missing[0]!r}: no prompt file sets it",
                param=where,
            )


def _walk(strategy: Strategy) -> Iterator[Strategy]:
    yield strategy
    for inner in strategy.inner():
        yield from _walk(inner)


def _offered_fields(registry: Registry) -> dict[str, frozenset[str]]:
    """Per template name, the fields its step offers: those any set's version uses."""
    offered: dict[str, frozenset[str]] = {}
    for set_name in PROMPT_SET_NAMES:
        for key, template in get_prompt_set(set_name, registry).templates.items():
            offered[key] = offered.get(key, frozenset()) | template.fields
    return offered
