"""RSA and adaptive voting on MockEngine: call graph, members read, stopping rule, budgets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message, SamplingParams, Usage
from scaffolds.errors import SpecError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import GSR, RC, RSA, Adaptive, Strategy
from scaffolds.strategies.adaptive import leader_probability
from tests.scaffolds.scripted import Script, cancel_checking_calls, wait_in_flight

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


async def run(strategy: Strategy, handler: Any, **kwargs: Any) -> tuple[MockEngine, RunResult]:
    engine = MockEngine(handler)
    return engine, await run_scaffold(strategy, PROBLEM, engine, RunSettings(**kwargs))


def started(result: RunResult, kind: str) -> list[StepStarted]:
    return [e for e in result.events if isinstance(e, StepStarted) and e.kind == kind]


def notes(result: RunResult) -> list[StepNote]:
    return [e for e in result.events if isinstance(e, StepNote)]


def samples_counted(result: RunResult, engine: MockEngine, strategy: Strategy) -> None:
    """Every call within the spec's bounds, and usage adding up over the steps."""
    assert len(engine.requests) <= strategy.max_calls()
    assert sum(r.params.n for r in engine.requests) <= strategy.max_samples()
    steps = [e for e in result.events if isinstance(e, StepFinished)]
    assert sum((s.usage for s in steps), start=Usage()) == result.usage
    assert result.usage.calls == len(engine.requests)


# -- rsa ------------------------------------------------------------------------------------
def numbered_members(request: GenerateRequest) -> str | list[str]:
    """Population member i says ``member i``; an aggregation says which it read."""
    text = request.prompt_text()
    if "### Attempts to combine" in text:
        return "combined \\boxed{42}"
    return [f"member {i} \\boxed{{{40 + i % 3}}}" for i in range(request.params.n)]


async def test_rsa_population_is_one_request_and_each_aggregation_reads_k_members() -> None:
    strategy = RSA(n=6, k=3, rounds=2)
    engine, result = await run(strategy, numbered_members)
    assert [r.params.n for r in engine.requests] == [6] + [1] * 12
    assert len(engine.requests) == strategy.max_calls() == 13
    assert sum(r.params.n for r in engine.requests) == strategy.max_samples() == 18
    [population] = [e for e in result.events if isinstance(e, StepStarted) and e.n == 6]
    aggregations = started(result, "aggregate")
    assert len(aggregations) == 12
    first_round = [a for a in aggregations if a.fields and a.fields["round"] == 1]
    assert len(first_round) == 6
    for step in first_round:
        assert step.fields is not None and step.template == "rsa_aggregate"
        members = step.fields["members"]
        assert len(members) == 3 and len({tuple(m) for m in members}) == 3  # no repeats
        assert all(sid == population.step_id and 0 <= i < 6 for sid, i in members)
        assert step.fields["candidates"] == [
            f"member {i} \\boxed{{{40 + i % 3}}}" for _, i in members
        ]
        assert step.parent_step == population.step_id
        assert step.prompt is not None and "The 3 attempts above" in step.prompt
    round_one_ids = {a.step_id for a in first_round}
    for step in aggregations[6:]:
        assert step.fields is not None and step.fields["round"] == 2
        assert {sid for sid, _ in step.fields["members"]} <= round_one_ids
        assert all(i == 0 for _, i in step.fields["members"])
    assert result.solutions[0].answer == "42" and not result.cut_short
    assert result.solutions[0].step_id in {a.step_id for a in aggregations[6:]}
    samples_counted(result, engine, strategy)


async def test_rsa_answers_with_the_majority_of_the_last_population() -> None:
    counter = iter(range(100))

    def handler(request: GenerateRequest) -> str | list[str]:
        if "### Attempts to combine" in request.prompt_text():
            return f"\\boxed{{{7 if next(counter) % 3 else 9}}}"  # two thirds say 7
        return ["\\boxed{1}"] * request.params.n

    _, result = await run(RSA(n=6, k=2, rounds=1), handler)
    assert result.solutions[0].answer == "7"


