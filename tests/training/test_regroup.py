"""Refine rows regrouped from plain samples are the prompts gsr sends, with right targets."""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.problem import Problem
from scaffolds.strategies import GSR, Majority, Strategy
from training.data import build_rows
from training.regroup import regrouped_refine_rows
from training.traces import TraceRecord

QUESTION = "What is 3+4?"


def record_of(strategy: Strategy, engine: MockEngine, *, chat: bool, prompts: str) -> TraceRecord:
    history = (Message("system", "Be brief."),) if chat else ()
    problem = (
        Problem.from_messages((*history, Message("user", QUESTION)))
        if chat
        else Problem.from_text(QUESTION)
    )
    run = asyncio.run(
        run_scaffold(strategy, problem, engine, RunSettings(chat=chat, prompts=prompts))
    )
    return TraceRecord(
        "p", QUESTION, "7", tuple(run.events), chat=chat, prompt_set=prompts, history=history
    )


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("prompts", ["default", "compact"])
def test_regrouped_prompts_are_the_prompts_gsr_sends(chat: bool, prompts: str) -> None:
    draws = iter(range(100))

    def model(request: GenerateRequest) -> str | list[str]:
        if request.params.n == 1:
            return "refined \\boxed{7}"
        return [f"try {next(draws)}: \\boxed{{{next(draws) % 9}}}" for _ in range(request.params.n)]

    record = record_of(GSR(n=3), MockEngine(model), chat=chat, prompts=prompts)
    [traced] = [row["prompt"] for row in build_rows(record, kinds=["gsr_refine"])]
    rows = regrouped_refine_rows([record], grade=lambda gold, text: True, n=3)
    assert [row["prompt"] for row in rows] == [traced]
    assert rows[0]["template"] == "gsr_refine"


def test_targets_are_a_right_candidate_or_a_borrowed_one() -> None:
    samples = [
        "\\boxed{8}",
        "\\boxed{9}",
        "\\boxed{8}",
        "\\boxed{7} first",
        "\\boxed{6}",
        "\\boxed{5}",
        "\\boxed{7} second",
    ]
    record = record_of(Majority(k=7), MockEngine(lambda r: samples), chat=True, prompts="default")
    rows = regrouped_refine_rows([record], n=2)  # groups (8, 9) (8, 7) (6, 5); 7 is left over
    assert [
        (r["target"], r["completion"][0]["content"], r["candidates_correct"]) for r in rows
    ] == [
        ("borrowed", "\\boxed{7} first", 0),
        ("candidate", "\\boxed{7} first", 1),
        ("borrowed", "\\boxed{7} second", 0),
    ]
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Be brief."}


def test_problems_without_a_right_sample_make_no_rows() -> None:
    record = record_of(
        Majority(k=4), MockEngine(lambda r: "\\boxed{8}"), chat=False, prompts="default"
    )
    assert regrouped_refine_rows([record], n=2) == []
