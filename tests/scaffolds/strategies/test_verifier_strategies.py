"""best_of_n(judge="verifier"), majority(weight="verifier"), beam and particle_filter on
a scripted engine and a scripted verifier: exact calls, scores in the trace, budget cuts."""

from __future__ import annotations

import math

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import HelperModel, Routing
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.errors import InvalidRequestError
from scaffolds.problem import Budget, Problem
from scaffolds.strategies import Beam, BestOfN, Majority, ParticleFilter, Strategy
from testing.scripted_verifier import ScriptedVerifier
from tests.scaffolds.scripted import Script, partial_of

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


def notes(result: RunResult, kind: str) -> list[StepNote]:
    return [e for e in result.events if isinstance(e, StepNote) and e.kind == kind]


def verify_steps(result: RunResult) -> list[StepStarted]:
    return [e for e in result.events if isinstance(e, StepStarted) and e.kind == "verify"]


async def test_best_of_n_takes_the_top_verifier_score_and_counts_the_call() -> None:
    texts = ["\\boxed{41}", "so \\boxed{42}", "\\boxed{43}"]
    script = Script(solve=texts)
    verifier = ScriptedVerifier(lambda t: 0.9 if "{42}" in t else 0.2)
    result = await run_scaffold(
        BestOfN(n=3, judge="verifier"), PROBLEM, MockEngine(script), RunSettings(verifier=verifier)
    )
    assert script.kinds == ["solve"]
    assert verifier.batches == [("What is 6*7?", texts, None)]
    assert result.solutions[0].answer == "42"
    assert result.usage.calls == 2  # the candidates' request and the verifier's
    [started] = verify_steps(result)
    assert started.fields == {"candidates": texts, "verifier": "scripted"}
    [note] = notes(result, "scores")
    assert note.values["scores"] == [0.2, 0.9, 0.2] and note.step_id == started.step_id
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert finished[-1].texts == ("score 0.2000", "score 0.9000", "score 0.2000")
    assert BestOfN(n=3, judge="verifier").max_calls() == 4


async def test_a_verifier_judge_without_a_verifier_is_refused_before_any_call() -> None:
    script = Script()
    with pytest.raises(InvalidRequestError) as info:
        await run_scaffold(BestOfN(n=2, judge="verifier"), PROBLEM, MockEngine(script))
    assert info.value.param == "scaffold.judge"
    assert script.kinds == []


async def test_verifier_weighted_majority_outweighs_the_count() -> None:
    answers = ["\\boxed{41}"] * 3 + ["\\boxed{42}"] * 2
    verifier = ScriptedVerifier(lambda t: 0.9 if "{42}" in t else 0.1)
    spec = Majority(k=5, weight="verifier")
    result = await run_scaffold(
        spec, PROBLEM, MockEngine(Script(solve=answers)), RunSettings(verifier=verifier)
    )
    # 41: three votes of 0.1 weigh 0.3; 42: two of 0.9 weigh 1.8.
    assert result.solutions[0].answer == "42" and not result.solutions[0].cut_short
    [vote] = notes(result, "weighted_vote")
    assert vote.values["answers"] == ["41", "42"]
    assert vote.values["weights"] == pytest.approx([0.3, 1.8])
    assert vote.values["members"] == [[0, 1, 2], [3, 4]]
    assert result.usage.calls == 2
    unweighted = await run_scaffold(Majority(k=5), PROBLEM, MockEngine(Script(solve=answers)))
    assert unweighted.solutions[0].answer == "41"


async def test_weighted_majority_without_budget_for_the_verifier_falls_back_to_the_vote() -> None:
    answers = ["\\boxed{41}"] * 3 + ["\\boxed{42}"] * 2
    verifier = ScriptedVerifier(lambda t: 0.9 if "{42}" in t else 0.1, per_candidate=True)
    result = await run_scaffold(
        Majority(k=5, weight="verifier"),
        PROBLEM,
        MockEngine(Script(solve=answers)),
        RunSettings(verifier=verifier, budget=Budget(max_calls=5)),
    )
    # One call for the samples; the verifier's five requests would make six.
    assert verifier.batches == []
    assert result.solutions[0].answer == "41" and result.solutions[0].cut_short
    assert result.cut_reason == "calls" and result.usage.calls == 1


