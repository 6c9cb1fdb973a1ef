"""Snapshot tests pin every template of every prompt set.

Serving and training share these words verbatim; a change here changes what trained
models see, so it must be deliberate: rerun with ``PONDER_UPDATE_SNAPSHOTS=1`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaffolds.prompts import PROMPT_SETS, PromptSet, get_prompt_set
from scaffolds.prompts.template import Template

SNAPSHOTS = Path(__file__).parent / "snapshots"
SAMPLE_FIELDS = {
    "problem": "<PROBLEM>",
    "summary": "<SUMMARY>",
    "attempt": "<ATTEMPT>",
    "candidates": "<CANDIDATES>",
    "count": "<COUNT>",
    "solution": "<SOLUTION>",
    "feedback": "<FEEDBACK>",
    "abstraction": "<ABSTRACTION>",
    "index": "<INDEX>",
    "text": "<TEXT>",
}


def render_all(prompt_set: PromptSet) -> str:
    parts = []
    for name, template in sorted(prompt_set.templates().items()):
        parts.append(f"===== {name} ({template.name}) =====\n{template.render(**SAMPLE_FIELDS)}")
    parts.append(f"===== candidates(['a', 'b']) =====\n{prompt_set.candidates(['a', 'b'])}")
    parts.append(f"===== rc_no_summary =====\n{prompt_set.rc_no_summary}")
    parts.append(f"===== self_refine_correct_marker =====\n{prompt_set.self_refine_correct_marker}")
    return "\n\n".join(parts) + "\n"


@pytest.mark.parametrize("name", sorted(PROMPT_SETS))
def test_prompt_set_matches_its_snapshot(name: str) -> None:
    rendered = render_all(get_prompt_set(name))
    path = SNAPSHOTS / f"prompts_{name}.txt"
    if os.environ.get("PONDER_UPDATE_SNAPSHOTS") == "1":
        path.write_text(rendered)
    assert path.exists(), f"no snapshot {path.name}: run with PONDER_UPDATE_SNAPSHOTS=1"
    assert rendered == path.read_text()


def test_every_set_defines_the_same_steps_with_known_fields() -> None:
    names = {frozenset(s.templates()) for s in PROMPT_SETS.values()}
    assert len(names) == 1
    for prompt_set in PROMPT_SETS.values():
        for template in prompt_set.templates().values():
            assert template.fields <= set(SAMPLE_FIELDS), template.name


def test_default_templates_put_the_problem_first_where_prefix_caching_matters() -> None:
    default = get_prompt_set("default")
    for template in (
        default.rc_reasoning_start,
        default.rc_reasoning_continue,
        default.rc_summary,
        default.gsr_refine,
        default.self_refine_feedback,
        default.self_refine_refine,
    ):
        assert template.render(**SAMPLE_FIELDS).startswith("### Problem\n<PROBLEM>"), template.name


def test_solution_templates_ask_for_a_boxed_answer() -> None:
    default = get_prompt_set("default")
    for template in (
        default.solve,
        default.rc_reasoning_start,
        default.rc_reasoning_continue,
        default.gsr_refine,
        default.self_refine_refine,
        default.abstraction_solve,
    ):
        assert "\\boxed{}" in template.text, template.name


def test_rendering_demands_the_fields_a_template_uses() -> None:
    with pytest.raises(ValueError, match="missing fields \\['problem'\\]"):
        Template("t", "$problem and $x").render(x="1")
    with pytest.raises(ValueError, match="malformed"):
        Template("t", "cost: $")


def test_values_are_not_reinterpreted() -> None:
    assert Template("t", "$problem").render(problem="$x costs $5 {}") == "$x costs $5 {}"
