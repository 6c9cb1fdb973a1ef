"""beam and particle_filter end a path whose step ended at the model's end of sequence
(the engine says no stop string matched), and go on with one that stopped at the step
separator, was cut by length, or came from an engine that does not say which."""

from __future__ import annotations

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.protocol import Completion, Message, SamplingParams
from scaffolds.problem import Problem
from scaffolds.strategies import Beam, ParticleFilter
from testing.scripted_verifier import ScriptedVerifier
from tests.scaffolds.scripted import partial_of, tree_engine

PROBLEM = Problem.from_messages((Message("user", "What is 12 * 4?"),))

EOS, SEPARATOR, UNSAID = False, True, None
"""Scripted ``stop_matched``: no stop string matched, the separator did, not said."""


def step(text: str, matched: bool | None, finish: str = "stop") -> Completion:
    return Completion(text, finish, completion_tokens=len(text.split()), stop_matched=matched)


SCORES = {"12 * 4 = 48": 0.9, "Let me think": 0.8, "12 * 4 =": 0.7, "\\boxed{48}": 0.97}
SCORES |= {"so 12 * 4 = 48": 0.6, " 48": 0.5}


def last_step_score(text: str) -> float:
    return SCORES[text.split("\n\n")[-1]]


def beam_tree(answer: bool | None) -> dict[str, list[Completion]]:
    """Three first steps: a whole answer that ended as ``answer`` says, one that stopped
    at the separator and one cut by length (the engine saying no stop string matched)."""
    return {
        "": [
            step("12 * 4 = 48", answer),
            step("Let me think", SEPARATOR),
            step("12 * 4 =", False, "length"),
        ],
        "Let me think\n\n": [step("so 12 * 4 = 48", EOS)],
        "12 * 4 =\n\n": [step(" 48", EOS)],
        "12 * 4 = 48\n\n": [step("\\boxed{48}", EOS)],
    }


async def test_beam_ends_a_path_whose_step_ended_at_end_of_sequence() -> None:
    engine, verifier = tree_engine(beam_tree(EOS)), ScriptedVerifier(last_step_score)
    result = await run_scaffold(
        Beam(width=3, expand=1, max_steps=2), PROBLEM, engine, RunSettings(verifier=verifier)
    )
    # Level 1 keeps all three (0.9, 0.8, 0.7); only the two unfinished ones go on, and the
    # finished answer (0.9) beats their second steps (0.6, 0.5).
    calls = sorted((partial_of(r), r.params.n) for r in engine.requests)
    assert calls == [("", 3), ("12 * 4 =\n\n", 1), ("Let me think\n\n", 1)]
    assert [len(batch[1]) for batch in verifier.batches] == [3, 2]
    assert result.usage.calls == 3 + 2
    [solution] = result.solutions
    assert solution.text == "12 * 4 = 48" and not solution.cut_short


@pytest.mark.parametrize("answer", [SEPARATOR, UNSAID])
async def test_beam_goes_on_after_a_separator_or_when_the_engine_does_not_say(
    answer: bool | None,
) -> None:
    engine, verifier = tree_engine(beam_tree(answer)), ScriptedVerifier(last_step_score)
    result = await run_scaffold(
        Beam(width=3, expand=1, max_steps=2), PROBLEM, engine, RunSettings(verifier=verifier)
    )
    calls = sorted((partial_of(r), r.params.n) for r in engine.requests)
    assert calls == [("", 3), ("12 * 4 =\n\n", 1), ("12 * 4 = 48\n\n", 1), ("Let me think\n\n", 1)]
    assert result.usage.calls == 4 + 2
    assert result.solutions[0].text == "12 * 4 = 48\n\n\\boxed{48}"


@pytest.mark.parametrize(
    ("first", "rounds"),
    [
        (step("12 * 4 = 48", EOS), 1),
        (step("12 * 4 = 48", SEPARATOR), 2),
        (step("12 * 4 = 48", UNSAID), 2),
        (step("12 * 4 = 48", False, "length"), 2),
    ],
    ids=["eos", "separator", "unsaid", "length"],
)
async def test_particle_filter_ends_a_particle_whose_step_ended_at_end_of_sequence(
    first: Completion, rounds: int
) -> None:
    tree = {
        "": [first, step("bad", SEPARATOR), step("worse", SEPARATOR)],
        "12 * 4 = 48\n\n": [step("\\boxed{48}", EOS)] * 3,
    }
    weights = {"12 * 4 = 48": 1.0, "bad": 0.0, "worse": 0.0, "\\boxed{48}": 1.0}
    engine = tree_engine(tree)
    verifier = ScriptedVerifier(lambda text: weights[text.split("\n\n")[-1]])
    result = await run_scaffold(
        ParticleFilter(n=3, max_steps=3),
        PROBLEM,
        engine,
        RunSettings(verifier=verifier, params=SamplingParams(seed=3)),
    )
    # Scores 1 and 0: every draw takes the first particle (the others ~1e-14 each).
    requests = [(partial_of(r), r.params.n) for r in engine.requests]
    assert requests == [("", 3), ("12 * 4 = 48\n\n", 3)][:rounds]
    assert result.usage.calls == 2 * rounds
    [solution] = result.solutions
    expected = "12 * 4 = 48" if rounds == 1 else "12 * 4 = 48\n\n\\boxed{48}"
    assert solution.text == expected and not solution.cut_short