def _yes(p_yes: float) -> Completion:
    tops = [
        {"token": "Yes", "logprob": math.log(p_yes)},
        {"token": "No", "logprob": math.log(1 - p_yes)},
    ]
    content = [{"token": "Yes", "logprob": math.log(p_yes), "top_logprobs": tops}]
    return Completion("Yes", completion_tokens=1, extra={"logprobs": {"content": content}})


async def test_a_spec_names_a_served_model_as_generative_verifier() -> None:
    def verdict(request: GenerateRequest) -> list[Completion]:
        return [_yes(0.8 if "{42}" in request.prompt_text() else 0.3)]

    judge = MockEngine(verdict)
    routing = Routing(models={"checker": HelperModel(judge)})
    answers = ["\\boxed{41}", "\\boxed{41}", "\\boxed{42}"]
    spec = Majority(k=3, weight="verifier", verifier="checker")
    result = await run_scaffold(
        spec, PROBLEM, MockEngine(Script(solve=answers)), RunSettings(routing=routing)
    )
    # 41: 0.3 + 0.3 = 0.6 < 42: 0.8
    assert result.solutions[0].answer == "42"
    assert len(judge.requests) == 3  # chat prompts: one request per candidate
    params = judge.requests[0].params
    assert (params.n, params.max_tokens, params.temperature, params.top_logprobs) == (1, 1, 0.0, 20)
    assert "### Proposed solution\n\\boxed{41}" in judge.requests[0].prompt_text()
    assert result.usage.calls == 4 and result.usage.completion_tokens == 3 + 3
    [note] = notes(result, "scores")
    assert note.values["scores"] == pytest.approx([0.3, 0.3, 0.8])
    assert spec.named_models() == [("scaffold.verifier", "checker")]


# -- beam -----------------------------------------------------------------------------

TREE = {
    "": ["A1", "B1", "C1", "D1"],
    "A1\n\n": ["a2", "so \\boxed{7}"],
    "C1\n\n": ["c2", "c2b"],
    "C1\n\nc2\n\n": ["\\boxed{8}", "\\boxed{9}"],
}
SCORES = {"A1": 0.9, "B1": 0.2, "C1": 0.8, "D1": 0.1, "a2": 0.3, "so \\boxed{7}": 0.95}
SCORES |= {"c2": 0.6, "c2b": 0.5, "\\boxed{8}": 0.7, "\\boxed{9}": 0.99}


def grow(request: GenerateRequest) -> list[str]:
    return TREE[partial_of(request)][: request.params.n]


def last_step_score(text: str) -> float:
    return SCORES[text.split("\n\n")[-1]]


async def test_beam_keeps_the_best_width_paths_and_answers_with_the_best() -> None:
    engine, verifier = MockEngine(grow), ScriptedVerifier(last_step_score)
    spec = Beam(width=2, expand=2, max_steps=3)
    result = await run_scaffold(spec, PROBLEM, engine, RunSettings(verifier=verifier))
    # Level 1 keeps A1 (0.9) and C1 (0.8); level 2 keeps A1's boxed 7 (0.95, finished) and
    # C1's c2 (0.6); level 3 continues c2 only, and boxed 9 (0.99) beats boxed 7.
    assert result.solutions[0].text == "C1\n\nc2\n\n\\boxed{9}"
    assert result.solutions[0].answer == "9" and not result.solutions[0].cut_short
    calls = sorted((partial_of(r), r.params.n) for r in engine.requests)
    assert calls == [("", 4), ("A1\n\n", 2), ("C1\n\n", 2), ("C1\n\nc2\n\n", 2)]
    assert all(r.params.stop == ("\n\n",) for r in engine.requests)
    assert engine.requests[0].continue_final is False
    assert all(r.continue_final for r in engine.requests[1:])
    assert [len(b[1]) for b in verifier.batches] == [4, 4, 2]
    assert {b[2] for b in verifier.batches} == {"\n\n"}
    assert result.usage.calls == 4 + 3
    kept = notes(result, "beam")
    assert [n.values["scores"] for n in kept] == [[0.9, 0.8], [0.95, 0.6], [0.99, 0.95]]
    # The tree: each step continues the step and sample of its path.
    steps = {e.step_id: e for e in result.events if isinstance(e, StepStarted)}
    last = [e for e in steps.values() if e.kind == "search_step"][-1]
    parent = steps[last.parent_step or ""]
    assert parent.fields is not None and parent.fields["steps"] == ["C1"]
    assert last.fields == {"problem": "What is 6*7?", "steps": ["C1", "c2"], "step": "\n\n"}
    assert last.sample == 0  # c2 is the first sample of C1's continuation
    assert verify_steps(result)[-1].fields["paths"] == [[last.step_id, 0], [last.step_id, 1]]  # type: ignore[index]


