"""RSA's first population and QED-Nano's tournament as their references run them: the
first population's template, each component's system prompt, and the letter verdict
reader, with prompt files of placeholder wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.errors import PromptFileError, SpecError
from scaffolds.problem import Problem
from scaffolds.prompts import PromptSet
from scaffolds.prompts.files import load_prompt_file
from scaffolds.spec.build import build_strategy
from scaffolds.spec.prompt_files import check_scaffold_templates, prompt_set_with_files
from scaffolds.strategies import RSA
from scaffolds.strategies.rsa import parse_letter_pick
from tests.scaffolds.scripted import step_of

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))

PLACEHOLDER_FILE = """\
templates:
  rsa_initial: "INIT <$problem> think, then box."
  rsa_aggregate: "AGG <$problem> $candidates"
  rsa_select: "SEL <$problem> $candidates"
texts:
  rsa_initial_system: "SYS-GEN"
  rsa_aggregate_system: "SYS-AGG"
  rsa_select_system: "SYS-SEL"
"""


def write(tmp_path: Path, text: str, name: str = "rsa.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def last_user(request: GenerateRequest) -> str:
    prompt = request.prompt
    assert not isinstance(prompt, str)
    return prompt[-1].content


# -- the first population ---------------------------------------------------------------


async def test_the_first_population_asks_with_the_rsa_initial_template() -> None:
    """The RSA reference's first loop sends each problem's data text as it is
    (HyperPotatoNeo/RSA ``eval_loop.py``:426-428, no candidates on the first loop, and
    :196-201, ``build_prompt`` then sends ``question`` alone), and that text is the
    data's ``prompt`` column (:627-632 and :78-84), which adds to every problem an
    instruction to think step by step and box the final answer
    (``data/aime25/test.parquet``, all 30 rows). Ponder's ``rsa_initial`` adds its own
    such instruction; ``solver=single`` still sends the problem as asked."""
    engine = MockEngine(lambda r: ["\\boxed{42}"] * r.params.n)
    result = await run_scaffold(RSA(n=2, k=2, rounds=1), PROBLEM, engine)
    first = engine.requests[0]
    assert first.params.n == 2
    assert last_user(first) == (
        "What is 6*7?\n\nReason step by step, and put your final answer within \\boxed{}."
    )
    assert result.solutions[0].answer == "42"
    engine = MockEngine(lambda r: ["\\boxed{42}"] * r.params.n)
    await run_scaffold(RSA(n=2, k=2, rounds=1, solver=build_strategy("single")), PROBLEM, engine)
    assert last_user(engine.requests[0]) == "What is 6*7?"


async def test_a_prompt_file_sets_the_first_population_and_every_system_prompt(
    tmp_path: Path,
) -> None:
    """QED-Nano sends each component (solver, merger, selector) its own system prompt
    before the user turn (CMU-AIRe/QED-Nano ``eval/src/imobench/agents/math_core.py``:83-86,
    :289-295, :352-358, set from each component's ``sysprompt``: :376-407)."""
    files = [load_prompt_file(write(tmp_path, PLACEHOLDER_FILE))]
    prompts = prompt_set_with_files("default", files)
    strategy = RSA(n=2, k=2, rounds=1, select="pairwise")
    check_scaffold_templates(files, strategy, "scaffold")

    def reply(request: GenerateRequest) -> list[str]:
        return ["\\boxed{42}"] * request.params.n

    engine = MockEngine(reply)
    asked = Problem.from_messages((Message("system", "caller's"), Message("user", "6*7?")))
    await run_scaffold(strategy, asked, engine, RunSettings(prompts=prompts))
    sent = []
    for request in engine.requests:
        assert not isinstance(request.prompt, str)
        sent.append([(m.role, m.content) for m in request.prompt])
    assert sent[0] == [("system", "SYS-GEN"), ("user", "INIT <6*7?> think, then box.")]
    assert [turns[0] for turns in sent[1:3]] == [("system", "SYS-AGG")] * 2
    assert all(turns[1][1].startswith("AGG <6*7?> ") for turns in sent[1:3])
    assert sent[3][0] == ("system", "SYS-SEL") and sent[3][1][1].startswith("SEL <6*7?> ")
    assert all(len(turns) == 2 for turns in sent)  # the caller's system turn is replaced
    # Without the file no step has a system prompt of its own: the caller's stays.
    engine = MockEngine(reply)
    await run_scaffold(strategy, asked, engine)
    assert all(r.prompt[0] == Message("system", "caller's") for r in engine.requests)


async def test_a_text_prompt_gets_the_system_prompt_before_it(tmp_path: Path) -> None:
    files = [load_prompt_file(write(tmp_path, PLACEHOLDER_FILE))]
    settings = RunSettings(prompts=prompt_set_with_files("default", files), chat=False)
    engine = MockEngine(lambda r: ["\\boxed{42}"] * r.params.n)
    await run_scaffold(RSA(n=1, k=1, rounds=0), PROBLEM, engine, settings)
    assert engine.requests[0].prompt == "SYS-GEN\n\nINIT <What is 6*7?> think, then box."


# -- rsa_select only for the tournament ---------------------------------------------------


def test_a_file_setting_only_rsa_aggregate_serves_the_majority_vote(tmp_path: Path) -> None:
    files = [
        load_prompt_file(write(tmp_path, "templates:\n  rsa_aggregate: '$problem $candidates'\n"))
    ]
    prompt_set_with_files("default", files)
    for spec in ("rsa", 'rsa(select="majority", draw="balanced")'):
        check_scaffold_templates(files, build_strategy(spec), "scaffold")
    with pytest.raises(PromptFileError) as err:
        check_scaffold_templates(files, build_strategy('rsa(select="pairwise")'), "scaffold")
    assert "template 'rsa_select'" in err.value.message and err.value.param == "scaffold"
    # A file that sets only the first population's template asks for nothing more.
    only_initial = [
        load_prompt_file(write(tmp_path, "templates:\n  rsa_initial: 'Q $problem'\n", "i.yaml"))
    ]
    check_scaffold_templates(only_initial, build_strategy('rsa(select="pairwise")'), "scaffold")


# -- QED-Nano's letter verdicts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "pick"),
    [
        ("\\boxed{A}", 0),
        ("so \\boxed{ b }", 1),
        ("B is better: \\boxed{B}. Earlier I thought \\boxed{A}.", 1),  # the first one decides
        ("\\boxed{2} then \\boxed{A}", 0),  # a digit is no verdict: the next box is read
        ("\\boxed{equal}", None),
        ("\\boxed{EQUAL} \\boxed{A}", None),  # equal, read first, keeps the last
        ("\\boxed{C}", None),  # past the two candidates
        ("\\boxed{AB}", None),
        ("A is better.", None),
    ],
)
def test_the_letter_reader_by_hand(verdict: str, pick: int | None) -> None:
    """QED-Nano's selector reads the first ``boxed{`` holding one letter or ``equal``
    (any case; CMU-AIRe/QED-Nano ``eval/src/imobench/agents/math_core.py``:272 and its
    ``re.search`` with IGNORECASE at :300); no match, ``equal``, or a letter past the
    candidates keeps the last candidate (:301-311); a letter names candidate
    ``ord(letter) - 65`` (:308), the candidates being headed A, B, ... (:284)."""
    assert parse_letter_pick(verdict, 2) == pick


