"""Snapshot tests pin every template of every prompt set.

Serving and training share these words verbatim; a change here changes what trained
models see, so it must be deliberate: rerun with ``PONDER_UPDATE_SNAPSHOTS=1`` and
review the diff. The sets, strategies and fields are read from the built-in registry,
so a new built-in needs no edit here, only a regenerated snapshot.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaffolds.prompts import PROMPT_SET_NAMES, PromptSet, common_prompts
from scaffolds.prompts.template import Template
from scaffolds.spec.registry import builtin_registry, get_prompt_set

SNAPSHOTS = Path(__file__).parent / "snapshots"
BUILTINS = builtin_registry()
"""The built-ins only, so that a scaffold installed from elsewhere leaves the snapshots."""


def full_set(name: str) -> PromptSet:
    return get_prompt_set(name, BUILTINS)


SAMPLE_FIELDS = {
    field: f"<{field.upper()}>"
    for name in PROMPT_SET_NAMES
    for template in full_set(name).templates.values()
    for field in sorted(template.fields)
}
"""A placeholder for every field a template uses (``problem`` -> ``<PROBLEM>``)."""


def render_all(prompt_set: PromptSet) -> str:
    parts = []
    for name, template in sorted(prompt_set.templates.items()):
        parts.append(f"===== {name} ({template.name}) =====\n{template.render(**SAMPLE_FIELDS)}")
    parts.append(f"===== candidates(['a', 'b']) =====\n{prompt_set.candidates(['a', 'b'])}")
    for key in sorted(set(prompt_set.texts) - set(common_prompts(prompt_set.name).texts)):
        parts.append(f"===== {key} =====\n{prompt_set.text(key)}")
    return "\n\n".join(parts) + "\n"


@pytest.mark.parametrize("name", PROMPT_SET_NAMES)
def test_prompt_set_matches_its_snapshot(name: str) -> None:
    rendered = render_all(full_set(name))
    path = SNAPSHOTS / f"prompts_{name}.txt"
    if os.environ.get("PONDER_UPDATE_SNAPSHOTS") == "1":
        path.write_text(rendered)
    assert path.exists(), f"no snapshot {path.name}: run with PONDER_UPDATE_SNAPSHOTS=1"
    assert rendered == path.read_text()


def test_every_set_defines_the_same_steps_with_known_fields() -> None:
    """The shared templates are in every set; a strategy's parts (it need not have one
    per set) define the same steps; no set's template asks for a field that the
    ``default`` set's version of it (where there is one) does not."""
    shared = [common_prompts(name) for name in PROMPT_SET_NAMES]
    assert len({frozenset(s.templates) for s in shared}) == 1
    assert len({frozenset(s.texts) for s in shared}) == 1
    for cls in BUILTINS.classes():
        assert len({frozenset(p.templates) for p in cls.prompt_sets}) <= 1, cls.name
        assert len({frozenset(p.texts) for p in cls.prompt_sets}) <= 1, cls.name
    reference = full_set("default")
    for prompt_set in map(full_set, PROMPT_SET_NAMES):
        for template in prompt_set.templates.values():
            assert template.fields <= set(SAMPLE_FIELDS), template.name
            if template.name in reference.templates:
                assert template.fields <= reference.template(template.name).fields, template.name


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