async def test_rsa_runs_each_round_concurrently() -> None:
    peak = {"now": 0, "max": 0}

    async def handler(request: GenerateRequest) -> str:
        peak["now"] += 1
        peak["max"] = max(peak["max"], peak["now"])
        await asyncio.sleep(0.05)
        peak["now"] -= 1
        return "\\boxed{42}"

    await run(RSA(n=5, k=2, rounds=2), handler)
    assert peak["max"] == 5


async def test_rsa_draws_are_reproducible_with_a_seed() -> None:
    async def draws(seed: int) -> list[Any]:
        _, result = await run(RSA(n=8, k=3, rounds=2), Script(), params=SamplingParams(seed=seed))
        return [s.fields["members"] for s in started(result, "aggregate") if s.fields]

    assert await draws(3) == await draws(3)
    assert await draws(3) != await draws(4)


async def test_rsa_out_of_calls_mid_round_votes_over_what_exists() -> None:
    def handler(request: GenerateRequest) -> str | list[str]:
        if "### Attempts to combine" in request.prompt_text():
            return "\\boxed{9}"
        return ["\\boxed{7}"] * request.params.n

    # Population (1 call) + 1 aggregation: the round is cut after one of its four.
    engine, result = await run(RSA(n=4, k=2, rounds=2), handler, budget=Budget(max_calls=2))
    assert len(engine.requests) == 2
    solution = result.solutions[0]
    assert solution.cut_short and result.cut_reason == "calls"
    assert solution.answer == "7"  # one 9 replaced one 7: 7 still leads


async def test_rsa_out_of_calls_before_any_round_votes_over_the_population() -> None:
    _, result = await run(
        RSA(n=3, k=2, rounds=1),
        Script(solve=["\\boxed{3}", "\\boxed{5}", "\\boxed{5}"]),
        budget=Budget(max_calls=1),
    )
    assert result.solutions[0].answer == "5" and result.solutions[0].cut_short


async def test_rsa_composes_with_a_solver() -> None:
    strategy = RSA(n=2, k=2, rounds=1, solver=RC(steps=2))
    engine, result = await run(strategy, Script())
    assert engine.requests[0].params.n == 2  # RC's first chunks: one request
    assert len(engine.requests) == strategy.max_calls() == 1 + 2 * 2 + 2
    aggregations = started(result, "aggregate")
    reads = {tuple(m) for a in aggregations if a.fields for m in a.fields["members"]}
    reasoning = {e.step_id for e in started(result, "reasoning")}
    assert {sid for sid, _ in reads} <= reasoning  # each member is its last reasoning step
    samples_counted(result, engine, strategy)
    assert result.solutions[0].answer == "42"


async def test_rsa_cancelled_mid_round_cancels_every_call() -> None:
    async def slow(request: GenerateRequest) -> str | list[str]:
        if "### Attempts to combine" in request.prompt_text():
            await asyncio.sleep(30)
        return ["\\boxed{1}"] * request.params.n

    engine = MockEngine(slow)
    task = asyncio.create_task(run_scaffold(RSA(n=3, k=2, rounds=1), PROBLEM, engine))
    await wait_in_flight(engine, 3)
    await cancel_checking_calls(task, engine, 3)


def test_rsa_spec_bounds() -> None:
    assert build_strategy("rsa") == RSA(n=16, k=4, rounds=3)
    assert RSA().max_calls() == 1 + 16 * 3
    with pytest.raises(SpecError, match=r"rsa\.k: must be at most n=4 \(got 5\)") as info:
        build_strategy("rsa(n=4, k=5)")
    assert info.value.param == "k"  # the server roots it: scaffold.k
    with pytest.raises(SpecError, match=r"rsa\.k: must be >= 1"):
        build_strategy("rsa(k=0)")


