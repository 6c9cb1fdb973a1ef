"""RSA's reference options: balanced draws, full candidates, the pairwise tournament, and
the per-round population accuracy when the reference answer is known."""

from __future__ import annotations

from collections import Counter
from itertools import count
from typing import Any

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepNote, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.errors import SpecError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import RSA
from scaffolds.strategies.rsa import balanced_draws
from tests.scaffolds.scripted import step_of

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


async def run(strategy: RSA, handler: Any, problem: Problem = PROBLEM, **kw: Any) -> RunResult:
    return await run_scaffold(strategy, problem, MockEngine(handler), RunSettings(**kw))


def started(result: RunResult, kind: str) -> list[StepStarted]:
    return [e for e in result.events if isinstance(e, StepStarted) and e.kind == kind]


def test_options_parse_round_trip_and_bound_calls() -> None:
    spec = 'rsa(n=8, k=2, candidates="full", draw="balanced", select="pairwise")'
    strategy = build_strategy(spec)
    assert strategy == RSA(n=8, k=2, candidates="full", draw="balanced", select="pairwise")
    assert build_strategy(str(strategy)) == strategy
    # Population, 8 aggregations a round for 3 rounds, 7 matches of the tournament.
    assert (strategy.max_calls(), strategy.max_samples()) == (1 + 24 + 7, 8 + 24 + 7)
    for bad, field in [('draw="random"', "draw"), ('select="judge"', "select")]:
        with pytest.raises(SpecError) as info:
            build_strategy(f"rsa({bad})")
        assert info.value.param == field


def test_balanced_blocks_by_hand() -> None:
    # The order [2, 0, 3, 1] read at offsets 0 and 2: block s is order[s], order[s+2].
    assert balanced_draws([2, 0, 3, 1], [0, 2], 4) == [[2, 3], [0, 1], [3, 2], [1, 0]]
    # Offsets 3 and 1 over five members: each member once per offset.
    blocks = balanced_draws([0, 1, 2, 3, 4], [3, 1], 5)
    assert blocks == [[3, 1], [4, 2], [0, 3], [1, 4], [2, 0]]


@pytest.mark.parametrize(("n", "k", "seed"), [(4, 2, 0), (5, 3, 7), (6, 6, 1)])
async def test_balanced_draws_read_each_member_exactly_k_times(n: int, k: int, seed: int) -> None:
    strategy = RSA(n=n, k=k, rounds=2, draw="balanced")
    result = await run(
        strategy, lambda r: ["\\boxed{1}"] * r.params.n, params=SamplingParams(seed=seed)
    )
    for round_ in (1, 2):
        steps = [
            s for s in started(result, "aggregate") if s.fields and s.fields["round"] == round_
        ]
        assert len(steps) == n
        reads = Counter(tuple(m) for s in steps for m in s.fields["members"])  # type: ignore[index]
        assert len(reads) == n and set(reads.values()) == {k}
        assert all(len({tuple(m) for m in s.fields["members"]}) == k for s in steps)  # type: ignore[index]


async def test_independent_draws_need_not_balance() -> None:
    result = await run(RSA(n=8, k=2, rounds=1), lambda r: ["\\boxed{1}"] * r.params.n)
    reads = Counter(tuple(m) for s in started(result, "aggregate") for m in s.fields["members"])  # type: ignore[index]
    assert sum(reads.values()) == 16 and set(reads.values()) != {2}


@pytest.mark.parametrize(
    ("candidates", "shown"),
    [
        ("answer", ["\\boxed{5}", "so \\boxed{6}"]),
        ("full", ["<think>2+3</think>\\boxed{5}", "<think>2*3</think>so \\boxed{6}"]),
    ],
)
async def test_candidates_full_reads_the_thinking_too(candidates: str, shown: list[str]) -> None:
    def handler(request: GenerateRequest) -> list[Completion]:
        if step_of(request) == "rsa_aggregate":
            return [Completion("\\boxed{5}")]
        # One member's thinking came separately (a reasoning parser), one's in its text.
        return [
            Completion("\\boxed{5}", reasoning="2+3"),
            Completion("<think>2*3</think>so \\boxed{6}"),
        ]

    strategy = RSA(n=2, k=2, rounds=1, candidates=candidates)  # type: ignore[arg-type]
    result = await run(strategy, handler)
    for step in started(result, "aggregate"):
        assert step.fields is not None
        order = [i for _, i in step.fields["members"]]
        assert step.fields["candidates"] == [shown[i] for i in order]
        assert all(text in (step.prompt or "") for text in shown)


