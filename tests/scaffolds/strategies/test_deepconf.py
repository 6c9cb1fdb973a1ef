"""deepconf: confidences from top logprobs, filtering, weighted voting, errors, budgets."""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines.mock import MockEngine, synthetic_top_logprobs
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.errors import FanOutError, SpecError, UnsupportedError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import SpecLimits, build_strategy, spec_string
from scaffolds.strategies import DeepConf, Majority
from scaffolds.strategies.deepconf import kept_indices, token_confidence, trace_confidence
from tests.scaffolds.scripted import cancel_checking_calls

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


def test_kept_traces_are_at_or_above_the_references_percentile() -> None:
    # Ranked [1, 2, 3] (None is unranked): the 50th percentile is rank 1 -> 2.0.
    assert kept_indices([1.0, 3.0, None, 2.0], 0.5) == [1, 3]
    # keep=0.1: the 90th percentile of [1..5] is rank 3.6 -> 4 + 0.6 = 4.6: only 5.
    assert kept_indices([1.0, 2.0, 3.0, 4.0, 5.0], 0.1) == [4]
    # keep=0.9: the 10th percentile is rank 0.4 -> 1.4: four of five (not ceil(4.5) = 5).
    assert kept_indices([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == [1, 2, 3, 4]
    assert kept_indices([2.0, 2.0, 2.0], 0.1) == [0, 1, 2]  # ties at the threshold vote
    assert kept_indices([None, None], 1.0) == []


def tokens(answer: str | None, *confidences: float) -> Completion:
    """A sample whose tokens have ``confidences`` in order (None: no answer)."""
    top = tuple(synthetic_top_logprobs(c, 4) for c in confidences)
    text = "I cannot tell." if answer is None else f"so \\boxed{{{answer}}}"
    return Completion(text, "stop", None, len(confidences), top_logprobs=top)


def test_the_three_measures_by_hand() -> None:
    tops = [synthetic_top_logprobs(c, 4) for c in (1.0, 1.0, 5.0, 5.0, 5.0, 5.0)]
    # Window means of 2: [1, 3, 5, 5, 5].
    assert trace_confidence(tops, window=2, measure="lowest") == pytest.approx(1.0)
    assert trace_confidence(tops, window=2, measure="tail") == pytest.approx(5.0)
    # bottom=0.4: int(5 * 0.4) = 2 lowest means, (1 + 3) / 2; bottom=0.1: at least one.
    assert trace_confidence(tops, window=2, measure="bottom", bottom=0.4) == pytest.approx(2.0)
    assert trace_confidence(tops, window=2, measure="bottom", bottom=0.1) == pytest.approx(1.0)
    assert trace_confidence(tops, window=2, measure="bottom", bottom=1.0) == pytest.approx(3.8)
    # Shorter than the window: the tail is every token, the windows one mean of all.
    assert trace_confidence(tops[:3], window=8, measure="tail") == pytest.approx(7 / 3)
    assert trace_confidence(tops[:3], window=8, measure="bottom") == pytest.approx(7 / 3)


@pytest.mark.parametrize(
    ("measure", "answer"),
    [
        ('"lowest"', "2"),
        ('"tail"', "1"),
        ('"bottom", bottom=0.4', "2"),
        ('"bottom", bottom=1.0', "1"),
    ],
)
async def test_tail_and_lowest_pick_different_answers(measure: str, answer: str) -> None:
    # "1" starts unsure and ends sure: windows [1, 3, 5, 5, 5], tail (last 2) 5.
    # "2" is 2.5 throughout. keep=0.5 of two: the threshold is their midpoint, so the
    # more confident one alone votes.
    engine = scripted(tokens("1", 1, 1, 5, 5, 5, 5), tokens("2", *[2.5] * 6))
    spec = f"deepconf(n=2, keep=0.5, window=2, measure={measure})"
    result = await run_scaffold(build_strategy(spec), PROBLEM, engine)
    assert len(engine.requests) == 1 and engine.requests[0].params.n == 2
    assert result.solutions[0].answer == answer


async def test_only_traces_with_an_answer_are_ranked() -> None:
    # Ranked alone, [2, 3]: keep=0.34 puts the threshold at rank 0.66 -> 2.66, so "1"
    # (3.0) votes. Had the unanswered 9.0 been ranked, [2, 3, 9] -> 4.92 would keep it
    # alone, and no answer.
    engine = scripted(tokens("1", 3, 3), tokens(None, 9, 9), tokens("2", 2, 2))
    result = await run_scaffold(DeepConf(n=3, keep=0.34, window=2), PROBLEM, engine)
    assert result.solutions[0].answer == "1"
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    assert note.values["kept"] == [True, False, False]
    assert note.values["confidence"] == pytest.approx([3.0, 9.0, 2.0])


async def test_no_answered_trace_falls_back_to_the_most_confident() -> None:
    engine = scripted(tokens(None, 1, 1), tokens(None, 4, 4))
    result = await run_scaffold(DeepConf(n=2, window=2), PROBLEM, engine)
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    assert note.values["chosen"] == 1 and note.values["threshold"] is None


async def test_the_papers_512_traces_are_one_request_within_the_default_cap() -> None:
    strategy = build_strategy("deepconf(n=512, keep=0.1, window=2048)")
    engine = MockEngine(lambda r: [f"\\boxed{{{i % 3}}}" for i in range(r.params.n)])
    await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.n for r in engine.requests] == [512]
    with pytest.raises(FanOutError, match="512 sequences"):  # --spec-max-samples 256
        build_strategy(strategy, limits=SpecLimits(max_samples=256))


# -- specs ---------------------------------------------------------------------------------
def test_spec_parses_and_round_trips() -> None:
    strategy = build_strategy("deepconf(n=8, keep=0.25, window=16, top_k=5)")
    assert strategy == DeepConf(n=8, keep=0.25, window=16, top_k=5)
    tail = build_strategy('deepconf(measure="bottom", bottom=0.2)')
    assert build_strategy(str(tail)) == tail == DeepConf(measure="bottom", bottom=0.2)
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
        ('deepconf(measure="mean")', "measure", "'lowest', 'tail' or 'bottom'"),
        ("deepconf(bottom=0)", "bottom", "> 0"),
        ("deepconf(n=5000)", "n", "<= 4096"),
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
        trace("42", 0.5),
        trace("42", 0.6),
        trace("42", 0.7),
        trace("41", 3.0),
        trace("40", 1.0),
        trace("40", 1.1),
    )
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
    result = await run_scaffold(
        DeepConf(n=2), PROBLEM, engine, RunSettings(budget=Budget(max_tokens=60))
    )
    kinds = [e.kind for e in result.events if isinstance(e, StepStarted)]
    assert kinds == ["generate", "force_answer", "force_answer"]
    assert result.solutions[0].answer == "5" and result.solutions[0].cut_short
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert result.usage.completion_tokens == sum(e.usage.completion_tokens for e in finished)
    assert result.usage.completion_tokens <= 60