# -- adaptive -------------------------------------------------------------------------------
def test_the_stopping_rule_is_the_beta_posterior_of_the_top_two() -> None:
    assert leader_probability(4, 0) == pytest.approx(31 / 32)  # 4-0 after one wave: stop
    assert leader_probability(2, 2) == pytest.approx(0.5)  # 2-2: nothing is known
    assert leader_probability(3, 1) == pytest.approx(26 / 32)
    assert leader_probability(0, 0) == pytest.approx(0.5)
    assert leader_probability(7, 1) == pytest.approx(502 / 512)
    for a, b in [(5, 2), (9, 4), (1, 0)]:
        assert leader_probability(a, b) + leader_probability(b, a) == pytest.approx(1.0)
    # More agreement at the same margin is more convincing; a wider margin, too.
    assert leader_probability(6, 2) > leader_probability(3, 1)
    assert leader_probability(8, 0) > leader_probability(6, 2) > leader_probability(5, 3)


def waves_of(*answers: list[str]) -> Callable[[GenerateRequest], list[str]]:
    """Wave i answers with ``answers[i]`` (boxed)."""
    pending = iter(answers)

    def handler(request: GenerateRequest) -> list[str]:
        return [f"\\boxed{{{a}}}" for a in next(pending)][: request.params.n]

    return handler


async def test_adaptive_stops_after_a_unanimous_first_wave() -> None:
    strategy = Adaptive(max_k=16, wave=4)
    engine, result = await run(strategy, waves_of(["5"] * 4))
    assert [r.params.n for r in engine.requests] == [4]
    [note] = notes(result)
    assert note.kind == "stopping" and note.values["probability"] == pytest.approx(31 / 32)
    assert note.values["stop"] and note.values["reason"] == "settled"
    assert note.values["votes"] == [4, 0] and note.values["leader"] == "5"
    assert result.solutions[0].answer == "5" and not result.cut_short
    samples_counted(result, engine, strategy)


async def test_adaptive_keeps_drawing_while_split_and_stops_at_max_k() -> None:
    split = ["1", "2", "1", "2"]
    strategy = Adaptive(max_k=12, wave=4)
    engine, result = await run(strategy, waves_of(split, split, split))
    assert [r.params.n for r in engine.requests] == [4, 4, 4]
    probabilities = [n.values["probability"] for n in notes(result)]
    assert probabilities == pytest.approx([0.5, 0.5, 0.5])
    assert [n.values["samples"] for n in notes(result)] == [4, 8, 12]
    assert [n.values["reason"] for n in notes(result)] == [None, None, "max_k"]
    assert not result.cut_short  # max_k reached: the plan finished
    assert len(engine.requests) == strategy.max_calls()


async def test_adaptive_stops_once_the_posterior_passes_the_confidence() -> None:
    engine, result = await run(
        Adaptive(max_k=32, wave=4), waves_of(["7", "7", "7", "8"], ["7", "7", "7", "7"])
    )
    assert [r.params.n for r in engine.requests] == [4, 4]
    assert [n.values["probability"] for n in notes(result)] == pytest.approx([26 / 32, 502 / 512])
    assert result.solutions[0].answer == "7"
    # Each note belongs to its own wave's scope.
    scopes = {e.parent_id for e in result.events if isinstance(e, StepStarted)}
    assert [n.scope_id for n in notes(result)] == sorted(scopes)


async def test_adaptive_last_wave_is_what_is_left_of_max_k() -> None:
    strategy = Adaptive(max_k=6, wave=4, confidence=1.0)
    engine, _ = await run(strategy, Script())
    assert [r.params.n for r in engine.requests] == [4, 2]
    assert strategy.max_calls() == 2 and strategy.max_samples() == 6


async def test_adaptive_out_of_budget_votes_over_what_it_has_cut_short() -> None:
    engine, result = await run(
        Adaptive(max_k=16, wave=4), waves_of(["1", "2", "2", "3"]), budget=Budget(max_calls=1)
    )
    assert len(engine.requests) == 1
    assert result.solutions[0].answer == "2" and result.solutions[0].cut_short
    assert result.cut_reason == "calls"


