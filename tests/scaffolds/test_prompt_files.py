"""Prompt files: a served model's own wording loaded from YAML or TOML, checked against
the prompt set and the scaffolds that use it (the files are written by the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.errors import PromptFileError
from scaffolds.problem import Problem
from scaffolds.prompts.files import load_prompt_file
from scaffolds.spec.build import build_strategy
from scaffolds.spec.prompt_files import check_scaffold_templates, prompt_set_with_files

RC_YAML = """\
templates:
  rc_reasoning: |-
    PROBLEM: $problem
    EARLIER: $summary
    Box it.
  rc_summary: "SUM [$problem] [$summary] [$attempt]"
texts:
  rc_no_summary: ""
"""

RC_TOML = """\
[templates]
rc_reasoning = "PROBLEM: $problem\\nEARLIER: $summary\\nBox it."
rc_summary = "SUM [$problem] [$summary] [$attempt]"
[texts]
rc_no_summary = ""
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_and_toml_files_load_the_same(tmp_path: Path) -> None:
    as_yaml = load_prompt_file(write(tmp_path, "rc.yaml", RC_YAML))
    as_toml = load_prompt_file(write(tmp_path, "rc.toml", RC_TOML))
    assert as_yaml.as_set("default") == as_toml.as_set("default")
    assert as_yaml.templates["rc_summary"].fields == {"problem", "summary", "attempt"}


async def test_a_run_speaks_the_files_wording_exactly(tmp_path: Path) -> None:
    files = [load_prompt_file(write(tmp_path, "rc.yaml", RC_YAML))]
    prompts = prompt_set_with_files("default", files)
    strategy = build_strategy('rc(steps=2, template="one")')
    check_scaffold_templates(files, strategy, "scaffold")

    def reply(request: GenerateRequest) -> str:
        return "I tried 6*7." if request.prompt_text().startswith("SUM") else "6*7=\\boxed{42}"

    engine = MockEngine(reply)
    problem = Problem.from_messages((Message("user", "What is 6*7?"),))
    result = await run_scaffold(strategy, problem, engine, RunSettings(prompts=prompts))
    assert [r.prompt_text() for r in engine.requests] == [
        "PROBLEM: What is 6*7?\nEARLIER: \nBox it.",
        "SUM [What is 6*7?] [] [6*7=\\boxed{42}]",
        "PROBLEM: What is 6*7?\nEARLIER: I tried 6*7.\nBox it.",
    ]
    assert result.solutions[0].answer == "42"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("templates:\n  rc_sumary: '$problem'\n", ["unknown template 'rc_sumary'"]),
        (
            "templates:\n  rc_summary: '$problem $summary $attempt $hint'\n",
            ["template 'rc_summary'", "unknown placeholder $hint"],
        ),
        (
            "templates:\n  rc_summary: '$problem $attempt'\n",
            ["template 'rc_summary'", "lacks the placeholder $summary"],
        ),
        (
            "templates:\n  rc_summary: 'costs $5 $problem $summary $attempt'\n",
            ["template 'rc_summary'", "malformed placeholder"],
        ),
        ("texts:\n  rc_nothing: ''\n", ["unknown text 'rc_nothing'"]),
        ("prompts:\n  solve: '$problem'\n", ["unknown section 'prompts'"]),
        ("templates:\n  solve: 3\n", ["template 'solve' must be a text"]),
        ("templates: [\n", ["is not valid YAML"]),
    ],
)
def test_a_bad_file_is_an_error_naming_it(tmp_path: Path, text: str, names: list[str]) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(PromptFileError) as err:
        prompt_set_with_files("default", [load_prompt_file(path)])
    assert f"prompt file {path}:" in err.value.message
    for name in names:
        assert name in err.value.message


def test_a_scaffold_must_find_every_template_it_needs_in_the_files(tmp_path: Path) -> None:
    only_pair = write(
        tmp_path,
        "pair.toml",
        '[templates]\nrc_reasoning_start = "$problem"\n'
        'rc_reasoning_continue = "$problem $summary"\n'
        'rc_summary = "$problem $summary $attempt"\n',
    )
    files = [load_prompt_file(only_pair)]
    prompt_set_with_files("default", files)
    check_scaffold_templates(files, build_strategy("majority(k=2, solver=rc(steps=2))"), "s")
    with pytest.raises(PromptFileError) as err:
        check_scaffold_templates(files, build_strategy('gsr(solver=rc(template="one"))'), "s")
    assert err.value.param == "s"
    assert str(only_pair) in err.value.message
    assert "template 'rc_reasoning'" in err.value.message
    # A scaffold whose templates no file touches keeps Ponder's own wording.
    check_scaffold_templates(files, build_strategy("self_refine"), "s")


def test_numbering_placeholders_may_be_left_out(tmp_path: Path) -> None:
    # RSA's reference prompt numbers its solutions but never says how many there are.
    path = write(
        tmp_path, "rsa.yaml", "templates:\n  rsa_aggregate: 'Problem: $problem $candidates'\n"
    )
    prompts = prompt_set_with_files("default", [load_prompt_file(path)])
    assert prompts.template("rsa_aggregate").fields == {"problem", "candidates"}


def test_later_files_win(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", "templates:\n  solve: 'A $problem'\n")
    second = write(tmp_path, "b.yaml", "templates:\n  solve: 'B $problem'\n")
    files = [load_prompt_file(first), load_prompt_file(second)]
    prompts = prompt_set_with_files("compact", files)
    assert prompts.name == "compact"
    assert prompts.template("solve").render(problem="1+1=") == "B 1+1="


async def test_qed_nanos_first_summary_text_comes_from_the_file(tmp_path: Path) -> None:
    text = RC_YAML.replace(
        'rc_no_summary: ""', "rc_no_summary: '[none]'\n  rc_first_summary: '[none]'"
    )
    files = [load_prompt_file(write(tmp_path, "qed.yaml", text))]
    engine = MockEngine(lambda r: "\\boxed{1}")
    problem = Problem.from_text("Q")
    strategy = build_strategy('rc(steps=2, template="one")')
    await run_scaffold(
        strategy, problem, engine, RunSettings(prompts=prompt_set_with_files("default", files))
    )
    assert [r.prompt_text() for r in engine.requests[:2]] == [
        "PROBLEM: Q\nEARLIER: [none]\nBox it.",
        "SUM [Q] [[none]] [\\boxed{1}]",
    ]
