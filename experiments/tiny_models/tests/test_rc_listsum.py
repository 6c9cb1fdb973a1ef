"""The Reasoning Cache list-sum demonstration: task, RC data, training, engine, evaluation.

Everything runs on the CPU in seconds: an oracle MockEngine stands in for a trained
model where the model does not matter, and a tiny random Qwen2 where it does.
"""

from __future__ import annotations

import asyncio
import doctest
import importlib
from pathlib import Path

import pytest

from experiments.tiny_models.listsum_task import (
    READ_PER_CHUNK,
    ListSumProblem,
    iter_problems,
    problems,
    split_of,
    state_of_chunk,
)
from experiments.tiny_models.rc_train import (
    direct_row,
    oracle_engine,
    oracle_reply,
    rc_rows,
    row_tokens,
)
from scaffolds import RunSettings, SamplingParams, solve
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest
from scaffolds.spec.registry import get_prompt_set

COMPACT = get_prompt_set("compact")


@pytest.mark.parametrize(
    "name", ["listsum_task", "rc_train", "rc_experiments", "rc_report", "batched_engine"]
)
def test_module_doctests(name: str) -> None:
    pytest.importorskip("transformers")
    module = importlib.import_module(f"experiments.tiny_models.{name}")
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0
    assert failures == 0


# --------------------------------------------------------------------------- the task


def test_problems_are_deterministic_distinct_and_in_their_split() -> None:
    first = problems("test", 200, lengths=(8, 16), seed=3)
    assert first == problems("test", 200, lengths=(8, 16), seed=3)
    assert len({p.problem for p in first}) == 200
    assert {p.length for p in first} == {8, 16}
    assert all(split_of(p.problem) == "test" for p in first)
    train = problems("train", 500, lengths=(8, 16), seed=3)
    assert not {p.problem for p in train} & {p.problem for p in first}


def test_problem_text_round_trips_and_labels_are_distinct() -> None:
    stream = iter_problems("train", lengths=(26,), seed=1)
    for _ in range(20):
        item = next(stream)
        assert ListSumProblem.parse(item.problem) == item
        assert sorted(item.labels) == sorted("abcdefghijklmnopqrstuvwxyz")
    with pytest.raises(ValueError):
        ListSumProblem("aa", (1, 2))
    with pytest.raises(ValueError):
        ListSumProblem.parse("347+589=")


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 24])
def test_a_trajectory_reads_every_number_and_ends_with_the_answer(length: int) -> None:
    for item in problems("train", 30, lengths=(length,)):
        steps = item.trajectory()
        assert len(steps) == item.chunks_needed == -(-length // READ_PER_CHUNK)
        read = "".join(chunk.partition(";")[0] for _, chunk in steps)
        assert read[0::3] == item.labels
        assert read[1::3] == "".join(map(str, item.digits))
        last = state_of_chunk(steps[-1][1])
        assert last == f"={item.answer}"
        assert item.chunk(last) == f";{last}"  # past the end the state stays


# --------------------------------------------------------------------------- RC data


def test_the_oracle_solves_through_the_rc_scaffold() -> None:
    async def run() -> list[bool]:
        out = []
        for item in problems("test", 20, lengths=(5, 24)):
            spec = f"rc(steps={item.chunks_needed})"
            result = await solve(
                spec, item.problem, oracle_engine(), RunSettings(prompts="compact")
            )
            out.append(result.solutions[0].answer == item.answer)
        return out

    assert all(asyncio.run(run()))


def test_rc_rows_are_rendered_by_the_compact_templates() -> None:
    item = ListSumProblem.parse("k7q3b9z1m4=")
    rows = rc_rows([item], extra_steps=1)
    states = [s for s, _ in item.trajectory(item.chunks_needed + 1)]
    chunks = [c for _, c in item.trajectory(item.chunks_needed + 1)]
    reasoning = [r for r in rows if r["kind"] == "rc_reasoning"]
    summaries = [r for r in rows if r["kind"] == "rc_summary"]
    assert [r["completion"] for r in reasoning] == chunks
    assert reasoning[0]["prompt"] == COMPACT.template("rc_reasoning_start").render(
        problem=item.problem
    )
    for row, state in zip(reasoning[1:], states[1:], strict=True):
        assert row["prompt"] == COMPACT.template("rc_reasoning_continue").render(
            problem=item.problem, summary=state
        )
    previous = [COMPACT.text("rc_no_summary"), *states[1:]]
    for row, before, chunk in zip(summaries, previous, chunks, strict=False):
        assert row["prompt"] == COMPACT.template("rc_summary").render(
            problem=item.problem, summary=before, attempt=chunk
        )
        assert row["completion"] == state_of_chunk(chunk)
    assert len(summaries) == item.chunks_needed
    assert all(r["prompt_set"] == "compact" and r["answer"] == "4" for r in rows)
    assert all(oracle_reply(r["prompt"]) == r["completion"] for r in rows)


def test_direct_rows_use_the_solve_template() -> None:
    item = ListSumProblem.parse("a9b9=")
    row = direct_row(item)
    assert row["prompt"] == COMPACT.template("solve").render(problem="a9b9=")
    assert row["completion"] == "8"
    assert row_tokens(row) == len("a9b9=") + 1 + 1


def test_the_oracle_refuses_other_prompts() -> None:
    with pytest.raises(ValueError):
        oracle_reply("a1b2=[3,4]")


# --------------------------------------------------------------------------- training


def test_two_training_steps_change_the_weights() -> None:
    pytest.importorskip("transformers")
    import torch
    from transformers import Qwen2ForCausalLM

    from experiments.tiny_models.model import model_config
    from experiments.tiny_models.rc_train import train

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        model_config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=16,
        )
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = rc_rows(problems("train", 8, lengths=(4, 6)))
    per_step = 4 * sum(row_tokens(r) for r in rows) // len(rows)
    info = train(model, rows, tokens=per_step, batch=4, warmup=1, log_every=0)
    assert info["steps"] >= 1 and info["tokens"] >= per_step
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert "model.embed_tokens.weight" in changed