async def test_adaptive_composes_with_a_solver() -> None:
    strategy = Adaptive(max_k=4, wave=2, solver=GSR(n=2))
    engine, result = await run(strategy, Script())
    # Two gsr runs per wave; 2-0 (7/8) does not settle, 4-0 does.
    assert len(engine.requests) == strategy.max_calls() == 2 * 2 * 2
    assert [n.values["reason"] for n in notes(result)] == [None, "settled"]
    samples_counted(result, engine, strategy)


async def test_adaptive_cancelled_mid_wave_cancels_the_call() -> None:
    engine = MockEngine(Script(), delay=30)
    task = asyncio.create_task(run_scaffold(Adaptive(max_k=8), PROBLEM, engine))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if engine.in_flight == 1:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.cancelled == 1 and engine.in_flight == 0


def one_by_one(*answers: str | None) -> Callable[[GenerateRequest], list[str]]:
    """Request i answers ``answers[i]`` (boxed; None: a text with no answer)."""
    pending = iter(answers)

    def handler(request: GenerateRequest) -> list[str]:
        assert request.params.n == 1
        answer = next(pending)
        return ["I cannot tell." if answer is None else f"\\boxed{{{answer}}}"]

    return handler


async def test_wave_one_counting_the_unanswered_is_adaptive_consistencys_library() -> None:
    # With unanswered="count", Beta(a+1, b+1) is read after every sample counting "no
    # answer" as an answer, as the reference library's counter does on TextInterface's
    # empty answers (adaptive_consistency/stopping_criterias.py:28-32, Counter over
    # every answer; scripts/pal/core/interface.py:91-92 answers "" when there is none):
    # (a, b) = (1,0) (1,1) (2,1) (3,1) (4,1) (5,1) (6,1); P(p > 1/2) by hand:
    # 3/4, 1/2, 11/16, 26/32, 57/64, 120/128, 247/256 >= 0.95: it stops at sample 7.
    strategy = build_strategy('adaptive(wave=1, max_k=40, unanswered="count")')
    engine, result = await run(strategy, one_by_one("7", None, "7", "7", "7", "7", "7"))
    assert [r.params.n for r in engine.requests] == [1] * 7
    readings = [(n.values["votes"], n.values["probability"]) for n in notes(result)]
    assert [votes for votes, _ in readings] == [
        [1, 0],
        [1, 1],
        [2, 1],
        [3, 1],
        [4, 1],
        [5, 1],
        [6, 1],
    ]
    expected = [3 / 4, 1 / 2, 11 / 16, 26 / 32, 57 / 64, 120 / 128, 247 / 256]
    assert [p for _, p in readings] == pytest.approx(expected)
    assert [n.values["stop"] for n in notes(result)] == [False] * 6 + [True]
    assert result.solutions[0].answer == "7" and not result.cut_short


async def test_wave_one_drops_the_unanswered_as_adaptive_consistencys_evaluation_does() -> None:
    # The default (unanswered unset, rule beta) is the reference's evaluation script,
    # which produced the paper's numbers: scripts/eval_outputs.py:16-24 keeps only the
    # answers that read (an empty string or a non-number is skipped), 29 reads the rule
    # on those. Votes (a, b) after each sample: (1,0) (1,0) (2,0) (3,0) (4,0); by hand
    # P = 3/4, 3/4, 7/8, 15/16, 31/32 >= 0.95: it stops at sample 5, not 7.
    strategy = build_strategy("adaptive(wave=1, max_k=40)")
    assert isinstance(strategy, Adaptive) and strategy.unanswered_rule() == "drop"
    engine, result = await run(strategy, one_by_one("7", None, "7", "7", "7"))
    assert [r.params.n for r in engine.requests] == [1] * 5
    readings = [(n.values["votes"], n.values["probability"]) for n in notes(result)]
    assert [votes for votes, _ in readings] == [[1, 0], [1, 0], [2, 0], [3, 0], [4, 0]]
    assert [p for _, p in readings] == pytest.approx([3 / 4, 3 / 4, 7 / 8, 15 / 16, 31 / 32])
    assert result.solutions[0].answer == "7" and not result.cut_short


