"""deepconf: confidences from top logprobs, filtering, weighted voting, errors, budgets."""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.core.context import Budget, Problem
from scaffolds.core.errors import SpecError, UnsupportedError
from scaffolds.core.run import run_scaffold
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines.mock import MockEngine, synthetic_top_logprobs
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.spec.build import build_strategy, spec_string
from scaffolds.strategies import DeepConf, Majority
from scaffolds.strategies.deepconf import kept_indices, token_confidence, trace_confidence

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


def trace(answer: str, confidence: float, tokens: int = 4, k: int = 5) -> Completion:
    """A sample whose every token has ``confidence``."""
    top = tuple(synthetic_top_logprobs(confidence, k) for _ in range(tokens))
    return Completion(f"so \\boxed{{{answer}}}", "stop", None, tokens, top_logprobs=top)


def scripted(*samples: Completion) -> MockEngine:
    def handler(request: GenerateRequest) -> list[Completion]:
        assert request.params.n == len(samples)
        return list(samples)

    return MockEngine(handler)


# -- the confidence measures -------------------------------------------------------------
def test_token_confidence_is_the_negative_mean_of_the_top_logprobs() -> None:
    assert token_confidence((-1.0, -2.0, -3.0)) == 2.0
    assert token_confidence(synthetic_top_logprobs(1.25, 20)) == pytest.approx(1.25)
    assert token_confidence(()) == 0.0


def test_trace_confidence_is_the_weakest_window() -> None:
    tops = [synthetic_top_logprobs(c, 4) for c in (3.0, 3.0, 1.0, 1.0, 3.0, 3.0)]
    assert trace_confidence(tops, window=2) == pytest.approx(1.0)
    assert trace_confidence(tops, window=3) == pytest.approx(5 / 3)
    # A trace shorter than the window is one group: its mean.
    assert trace_confidence(tops, window=100) == pytest.approx(14 / 6)
    assert trace_confidence([], window=4) is None


def test_kept_traces_are_the_most_confident_fraction() -> None:
    assert kept_indices([1.0, 3.0, None, 2.0], 0.5) == [1, 3]
    assert kept_indices([1.0, 3.0, 2.0], 0.1) == [1]  # at least one
    assert kept_indices([None, None], 1.0) == [0, 1]


# -- specs ---------------------------------------------------------------------------------
def test_spec_parses_and_round_trips() -> None:
    strategy = build_strategy("deepconf(n=8, keep=0.25, window=16, top_k=5)")
    assert strategy == DeepConf(n=8, keep=0.25, window=16, top_k=5)
    assert build_strategy(spec_string(strategy)) == strategy
    assert strategy.max_calls() == 1 and strategy.max_samples() == 8
    assert build_strategy('deepconf(solver=single(prompt="solve"))').to_spec() == {
        "name": "deepconf",
        "solver": {"name": "single", "prompt": "solve"},
    }