async def test_a_call_budget_stops_further_deepconf_runs() -> None:
    engine = MockEngine(lambda r: "\\boxed{1}")
    strategy = Majority(k=3, solver=DeepConf(n=2))
    result = await run_scaffold(strategy, PROBLEM, engine, RunSettings(budget=Budget(max_calls=1)))
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
    await cancel_checking_calls(task, engine, 1)


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


# -- the token confidence as the reference computes it -------------------------------------
def test_the_sampled_token_joins_the_top_logprobs_as_in_vllms_dict() -> None:
    """facebookresearch/deepconf deepconf/utils.py:41-50 (commit 675529d) averages every
    value of vLLM's per-position dict, rounded to 3 decimals; vLLM builds that dict from
    the sampled token first, then the top k (vllm/logprobs.py
    ``append_logprobs_for_next_position``: "inserting duplicated data into a dictionary
    twice is the same as doing it once"), so it holds k + 1 values when the sampled token
    is outside the top k, k when it is one of them.

    By hand, top 3 = (-0.1, -1.0, -2.5):
    - sampled -4.0 (outside): -(-0.1 - 1.0 - 2.5 - 4.0) / 4 = 7.6 / 4 = 1.9
    - sampled -1.0 (the second): -(-0.1 - 1.0 - 2.5) / 3 = 3.6 / 3 = 1.2
    - no sampled value (an engine that gave none): 1.2 as well
    - top (-0.1, -0.2, -0.4), sampled -0.7: (0.1 + 0.2 + 0.4 + 0.7) / 4 = 1.4 / 4 = 0.35
    """
    top = (-0.1, -1.0, -2.5)
    assert token_confidence(top, sampled=-4.0) == 1.9
    assert token_confidence(top, sampled=-1.0) == 1.2
    assert token_confidence(top) == 1.2
    assert token_confidence((-0.1, -0.2, -0.4), sampled=-0.7) == 0.35
    # A trace: position 1 samples outside its top 2, position 2 samples its best.
    # Token confidences: (0.5 + 1.5 + 4.0) / 3 = 2.0 and (0.2 + 0.6) / 2 = 0.4;
    # one window of 2: (2.0 + 0.4) / 2 = 1.2 (without the sampled token: (1.0 + 0.4) / 2 = 0.7).
    tops = [(-0.5, -1.5), (-0.2, -0.6)]
    assert trace_confidence(tops, window=2, sampled=(-4.0, -0.2)) == pytest.approx(1.2)
    assert trace_confidence(tops, window=2) == pytest.approx(0.7)


async def test_deepconf_averages_the_sampled_tokens_logprob_that_the_engine_returns() -> None:
    """The same rule in a run (deepconf/utils.py:48): the engine's ``logprobs`` (the
    sampled tokens') join the top logprobs. Trace A answers 1: top (-0.1, -0.1) and
    sampled -0.1 at both positions: confidence 0.1. Trace B answers 2: top (-0.1, -0.1),
    sampled -2.9 (outside its top 2): (0.1 + 0.1 + 2.9) / 3 = 1.033 at both positions.
    Averaging the top logprobs alone both are 0.1 and tie; with the sampled token B is
    the more confident, and keep=0.5 keeps only it."""
    top = ((-0.1, -0.1), (-0.1, -0.1))
    a = Completion("\\boxed{1}", "stop", None, 2, logprobs=(-0.1, -0.1), top_logprobs=top)
    b = Completion("\\boxed{2}", "stop", None, 2, logprobs=(-2.9, -2.9), top_logprobs=top)
    result = await run_scaffold(
        DeepConf(n=2, keep=0.5, window=2, top_k=2), PROBLEM, scripted(a, b), RunSettings()
    )
    recorded = [e for e in result.events if isinstance(e, StepNote)]
    [note] = recorded
    assert note.values["confidence"] == [pytest.approx(0.1), pytest.approx(1.033)]
    assert note.values["kept"] == [False, True]
    assert result.solutions[0].answer == "2"