def answering(*waves: list[str | None]) -> Callable[[GenerateRequest], list[str]]:
    """Wave i answers ``waves[i]`` (boxed; None: a text with no answer)."""
    pending = iter(waves)

    def handler(request: GenerateRequest) -> list[str]:
        wave = next(pending)
        return ["I cannot tell." if a is None else f"\\boxed{{{a}}}" for a in wave]

    return handler


@pytest.mark.parametrize("unanswered", ["drop", "count"])
async def test_four_unanswered_samples_never_stop_the_run(
    unanswered: Literal["drop", "count"],
) -> None:
    # Before: four unanswered samples were 4-0 for "no answer" (31/32 >= 0.95), and the
    # run stopped after one wave with no answer. With none answered there is nothing to
    # stop on (the reference's evaluation script draws on: eval_outputs.py:25-28); the
    # 5s that follow settle it: at once when dropped (4-0), later when counted (4-4, 8-4,
    # 12-4: the unanswered four stay the runner-up).
    strategy = Adaptive(max_k=16, wave=4, unanswered=unanswered)
    waves = ([None] * 4, ["5"] * 4, ["5"] * 4, ["5"] * 4)
    engine, result = await run(strategy, answering(*waves))
    assert len(engine.requests) == (2 if unanswered == "drop" else 4)
    first = notes(result)[0].values
    assert not first["stop"] and first["answers"] == 0
    assert result.solutions[0].answer == "5"
    if unanswered == "drop":  # (4, 0): 31/32 after the second wave
        assert [n.values["votes"] for n in notes(result)] == [[0, 0], [4, 0]]
    else:  # by hand: P(Bin(9, 1/2) <= 4) = 1/2; P(Bin(13, 1/2) <= 8) = 7099/8192 = 0.867;
        # P(Bin(17, 1/2) <= 12) = (131072 - 3214)/131072 = 0.9755 >= 0.95: stop.
        assert [n.values["votes"] for n in notes(result)] == [[4, 0], [4, 4], [8, 4], [12, 4]]
        probabilities = [n.values["probability"] for n in notes(result)][1:]
        assert probabilities == pytest.approx([1 / 2, 7099 / 8192, 127858 / 131072])


async def test_esc_stops_at_the_first_unanimous_window() -> None:
    strategy = build_strategy('adaptive(rule="esc", window=5, max_k=40)')
    assert strategy.waves() == [5] * 8 and strategy.max_samples() == 40
    windows = (["1", "1", "2", "1", "1"], ["3", "3", "3", "3", "4"], ["3"] * 5, ["9"] * 5)
    engine, result = await run(strategy, waves_of(*windows))
    assert [r.params.n for r in engine.requests] == [5, 5, 5]  # the third window agrees
    assert [n.values["unanimous"] for n in notes(result)] == [False, False, True]
    assert [n.values["samples"] for n in notes(result)] == [5, 10, 15]
    assert result.solutions[0].answer == "3" and not result.cut_short
    # The answer is the unanimous window's: started by the third request.
    third = started(result, "generate")[2]
    assert result.solutions[0].step_id == third.step_id


async def test_esc_with_no_unanimous_window_answers_with_the_majority_of_all() -> None:
    strategy = Adaptive(rule="esc", window=3, max_k=7)  # 7 // 3: two windows
    windows = (["1", "2", "2"], ["2", "3", "1"], ["5"] * 3)
    engine, result = await run(strategy, waves_of(*windows))
    assert [r.params.n for r in engine.requests] == [3, 3]
    assert [n.values["reason"] for n in notes(result)] == [None, "max_k"]
    assert result.solutions[0].answer == "2"  # 2: 3 votes, 1: 2, 3: 1
    assert strategy.max_calls() == 2


