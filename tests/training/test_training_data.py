"""The dataset builders produce the documented rows from MockEngine traces."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import TRACE_SCHEMA, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.problem import Problem
from scaffolds.spec.registry import get_prompt_set
from scaffolds.strategies import GSR, RC, RSA, Abstraction, SelfRefine, Strategy
from training.data import Row, build_rows, mix_rows, right_solutions, sft_columns
from training.traces import TraceRecord

PROBLEM = "What is 3+4?"
DEFAULT = get_prompt_set("default")


def handler(request: GenerateRequest) -> str:
    """A scripted model: plain solves say 8 (wrong); every scaffold step repairs it."""
    p = request.prompt_text()
    if "### Candidate solutions" in p:
        return "Merged them: \\boxed{7}"
    if "### Attempts to combine" in p:
        return "Combined: \\boxed{7}"
    if "### Existing summary" in p:
        return "I added 3 and 4."
    if "### Summary of an earlier attempt" in p:
        return "Going on from the summary: \\boxed{7}"
    if "### Proposed solution" in p:
        shown = p.split("### Proposed solution")[1]
        return "fine\nVERDICT: CORRECT" if "{7}" in shown else "wrong sum\nVERDICT: INCORRECT"
    if "### Feedback on it" in p:
        return "Fixed: \\boxed{7}"
    if "Do not solve" in p:
        return "Add the ones digits first."
    if "### Cheat sheet" in p:
        return "\\boxed{7}"
    return "\\boxed{8}"


def record_of(
    strategy: Strategy,
    *,
    chat: bool = False,
    n: int = 1,
    history: tuple[Message, ...] = (),
    prompts: str = "default",
    answer: str | None = "7",
    engine: MockEngine | None = None,
) -> TraceRecord:
    if chat:
        problem = Problem.from_messages((*history, Message("user", PROBLEM)))
    else:
        problem = Problem.from_text(PROBLEM)
    run = run_scaffold(
        strategy,
        problem,
        engine or MockEngine(handler),
        RunSettings(n=n, chat=chat, prompts=prompts),
    )
    events = tuple(asyncio.run(run).events)
    return TraceRecord(
        "p1", PROBLEM, answer, events, chat=chat, prompt_set=prompts, history=history
    )


def gsr_rows(record: TraceRecord, keep: str = "all") -> list[Row]:
    return build_rows(record, kinds=["gsr_refine"], gsr_keep=keep)


def direct_rows(record: TraceRecord) -> list[Row]:
    return build_rows(record, kinds=["direct"])


def rc_rows(record: TraceRecord, summaries: str = "next_correct") -> list[Row]:
    return build_rows(record, kinds=["rc_reasoning", "rc_summary"], rc_summaries=summaries)


def started(record: TraceRecord, step_id: str) -> StepStarted:
    return next(e for e in record.events if isinstance(e, StepStarted) and e.step_id == step_id)


def test_gsr_rows_take_the_trace_prompt_and_match_the_template() -> None:
    record = record_of(GSR(n=3))
    [row] = gsr_rows(record)
    assert row["kind"] == "gsr_refine"
    assert row["completion"] == "Merged them: \\boxed{7}"
    assert row["candidates_correct"] == 0 and row["num_candidates"] == 3  # all wrong, kept
    assert row["prompt"] == started(record, row["step_id"]).prompt
    rendered = DEFAULT.template("gsr_refine").render(
        problem=PROBLEM, candidates=DEFAULT.candidates(["\\boxed{8}"] * 3), count="3"
    )
    assert row["prompt"] == rendered
    assert {k: row[k] for k in ("id", "answer", "sample", "correct", "prompt_set")} == {
        "id": "p1",
        "answer": "7",
        "sample": 0,
        "correct": True,
        "prompt_set": "default",
    }


def test_gsr_keep_filters_on_candidates() -> None:
    record = record_of(GSR(n=2))
    assert len(gsr_rows(record, keep="all_wrong")) == 1
    assert gsr_rows(record, keep="some_right") == []


def test_gsr_drops_wrong_refinements() -> None:
    engine = MockEngine(lambda r: "\\boxed{8}")
    assert gsr_rows(record_of(GSR(n=2), engine=engine)) == []


def test_direct_rows_and_the_gsr_mix() -> None:
    engine = MockEngine(
        lambda r: "Merged: \\boxed{7}" if "Candidate" in r.prompt_text() else ["\\boxed{7}", "9"]
    )
    record = record_of(GSR(n=2), engine=engine)
    direct = direct_rows(record)
    assert [(r["prompt"], r["completion"], r["sample"]) for r in direct] == [
        (PROBLEM, "\\boxed{7}", 0)
    ]
    [refine] = gsr_rows(record)
    assert refine["candidates_correct"] == 1
    mixed = mix_rows([refine] * 6, direct * 5, 0.25, seed=1)
    assert len(mixed) == 8 and sum(r["kind"] == "direct" for r in mixed) == 2
    assert sft_columns(mixed)[0].keys() == {"prompt", "completion"}
    with pytest.raises(ValueError):
        mix_rows([refine], direct, 1.0)


def test_chat_rows_are_conversational_with_history() -> None:
    history = (Message("system", "Be brief."),)
    record = record_of(GSR(n=2), chat=True, history=history)
    [row] = gsr_rows(record)
    text = DEFAULT.template("gsr_refine").render(
        problem=PROBLEM, candidates=DEFAULT.candidates(["\\boxed{8}"] * 2), count="2"
    )
    assert row["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": text},
    ]
    assert row["completion"] == [{"role": "assistant", "content": "Merged them: \\boxed{7}"}]
    assert started(record, row["step_id"]).prompt == "Be brief.\n" + text


def test_rc_rows_reasoning_and_summaries() -> None:
    record = record_of(RC(steps=3))
    rows = rc_rows(record)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("rc_reasoning") == 2  # the first chunk (8) is wrong
    assert kinds.count("rc_summary") == 2
    for row in rows:
        assert row["prompt"] == started(record, row["step_id"]).prompt
    reasoning = next(r for r in rows if r["kind"] == "rc_reasoning")
    assert reasoning["prompt"] == DEFAULT.template("rc_reasoning_continue").render(
        problem=PROBLEM, summary="I added 3 and 4."
    )
    assert reasoning["has_summary"] is True
    summary = next(r for r in rows if r["kind"] == "rc_summary")
    assert summary["prompt"] == DEFAULT.template("rc_summary").render(
        problem=PROBLEM, summary=DEFAULT.text("rc_no_summary"), attempt="\\boxed{8}"
    )
    assert summary["completion"] == "I added 3 and 4." and summary["correct"] is True


def test_rc_summaries_filter_on_the_next_chunk() -> None:
    engine = MockEngine(
        lambda r: "my summary" if "Existing summary" in r.prompt_text() else "\\boxed{8}"
    )
    record = record_of(RC(steps=2), engine=engine)
    assert rc_rows(record) == []
    [row] = rc_rows(record, summaries="all")
    assert row["kind"] == "rc_summary" and row["correct"] is False


def test_self_refine_rows() -> None:
    record = record_of(SelfRefine(max_rounds=2))
    rows = build_rows(record, kinds=["self_refine_feedback", "self_refine_refine"])
    assert [r["kind"] for r in rows] == [
        "self_refine_feedback",  # said INCORRECT about 8: right
        "self_refine_refine",  # 8 -> 7
        "self_refine_feedback",  # said CORRECT about 7: right
    ]
    assert rows[0]["solution_correct"] is False and rows[2]["solution_correct"] is True
    assert rows[1]["previous_correct"] is False
    assert rows[1]["prompt"] == DEFAULT.template("self_refine_refine").render(
        problem=PROBLEM, solution="\\boxed{8}", feedback="wrong sum\nVERDICT: INCORRECT"
    )


def test_self_refine_feedback_with_a_wrong_verdict_is_dropped() -> None:
    engine = MockEngine(
        lambda r: "VERDICT: CORRECT" if "Proposed" in r.prompt_text() else "\\boxed{8}"
    )
    assert build_rows(record_of(SelfRefine(max_rounds=1), engine=engine)) == []


def test_abstraction_rows() -> None:
    record = record_of(Abstraction(m=2, n=2))
    rows = build_rows(record)
    propose = [r for r in rows if r["kind"] == "abstraction_propose"]
    solve = [r for r in rows if r["kind"] == "abstraction_solve"]
    assert len(propose) == 2 and all(r["accuracy"] == 1.0 for r in propose)
    assert propose[0]["prompt"] == DEFAULT.template("abstraction_propose").render(problem=PROBLEM)
    assert len(solve) == 4
    assert solve[0]["prompt"] == DEFAULT.template("abstraction_solve").render(
        abstraction="Add the ones digits first.", problem=PROBLEM
    )


def test_composed_scaffold_yields_both_kinds_and_survives_json() -> None:
    record = record_of(GSR(n=2, solver=RC(steps=2)), n=2)
    rows = build_rows(record)
    assert {r["kind"] for r in rows} == {"gsr_refine", "rc_reasoning", "rc_summary"}
    assert all(r["candidates_correct"] == 2 for r in rows if r["kind"] == "gsr_refine")
    again = TraceRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert build_rows(again) == rows


def test_compact_prompt_set_rows() -> None:
    engine = MockEngine(lambda r: "7" if "[" in r.prompt_text() else "8")
    record = record_of(GSR(n=2), prompts="compact", engine=engine)
    [row] = build_rows(record)
    assert row["prompt"] == "What is 3+4?[8,8]" and row["completion"] == "7"


def test_rows_without_a_gold_answer_are_not_kept() -> None:
    assert build_rows(record_of(GSR(n=2), answer=None)) == []
    with pytest.raises(ValueError, match="unknown row kinds"):
        build_rows(record_of(GSR(n=2)), kinds=["nope"])


def test_steps_record_their_provenance() -> None:
    history = (Message("system", "Be brief."),)
    record = record_of(GSR(n=2), chat=True, history=history)
    [candidates, refine] = [started(record, s.step_id) for s in record.steps()]
    assert candidates.template is None and candidates.fields == {"problem": PROBLEM}
    assert refine.template == "gsr_refine"
    assert refine.fields == {"problem": PROBLEM, "candidates": ["\\boxed{8}"] * 2, "count": "2"}
    assert refine.parent_step == candidates.step_id and refine.sample is None
    assert refine.messages is not None and refine.messages[0] == history[0].to_openai()
    assert refine.messages[-1]["content"].startswith("### Problem\nWhat is 3+4?")


def test_saved_traces_carry_their_schema_version() -> None:
    record = record_of(GSR(n=2))
    saved = json.loads(json.dumps(record.to_json()))
    assert saved["schema"] == TRACE_SCHEMA
    assert TraceRecord.from_json(saved) == record
    old = {**saved, "schema": 1}
    del old["schema"]
    loaded = TraceRecord.from_json(old)
    assert loaded.schema == 1 and len(loaded.steps()) == 2
    with pytest.raises(ValueError, match="schema version 1, which records no step provenance"):
        build_rows(loaded)
    with pytest.raises(ValueError, match="schema version 7; this Ponder reads versions 1 to"):
        TraceRecord.from_json({**saved, "schema": 7})


def test_rsa_aggregation_rows_record_the_members_and_the_round() -> None:
    record = record_of(RSA(n=3, k=2, rounds=2))
    rows = build_rows(record, kinds=["rsa_aggregate"])
    assert len(rows) == 6 and all(r["kind"] == "rsa_aggregate" for r in rows)
    assert [r["round"] for r in rows] == [1, 1, 1, 2, 2, 2]
    assert [r["candidates_correct"] for r in rows] == [0, 0, 0, 2, 2, 2]
    assert all(r["num_candidates"] == 2 and r["completion"] == "Combined: \\boxed{7}" for r in rows)
    first = rows[0]
    step = started(record, first["step_id"])
    assert (
        first["prompt"]
        == step.prompt
        == DEFAULT.template("rsa_aggregate").render(
            problem=PROBLEM, candidates=DEFAULT.candidates(["\\boxed{8}"] * 2), count="2"
        )
    )
    assert step.fields is not None and len(step.fields["members"]) == 2
    again = TraceRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert build_rows(again, kinds=["rsa_aggregate"]) == rows


def test_rsa_wrong_aggregations_are_dropped_and_compact_rows_render() -> None:
    wrong = MockEngine(lambda r: "\\boxed{8}")
    assert build_rows(record_of(RSA(n=2, k=2, rounds=1), engine=wrong)) == []
    engine = MockEngine(lambda r: "7" if "(" in r.prompt_text() else "8")
    record = record_of(RSA(n=2, k=2, rounds=1), prompts="compact", engine=engine)
    rows = build_rows(record, kinds=["rsa_aggregate"])
    assert [r["prompt"] for r in rows] == ["What is 3+4?(8,8)"] * 2
    assert [r["completion"] for r in rows] == ["7", "7"]


def test_adaptive_notes_round_trip_through_saved_records() -> None:
    from scaffolds.core.trace import StepNote
    from scaffolds.strategies import Adaptive

    record = record_of(Adaptive(max_k=8, wave=4))
    again = TraceRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record
    [note] = [e for e in again.events if isinstance(e, StepNote)]
    assert note.values["probability"] == 31 / 32 and note.values["reason"] == "settled"
    assert build_rows(again, kinds=["direct"]) == []  # all 8s: wrong, no rows


def test_gsr_borrow_targets_a_right_candidate_the_refine_read() -> None:
    engine = MockEngine(
        lambda r: "Merged: \\boxed{8}" if "Candidate" in r.prompt_text() else ["9", "\\boxed{7}"]
    )
    record = record_of(GSR(n=2), engine=engine)
    assert gsr_rows(record) == []  # the refinement is wrong: no row without borrowing
    [row] = build_rows(record, kinds=["gsr_refine"], gsr_borrow=["elsewhere: \\boxed{7}"])
    assert (row["target"], row["completion"], row["candidates_correct"]) == (
        "candidate",
        "\\boxed{7}",
        1,
    )
    assert row["prompt"] == started(record, row["step_id"]).prompt  # the prompt as sent
    assert "completion_text" not in row


def test_gsr_borrow_solves_afresh_when_every_candidate_is_wrong() -> None:
    record = record_of(GSR(n=2), engine=MockEngine(lambda r: "\\boxed{8}"), chat=True)
    assert build_rows(record, kinds=["gsr_refine"], gsr_borrow=[]) == []
    [row] = build_rows(record, kinds=["gsr_refine"], gsr_borrow=["a: \\boxed{7}", "b"])
    assert row["target"] == "borrowed" and row["candidates_correct"] == 0
    assert row["completion"] == [{"role": "assistant", "content": "a: \\boxed{7}"}]


def test_right_solutions_pool_each_problems_right_candidates() -> None:
    right = record_of(
        GSR(n=2),
        engine=MockEngine(lambda r: "8" if "Candidate" in r.prompt_text() else ["\\boxed{7}", "9"]),
    )
    wrong = record_of(GSR(n=2), engine=MockEngine(lambda r: "\\boxed{8}"), chat=True)
    assert right_solutions([right, wrong]) == {"p1": ["\\boxed{7}"]}
    assert right_solutions([wrong]) == {}


def test_make_data_lends_other_samples_solutions(tmp_path: Path) -> None:
    from scaffolds.evaluation.problems import ProblemRow
    from training.pipeline import make_data
    from training.runs import RunDir

    calls = iter(range(1000))

    def model(request: GenerateRequest) -> str | list[str]:
        if "[" in request.prompt_text():
            return "8"  # every refinement is wrong
        return ["7", "9"] if next(calls) == 0 else ["9", "9"]  # only the first sample is right

    async def data(borrow: bool) -> tuple[dict[str, int], list[Row]]:
        run = RunDir(tmp_path / str(borrow))
        report = await make_data(
            run,
            [ProblemRow("p", "3+4=", "7")],
            MockEngine(model),
            scaffold="gsr(n=2)",
            samples=2,
            prompt_set="compact",
            concurrency=1,
            progress=False,
            inline_grading=True,
            gsr_borrow=borrow,
        )
        path = report.paths.get("gsr_refine")
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path else []
        return report.counts, rows

    assert asyncio.run(data(False))[0] == {"direct": 1}
    calls = iter(range(1000))
    counts, rows = asyncio.run(data(True))
    assert counts == {"direct": 1, "gsr_refine": 2}
    assert sorted((r["target"], r["completion"]) for r in rows) == [
        ("borrowed", "7"),
        ("candidate", "7"),
    ]