async def test_beam_out_of_calls_answers_with_the_best_path_so_far() -> None:
    verifier = ScriptedVerifier(last_step_score)
    spec = Beam(width=2, expand=2, max_steps=3)
    result = await run_scaffold(
        spec, PROBLEM, MockEngine(grow), RunSettings(verifier=verifier, budget=Budget(max_calls=2))
    )
    assert result.solutions[0].text == "A1" and result.solutions[0].cut_short
    assert result.cut_reason == "calls" and result.usage.calls == 2


# -- particle filter ----------------------------------------------------------------------

PARTICLES = {
    "": ["good", "bad", "worse"],
    "good\n\n": ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"],
}
WEIGHTS = {"good": 1.0, "bad": 0.0, "worse": 0.0, "\\boxed{1}": 0.0, "\\boxed{2}": 1.0}
WEIGHTS["\\boxed{3}"] = 0.0


def propagate(request: GenerateRequest) -> list[str]:
    return PARTICLES[partial_of(request)][: request.params.n]


async def test_particle_filter_resamples_by_softmax_of_logits_and_shares_prefixes() -> None:
    engine = MockEngine(propagate)
    verifier = ScriptedVerifier(lambda t: WEIGHTS[t.split("\n\n")[-1]])
    spec = ParticleFilter(n=3, max_steps=2)
    result = await run_scaffold(
        spec, PROBLEM, engine, RunSettings(verifier=verifier, params=SamplingParams(seed=3))
    )
    # Scores 1 and 0 clip to 1 - 1e-7 and 1e-7: log weights +-ln(9999999), so every draw
    # takes the one good particle (the others have probability ~1e-14 each).
    assert result.solutions[0].text == "good\n\n\\boxed{2}" and result.solutions[0].answer == "2"
    # The three copies of "good" share their prefix: one request of n=3.
    assert [(partial_of(r), r.params.n) for r in engine.requests] == [("", 3), ("good\n\n", 3)]
    assert [len(b[1]) for b in verifier.batches] == [3, 3]
    first, second = notes(result, "resample")
    high = math.log(9999999)
    assert first.values["log_weights"] == pytest.approx([high, -high, -high], rel=1e-6)
    assert first.values["drawn"] == [0, 0, 0] and second.values["drawn"] == [1, 1, 1]
    assert result.usage.calls == 4


async def test_particle_filter_out_of_calls_answers_with_the_heaviest_particle() -> None:
    verifier = ScriptedVerifier(lambda t: WEIGHTS[t.split("\n\n")[-1]])
    result = await run_scaffold(
        ParticleFilter(n=3, max_steps=2),
        PROBLEM,
        MockEngine(propagate),
        RunSettings(verifier=verifier, budget=Budget(max_calls=3)),
    )
    assert result.solutions[0].text == "good" and result.solutions[0].cut_short
    assert result.cut_reason == "calls"


@pytest.mark.parametrize("spec", [Beam(), ParticleFilter()])
async def test_search_without_a_verifier_names_the_field(spec: Strategy) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await run_scaffold(spec, PROBLEM, MockEngine(grow))
    assert info.value.param == "scaffold.verifier"