def letters_judge(request: GenerateRequest) -> str | list[str]:
    """A judge that answers as QED-Nano's does: a letter, for the smaller answer."""
    text = request.prompt_text()
    if step_of(request) == "rsa_select":
        heads = re.findall(r"#### Candidate (\w)\n[^#]*?\\boxed\{(\d+)\}", text)
        assert [h for h, _ in heads] in (["A", "B"], ["1", "2"])
        [(_, first), (_, second)] = heads
        return f"\\boxed{{{'A' if int(first) < int(second) else 'B'}}}"
    return [f"member \\boxed{{{i}}}" for i in (4, 3, 1, 2)][: request.params.n]


async def test_the_letter_tournament_follows_a_letter_judge() -> None:
    """QED-Nano's tournament pairs members in order, the winners shuffled between
    levels (``rsa_agent.py``:48-60). The judge picks the smaller answer: level 1 pairs
    (4, 3) and (1, 2), B and A, so 3 and 1 go on; level 2 picks 1 whatever the shuffle.
    Read as digits, no verdict is readable, so each match keeps its second member:
    level 1 keeps 3 and 2, and the winner is one of them (the shuffle's second)."""
    strategy = RSA(n=4, k=2, rounds=0, select="pairwise", verdict="letter")
    engine = MockEngine(letters_judge)
    result = await run_scaffold(strategy, PROBLEM, engine)
    assert result.solutions[0].answer == "1"
    selects = [r.prompt_text() for r in engine.requests if step_of(r) == "rsa_select"]
    assert len(selects) == 3 and all("#### Candidate A" in t for t in selects)
    digits = await run_scaffold(
        RSA(n=4, k=2, rounds=0, select="pairwise"), PROBLEM, MockEngine(letters_judge)
    )
    assert digits.solutions[0].answer in {"3", "2"}


