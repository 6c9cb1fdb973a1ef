"""Prompt sets: every scaffold step's template, by name, shared by serving and training.

A served model declares the set it was trained with (``default`` for instruction-following
chat models, ``compact`` for the small synthetic-task model), and every scaffold renders
its prompts from that set.

>>> get_prompt_set("default").gsr_refine.fields == {"problem", "candidates", "count"}
True
>>> get_prompt_set("nope")
Traceback (most recent call last):
...
scaffolds.errors.NotFoundError: unknown prompt set 'nope' (known: compact, default)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from scaffolds.errors import NotFoundError
from scaffolds.prompts import abstraction, best_of_n, common, gsr, rc, self_refine
from scaffolds.prompts.template import Template

__all__ = ["PROMPT_SETS", "PromptSet", "Template", "get_prompt_set"]


@dataclass(frozen=True, slots=True)
class PromptSet:
    name: str
    solve: Template
    force_answer: Template
    candidate: Template
    candidate_separator: str
    rc_reasoning_start: Template
    rc_reasoning_continue: Template
    rc_summary: Template
    rc_no_summary: str
    gsr_refine: Template
    self_refine_feedback: Template
    self_refine_refine: Template
    self_refine_correct_marker: str
    abstraction_propose: Template
    abstraction_solve: Template
    best_of_n_judge: Template

    def candidates(self, texts: Sequence[str]) -> str:
        """Number and join candidate solutions the way this set's templates expect."""
        return self.candidate_separator.join(
            self.candidate.render(index=str(i), text=text) for i, text in enumerate(texts, start=1)
        )

    def templates(self) -> dict[str, Template]:
        return {
            name: value
            for name in self.__dataclass_fields__
            if isinstance(value := getattr(self, name), Template)
        }


DEFAULT = PromptSet(
    name="default",
    solve=common.SOLVE,
    force_answer=common.FORCE_ANSWER,
    candidate=common.CANDIDATE,
    candidate_separator=common.CANDIDATE_SEPARATOR,
    rc_reasoning_start=rc.REASONING_START,
    rc_reasoning_continue=rc.REASONING_CONTINUE,
    rc_summary=rc.SUMMARY,
    rc_no_summary=rc.NO_SUMMARY,
    gsr_refine=gsr.REFINE,
    self_refine_feedback=self_refine.FEEDBACK,
    self_refine_refine=self_refine.REFINE,
    self_refine_correct_marker=self_refine.CORRECT_MARKER,
    abstraction_propose=abstraction.PROPOSE,
    abstraction_solve=abstraction.SOLVE,
    best_of_n_judge=best_of_n.JUDGE,
)

COMPACT = PromptSet(
    name="compact",
    solve=common.COMPACT_SOLVE,
    force_answer=common.COMPACT_FORCE_ANSWER,
    candidate=common.COMPACT_CANDIDATE,
    candidate_separator=common.COMPACT_CANDIDATE_SEPARATOR,
    rc_reasoning_start=rc.COMPACT_REASONING_START,
    rc_reasoning_continue=rc.COMPACT_REASONING_CONTINUE,
    rc_summary=rc.COMPACT_SUMMARY,
    rc_no_summary=rc.COMPACT_NO_SUMMARY,
    gsr_refine=gsr.COMPACT_REFINE,
    self_refine_feedback=self_refine.COMPACT_FEEDBACK,
    self_refine_refine=self_refine.COMPACT_REFINE,
    self_refine_correct_marker=self_refine.COMPACT_CORRECT_MARKER,
    abstraction_propose=abstraction.COMPACT_PROPOSE,
    abstraction_solve=abstraction.COMPACT_SOLVE,
    best_of_n_judge=best_of_n.COMPACT_JUDGE,
)

PROMPT_SETS = MappingProxyType({s.name: s for s in (DEFAULT, COMPACT)})


def get_prompt_set(name: str) -> PromptSet:
    try:
        return PROMPT_SETS[name]
    except KeyError:
        known = ", ".join(sorted(PROMPT_SETS))
        raise NotFoundError(
            f"unknown prompt set {name!r} (known: {known})", param="prompt_set"
        ) from None
