"""``auto``'s lowest tier refines or asks the verifier (``hard=``), and its probe may be
the verifier's mean score (``probe="verifier"``): on MockEngine with a scripted verifier,
hand-worked tiers and actions, the calls made, the tokens counted and the budget's cuts;
then ``hard="refine"`` on a real Ponder (uvicorn on loopback, the fake engine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepNote
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message
from scaffolds.errors import InvalidRequestError, SpecError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import Auto
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.scripted_verifier import ScriptedVerifier
from tests.evalkit import MODEL, serve_ponder
from tests.scaffolds.scripted import Script

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))
REFINED = "compared them all: \\boxed{7}"  # 4 tokens (MockEngine counts words)
SPLIT = (["1", "1", "2", "3"], ["2"])
"""A pilot that leans to 1 (2 of 4: the lowest tier); every later sample says 2."""


def script(*waves: list[str], refine: str = REFINED) -> Script:
    """Solve request i answers ``waves[i]`` (boxed), cycled to its ``n``; a refine says
    ``refine``."""
    pending: Iterator[list[str]] = iter(waves)

    def solve(request: GenerateRequest) -> list[str]:
        wave = next(pending)
        return [f"\\boxed{{{wave[i % len(wave)]}}}" for i in range(request.params.n)]

    return Script(solve=solve, gsr_refine=refine)


async def run(strategy: Auto, handler: Script, **settings: Any) -> tuple[MockEngine, RunResult]:
    engine = MockEngine(handler)
    return engine, await run_scaffold(strategy, PROBLEM, engine, RunSettings(**settings))


def allocation(result: RunResult) -> dict[str, Any]:
    [note] = [e for e in result.events if isinstance(e, StepNote) and e.kind == "allocation"]
    return dict(note.values)


async def test_the_lowest_tier_refines_every_sample_into_the_answer() -> None:
    handler = script(*SPLIT)
    engine, result = await run(Auto(hard="refine"), handler)
    assert handler.kinds == ["solve", "solve", "gsr_refine"]
    assert [r.params.n for r in engine.requests] == [4, 12, 1]
    refine_prompt = engine.requests[2].prompt_text()
    assert "Above are 16 candidate solutions" in refine_prompt  # gsr's template, all 16
    assert refine_prompt.count("\\boxed{2}") == 13 and refine_prompt.count("\\boxed{1}") == 2
    assert result.solutions[0].answer == "7" and not result.cut_short  # the vote would say 2
    assert (result.usage.calls, result.usage.completion_tokens) == (3, 16 + 4)
    note = allocation(result)
    assert (note["tier"], note["planned"], note["samples"]) == ("max", 16, 16)
    assert (note["hard"], note["action"], note["reason"], note["leader"]) == (
        "refine",
        "refine",
        "planned",
        "7",
    )


@pytest.mark.parametrize(
    ("waves", "tier", "sent"),
    [((["5"],), "stop", [4]), ((["5", "5", "5", "6"], ["5"]), "mid", [4, 4])],
)
async def test_the_upper_tiers_vote_as_before(
    waves: tuple[list[str], ...], tier: str, sent: list[int]
) -> None:
    handler = script(*waves)
    engine, result = await run(Auto(hard="refine"), handler)
    assert "gsr_refine" not in handler.kinds and [r.params.n for r in engine.requests] == sent
    note = allocation(result)
    assert (note["tier"], note["hard"], note["action"]) == (tier, "refine", "vote")
    assert result.solutions[0].answer == "5"


async def test_no_room_for_the_refine_votes_over_the_draws_cut_short() -> None:
    handler = script(*SPLIT)
    _, result = await run(Auto(hard="refine"), handler, budget=Budget(max_calls=2))
    assert handler.kinds == ["solve", "solve"] and result.usage.calls == 2
    assert result.solutions[0].answer == "2" and result.cut_short
    note = allocation(result)
    assert (note["samples"], note["action"], note["reason"]) == (16, "vote", "budget")


async def test_a_budget_spent_on_the_pilot_still_answers() -> None:
    handler = script(*SPLIT)
    _, result = await run(Auto(hard="refine"), handler, budget=Budget(max_calls=1))
    assert handler.kinds == ["solve"] and result.usage.calls == 1
    assert result.solutions[0].answer == "1" and result.cut_short
    note = allocation(result)
    assert (note["planned"], note["samples"], note["action"]) == (16, 4, "vote")


async def test_a_token_budget_spent_by_the_draws_leaves_the_vote() -> None:
    # 16 tokens: the pilot's 4 and the 12 more (a token each); nothing left to refine.
    handler = script(*SPLIT)
    _, result = await run(Auto(hard="refine"), handler, budget=Budget(max_tokens=16))
    assert handler.kinds == ["solve", "solve"] and result.usage.completion_tokens == 16
    assert result.solutions[0].answer == "2" and result.cut_short
    note = allocation(result)
    assert (note["samples"], note["action"], note["reason"]) == (16, "vote", "budget")


async def test_the_lowest_tier_picks_by_the_verifier() -> None:
    # 16 samples: 1 x8, 2 x1, 3 x7. The count says 1; scores (3: 0.9, else 0.1) weigh
    # 1 at 0.8 and 3 at 6.3.
    verifier = ScriptedVerifier(lambda t: 0.9 if "{3}" in t else 0.1)
    handler = script(["1", "1", "2", "3"], ["1", "3"])
    engine, result = await run(Auto(hard="verifier"), handler, verifier=verifier)
    assert [r.params.n for r in engine.requests] == [4, 12]
    assert [len(texts) for _, texts, _ in verifier.batches] == [16]
    assert result.solutions[0].answer == "3" and result.usage.calls == 3
    note = allocation(result)
    assert (note["tier"], note["action"], note["probe"]) == ("max", "verifier", "agreement")


@pytest.mark.parametrize(
    ("spec", "param"),
    [(Auto(hard="verifier"), "scaffold.hard"), (Auto(probe="verifier"), "scaffold.probe")],
)
async def test_no_verifier_is_refused_before_any_call(spec: Auto, param: str) -> None:
    handler = script(*SPLIT)
    with pytest.raises(InvalidRequestError) as info:
        await run(spec, handler)
    assert info.value.param == param and handler.kinds == []


async def test_the_verifier_probe_places_by_the_mean_score() -> None:
    # A unanimous pilot (agreement 1.0 would stop) scored 0.8 on average: the middle tier.
    verifier = ScriptedVerifier(lambda t: 0.8)
    engine, result = await run(Auto(probe="verifier"), script(["5"], ["5"]), verifier=verifier)
    assert [r.params.n for r in engine.requests] == [4, 4]
    assert [len(texts) for _, texts, _ in verifier.batches] == [4]
    note = allocation(result)
    assert (note["probe"], note["agreement"], note["tier"], note["samples"]) == (
        "verifier",
        1.0,
        "mid",
        8,
    )
    assert note["score"] == pytest.approx(0.8) and result.usage.calls == 3


async def test_the_verifier_probe_s_scores_are_reused_by_the_verifier_pick() -> None:
    verifier = ScriptedVerifier(lambda t: 0.9 if "{3}" in t else 0.1)
    handler = script(["1", "1", "2", "3"], ["3"])  # pilot mean 0.3: the lowest tier
    _, result = await run(Auto(probe="verifier", hard="verifier"), handler, verifier=verifier)
    assert [len(texts) for _, texts, _ in verifier.batches] == [4, 12]  # each sample once
    assert result.solutions[0].answer == "3" and result.usage.calls == 4
    assert allocation(result)["score"] == pytest.approx(0.3)


async def test_a_verifier_probe_with_no_room_places_by_agreement() -> None:
    verifier = ScriptedVerifier(lambda t: 0.8)
    handler = script(*SPLIT)
    _, result = await run(
        Auto(probe="verifier"), handler, verifier=verifier, budget=Budget(max_calls=1)
    )
    assert handler.kinds == ["solve"] and verifier.batches == []
    note = allocation(result)
    assert (note["score"], note["agreement"], note["tier"], note["reason"]) == (
        None,
        0.5,
        "max",
        "budget",
    )
    assert result.solutions[0].answer == "1" and result.cut_short


def tool_call(city: str) -> Completion:
    function = {"name": "get_weather", "arguments": json.dumps({"city": city})}
    message = {"tool_calls": [{"id": f"call_{city}", "type": "function", "function": function}]}
    return Completion("", "tool_calls", extra={"message": message})


async def test_tool_calls_are_voted_never_scored_or_refined() -> None:
    wave = [tool_call("London"), tool_call("Paris"), tool_call("Paris"), Completion("\\boxed{4}")]
    verifier = ScriptedVerifier(lambda t: 0.9)
    engine = MockEngine(lambda r: [wave[i % 4] for i in range(r.params.n)])
    spec = Auto(probe="verifier", hard="verifier")
    result = await run_scaffold(spec, PROBLEM, engine, RunSettings(verifier=verifier))
    assert [r.params.n for r in engine.requests] == [4, 12] and verifier.batches == []
    assert result.solutions[0].tool_call is not None and "Paris" in result.solutions[0].tool_call
    note = allocation(result)
    assert (note["agreement"], note["tier"], note["action"]) == (0.5, "max", "vote")


def test_the_spec_parses_and_bounds_the_extra_calls() -> None:
    strategy = build_strategy('auto(hard="refine")')
    assert isinstance(strategy, Auto) and strategy.hard == "refine"
    assert str(build_strategy(str(strategy))) == str(strategy)
    # pilot + more + refine; a verifier may take a request per sample scored
    assert (strategy.max_calls(), Auto(hard="verifier").max_calls()) == (3, 18)
    assert Auto(probe="verifier").max_calls() == 6 and str(Auto()) == "auto"
    with pytest.raises(SpecError, match=r"auto\.hard"):
        build_strategy('auto(hard="search")')


def respond(body: dict[str, Any]) -> list[str]:
    """A refine says 7; a split prompt's sample i says i % 2; any other says 42."""
    text = str(body["messages"][-1]["content"])
    n = int(body.get("n") or 1)
    if "### Candidate solutions" in text:
        return ["compared: \\boxed{7}"] * n
    return [f"\\boxed{{{i % 2 if 'split' in text else 42}}}" for i in range(n)]