@pytest.mark.parametrize(
    ("spec", "param", "words"),
    [
        ('deepconf(mode="online")', "mode", "not built yet"),
        ("deepconf(keep=0)", "keep", "> 0"),
        ("deepconf(top_k=21)", "top_k", "<= 20"),
        ("deepconf(solver=majority(k=2))", "solver", "only single calls"),
    ],
)
def test_bad_specs_name_the_parameter(spec: str, param: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        build_strategy(spec)
    assert info.value.param == param
    assert words in str(info.value)


# -- runs ------------------------------------------------------------------------------------
async def test_one_request_with_top_logprobs_and_a_confidence_weighted_vote() -> None:
    # 42 is the plain majority, but its traces are the least confident: keep=0.5 drops
    # them, and 41 (one very confident trace) outweighs 40.
    engine = scripted(
        trace("42", 0.5), trace("42", 0.6), trace("42", 0.7),
        trace("41", 3.0), trace("40", 1.0), trace("40", 1.1),
    )  # fmt: skip
    result = await run_scaffold(DeepConf(n=6, keep=0.5, top_k=5), PROBLEM, engine)
    [request] = engine.requests
    assert (request.params.n, request.params.top_logprobs) == (6, 5)
    assert result.solutions[0].answer == "41"
    assert result.usage.calls == 1 and result.usage.completion_tokens == 24
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    [started] = [e for e in result.events if isinstance(e, StepStarted)]
    assert note.step_id == started.step_id and note.kind == "confidence"
    assert note.values["confidence"] == pytest.approx([0.5, 0.6, 0.7, 3.0, 1.0, 1.1])
    assert note.values["kept"] == [False, False, False, True, True, True]
    assert note.values["threshold"] == pytest.approx(1.0)
    assert note.values["chosen"] == 3
    assert result.solutions[0].step_id == started.step_id


async def test_weighted_vote_lets_many_confident_traces_beat_one() -> None:
    engine = scripted(trace("7", 2.0), trace("8", 1.5), trace("8", 1.5), trace("9", 0.1))
    result = await run_scaffold(DeepConf(n=4, keep=0.75), PROBLEM, engine)
    assert result.solutions[0].answer == "8"


async def test_the_mock_engines_synthetic_logprobs_work_end_to_end() -> None:
    engine = MockEngine(lambda r: ["a \\boxed{1}", "b \\boxed{2}", "a \\boxed{1}"])
    result = await run_scaffold(DeepConf(n=3), PROBLEM, engine)
    assert result.solutions[0].answer in ("1", "2")
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    assert all(c is not None and c > 0 for c in note.values["confidence"])


async def test_an_engine_without_logprobs_is_an_unsupported_error_naming_deepconf() -> None:
    engine = MockEngine(lambda r: "\\boxed{4}", logprobs=False)
    with pytest.raises(UnsupportedError) as info:
        await run_scaffold(DeepConf(n=2), PROBLEM, engine)
    assert "deepconf" in str(info.value) and info.value.param == "scaffold"


async def test_token_budget_forces_answers_and_marks_the_vote_cut_short() -> None:
    long = "step " * 40 + "\\boxed{5}"
    engine = MockEngine(lambda r: "\\boxed{5}" if "Time is up" in r.prompt_text() else [long, long])
    result = await run_scaffold(DeepConf(n=2), PROBLEM, engine, budget=Budget(max_tokens=60))
    kinds = [e.kind for e in result.events if isinstance(e, StepStarted)]
    assert kinds == ["generate", "force_answer", "force_answer"]
    assert result.solutions[0].answer == "5" and result.solutions[0].cut_short
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert result.usage.completion_tokens == sum(e.usage.completion_tokens for e in finished)
    assert result.usage.completion_tokens <= 60


async def test_a_call_budget_stops_further_deepconf_runs() -> None:
    engine = MockEngine(lambda r: "\\boxed{1}")
    strategy = Majority(k=3, solver=DeepConf(n=2))
    result = await run_scaffold(strategy, PROBLEM, engine, budget=Budget(max_calls=1))
    assert len(engine.requests) == 1
    assert result.solutions[0].answer == "1" and result.solutions[0].cut_short
    assert result.cut_reason == "calls"


async def test_cancelling_the_run_cancels_the_engine_call() -> None:
    started = asyncio.Event()

    async def handler(request: GenerateRequest) -> str:
        started.set()
        await asyncio.sleep(30)
        return "\\boxed{1}"

    engine = MockEngine(handler)
    task = asyncio.create_task(run_scaffold(DeepConf(n=4), PROBLEM, engine))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.cancelled == 1 and engine.in_flight == 0


async def test_composes_as_a_solver_of_majority() -> None:
    engine = MockEngine(lambda r: "\\boxed{3}", delay=0)
    strategy = Majority(k=2, solver=DeepConf(n=3))
    result = await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.n for r in engine.requests] == [3, 3]
    assert result.solutions[0].answer == "3"
    assert strategy.max_calls() == 2 and strategy.max_samples() == 6


def test_sampling_params_bound_top_logprobs() -> None:
    with pytest.raises(Exception, match="top_logprobs must be in"):
        SamplingParams(top_logprobs=21)


async def test_the_confidence_note_survives_a_saved_trace() -> None:
    from scaffolds.core.trace import event_to_dict
    from training.traces import event_from_dict

    engine = scripted(trace("1", 2.0), trace("2", 1.0))
    result = await run_scaffold(DeepConf(n=2), PROBLEM, engine)
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    assert event_from_dict(event_to_dict(note)) == note