@pytest.mark.parametrize(
    ("said", "answer"), [("\\boxed{A}", "4"), ("\\boxed{equal}", "3"), ("none", "3")]
)
async def test_a_letter_match_of_two(said: str, answer: str) -> None:
    """n=2: one match of members 4 (A) and 3 (B). A picks 4; equal or no verdict keeps
    the last, 3 (``math_core.py``:301-306)."""

    def reply(request: GenerateRequest) -> str | list[str]:
        if step_of(request) == "rsa_select":
            return said
        return ["\\boxed{4}", "\\boxed{3}"][: request.params.n]

    strategy = RSA(n=2, k=1, rounds=0, select="pairwise", verdict="letter")
    result = await run_scaffold(strategy, PROBLEM, MockEngine(reply))
    assert result.solutions[0].answer == answer


def test_the_verdict_format_is_a_tournament_option() -> None:
    strategy = build_strategy('rsa(n=8, k=3, draw="balanced", select="pairwise", verdict="letter")')
    assert isinstance(strategy, RSA) and strategy.verdict == "letter"
    assert build_strategy(str(strategy)) == strategy
    assert (strategy.max_calls(), strategy.max_samples()) == (1 + 24 + 7, 8 + 24 + 7)
    with pytest.raises(SpecError) as info:
        build_strategy('rsa(verdict="letter")')
    assert info.value.param is not None and info.value.param.endswith("verdict")
    with pytest.raises(SpecError):
        build_strategy('rsa(select="pairwise", verdict="roman")')


def test_the_system_texts_are_empty_by_default() -> None:
    for name in ("default", "compact"):
        part: PromptSet = RSA.prompts_for(name)
        assert [part.text(f"rsa_{k}_system") for k in ("initial", "aggregate", "select")] == [
            "",
            "",
            "",
        ]


async def test_the_aggregation_heads_its_candidates_by_number_whatever_the_verdict() -> None:
    """QED-Nano's merger heads its solutions A, B, C (``math_core.py``:345-350); Ponder's
    aggregation keeps the shared ``candidate`` template's numbers (README says so)."""
    strategy = RSA(n=2, k=2, rounds=1, select="pairwise", verdict="letter")
    engine = MockEngine(letters_judge)
    await run_scaffold(strategy, PROBLEM, engine)
    aggregations = [r.prompt_text() for r in engine.requests if step_of(r) == "rsa_aggregate"]
    assert len(aggregations) == 2
    assert all("#### Candidate 1" in t and "#### Candidate 2" in t for t in aggregations)