def test_a_refined_run_on_a_real_server_says_so_in_its_trace() -> None:
    spec = 'auto(pilot=2, mid_k=4, max_k=8, hard="refine")'
    with (
        running_fake_engine(FakeEngineConfig(respond=respond)) as fake,
        serve_ponder(fake) as url,
    ):
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        body = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "split: what is 6*7?"}],
            extra_body={"scaffold": spec, "return_trace": True},
        )
        sent = [int(r.body.get("n") or 1) for r in list(fake.state.requests)]
    assert sent == [2, 6, 1]
    assert body.choices[0].message.content is not None
    assert "\\boxed{7}" in body.choices[0].message.content
    assert body.model_extra is not None
    [note] = [
        e["values"]
        for e in body.model_extra["trace"]
        if e["type"] == "step_note" and e["kind"] == "allocation"
    ]
    assert (note["tier"], note["hard"], note["action"], note["samples"]) == (
        "max",
        "refine",
        "refine",
        8,
    )
    assert body.usage is not None and body.usage.completion_tokens >= 8 + 2


def test_calibrate_measures_a_refining_auto_only_when_asked() -> None:
    from clients.calibrate import DEFAULT_SPECS, Sample, calibrate_app, candidate_specs, run_on

    assert candidate_specs(None) == list(DEFAULT_SPECS)
    assert candidate_specs(None, auto_refine=True) == [*DEFAULT_SPECS, 'auto(hard="refine")']
    pool = [Sample(a, a == "1", 10) for a in ["1", "2", "1", "1"]]
    assert run_on("auto(pilot=2, mid_k=2, max_k=4)", pool) == (True, 40)
    for spec in ('auto(pilot=2, mid_k=2, max_k=4, hard="refine")', 'auto(probe="verifier")'):
        with pytest.raises(ValueError, match="not in a pool of single samples"):
            run_on(spec, pool)
    help_text = CliRunner().invoke(calibrate_app, ["--help"], env={"COLUMNS": "200"}).output
    assert "--auto-refine" in help_text
