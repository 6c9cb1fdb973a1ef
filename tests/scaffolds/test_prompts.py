"""Snapshot tests pin every template of every prompt set.

Serving and training share these words verbatim; a change here changes what trained
models see, so it must be deliberate: rerun with ``PONDER_UPDATE_SNAPSHOTS=1`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaffolds.prompts import PROMPT_SET_NAMES, PromptSet
from scaffolds.prompts.template import Template
from scaffolds.spec.build import get_prompt_set

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
    for name, template in sorted(prompt_set.templates.items()):
        parts.append(f"===== {name} ({template.name}) =====\n{template.render(**SAMPLE_FIELDS)}")
    parts.append(f"===== candidates(['a', 'b']) =====\n{prompt_set.candidates(['a', 'b'])}")
    for key in ("rc_no_summary", "self_refine_correct_marker"):
        parts.append(f"===== {key} =====\n{prompt_set.text(key)}")
    return "\n\n".join(parts) + "\n"


@pytest.mark.parametrize("name", PROMPT_SET_NAMES)
def test_prompt_set_matches_its_snapshot(name: str) -> None:
    rendered = render_all(get_prompt_set(name))
    path = SNAPSHOTS / f"prompts_{name}.txt"
    if os.environ.get("PONDER_UPDATE_SNAPSHOTS") == "1":
        path.write_text(rendered)
    assert path.exists(), f"no snapshot {path.name}: run with PONDER_UPDATE_SNAPSHOTS=1"
    assert rendered == path.read_text()


def test_every_set_defines_the_same_steps_with_known_fields() -> None:
    sets = [get_prompt_set(name) for name in PROMPT_SET_NAMES]
    assert len({frozenset(s.templates) for s in sets}) == 1
    assert len({frozenset(s.texts) for s in sets}) == 1
    for prompt_set in sets:
        for template in prompt_set.templates.values():
            assert template.fields <= set(SAMPLE_FIELDS), template.name


def test_default_templates_put_the_problem_first_where_prefix_caching_matters() -> None:
    default = get_prompt_set("default")
    for template in (
        default.template("rc_reasoning_start"),
        default.template("rc_reasoning_continue"),
        default.template("rc_summary"),
        default.template("gsr_refine"),
        default.template("rsa_aggregate"),
        default.template("self_refine_feedback"),
        default.template("self_refine_refine"),
    ):
        assert template.render(**SAMPLE_FIELDS).startswith("### Problem\n<PROBLEM>"), template.name


def test_solution_templates_ask_for_a_boxed_answer() -> None:
    default = get_prompt_set("default")
    for template in (
        default.template("solve"),
        default.template("rc_reasoning_start"),
        default.template("rc_reasoning_continue"),
        default.template("gsr_refine"),
        default.template("rsa_aggregate"),
        default.template("self_refine_refine"),
        default.template("abstraction_solve"),
    ):
        assert "\\boxed{}" in template.text, template.name


def test_rendering_demands_the_fields_a_template_uses() -> None:
    with pytest.raises(ValueError, match="missing fields \\['problem'\\]"):
        Template("t", "$problem and $x").render(x="1")
    with pytest.raises(ValueError, match="malformed"):
        Template("t", "cost: $")


def test_values_are_not_reinterpreted() -> None:
    assert Template("t", "$problem").render(problem="$x costs $5 {}") == "$x costs $5 {}"
