"""Prompt sets: every scaffold step's template, by name, shared by serving and training.

The package is the prompts' public API: import the names in ``__all__`` from here.

A served model declares the set it was trained with (``default`` for instruction-following
chat models, ``compact`` for the small synthetic-task model). The shared templates of each
set live in :mod:`scaffolds.prompts.common`; each strategy contributes its own (its
``prompt_sets``), and :func:`scaffolds.spec.registry.get_prompt_set` assembles a whole set from
every registered strategy.

>>> common_prompts("compact").template("solve").render(problem="3+4=")
'3+4='
>>> common_prompts("nope")
Traceback (most recent call last):
...
scaffolds.errors.NotFoundError: unknown prompt set 'nope' (known: compact, default)
"""

from __future__ import annotations

from scaffolds.errors import NotFoundError
from scaffolds.prompts import common
from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

__all__ = ["PROMPT_SET_NAMES", "PromptSet", "Template", "common_prompts"]

PROMPT_SET_NAMES = tuple(sorted(s.name for s in common.SETS))
"""The prompt sets that exist (every one defines the shared templates)."""


def common_prompts(name: str) -> PromptSet:
    """The shared templates (solve, forced answer, candidates) of the set ``name``."""
    for prompt_set in common.SETS:
        if prompt_set.name == name:
            return prompt_set
    known = ", ".join(PROMPT_SET_NAMES)
    raise NotFoundError(f"unknown prompt set {name!r} (known: {known})", param="prompt_set")
