"""The scaffold experiments' statistics and GSR data building, on a few problems.

MockEngine stands in for the model: no weights, no timing.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.tiny_models.experiments import GREEDY, GSR4, MAJ4, SINGLE, run_condition
from experiments.tiny_models.gsr_train import direct_row, encode_rows, lr_at, refine_rows
from scaffolds import RunSettings, solve
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest
from scaffolds.evaluation.addition_task import AdditionProblem, parse_problem, problems
from scaffolds.evaluation.stats import add_pairs, markdown, paired, per_problem, summarize


def test_summary_is_over_problems_averaged_over_seeds() -> None:
    matrix = [[1, 0, 1, 1], [1, 0, 0, 1], [1, 1, 0, 1]]  # 3 seeds x 4 problems
    scores = per_problem(matrix)
    assert scores == pytest.approx([1.0, 1 / 3, 1 / 3, 1.0])
    s = summarize(matrix)
    mean = sum(scores) / 4
    se = math.sqrt(sum((x - mean) ** 2 for x in scores) / 3 / 4)
    assert s["accuracy"] == pytest.approx(mean)
    assert s["se"] == pytest.approx(se)
    assert s["ci95"] == pytest.approx([mean - 1.96 * se, mean + 1.96 * se])
    assert s["by_seed"] == pytest.approx([0.75, 0.5, 0.75])
    assert (s["problems"], s["seeds"]) == (4, 3)


def test_paired_difference_uses_per_problem_differences() -> None:
    a = [[1, 1, 0, 1], [1, 0, 0, 1]]
    b = [[0, 1, 0, 1], [0, 1, 0, 0]]
    diffs = [1.0, -0.5, 0.0, 0.5]
    d = paired(a, b)
    mean = sum(diffs) / 4
    se = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 3 / 4)
    assert d["diff"] == pytest.approx(mean)
    assert d["ci95"] == pytest.approx([mean - 1.96 * se, mean + 1.96 * se])
    # A single greedy run pairs with the other condition's per-problem mean.
    greedy = [[1, 0, 0, 1]]
    assert paired(a, greedy)["diff"] == pytest.approx((0 + 0.5 + 0 + 0) / 4)
    with pytest.raises(ValueError):
        paired(a, [[1, 0]])


def _handler(request: GenerateRequest) -> list[str]:
    """Right on even first operands when solving; refine always right; wrong otherwise."""
    prompt = request.prompt_text()
    item = parse_problem(prompt)
    n = request.params.n
    if "[" in prompt:
        return [item.answer] * n
    if item.a % 2 == 0:
        return [item.answer] * n
    return [str(int(item.answer) + 1)] * n


async def test_run_condition_scores_each_problem() -> None:
    items = problems("test", 6)
    engine = MockEngine(_handler)
    expected = [int(p.a % 2 == 0) for p in items]
    for condition in (GREEDY, SINGLE, MAJ4):
        run = await run_condition(engine, condition, items, seed=0, request_seeds=True)
        assert run["correct"] == expected
        assert run["answers"][0] is not None
    gsr = await run_condition(engine, GSR4, items, seed=1, request_seeds=False)
    assert gsr["correct"] == [1] * 6
    assert all(t > 0 for t in gsr["completion_tokens"])
    # Per-request seeds only for sampled conditions and only when asked for.
    seeds = {r.params.seed for r in engine.requests}
    assert None in seeds and any(s is not None for s in seeds)


async def test_refine_rows_match_the_prompt_the_gsr_scaffold_sends() -> None:
    item = AdditionProblem(347, 589)
    candidates = ["936", "926", "936", "946"]
    engine = MockEngine(lambda r: candidates if r.params.n == 4 else "936")
    await solve("gsr(n=4)", item.problem, engine, RunSettings(prompts="compact"))
    refine_prompt = engine.requests[-1].prompt_text()
    rows = refine_rows([item], [candidates])
    assert rows[0]["prompt"] == refine_prompt == "347+589=[936,926,936,946]"
    assert rows[0]["completion"] == "936"
    assert rows[0]["candidates_correct"] == 2
    # Every-candidate-wrong problems are kept (the correct answer is the target).
    wrong = refine_rows([item], [["1", "2", "3", "4"]])
    assert wrong[0]["candidates_correct"] == 0 and wrong[0]["completion"] == "936"
    assert direct_row(item)["prompt"] == item.problem


def test_encode_rows_puts_loss_on_completion_and_eos_only() -> None:
    from experiments.tiny_models.tokenizer import EOS, vocabulary

    vocab = vocabulary()
    rows = [direct_row(AdditionProblem(3, 4)), *refine_rows([AdditionProblem(1, 2)], [["3", "4"]])]
    ids, targets = encode_rows(rows)
    assert ids.shape == (2, len("1+2=[3,4]3") + 1)
    kept = targets[0][targets[0] != -100].tolist()
    assert kept == [vocab["7"], vocab[EOS]]
    kept = targets[1][targets[1] != -100].tolist()
    assert kept == [vocab["3"], vocab[EOS]]
    assert lr_at(0, 0.0, peak=1.0, warmup=2, seconds=10) == 0.5


def test_report_table_and_plot(tmp_path: Path) -> None:
    from experiments.tiny_models.report import plot

    def entry(correct: list[list[int]], tokens: float) -> dict[str, object]:
        return {
            "correct": correct,
            "summary": summarize(correct),
            "completion_tokens_mean": tokens,
            "prompt_tokens_mean": 8.0,
        }

    results: dict[str, object] = {
        "problems": 3,
        "seeds": [0, 1],
        "models": {
            "base": {"single": entry([[1, 0, 1], [0, 0, 1]], 4.0)},
            "gsr": {"gsr(n=4)": entry([[1, 1, 1], [1, 0, 1]], 20.0)},
        },
    }
    add_pairs(results, [("gsr/gsr(n=4)", "base/single"), ("gsr/nothing", "base/single")])
    assert list(results["paired"]) == ["gsr/gsr(n=4) - base/single"]  # type: ignore[call-overload]
    text = markdown(results)
    assert "| gsr | gsr(n=4) | 0.833 |" in text and "+0.333" in text
    assert plot(results, tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize("name", ["experiments", "gsr_train"])
def test_module_doctests(name: str) -> None:
    import doctest
    import importlib

    module = importlib.import_module(f"experiments.tiny_models.{name}")
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


def test_step_capped_training_redraws_candidates(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``steps`` stops the run at that many steps whatever the clock; ``refreshes``
    redraws the refine candidates from the model being trained, evenly spaced."""
    pytest.importorskip("torch")
    from experiments.tiny_models.gsr_train import train

    info = train(
        "gsr",
        tiny_model_dir,
        tmp_path / "out",
        seconds=1e9,
        steps=4,
        refreshes=1,
        data_problems=16,
        batch=8,
        warmup=1,
    )
    assert info["steps"] == 4 and info["max_steps"] == 4
    assert [r["step"] for r in info["refreshes"]] == [2]
    assert 0.0 <= info["refreshes"][0]["candidate_accuracy"] <= 1.0
    assert (tmp_path / "out" / "config.json").exists()
