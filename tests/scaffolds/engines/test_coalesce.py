"""The request-scoped Coalescer: k concurrent runs' calls as one engine request.

Its engine here is a MockEngine that takes lists (each ``generate_batch`` recorded), so
these tests see exactly which calls were batched; tests/server/runs/test_prompt_lists.py
runs the same through Ponder over HTTP against an engine server that counts requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.coalesce import Coalescer
from scaffolds.engines.mock import Handler, MockEngine
from scaffolds.engines.protocol import GenerateRequest, GenerateResult, SamplingParams, Usage
from scaffolds.errors import EngineRejectedError
from scaffolds.problem import Problem
from scaffolds.strategies.single import Single


class ListEngine(MockEngine):
    """A MockEngine that takes lists: one recorded batch per ``generate_batch``."""

    takes_prompt_lists = True

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.batches: list[list[str]] = []
        self.batch_cancelled = 0

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.batches.append([r.prompt_text() for r in requests])
        try:
            results = [await self.generate(r) for r in requests]
        except asyncio.CancelledError:
            self.batch_cancelled += 1
            raise
        # One engine request: its one call counted on the first prompt's result.
        return [
            GenerateResult(r.completions, Usage(r.usage.prompt_tokens, r.usage.completion_tokens))
            if i
            else r
            for i, r in enumerate(results)
        ]


def numbered(request: GenerateRequest) -> list[str]:
    return [f"{request.prompt_text()}#{i}" for i in range(request.params.n)]


def slowly(started: asyncio.Event, seconds: float) -> Handler:
    """``numbered``, after ``seconds``; ``started`` is set once a call is in flight."""

    async def handler(request: GenerateRequest) -> list[str]:
        started.set()
        await asyncio.sleep(seconds)
        return numbered(request)

    return handler


async def run_prompts(engine: ListEngine, prompts: Sequence[str], n: int = 1) -> list[list[str]]:
    coalescer = Coalescer(engine, len(prompts))
    try:
        results = await asyncio.gather(
            *(
                coalescer.member(
                    run_scaffold(
                        Single(), Problem.from_text(p), coalescer, RunSettings(n=n, chat=False)
                    )
                )
                for p in prompts
            )
        )
    finally:
        await coalescer.aclose()
    usage = sum((r.usage for r in results), Usage())
    assert usage.calls == 1
    return [[s.text for s in r.solutions] for r in results]


async def test_k_runs_of_single_are_one_batch_with_each_runs_own_samples() -> None:
    engine = ListEngine(numbered)
    texts = await run_prompts(engine, ["a", "b", "c"], n=2)
    assert texts == [["a#0", "a#1"], ["b#0", "b#1"], ["c#0", "c#1"]]
    assert engine.batches == [["a", "b", "c"]]


async def test_calls_that_cannot_share_a_request_go_one_by_one() -> None:
    engine = ListEngine(numbered)
    coalescer = Coalescer(engine, 3)
    requests = [
        GenerateRequest("a"),
        GenerateRequest("b", SamplingParams(max_tokens=3)),
        GenerateRequest("c"),
    ]
    results = await asyncio.gather(*(coalescer.member(coalescer.generate(r)) for r in requests))
    assert [r.completions[0].text for r in results] == ["a#0", "b#0", "c#0"]
    assert engine.batches == [["a", "c"]]  # b went alone
    assert [r.prompt_text() for r in engine.requests] == ["a", "c", "b"]


async def test_a_run_that_ends_without_a_call_does_not_hold_the_others() -> None:
    engine = ListEngine(numbered)
    coalescer = Coalescer(engine, 3)

    async def no_call() -> None:
        await asyncio.sleep(0.01)

    out = await asyncio.gather(
        coalescer.member(coalescer.generate(GenerateRequest("a"))),
        coalescer.member(no_call()),
        coalescer.member(coalescer.generate(GenerateRequest("b"))),
    )
    assert engine.batches == [["a", "b"]] and out[1] is None


async def test_one_failed_request_fails_every_run_with_its_error() -> None:
    def refuse(request: GenerateRequest) -> str:
        raise EngineRejectedError("engine said no (HTTP 400)", status=400)

    engine = ListEngine(refuse)
    coalescer = Coalescer(engine, 2)
    outcomes = await asyncio.gather(
        *(coalescer.member(coalescer.generate(GenerateRequest(p))) for p in "ab"),
        return_exceptions=True,
    )
    assert [type(o) for o in outcomes] == [EngineRejectedError] * 2
    assert len(engine.batches) == 1


async def test_cancelling_every_run_cancels_the_request_in_flight() -> None:
    started = asyncio.Event()
    engine = ListEngine(slowly(started, 60))
    coalescer = Coalescer(engine, 2)
    runs = [
        asyncio.ensure_future(coalescer.member(coalescer.generate(GenerateRequest(p))))
        for p in "ab"
    ]
    await started.wait()
    for run in runs:
        run.cancel()
    await asyncio.wait(runs)
    await coalescer.aclose()
    assert engine.batch_cancelled == 1 and engine.in_flight == 0


async def test_a_run_that_stops_waiting_leaves_the_request_to_the_others() -> None:
    started = asyncio.Event()
    engine = ListEngine(slowly(started, 0.2))
    coalescer = Coalescer(engine, 2)
    a = asyncio.ensure_future(coalescer.member(coalescer.generate(GenerateRequest("a"))))
    b = asyncio.ensure_future(coalescer.member(coalescer.generate(GenerateRequest("b"))))
    await started.wait()
    a.cancel()
    result = await b
    assert result.completions[0].text == "b#0" and engine.batch_cancelled == 0
    with pytest.raises(asyncio.CancelledError):
        await a


async def test_a_cancelled_call_that_was_not_sent_yet_leaves_the_queue() -> None:
    engine = ListEngine(numbered)
    coalescer = Coalescer(engine, 3)
    a = asyncio.ensure_future(coalescer.member(coalescer.generate(GenerateRequest("a"))))
    b = asyncio.ensure_future(coalescer.member(coalescer.generate(GenerateRequest("b"))))
    await asyncio.sleep(0.01)
    assert not engine.batches  # the third run has not called yet
    a.cancel()
    third = await coalescer.member(coalescer.generate(GenerateRequest("c")))
    assert third.completions[0].text == "c#0" and (await b).completions[0].text == "b#0"
    assert engine.batches == [["b", "c"]]
