"""Training rows from a thinking model's runs: a helper step whose answer came back
empty (cut mid-thought, or nothing at all) passed its thinking or a placeholder on to the
next prompt; it makes no row, since the model never wrote that text as its answer."""

from __future__ import annotations

import asyncio
import json

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import Routing, Thinking
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.problem import Problem
from scaffolds.spec.build import build_strategy
from tests.scaffolds.scripted import step_of
from tests.scaffolds.thinking_engine import THOUGHT, ThinkingModel
from training.data import build_rows
from training.traces import TraceRecord

PROBLEM = "What is 3+4?"
RC = "rc(steps=2, reasoning_tokens=500, summary_tokens=300)"


def says(request: GenerateRequest) -> str:
    if step_of(request) == "summary":
        return "I added 3 and 4 and got 7."
    return "The sum is \\boxed{7}"


def record_of(engine: MockEngine, routing: Routing | None = None) -> TraceRecord:
    problem = Problem.from_messages((Message("user", PROBLEM),))
    settings = RunSettings(routing=routing or Routing())
    run = run_scaffold(build_strategy(RC), problem, engine, settings)
    events = tuple(asyncio.run(run).events)
    return TraceRecord("p1", PROBLEM, "7", events, chat=True)


def rows_by_kind(record: TraceRecord) -> dict[str, list[dict]]:
    rows = build_rows(record, kinds=["rc_reasoning", "rc_summary"], rc_summaries="all")
    return {kind: [r for r in rows if r["kind"] == kind] for kind in ("rc_reasoning", "rc_summary")}


def test_a_summary_cut_mid_thought_makes_no_row() -> None:
    record = record_of(MockEngine(ThinkingModel(says, think=400)))
    rows = rows_by_kind(record)
    assert rows["rc_summary"] == []
    # The chunk that read the thinking in its summary slot is still a row, prompt as sent.
    [first, second] = rows["rc_reasoning"]
    assert THOUGHT in second["prompt"][-1]["content"]
    assert THOUGHT not in first["prompt"][-1]["content"]

    # A saved record keeps the substitution, so its rows are the same; so does one saved
    # before the note carried the text passed on (it named the samples only).
    saved = record.to_json()
    assert rows_by_kind(TraceRecord.from_json(json.loads(json.dumps(saved)))) == rows
    for event in saved["events"]:
        if event["type"] == "step_note" and event["kind"] == "helper_text":
            del event["values"]["texts"]
    assert rows_by_kind(TraceRecord.from_json(saved)) == rows

    # With the model's thinking off, the summary is content and makes its row.
    record = record_of(MockEngine(ThinkingModel(says, think=400)), Routing(Thinking.of("qwen3")))
    [summary] = rows_by_kind(record)["rc_summary"]
    assert summary["completion"] == [{"role": "assistant", "content": "I added 3 and 4 and got 7."}]


def test_a_summary_that_wrote_nothing_makes_no_row() -> None:
    engine = MockEngine(lambda r: "" if step_of(r) == "summary" else "\\boxed{7}")
    rows = rows_by_kind(record_of(engine))
    assert rows["rc_summary"] == [] and len(rows["rc_reasoning"]) == 2
    assert all(row["completion"][0]["content"] for row in rows["rc_reasoning"])