async def test_esc_counts_an_unanswered_sample_as_esc_does() -> None:
    """ESC's script reads each sample with ``extract_math_answer``, which gives "" when it
    finds nothing (``early_stop_math.py:36-43``; "" too when it fails, 136-139), and a
    window stops when its predictions make one value (142-145): a window of four 3s and
    one unanswered sample holds two values and draws on. Unset, ``rule="esc"`` counts."""
    strategy = build_strategy('adaptive(rule="esc", window=5, max_k=15)')
    assert isinstance(strategy, Adaptive) and strategy.unanswered_rule() == "count"
    windows = (["3", "3", None, "3", "3"], ["3"] * 5)
    engine, result = await run(strategy, answering(*windows))
    assert [n.values["unanimous"] for n in notes(result)] == [False, True]
    assert len(engine.requests) == 2 and result.solutions[0].answer == "3"


async def test_esc_dropping_the_unanswered_stops_on_the_answers_that_agree() -> None:
    strategy = build_strategy('adaptive(rule="esc", window=5, max_k=15, unanswered="drop")')
    engine, result = await run(strategy, answering([None, "3", "3", None, "3"]))
    assert [n.values["unanimous"] for n in notes(result)] == [True]
    assert len(engine.requests) == 1
    # The window's answer: its first answered sample, the second of the first request.
    assert result.solutions[0].answer == "3"


@pytest.mark.parametrize("unanswered", [None, "drop", "count"])
async def test_esc_never_stops_on_a_window_with_no_answer(
    unanswered: Literal["drop", "count"] | None,
) -> None:
    """Issue 51, finding 3: under ``boxed``, five few-shot "The answer is X" samples read
    as five unanswered ones; the window counted as unanimous and the run stopped with no
    answer. (ESC's script would stop on five empty predictions, as one value: 142-143;
    Ponder draws on instead, since a stop there could only answer with nothing.)"""
    strategy = Adaptive(rule="esc", window=5, max_k=15, unanswered=unanswered)
    windows = ([None] * 5, ["4", "4", "4", "4", "4"])
    engine, result = await run(strategy, answering(*windows))
    assert [n.values["unanimous"] for n in notes(result)] == [False, True]
    assert result.solutions[0].answer == "4" and len(engine.requests) == 2


async def test_esc_few_shot_samples_under_boxed_run_every_window_and_answer_is_reads_them() -> None:
    few_shot = [f"2 + 3 = 5. The answer is {a}." for a in ("5", "5", "5", "5", "5")]

    def handler(request: GenerateRequest) -> list[str]:
        return few_shot[: request.params.n]

    strategy = Adaptive(rule="esc", window=5, max_k=15)
    engine, result = await run(strategy, handler, answer_format="boxed")
    assert len(engine.requests) == 3  # no window read an answer: none stopped the run
    assert result.solutions[0].answer is None
    engine, result = await run(strategy, handler, answer_format="answer_is")
    assert len(engine.requests) == 1 and result.solutions[0].answer == "5"


@pytest.mark.parametrize(
    ("spec", "param", "words"),
    [
        ('adaptive(unanswered="skip")', "unanswered", "'drop' or 'count'"),
        ("adaptive(window=4)", "window", 'is for rule="esc"'),
        ('adaptive(rule="esc", wave=2)', "wave", 'is for rule="beta"'),
        ('adaptive(rule="esc", confidence=0.9)', "confidence", 'is for rule="beta"'),
        ('adaptive(rule="esc", window=8, max_k=5)', "window", "must be at most max_k=5"),
        ('adaptive(rule="vote")', "rule", "must be 'beta' or 'esc'"),
    ],
)
def test_adaptive_rule_options_are_checked_by_field(spec: str, param: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        build_strategy(spec)
    assert info.value.param == param and words in str(info.value)


def test_adaptive_rule_options_round_trip() -> None:
    for spec in (
        'adaptive(rule="esc", window=5, max_k=40)',
        "adaptive(max_k=40, wave=1)",
        'adaptive(unanswered="count")',
        'adaptive(rule="esc", unanswered="drop")',
    ):
        strategy = build_strategy(spec)
        assert build_strategy(str(strategy)) == strategy
