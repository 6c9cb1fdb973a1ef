"""``ponder eval`` asks the server about the model once (``GET /v1/models``) and reads
from its ``ponder`` card the concurrency, the answer format and the model's own thinking
markers, which it grades after (a model whose thinking comes back inside ``content``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clients.eval.cli import eval_app
from clients.eval.resume import ResumeConflictError, check_resume
from scaffolds.evaluation.answers import ThinkingMarkers
from scaffolds.evaluation.grading import ExactGrader, MathGrader
from scaffolds.evaluation.problems import ProblemRow
from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.fake_engine.tokens import prompt_text
from testing.threaded import serving_in_thread
from tests.evalkit import MODEL, read_jsonl

OPEN, CLOSE = "<|begin_of_thought|>", "<|end_of_thought|>"
THOUGHT = ThinkingMarkers(OPEN, CLOSE)
TEXTS = (
    rf"{OPEN}Maybe \boxed{{578}}?{CLOSE}So \boxed{{579}}.",  # 579 either way
    rf"{OPEN}It is \boxed{{579}}.{CLOSE}That is the sum.",  # boxed only in the thinking
    rf"{OPEN}It is \boxed{{579}}, I think",  # the thinking never closed
)
"""Three answers to 123+456=. Read boxed after the model's markers: 579, none, none.
Read after ``<think>``/``</think>`` (markers unknown, so all is final text): 579 thrice."""
UNCLOSED_580 = rf"{OPEN}It is \boxed{{580}}, I think"
"""No answer after the model's markers; 580 to a reader who knows only ``<think>``."""

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def counting(app: App, seen: list[str]) -> App:
    """``app``, noting each HTTP request's method and path in ``seen``."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(f"{scope['method']} {scope['path']}")
        await app(scope, receive, send)

    return wrapped


def test_one_models_call_gives_concurrency_format_and_thinking_markers(tmp_path: Path) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"id": "p0", "problem": "123+456=", "answer": "579"}) + "\n")
    calls: Counter[str] = Counter()

    def respond(body: dict[str, Any]) -> list[str]:
        if int(body.get("n") or 1) > 1:  # the server's vote: 579 once, else no answer
            return [UNCLOSED_580, UNCLOSED_580, TEXTS[0]]
        calls[prompt_text(body)] += 1
        return [TEXTS[(calls[prompt_text(body)] - 1) % 3]]

    seen: list[str] = []
    cli = CliRunner()
    with running_fake_engine(FakeEngineConfig(respond=respond)) as engine:
        settings = Settings(
            model=MODEL, engines=(engine.base_url,), thinking_start=OPEN, thinking_end=CLOSE
        )
        with serving_in_thread(counting(create_app(settings), seen)) as url:
            args = ["--base-url", f"{url}/v1", "--model", MODEL, "--dataset", str(data)]
            args += ["-s", "single", "-s", "majority(k=3)", "--samples", "3"]
            args += ["--grade-workers", "1", "--no-progress"]
            ran = cli.invoke(eval_app, [*args, "--out", str(tmp_path / "run")])
            asked = Counter(seen)
            again = cli.invoke(eval_app, [*args, "--out", str(tmp_path / "run")])  # resumes
    assert ran.exit_code == 0, ran.output
    assert asked["GET /v1/models"] == 1 and asked["POST /v1/chat/completions"] == 6
    said = " ".join(ran.output.split())
    assert f"concurrency 1024 (what {url}/v1 runs at once" in said  # the card's run slots
    assert "answers are read boxed (as the server reads this model's" in said
    assert f"answers are read after '{CLOSE}', the model's end of thinking" in said
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    single = [r for r in records if r["scaffold"] == "single"]
    assert sorted(str(r["extracted"]) for r in single) == ["579", "None", "None"]
    assert {json.dumps(r["thinking_markers"]) for r in records} == {
        json.dumps({"start": OPEN, "end": CLOSE})
    }
    assert sum(r["correct"] for r in single) == 1  # graded after the model's markers too
    # the server's votes read after --thinking-start too: the unclosed 580s cast none
    assert [r["correct"] for r in records if r["scaffold"] != "single"] == [True] * 3
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["thinking_markers"] == {"start": OPEN, "end": CLOSE}
    assert f"`{OPEN}` … `{CLOSE}`" in (tmp_path / "run" / "report.md").read_text()
    assert again.exit_code == 0, again.output
    assert Counter(seen)["GET /v1/models"] == 2  # one per eval start


def test_a_resume_after_other_thinking_markers_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    graded = {"answer_format": "boxed", "thinking_markers": THOUGHT.as_dict()}
    check_resume(path, "boxed", [graded], THOUGHT)
    with pytest.raises(ResumeConflictError, match="thinking markers changed") as caught:
        check_resume(path, "boxed", [graded, {"answer_format": "boxed"}], THOUGHT)
    assert "'<think>'...'</think>' (1 samples)" in str(caught.value)  # an older record


@pytest.mark.parametrize(
    ("text", "boxed", "lenient"),
    [
        (TEXTS[1], None, "579"),  # lenient: no number after the thinking, its box at last
        (rf"{OPEN}\boxed{{578}}? No.{CLOSE}So 579.", None, "579"),  # not the thinking's box
        (rf"{OPEN}Maybe \boxed{{578}}?{CLOSE}So \boxed{{579}}.", "579", "579"),
    ],
)
async def test_graders_read_after_the_thinking_markers_they_are_given(
    text: str, boxed: str | None, lenient: str | None
) -> None:
    problem = ProblemRow("p", "123+456=", "579")
    for fmt, answer in (("boxed", boxed), ("lenient", lenient)):
        graders = (
            MathGrader(inline=True, answer_format=fmt, thinking=THOUGHT),
            ExactGrader(answer_format=fmt, thinking=THOUGHT),
        )  # type: ignore[arg-type]
        for grader in graders:
            assert grader.read(text) == answer, (fmt, grader.name)
            assert (await grader.grade(problem, text)).correct is (answer == "579")
            await grader.aclose()
    # with the default markers the thinking's \boxed{578} is the lenient answer
    assert ExactGrader().read(rf"{OPEN}\boxed{{578}}? No.{CLOSE}So 579.") == "578"
