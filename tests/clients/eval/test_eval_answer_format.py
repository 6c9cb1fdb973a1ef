"""``ponder eval --answer-format``: the votes inside the server and the grade outside read
a sample's answer the same way (``boxed``: the last ``\\boxed{}`` after the thinking, none
is wrong; ``lenient``: also "final answer is X", ``#### X``, the last number)."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clients.eval.cli import eval_app
from clients.eval.runner import EvalConfig, reasoning_steps, run_eval
from scaffolds.evaluation.grading import ExactGrader, MathGrader
from scaffolds.evaluation.problems import ProblemRow
from testing.fake_engine import FakeEngineConfig, Responder, running_fake_engine
from testing.fake_engine.tokens import prompt_text
from tests.evalkit import MODEL, read_jsonl, serve_ponder

BOXED = r"Adding the columns: \boxed{579}."
FINAL_IS = "Adding the columns, the final answer is 579."
BOX_IN_THINKING = r"<think>It is \boxed{579}.</think>That is the sum."
"""The three texts of a right answer to 123+456 that the two formats read apart."""


@pytest.mark.parametrize(
    ("text", "boxed", "lenient"),
    [
        (BOXED, "579", "579"),
        (FINAL_IS, None, "579"),  # no box: no answer
        (BOX_IN_THINKING, None, "579"),  # a box inside the thinking does not count
        (r"<think>\boxed{578}</think>So \boxed{579}, not 578.", "579", "579"),
    ],
)
async def test_graders_read_the_final_answer_in_their_format(
    text: str, boxed: str | None, lenient: str | None
) -> None:
    problem = ProblemRow("p", "123+456=", "579")
    for fmt, answer in (("boxed", boxed), ("lenient", lenient)):
        for grader in (MathGrader(inline=True, answer_format=fmt), ExactGrader(answer_format=fmt)):
            grade = await grader.grade(problem, text)
            assert grade.correct is (answer == "579"), (fmt, grader.name)
            assert grade.note == (None if answer else "no answer")
            await grader.aclose()


def test_the_run_format_defaults_to_boxed_and_steps_are_read_in_it(tmp_path: Path) -> None:
    assert EvalConfig("u", MODEL, ["single"], tmp_path).answer_format == "boxed"  # the papers'
    with pytest.raises(ValueError, match="--answer-format"):
        EvalConfig("u", MODEL, ["single"], tmp_path, extra_body={"answer_format": "lenient"})
    trace = [
        {"type": "step_started", "step_id": "r1", "kind": "reasoning"},
        {"type": "step_finished", "step_id": "r1", "texts": [FINAL_IS], "usage": {}},
    ]  # a trace without the server's answers: the text is read here
    assert reasoning_steps(trace, answer_format="boxed")[0]["answer"] is None
    assert reasoning_steps(trace, answer_format="lenient")[0]["answer"] == "579"


async def test_a_grader_reading_another_format_is_refused(tmp_path: Path) -> None:
    config = EvalConfig("http://127.0.0.1:9/v1", MODEL, ["single"], tmp_path)
    with pytest.raises(ValueError, match="answer_format='boxed'"):
        await run_eval(config, [], MathGrader(inline=True), progress=False)


_SUM = re.compile(r"(\d+)\+(\d+)")


def _styles() -> Responder:
    """A responder: ``single``'s three samples of a problem are, in turn, its right answer
    boxed, stated as "the final answer is", and boxed only inside the thinking; a vote's
    three samples (one request of n=3) box a wrong answer once and state the right one
    twice without a box."""
    calls: Counter[str] = Counter()

    def respond(body: dict[str, Any]) -> list[str]:
        prompt = prompt_text(body)
        a, b = (int(x) for x in _SUM.findall(prompt)[-1])
        right = str(a + b)
        texts = [t.replace("579", right) for t in (BOXED, FINAL_IS, BOX_IN_THINKING)]
        if int(body.get("n") or 1) > 1:
            return [rf"So \boxed{{{a + b + 1}}}.", texts[1], texts[1]]
        calls[prompt] += 1
        return [texts[(calls[prompt] - 1) % 3]]

    return respond


def test_eval_sends_the_format_and_grades_in_it(tmp_path: Path) -> None:
    data = tmp_path / "sums.jsonl"
    rows = [
        {"id": "p0", "problem": "123+456=", "answer": "579"},
        {"id": "p1", "problem": "100+250=", "answer": "350"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli = CliRunner()
    with (
        running_fake_engine(FakeEngineConfig(respond=_styles())) as engine,
        serve_ponder(engine) as url,
    ):
        args = ["--base-url", url, "--model", MODEL, "--dataset", str(data), "-s", "single"]
        args += ["-s", "majority(k=3)", "--samples", "3", "--concurrency", "2"]
        args += ["--grade-workers", "1", "--no-progress"]
        runs = {"boxed": tmp_path / "boxed", "lenient": tmp_path / "lenient"}
        default = cli.invoke(eval_app, [*args, "--out", str(runs["boxed"])])  # the server's
        assert default.exit_code == 0, default.output
        assert "answers are read boxed (as the server reads this model's" in default.output
        lenient = cli.invoke(
            eval_app, [*args, "--answer-format", "lenient", "--out", str(runs["lenient"])]
        )
        assert lenient.exit_code == 0, lenient.output

        calls = engine.state.calls
        switched = cli.invoke(
            eval_app, [*args, "--answer-format", "lenient", "--out", str(runs["boxed"])]
        )
        assert switched.exit_code == 2 and engine.state.calls == calls
        said = " ".join(switched.output.split())
        assert "graded with answer_format 'boxed' (12 samples), not 'lenient'" in said
        assert "resume it with --answer-format boxed" in said
        clash = ["--extra-body", '{"answer_format": "lenient"}', "--answer-format", "boxed"]
        both = cli.invoke(eval_app, [*args, *clash, "--out", str(tmp_path / "x")])
        assert both.exit_code == 2 and "--answer-format instead" in " ".join(both.output.split())

        before = len(engine.state.requests)  # straight to the engine: the bodies as sent
        direct = ["--base-url", engine.base_url, "--model", MODEL, "--dataset", str(data)]
        direct += ["-s", "single", "-s", "none", "--answer-format", "lenient", "--no-progress"]
        sent = cli.invoke(eval_app, [*direct, "--grader", "exact", "--out", str(tmp_path / "d")])
        assert sent.exit_code == 0, sent.output
        bodies = [r.body for r in list(engine.state.requests)[before:]]
    assert len(bodies) == 4
    assert sorted(str(b.get("answer_format")) for b in bodies) == ["None", "None"] + ["lenient"] * 2
    assert all(("scaffold" in b) == ("answer_format" in b) for b in bodies)  # none: plain

    summaries = {}
    for fmt, out in runs.items():
        records = read_jsonl(out / "results.jsonl")
        assert {r["answer_format"] for r in records} == {fmt}
        report = json.loads((out / "report.json").read_text())
        assert report["answer_format"] == fmt
        assert f"- **answer_format**: `{fmt}`" in (out / "report.md").read_text()
        summaries[fmt] = {s["scaffold"]: s for s in report["scaffolds"]}
        single = [r for r in records if r["scaffold"] == "single"]
        right = {"p0": "579", "p1": "350"}
        extracted = Counter(r["extracted"] == right[r["id"]] for r in single)
        assert extracted == ({True: 2, False: 4} if fmt == "boxed" else {True: 6})

    # single: boxed reads only the boxed sample of three (1/3 right); lenient all three.
    # majority(k=3) in the server: boxed votes the one boxed (wrong) answer; lenient 2 to 1.
    # maj@3 of single clusters the same extracted answers: the right one wins either way.
    boxed, lenient = summaries["boxed"], summaries["lenient"]
    assert boxed["single"]["accuracy"] == pytest.approx(1 / 3)
    assert lenient["single"]["accuracy"] == 1.0
    assert boxed["single"]["no_answer"] == 4 and lenient["single"]["no_answer"] == 0
    assert boxed["single"]["maj_at"]["3"] == lenient["single"]["maj_at"]["3"] == 1.0
    assert boxed["majority(k=3)"]["accuracy"] == 0.0
    assert lenient["majority(k=3)"]["accuracy"] == 1.0


async def test_compare_warns_when_the_runs_read_answers_differently(tmp_path: Path) -> None:
    from rich.console import Console

    from clients.eval.compare import compare_runs, print_comparison

    async def by_text(answers: Any) -> list[list[int]]:
        return [[i] for i, a in enumerate(answers) if a]

    record = {"scaffold": "single", "id": "p", "sample": 0, "extracted": "1", "correct": True}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(record | {"answer_format": "boxed"}) + "\n")
    b.write_text(json.dumps(record) + "\n")  # written before the field: lenient
    result = await compare_runs(a, b, by_text)
    assert result["answer_format"] == {"a": "boxed", "b": "lenient"}
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=200))
    assert "A was graded answer_format 'boxed', B 'lenient'" in out.getvalue()
    same = await compare_runs(a, a, by_text)
    out = io.StringIO()
    print_comparison(same, Console(file=out, width=200))
    assert "warning" not in out.getvalue()


def test_auto_reads_answers_as_the_served_model_does_else_boxed(tmp_path: Path) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"id": "p0", "problem": "123+456=", "answer": "579"}) + "\n")
    cli = CliRunner()
    with (
        running_fake_engine(FakeEngineConfig(respond=_styles())) as engine,
        serve_ponder(engine, answer_format="lenient") as url,
    ):
        args = ["--model", MODEL, "--dataset", str(data), "--samples", "3", "--no-progress"]
        ponder = cli.invoke(eval_app, [*args, "--base-url", url, "--out", str(tmp_path / "p")])
        direct = ["--base-url", engine.base_url, "-s", "none", "--grader", "exact"]
        plain = cli.invoke(eval_app, [*args, *direct, "--out", str(tmp_path / "e")])
        given = cli.invoke(
            eval_app,
            [
                *args,
                "--base-url",
                url,
                "--out",
                str(tmp_path / "g"),
                "--extra-body",
                '{"answer_format": "boxed"}',
            ],
        )
    assert ponder.exit_code == 0, ponder.output
    assert "answers are read lenient (as the server reads this model's" in ponder.output
    graded = read_jsonl(tmp_path / "p" / "results.jsonl")
    # boxed, "the final answer is", boxed only in the thinking: lenient reads all three.
    assert [r["answer_format"] for r in graded] == ["lenient"] * 3
    assert sum(r["correct"] for r in graded) == 3
    assert plain.exit_code == 0, plain.output
    assert "answers are read boxed (the server does not say how" in plain.output
    assert given.exit_code == 0, given.output  # the extra body's format is the run's
    assert {r["answer_format"] for r in read_jsonl(tmp_path / "g" / "results.jsonl")} == {"boxed"}