def larger_wins(request: GenerateRequest) -> str | list[str]:
    """Members answer 1..n; a verdict names the candidate with the larger answer."""
    if step_of(request) == "rsa_select":
        text = request.prompt_text()
        first, second = (
            int(part.split("\\boxed{")[1].split("}")[0])
            for part in text.split("#### Candidate ")[1:3]
        )
        return f"The better one is \\boxed{{{1 if first > second else 2}}}"
    return [f"member \\boxed{{{i}}}" for i in (5, 5, 5, 9, 5, 3, 5, 1)][: request.params.n]


async def test_pairwise_tournament_over_the_last_population() -> None:
    # rounds=0: the tournament runs over the first population itself. Its majority is 5,
    # but every match goes to the larger answer, so 9 wins: 8 players, 4 + 2 + 1 calls.
    strategy = RSA(n=8, k=2, rounds=0, select="pairwise")
    engine = MockEngine(larger_wins)
    result = await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.n for r in engine.requests] == [8] + [1] * 7
    assert len(engine.requests) == strategy.max_calls()
    selects = started(result, "select")
    assert len(selects) == 7 and all(s.template == "rsa_select" for s in selects)
    assert all(s.fields is not None and len(s.fields["candidates"]) == 2 for s in selects)
    population = engine.requests[0]
    assert population.params.n == 8
    # The first level pairs the population in order: (0, 1), (2, 3), (4, 5), (6, 7).
    first_level = sorted(tuple(i for _, i in s.fields["members"]) for s in selects[:4])  # type: ignore[index]
    assert first_level == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert result.solutions[0].answer == "9" and not result.cut_short
    # With select="majority", the same population answers 5.
    majority = await run(RSA(n=8, k=2, rounds=0), larger_wins)
    assert majority.solutions[0].answer == "5"


async def test_an_unreadable_verdict_keeps_the_second_of_the_pair() -> None:
    def handler(request: GenerateRequest) -> str | list[str]:
        if step_of(request) == "rsa_select":
            return "Both look fine to me."
        return ["\\boxed{1}", "\\boxed{2}"]

    result = await run(RSA(n=2, k=1, rounds=0, select="pairwise"), handler)
    assert result.solutions[0].answer == "2"


async def test_a_tournament_cut_by_the_budget_is_marked_cut_short() -> None:
    result = await run(
        RSA(n=4, k=2, rounds=0, select="pairwise"), larger_wins, budget=Budget(max_calls=3)
    )
    assert result.solutions[0].cut_short and result.cut_reason == "calls"


async def test_population_accuracy_per_round_when_the_reference_is_known() -> None:
    calls = count()

    def handler(request: GenerateRequest) -> str | list[str]:
        if step_of(request) == "rsa_aggregate":  # one wrong member in round 1, none after
            return "\\boxed{41}" if next(calls) == 1 else "\\boxed{42.0}"
        return ["\\boxed{42}", "\\boxed{7}", "\\boxed{7}", "\\boxed{7}"]

    problem = Problem(PROBLEM.text, raw_prompt=PROBLEM.raw_prompt, reference="42")
    result = await run(RSA(n=4, k=2, rounds=2), handler, problem)
    notes = [e for e in result.events if isinstance(e, StepNote) and e.kind == "population"]
    assert [n.values["round"] for n in notes] == [0, 1, 2]  # round 0: the first population
    assert [n.values["accuracy"] for n in notes] == [1 / 4, 3 / 4, 1.0]  # 42.0 is 42
    assert notes[0].values["correct"] == [True, False, False, False]
    assert sorted(notes[1].values["correct"]) == [False, True, True, True]
    assert [n.values["answers"].count("41") for n in notes] == [0, 1, 0]
    # Without a reference the notes give the answers only.
    plain = await run(RSA(n=4, k=2, rounds=1), handler)
    notes = [e for e in plain.events if isinstance(e, StepNote) and e.kind == "population"]
    assert [len(n.values["answers"]) for n in notes] == [4, 4]
    assert not any("accuracy" in n.values for n in notes)
