r"""beam and particle_filter with ``semantics="its_hub"``: its_hub's BeamSearch and
ParticleFiltering as written (Red-Hat-AI-Innovation-Team/its_hub at e4d00d1), each rule
on a scripted engine (a tree of steps keyed by the partial solution) and a scripted
process reward model, the values worked out by hand in the comments.

Cited files: ``its_hub/algorithms/beam_search.py``, ``its_hub/algorithms/particle_gibbs.py``,
``its_hub/lms.py`` (``StepGeneration``), ``README.md`` and ``docs/algorithms.md``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepNote
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.errors import FanOutError, SpecError
from scaffolds.problem import Problem
from scaffolds.spec.build import SpecLimits, build_strategy, spec_of, spec_string
from scaffolds.strategies import Beam, ParticleFilter
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.beam import finished
from testing.scripted_verifier import ScriptedVerifier
from tests.scaffolds.scripted import partial_of, tree_engine

PROBLEM = Problem.from_messages((Message("user", "What is 12 * 4?"),))
README = Path(__file__).resolve().parents[3] / "README.md"

EOS, SEPARATOR = False, True
"""Scripted ``stop_matched``: no stop string matched (end of sequence), the separator did."""

BEAM_ITS_HUB = (
    'beam(semantics="its_hub", width=4, budget=32, max_steps=32, aggregate="prod", temperature=0.8)'
)
"""its_hub's documented beam search (docs/algorithms.md:76-85: ``max_steps=32``, a
``prod`` process reward model, ``beam_width=4``, ``budget=32``; lms.py:37: 0.8)."""
PF_ITS_HUB = (
    'particle_filter(semantics="its_hub", n=8, max_steps=32, aggregate="prod", temperature=0.8)'
)
"""its_hub's documented particle filtering (README.md:32-41, docs/algorithms.md:105-114:
``max_steps=32``, a ``prod`` process reward model, ``budget=8``; lms.py:37: 0.8)."""


def step(text: str, matched: bool = SEPARATOR) -> Completion:
    return Completion(text, "stop", completion_tokens=len(text.split()), stop_matched=matched)


def chain_engine() -> MockEngine:
    """Every step ``s<k>`` (the k-th step), ended at the separator: nothing stops a path
    but the step count."""

    def reply(request: GenerateRequest) -> list[Completion]:
        k = partial_of(request).count("\n\n") + 1
        return [step(f"s{k}")] * request.params.n

    return MockEngine(reply)


def by_step(table: dict[str, float]) -> ScriptedVerifier:
    """A process reward model: one score per step, from ``table``."""
    return ScriptedVerifier(lambda text: [table[s] for s in text.split("\n\n")])


def requests(engine: MockEngine) -> list[tuple[str, int]]:
    return [(partial_of(r), r.params.n) for r in engine.requests]


def notes(result: RunResult, kind: str) -> list[StepNote]:
    return [e for e in result.events if isinstance(e, StepNote) and e.kind == kind]


async def run(strategy: Strategy, engine: MockEngine, verifier: ScriptedVerifier) -> RunResult:
    settings = RunSettings(verifier=verifier, params=SamplingParams(seed=7))
    return await run_scaffold(strategy, PROBLEM, engine, settings)


FIRSTS = {f"\\boxed{{{k}}}": k / 10 for k in range(1, 7)}
"""Six finished first steps, scored 0.1 ... 0.6."""


async def test_its_hub_first_level_is_budget_over_width() -> None:
    """its_hub draws ``budget // beam_width`` first paths (beam_search.py:140-144), where
    the default draws ``width * expand``, as search-and-learn starts from ``config.n``
    beams (huggingface/search-and-learn src/sal/search/beam_search.py:43-44): width 2,
    budget 6 -> 3 first steps (the best of them, 0.3, wins); width 2, expand 3 -> 6 (0.6
    wins)."""
    tree = {"": [step(text, EOS) for text in FIRSTS]}
    engine, verifier = tree_engine(tree), ScriptedVerifier(lambda text: FIRSTS[text])
    result = await run(Beam(semantics="its_hub", width=2, budget=6, max_steps=3), engine, verifier)
    assert requests(engine) == [("", 3)]
    assert [len(batch[1]) for batch in verifier.batches] == [3]
    assert result.solutions[0].text == "\\boxed{3}"

    engine, verifier = tree_engine(tree), ScriptedVerifier(lambda text: FIRSTS[text])
    result = await run(Beam(width=2, expand=3, max_steps=3), engine, verifier)
    assert requests(engine) == [("", 6)]
    assert result.solutions[0].text == "\\boxed{6}"


STOPS = {
    "": [step("Let me think", EOS)],
    "Let me think\n\n": [step("", EOS)],
    "Let me think\n\n\n\n": [step("so \\boxed{48", EOS)],
}
"""A step that ended at end of sequence, an empty one, then ``\\boxed`` left unclosed."""


@pytest.mark.parametrize(
    ("strategy", "default"),
    [
        (Beam(semantics="its_hub", width=1, budget=1, max_steps=8), Beam(width=1, expand=1)),
        (ParticleFilter(semantics="its_hub", n=1, max_steps=8), ParticleFilter(n=1)),
    ],
    ids=["beam", "particle_filter"],
)
async def test_its_hub_stops_only_at_boxed_or_the_step_count(
    strategy: Strategy, default: Strategy
) -> None:
    """its_hub's ``is_stopped`` is ``len(steps_so_far) >= max_steps`` or the stop token
    (``README.md:32``: ``r"\\boxed"``) in the step (lms.py:181-189): end of sequence and an
    empty step go on, and ``\\boxed`` stops as a substring, closed or not. The default
    ends the path at the first step (it ended at end of sequence, as search-and-learn's
    beam_search.py:125-131 completes a beam)."""
    engine = tree_engine(STOPS)
    result = await run(strategy, engine, ScriptedVerifier(lambda text: 0.5))
    assert requests(engine) == [("", 1), ("Let me think\n\n", 1), ("Let me think\n\n\n\n", 1)]
    [solution] = result.solutions
    assert solution.text == "Let me think\n\n\n\nso \\boxed{48" and not solution.cut_short

    engine = tree_engine(STOPS)
    result = await run(default, engine, ScriptedVerifier(lambda text: 0.5))
    assert requests(engine) == [("", 1)]
    assert result.solutions[0].text == "Let me think"


@pytest.mark.parametrize(
    ("strategy", "steps"),
    [
        (Beam(semantics="its_hub", width=1, budget=1, max_steps=2), 3),
        (ParticleFilter(semantics="its_hub", n=1, max_steps=2), 3),
        (Beam(width=1, expand=1, max_steps=2), 2),
        (ParticleFilter(n=1, max_steps=2), 2),
    ],
    ids=["beam-its_hub", "pf-its_hub", "beam-default", "pf-default"],
)
async def test_its_hub_writes_one_step_more_than_max_steps(strategy: Strategy, steps: int) -> None:
    """its_hub checks the step count before the new step (lms.py:181-184: stopped when
    ``len(steps_so_far) >= max_steps``), so ``max_steps=2`` writes s1, s2 and s3; the
    default stops at 2 steps."""
    engine = chain_engine()
    result = await run(strategy, engine, ScriptedVerifier(lambda text: 0.5))
    assert len(engine.requests) == steps
    [solution] = result.solutions
    assert solution.text == "\n\n".join(f"s{k}" for k in range(1, steps + 1))
    assert not solution.cut_short


FILL = {
    "": [step("12 * 4 = \\boxed{48}", EOS), step("Let me think"), step("x"), step("y")],
    "Let me think\n\n": [step("so 48"), step("hmm")],
}
FILL_SCORES = {"12 * 4 = \\boxed{48}": 0.9, "Let me think": 0.5, "x": 0.1, "y": 0.2}
FILL_SCORES |= {"so 48": 0.6, "hmm": 0.4}


def fill_verifier() -> ScriptedVerifier:
    return ScriptedVerifier(lambda text: FILL_SCORES[text.split("\n\n")[-1]])


async def test_its_hub_finished_paths_fill_the_beam() -> None:
    """width 2, budget 4 (2 copies). Level 1: A (finished, 0.9) and B (0.5), both kept.
    its_hub copies the kept paths copy by copy (beam_search.py:153-158) and continues
    only B's copies (beam_search.py:79-81): pool [A, B1 0.6, A, B2 0.4]; the stable sort
    (beam_search.py:150) keeps [A, A], every kept path is finished, and the search ends
    (beam_search.py:146) with A."""
    engine, verifier = tree_engine(FILL), fill_verifier()
    result = await run(Beam(semantics="its_hub", width=2, budget=4, max_steps=8), engine, verifier)
    assert requests(engine) == [("", 2), ("Let me think\n\n", 2)]
    level1, level2 = notes(result, "beam")
    a = level1.values["kept"][0]
    assert level1.values["scores"] == [0.9, 0.5]
    assert level2.values["kept"] == [a, a] and level2.values["scores"] == [0.9, 0.9]
    assert result.solutions[0].text == "12 * 4 = \\boxed{48}"


async def test_default_keeps_a_finished_path_once() -> None:
    """The same tree by default (width 2, expand 2, max_steps 2): level 1 draws all four
    and keeps A (0.9) and B (0.5); level 2's pool is A once with B1 0.6 and B2 0.4, so
    the beam is [A, B1]."""
    engine, verifier = tree_engine(FILL), fill_verifier()
    result = await run(Beam(width=2, expand=2, max_steps=2), engine, verifier)
    assert requests(engine) == [("", 4), ("Let me think\n\n", 2)]
    level1, level2 = notes(result, "beam")
    assert level2.values["scores"] == [0.9, 0.6]
    assert level2.values["kept"][0] == level1.values["kept"][0]
    assert level2.values["kept"][1] != level2.values["kept"][0]


PROD = {
    "": [step("X"), step("Y")],
    "X\n\n": [step("\\boxed{1}", EOS), step("\\boxed{2}", EOS)],
    "Y\n\n": [step("\\boxed{3}", EOS), step("\\boxed{4}", EOS)],
}
PROD_SCORES = {"X": 0.9, "Y": 0.6, "\\boxed{1}": 0.7, "\\boxed{2}": 0.1}
PROD_SCORES |= {"\\boxed{3}": 0.95, "\\boxed{4}": 0.2}


@pytest.mark.parametrize(
    ("how", "answer"), [("prod", "X\n\n\\boxed{1}"), ("last", "Y\n\n\\boxed{3}")]
)
async def test_its_hub_beam_with_prod_aggregation(how: str, answer: str) -> None:
    """its_hub's documented process reward model aggregates by ``prod`` (README.md:33-37;
    reward_hub.py:23-27 passes ``aggregation_method`` to the model). Width 2, budget 4:
    both first steps are kept (X 0.9, Y 0.6), each continued 2 ways. Products: X,1
    0.9*0.7 = 0.63, X,2 0.09, Y,3 0.6*0.95 = 0.57, Y,4 0.12, so prod picks X,1; by the
    last step alone Y,3 (0.95) wins."""
    engine, verifier = tree_engine(PROD), by_step(PROD_SCORES)
    strategy = Beam(semantics="its_hub", width=2, budget=4, max_steps=8, aggregate=how)
    result = await run(strategy, engine, verifier)
    assert sorted(requests(engine)) == [("", 2), ("X\n\n", 2), ("Y\n\n", 2)]
    assert result.solutions[0].text == answer
    expected = [0.63, 0.57] if how == "prod" else [0.95, 0.7]
    assert notes(result, "beam")[-1].values["scores"] == pytest.approx(expected)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


@pytest.mark.parametrize("how", ["prod", "last"])
async def test_its_hub_particle_weights_with_prod_aggregation(how: str) -> None:
    """A particle's log weight is the logit of its (``prod``-aggregated) score
    (particle_gibbs.py:52-56, :169). Round 1: P 0.8, Q 1e-9 (clipped to 1e-7: logit
    -16.1), so both draws are P (Q's chance ~2.5e-8 each). Round 2 continues P two ways:
    P,1 scored 0.5 and P,2 0.6; by prod 0.4 and 0.48, by the last step 0.5 and 0.6."""
    tree = {"": [step("P"), step("Q")], "P\n\n": [step("\\boxed{1}"), step("\\boxed{2}")]}
    scores = {"P": 0.8, "Q": 1e-9, "\\boxed{1}": 0.5, "\\boxed{2}": 0.6}
    engine = tree_engine(tree)
    strategy = ParticleFilter(semantics="its_hub", n=2, max_steps=8, aggregate=how)
    result = await run(strategy, engine, by_step(scores))
    assert requests(engine) == [("", 2), ("P\n\n", 2)]
    first, second = notes(result, "resample")
    assert first.values["log_weights"] == pytest.approx([logit(0.8), logit(1e-7)])
    assert first.values["drawn"] == [0, 0]
    weights = [0.4, 0.48] if how == "prod" else [0.5, 0.6]
    assert second.values["log_weights"] == pytest.approx([logit(w) for w in weights])


async def test_temperature_is_each_steps_own() -> None:
    """its_hub samples every step at ``StepGeneration``'s temperature, 0.8 by default
    (lms.py:37, passed at :144 and :178); unset, a step keeps the request's."""
    engine = chain_engine()
    strategy = Beam(semantics="its_hub", width=1, budget=1, max_steps=1, temperature=0.8)
    settings = RunSettings(
        verifier=ScriptedVerifier(lambda text: 0.5), params=SamplingParams(temperature=0.3)
    )
    await run_scaffold(strategy, PROBLEM, engine, settings)
    assert [r.params.temperature for r in engine.requests] == [0.8, 0.8]
    engine = chain_engine()
    await run_scaffold(ParticleFilter(n=1, max_steps=1), PROBLEM, engine, settings)
    assert [r.params.temperature for r in engine.requests] == [0.3]


@pytest.mark.parametrize(
    ("text", "eos", "before", "default", "its_hub"),
    [
        ("", False, 0, True, False),  # an empty step at the separator
        ("x", True, 0, True, False),  # end of sequence
        ("so \\boxed{48", False, 0, False, True),  # unclosed: no boxed answer to read
        ("\\boxed{48}", False, 0, True, True),
        ("x", False, 1, True, False),  # max_steps=2: the default's 2nd step, its_hub's 2nd
        ("x", False, 2, True, True),  # its_hub's 3rd step (lms.py:181-184)
    ],
)
def test_finished(text: str, eos: bool, before: int, default: bool, its_hub: bool) -> None:
    """Whether a step ends its path, with ``max_steps=2``: by default an empty step, end of
    sequence, a readable ``\\boxed{}`` answer or the ``max_steps``-th step; its_hub only
    ``\\boxed`` in the step (lms.py:185-189) or a step after ``max_steps`` (lms.py:181-184)."""
    assert finished(text, eos, before, 2, "default") is default
    assert finished(text, eos, before, 2, "its_hub") is its_hub


# -- specs ------------------------------------------------------------------------------------
ROOMY = SpecLimits(max_calls=1185)
"""The server's cap that the documented beam search needs (``--spec-max-calls 1185``)."""


@pytest.mark.parametrize(
    ("spec", "canonical", "calls", "samples"),
    [
        (
            BEAM_ITS_HUB,
            'beam(semantics="its_hub", budget=32, max_steps=32, aggregate="prod", temperature=0.8)',
            1185,
            2112,
        ),
        (
            PF_ITS_HUB,
            'particle_filter(semantics="its_hub", max_steps=32, aggregate="prod", temperature=0.8)',
            528,
            528,
        ),
    ],
)
def test_its_hub_specs_round_trip_and_need_a_higher_cap(
    spec: str, canonical: str, calls: int, samples: int
) -> None:
    """The README's specs round-trip through both forms (``width=4`` and ``n=8``, its_hub's
    documented values, are the defaults, so the canonical form leaves them out). The beam plans
    at most 1 + 32 levels * 4 + 33 * 32 scored = 1185 calls, particle filtering 2 * 8 * 33
    = 528: over the default cap of 256, so the README names ``--spec-max-calls``."""
    strategy = build_strategy(spec, limits=ROOMY)
    assert spec_string(strategy) == canonical
    assert build_strategy(canonical, limits=ROOMY) == strategy
    assert build_strategy(spec_of(strategy), limits=ROOMY) == strategy
    assert (strategy.max_calls(), strategy.max_samples()) == (calls, samples)
    with pytest.raises(FanOutError):
        build_strategy(spec)


def test_readme_rows_run_the_documented_specs() -> None:
    """README's beam and particle filter rows give these specs, and the cap they need."""
    text = README.read_text()
    for spec in (BEAM_ITS_HUB, PF_ITS_HUB):
        assert f"`{spec}`" in text
    assert "--spec-max-calls 1185" in text


@pytest.mark.parametrize(
    ("spec", "message", "param"),
    [
        ('beam(semantics="its_hub")', 'beam.budget: is needed for semantics="its_hub"', "budget"),
        (
            'beam(semantics="its_hub", width=4, budget=30)',
            "beam.budget: must be a multiple of width=4",
            "budget",
        ),
        (
            'beam(semantics="its_hub", budget=8, expand=2)',
            'beam.expand: is not for semantics="its_hub"',
            "expand",
        ),
        ("beam(budget=8)", 'beam.budget: is for semantics="its_hub"', "budget"),
        ('beam(semantics="sal")', "beam.semantics:", "semantics"),
        ("particle_filter(temperature=3)", "particle_filter.temperature:", "temperature"),
    ],
)
def test_its_hub_spec_errors(spec: str, message: str, param: str) -> None:
    with pytest.raises(SpecError) as info:
        build_strategy(spec)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.param == param


def test_default_specs_are_unchanged() -> None:
    """The new fields leave today's specs as they were (defaults are not written)."""
    assert spec_string(build_strategy("beam(width=2, expand=3)")) == "beam(width=2, expand=3)"
    assert spec_string(build_strategy("particle_filter(n=4)")) == "particle_filter(n=4)"
    assert spec_string(Beam()) == "beam" and spec_string(ParticleFilter()) == "particle_filter"