# --------------------------------------------------------------------------- the engine


def test_batched_engine_matches_local_engine_greedy(shipped_model_dir: Path) -> None:
    pytest.importorskip("transformers")
    from experiments.tiny_models.batched_engine import BatchedEngine
    from scaffolds.engines.local import LocalEngine
    from scaffolds.evaluation.addition_task import problems as addition_problems

    prompts = [p.problem for p in addition_problems("test", 12)] + ["12+3=[15,14]", "7+"]

    async def answers(engine: object) -> list[list[str]]:
        calls = [
            engine.generate(  # type: ignore[attr-defined]
                GenerateRequest(p, SamplingParams(temperature=0.0, max_tokens=6, n=1 + i % 2))
            )
            for i, p in enumerate(prompts)
        ]
        results = await asyncio.gather(*calls)
        await engine.aclose()  # type: ignore[attr-defined]
        return [[c.text for c in r.completions] for r in results]

    local = asyncio.run(answers(LocalEngine(shipped_model_dir, threads=1)))
    batched = asyncio.run(answers(BatchedEngine(shipped_model_dir)))
    assert batched == local


def test_batched_engine_samples_the_same_whatever_the_batch(tiny_model_dir: Path) -> None:
    from experiments.tiny_models.batched_engine import BatchedEngine

    async def sample(max_batch: int) -> tuple[list[tuple[str, ...]], int]:
        engine = BatchedEngine(tiny_model_dir, max_batch=max_batch)
        calls = [
            engine.generate(
                GenerateRequest(f"a{i}b2=", SamplingParams(n=2, max_tokens=5, seed=100 + i))
            )
            for i in range(6)
        ]
        results = await asyncio.gather(*calls)
        await engine.aclose()
        assert all(r.usage.calls == 1 and r.usage.prompt_tokens == 5 for r in results)
        return [tuple(c.text for c in r.completions) for r in results], engine.batches

    big, big_batches = asyncio.run(sample(64))
    small, small_batches = asyncio.run(sample(2))
    assert big == small
    assert big_batches < small_batches


def test_batched_engine_refuses_what_it_does_not_support(tiny_model_dir: Path) -> None:
    from experiments.tiny_models.batched_engine import BatchedEngine
    from scaffolds.errors import InvalidRequestError

    engine = BatchedEngine(tiny_model_dir)
    request = GenerateRequest("a1=", SamplingParams(stop=("x",)))
    with pytest.raises(InvalidRequestError):
        asyncio.run(engine.generate(request))


# --------------------------------------------------------------------------- evaluation


def test_rc_runs_over_the_tiny_model_and_is_scored(tiny_model_dir: Path) -> None:
    from experiments.tiny_models.rc_experiments import evaluate

    items = problems("test", 6, lengths=(6,))
    out = asyncio.run(evaluate("rc", tiny_model_dir, items, [0, 1]))
    assert set(out) == {"greedy", "single", "rc greedy", "rc"}
    rc = out["rc"]
    assert rc["spec"].startswith("rc(steps=3,")
    assert len(rc["correct"]) == 2 and len(rc["correct"][0]) == 6
    assert 0.0 <= rc["summary"]["accuracy"] <= 1.0
    assert len(out["rc greedy"]["first_error"]) == 6
    assert rc["completion_tokens_mean"] > out["single"]["completion_tokens_mean"]


def test_first_error_finds_the_first_wrong_step() -> None:
    from experiments.tiny_models.rc_experiments import RC_GREEDY, run_condition

    items = [ListSumProblem.parse("a1b2c3d4e5f6=")]
    right = asyncio.run(run_condition(oracle_engine(), RC_GREEDY, items, seed=0))
    assert right["correct"] == [1] and right["first_error"] == [None]

    def wrong_third_chunk(request: GenerateRequest) -> str:
        prompt = request.prompt_text()
        return "e55f62;=2" if prompt.endswith("|e0>") else oracle_reply(prompt)

    engine = MockEngine(wrong_third_chunk)
    wrong = asyncio.run(run_condition(engine, RC_GREEDY, items, seed=0))
    assert wrong["correct"] == [0] and wrong["first_error"] == [(4, "reasoning")]


def test_step_accuracy_scores_every_step_of_the_oracle_trajectory(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    from experiments.tiny_models.rc_experiments import step_accuracy
    from experiments.tiny_models.rc_report import plot_steps, step_table

    out = asyncio.run(step_accuracy(tiny_model_dir, [5], 4))
    kinds = out["L=5"]
    assert (len(kinds["start"]), len(kinds["continue"]), len(kinds["summary"])) == (4, 8, 8)
    assert all(score in (0, 1) for scores in kinds.values() for score in scores)
    assert "| rc | 5 |" in step_table({"rc": out})
    assert plot_steps({"rc": out}, tmp_path / "steps.png").stat().st_size > 0
