"""The runner against a real Ponder server on loopback (uvicorn fronting the fake engine)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.eval.pipeline import evaluate
from clients.eval.runner import EvalConfig, run_eval
from scaffolds.evaluation.grading import MathGrader
from scaffolds.evaluation.problems import ProblemRow, load_problems
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.evalkit import MODEL, adder, keys, ponder_over_fake, read_jsonl, write_problems


@pytest.fixture(scope="module")
def ponder() -> Iterator[tuple[str, FakeEngineHandle]]:
    with ponder_over_fake(engine_max_retries=0) as pair:
        yield pair


@pytest.fixture
def problems(tmp_path: Path) -> list[ProblemRow]:
    return load_problems(str(write_problems(tmp_path / "add.jsonl", 6))).problems


def config(url: str, out: Path, scaffolds: list[str], **kw: Any) -> EvalConfig:
    fields: dict[str, Any] = {"samples": 2, "seed": 0, "concurrency": 4, "max_retries": 0}
    return EvalConfig(url, MODEL, scaffolds, out, **(fields | kw))


def grader() -> MathGrader:
    return MathGrader(inline=True, answer_format="boxed")  # EvalConfig's default


async def test_cancel_mid_run_then_resume_loses_nothing_and_duplicates_nothing(
    ponder: tuple[str, FakeEngineHandle], problems: list[ProblemRow], tmp_path: Path
) -> None:
    url, _ = ponder
    cfg = config(url, tmp_path / "run", ["single", "gsr(n=2)"], samples=3)
    expected = len(problems) * 3 * 2
    landed: list[dict[str, Any]] = []
    task: asyncio.Task[Any] | None = None

    def stop_after_seven(record: dict[str, Any]) -> None:
        landed.append(record)
        if len(landed) == 7 and task is not None:
            task.cancel()  # what Ctrl-C does to asyncio.run's main task

    task = asyncio.create_task(
        run_eval(cfg, problems, grader(), progress=False, on_record=stop_after_seven)
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    first = read_jsonl(cfg.results_path)
    assert 7 <= len(first) < expected
    assert len(set(keys(first))) == len(first)
    assert keys(landed) == keys(first)  # every record reported was already on disk

    with cfg.results_path.open("a") as handle:  # a kill tore the last line mid-write
        handle.write('{"scaffold": "single", "id": "add-0-0000')
    outcome = await run_eval(cfg, problems, grader(), progress=False)
    assert outcome.already_done == len(first)
    assert outcome.finished == expected - len(first)
    final = read_jsonl(cfg.results_path)
    assert len(final) == expected and len(set(keys(final))) == expected
    assert final[: len(first)] == first  # earlier records untouched

    again = await run_eval(cfg, problems, grader(), progress=False)
    assert (again.finished, again.pending) == (0, 0)
    assert read_jsonl(cfg.results_path) == final


async def test_failed_requests_are_recorded_counted_and_retried(
    ponder: tuple[str, FakeEngineHandle], problems: list[ProblemRow], tmp_path: Path
) -> None:
    url, engine = ponder
    cfg = config(url, tmp_path / "run", ["single"], concurrency=1)
    engine.config.fail_next(400, times=3)
    try:
        outcome, report = await evaluate(cfg, problems, grader(), progress=False)
    finally:
        engine.config.failures.clear()
    assert (outcome.errors, outcome.finished) == (3, len(problems) * 2 - 3)
    records = read_jsonl(cfg.results_path)
    failed = [r for r in records if r.get("error")]
    assert len(failed) == 3 and all("Error" in r["error"] for r in failed)
    assert report["scaffolds"][0]["errors"] == 3
    assert report["scaffolds"][0]["samples"] == len(problems) * 2 - 3

    outcome, report = await evaluate(cfg, problems, grader(), progress=False)
    assert (outcome.finished, outcome.errors) == (3, 0)
    records = read_jsonl(cfg.results_path)
    assert len(records) == len(problems) * 2 == len(set(keys(records)))
    assert not any(r.get("error") for r in records)
    assert report["scaffolds"][0]["errors"] == 0


async def test_records_carry_usage_grades_and_rc_steps(
    ponder: tuple[str, FakeEngineHandle], problems: list[ProblemRow], tmp_path: Path
) -> None:
    url, _ = ponder
    rc = "rc(steps=3, reasoning_tokens=40)"
    cfg = config(url, tmp_path / "run", ["single", rc], samples=2)
    _, report = await evaluate(cfg, problems, grader(), progress=False, dataset="add")
    records = read_jsonl(cfg.results_path)
    single = [r for r in records if r["scaffold"] == "single"]
    assert all(
        r["usage"]["engine_calls"] == 1 and r["usage"]["completion_tokens"] > 0 for r in single
    )
    for r in records:
        assert r["correct"] == (r["extracted"] == r["reference"])
        assert r["finish_reason"] == "stop" and r["cut_short"] is False
        assert r["latency_s"] > 0 and "trace" not in r  # no --trace
    rc_records = [r for r in records if r["scaffold"] == rc]
    assert all(r["usage"]["engine_calls"] == 5 for r in rc_records)
    for r in rc_records:
        steps = r["steps"]
        assert len(steps) == 3
        tokens = [s["completion_tokens"] for s in steps]
        assert tokens == sorted(tokens) and tokens[-1] <= r["usage"]["completion_tokens"]
        assert steps[-1]["answer"] == r["extracted"]
        assert all(s["correct"] == (s["answer"] == r["reference"]) for s in steps)
    by_spec = {s["scaffold"]: s for s in report["scaffolds"]}
    curve = by_spec[rc]["rc_steps"]
    assert [p["step"] for p in curve] == [1, 2, 3]
    assert curve[-1]["accuracy"] == pytest.approx(by_spec[rc]["accuracy"])
    assert by_spec["single"]["rc_steps"] is None
    for name in ("accuracy_vs_tokens.png", "rc_steps.png"):
        png = (cfg.out_dir / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    saved = json.loads((cfg.out_dir / "report.json").read_text())
    assert saved["scaffolds"][1]["rc_steps"] == curve
    assert saved["files"]["plots"] == ["accuracy_vs_tokens.png", "rc_steps.png"]


async def test_trace_on_request(
    ponder: tuple[str, FakeEngineHandle], problems: list[ProblemRow], tmp_path: Path
) -> None:
    url, engine = ponder
    cfg = config(url, tmp_path / "run", ["gsr(n=2)"], samples=1, trace=True)
    await run_eval(cfg, problems[:2], grader(), progress=False)
    assert engine.state.requests[-1].path.endswith("/chat/completions")
    for record in read_jsonl(cfg.results_path):
        started = [e for e in record["trace"] if e["type"] == "step_started"]
        assert {e["kind"] for e in started} >= {"refine"}
        assert record["trace"][-1]["type"] in ("run_finished", "step_finished")


async def test_rsa_population_accuracy_from_the_reference_answer(
    ponder: tuple[str, FakeEngineHandle], problems: list[ProblemRow], tmp_path: Path
) -> None:
    url, engine = ponder
    cfg = config(url, tmp_path / "run", ["rsa(n=2, k=2, rounds=1)"], samples=1, trace=True)
    before = len(engine.state.requests)
    await run_eval(cfg, problems[:2], grader(), progress=False)
    bodies = [r.body for r in list(engine.state.requests)[before:]]
    assert bodies and all("reference" not in body for body in bodies)  # Ponder's own field
    for record in read_jsonl(cfg.results_path):
        notes = [e for e in record["trace"] if e.get("kind") == "population"]
        assert [note["values"]["round"] for note in notes] == [0, 1]
        for note in notes:
            answers, correct = note["values"]["answers"], note["values"]["correct"]
            assert correct == [a == record["reference"] for a in answers]
            assert note["values"]["accuracy"] == sum(correct) / 2


async def test_plain_openai_url_without_ponder_fields(tmp_path: Path) -> None:
    with running_fake_engine(FakeEngineConfig(respond=adder)) as engine:
        path = write_problems(tmp_path / "add.jsonl", 3)
        problems = load_problems(str(path)).problems
        cfg = config(engine.base_url, tmp_path / "run", ["none"], temperature=0.5)
        outcome = await run_eval(cfg, problems, grader(), progress=False)
        bodies = [r.body for r in engine.state.requests]
    assert outcome.finished == 6
    assert all("scaffold" not in b and "return_trace" not in b for b in bodies)
    assert {b["seed"] for b in bodies} == {0, 1} and bodies[0]["temperature"] == 0.5
    records = read_jsonl(cfg.results_path)
    assert all(r["usage"]["engine_calls"] == 1 for r in records)
    assert all(r["correct"] is not None for r in records)


async def test_batch_api_file_through_ponder(
    ponder: tuple[str, FakeEngineHandle], tmp_path: Path
) -> None:
    url, _ = ponder
    rows = [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "someone-elses-model",
                "messages": [{"role": "user", "content": f"{a}+{b}="}],
                "max_tokens": 64,
            },
            "answer": str(a + b),
        }
        for i, (a, b) in enumerate([(123, 456), (700, 300)])
    ]
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = load_problems(str(path)).problems
    cfg = config(url, tmp_path / "run", ["single"], samples=1)
    await run_eval(cfg, problems, grader(), progress=False)
    records = read_jsonl(cfg.results_path)
    assert sorted(r["id"] for r in records) == ["req-0", "req-1"]
    assert all(r["model"] == MODEL and r["correct"] is not None for r in records)
