"""Math-Shepherd step labels (``ponder train verifier --process``) on a scripted engine:
one request with n=N per step prefix but the last, hard and soft labels worked out by
hand, and the rows they become."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from scaffolds.evaluation.answers import ThinkingMarkers
from training.process_labels import (
    Sample,
    label_samples,
    records_reading,
    rollout_grade,
    step_rows,
)

SOLUTION = "x = 2\n\ny = x + 2\n\nso \\boxed{4}"  # gold is 5: the second step goes wrong
ROLLOUTS = {
    # from "x = 2": 2 of 4 completions reach 5; from "x = 2 ... y = x + 2": none does
    "x = 2\n\n": ["y = 3, \\boxed{5}", "\\boxed{4}", "\\boxed{7}", "so \\boxed{5}"],
    "x = 2\n\ny = x + 2\n\n": ["\\boxed{4}", "\\boxed{4}", "\\boxed{6}", "no answer"],
}


def continue_prefix(request: GenerateRequest) -> list[str]:
    prompt = request.prompt
    assert not isinstance(prompt, str) and prompt[-1].role == "assistant"
    return ROLLOUTS[prompt[-1].content][: request.params.n]


@pytest.mark.parametrize(("soft", "labels"), [(False, (1.0, 0.0, 0.0)), (True, (0.5, 0.0, 0.0))])
async def test_each_step_is_labelled_by_n_rollouts_from_its_prefix(
    soft: bool, labels: tuple[float, ...]
) -> None:
    engine = MockEngine(continue_prefix)
    sample = Sample("p", "What is 2+3?", "5", SOLUTION, correct=False)
    done: list[int] = []
    params = SamplingParams(n=4, max_tokens=64)
    [labelled], usage = await label_samples(
        engine, [sample], params, soft=soft, on_done=done.append
    )
    assert labelled.prefixes == ("x = 2", "x = 2\n\ny = x + 2", SOLUTION)
    assert labelled.labels == labels  # the last step is the sample's own grade
    # one request per prefix but the last, each n=4, continuing the assistant's message
    calls = sorted((r.prompt[-1].content, r.params.n) for r in engine.requests)  # type: ignore[union-attr]
    assert calls == [("x = 2\n\n", 4), ("x = 2\n\ny = x + 2\n\n", 4)]
    assert all(r.continue_final and r.prompt[0].content == "What is 2+3?" for r in engine.requests)  # type: ignore[union-attr]
    assert usage.calls == 2 and usage.completion_tokens > 0 and done == [2]


def solution_of(row: dict[str, Any]) -> str:
    """The proposed solution in a row's verifier question."""
    question = str(row["prompt"][0]["content"])
    return question.split("### Proposed solution\n")[1].split("\n\n### Question")[0]


def test_a_soft_label_becomes_yes_and_no_rows_in_its_proportion() -> None:
    prefixes = ["a", "a\n\nb", "a\n\nb\n\nc"]
    rows = step_rows("q", prefixes, [0.75, 0.5, 0.0], soft=True, rollouts=4, id="p")
    answers = [(solution_of(r), r["completion"][0]["content"]) for r in rows]
    # 3/4 -> 3 yes, 1 no; 2/4 -> 1 yes, 1 no (divided by 2); 0/4 -> 1 no
    a, ab, abc = prefixes
    assert answers == [(a, "yes")] * 3 + [(a, "no"), (ab, "yes"), (ab, "no"), (abc, "no")]
    assert {r["kind"] for r in rows} == {"verify_step"} and {r["id"] for r in rows} == {"p"}
    hard = step_rows("q", prefixes, [1.0, 0.0, 0.0], soft=False, rollouts=4)
    assert [r["completion"][0]["content"] for r in hard] == ["yes", "no", "no"]


async def test_prefixes_of_every_sample_go_out_together_up_to_the_concurrency() -> None:
    seen: list[int] = []

    def record(request: GenerateRequest) -> list[str]:
        seen.append(engine.in_flight)
        return continue_prefix(request)

    engine = MockEngine(record, delay=0.01)
    samples = [Sample(f"p{i}", "What is 2+3?", "5", SOLUTION, correct=False) for i in range(3)]
    params = SamplingParams(n=2)
    labelled, usage = await label_samples(engine, samples, params)
    assert max(seen) == 6 and usage.calls == 6  # 3 samples x 2 prefixes, all at once
    assert [s.labels for s in labelled] == [(1.0, 0.0, 0.0)] * 3
    seen.clear()
    await label_samples(engine, samples, params, concurrency=2)
    assert max(seen) == 2 and len(seen) == 6


OPEN, CLOSE = "<|begin_of_thought|>", "<|end_of_thought|>"
BOXED_RUN = "x = 2\n\ny = 3\n\nso \\boxed{5}"  # right (gold 5)
ROLLOUTS_BY_FORMAT = {
    # after "x = 2\n\n": boxed after the thinking, only the third; leniently all but the last
    "x = 2\n\n": [
        "y = 3, so the final answer is 5",
        f"{OPEN}\\boxed{{5}}{CLOSE}done",
        f"{CLOSE}\\boxed{{5}}",
        "\\boxed{4}",
    ],
    # after "x = 2\n\ny = 3\n\n": boxed only the first; leniently the first two (the
    # last number of "...y = 3\n\nno" is the prefix's 3)
    "x = 2\n\ny = 3\n\n": ["\\boxed{5}", "5", "6", "no"],
}


@pytest.mark.parametrize(
    ("answer_format", "labels"), [("boxed", (0.25, 0.25, 1.0)), ("lenient", (0.75, 0.5, 1.0))]
)
async def test_rollouts_are_graded_in_the_records_format_after_their_markers(
    answer_format: str, labels: tuple[float, ...]
) -> None:
    def continue_run(request: GenerateRequest) -> list[str]:
        prompt = request.prompt
        assert not isinstance(prompt, str)
        return ROLLOUTS_BY_FORMAT[prompt[-1].content]

    record = {"answer_format": answer_format, "thinking_markers": {"start": OPEN, "end": CLOSE}}
    fmt, thinking = records_reading([record | {"correct": True}, {"error": "timeout"}])
    assert (fmt, thinking) == (answer_format, ThinkingMarkers(OPEN, CLOSE))
    sample = Sample("p", "What is 2+3?", "5", BOXED_RUN, correct=True)
    params = SamplingParams(n=4)
    grade = rollout_grade(fmt, thinking)
    [labelled], _ = await label_samples(
        MockEngine(continue_run), [sample], params, soft=True, grade=grade
    )
    assert labelled.labels == labels
    if answer_format == "lenient":  # the default grade reads leniently
        [default], _ = await label_samples(MockEngine(continue_run), [sample], params, soft=True)
        assert default.labels == labels


def test_process_labels_refuse_records_graded_several_ways(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from training.cli import train_app

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p", "problem": "2+3=", "answer": "5"}) + "\n")
    results = tmp_path / "results.jsonl"
    records = [
        {
            "scaffold": "single",
            "id": "p",
            "sample": 0,
            "response": BOXED_RUN,
            "correct": True,
            "answer_format": "boxed",
        },
        {"scaffold": "single", "id": "p", "sample": 1, "response": "so 5", "correct": True},
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["verifier", "--model", "unused", "--results", str(results), "--problems"]
    args += [str(problems), "--out", str(tmp_path / "out"), "--process"]
    args += ["--engine", "http://127.0.0.1:9/v1", "--no-progress"]
    result = CliRunner().invoke(train_app, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "read their answers several ways (1 boxed after '</think>', 1 lenient" in said
    assert not (tmp_path / "out").exists()
