"""The addition task: deterministic splits that never overlap, and the JSONL form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaffolds.evaluation.addition_task import (
    SPLITS,
    AdditionProblem,
    iter_problems,
    parse_problem,
    problems,
    read_jsonl,
    split_of,
    write_jsonl,
)


def test_task_problem_and_answer_forms() -> None:
    item = AdditionProblem(347, 589)
    assert item.problem == "347+589="
    assert item.answer == "936"
    assert item.to_json() == {"id": "add-347-589", "problem": "347+589=", "answer": "936"}
    assert AdditionProblem(999, 999).answer == "1998"


def test_task_splits_never_overlap() -> None:
    drawn = {split: {(p.a, p.b) for p in problems(split, 2000, seed=3)} for split in SPLITS}
    assert drawn["train"].isdisjoint(drawn["validation"])
    assert drawn["train"].isdisjoint(drawn["test"])
    assert drawn["validation"].isdisjoint(drawn["test"])
    for split, pairs in drawn.items():
        assert len(pairs) == 2000
        assert all(split_of(a, b) == split for a, b in pairs)
        assert all(100 <= a <= 999 and 100 <= b <= 999 for a, b in pairs)


def test_task_split_sizes_are_roughly_as_designed() -> None:
    counts = {split: 0 for split in SPLITS}
    for a in range(100, 1000, 7):
        for b in range(100, 1000, 3):
            counts[split_of(a, b)] += 1
    total = sum(counts.values())
    assert 0.01 < counts["test"] / total < 0.03
    assert 0.01 < counts["validation"] / total < 0.03


def test_task_generators_are_deterministic_per_seed() -> None:
    assert problems("test", 50) == problems("test", 50)
    assert problems("test", 50, seed=1) != problems("test", 50, seed=0)
    assert problems("test", 10) == problems("test", 50)[:10]
    stream = iter_problems("train", seed=0)
    first = [next(stream) for _ in range(20)]
    stream = iter_problems("train", seed=0)
    assert [next(stream) for _ in range(20)] == first


def test_task_jsonl_round_trip(tmp_path: Path) -> None:
    rows = problems("validation", 25)
    path = tmp_path / "validation.jsonl"
    assert write_jsonl(path, rows) == 25
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert set(lines[0]) == {"id", "problem", "answer"}
    assert read_jsonl(path) == rows


def test_task_parse_problem_rejects_other_text() -> None:
    assert parse_problem("12+345=[357]") == AdditionProblem(12, 345)
    for bad in ("12-3=", "12+3", "+3=", "a+b="):
        with pytest.raises(ValueError):
            parse_problem(bad)
    with pytest.raises(ValueError):
        next(iter_problems("dev"))  # type: ignore[arg-type]
