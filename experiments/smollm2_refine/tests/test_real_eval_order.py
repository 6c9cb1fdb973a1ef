"""``experiments.smollm2_refine``'s evaluation order: seed by seed across the models, so a stopped
evaluation is still paired, and a finished (model, seed) starts no engine."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from experiments.smollm2_refine import evaluate as evaluate_module
from experiments.smollm2_refine.arms import Experiment
from scaffolds.evaluation.problems import ProblemRow


async def test_every_model_finishes_a_seed_before_the_next_and_done_work_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problems = [ProblemRow(id=f"p{i}", problem=f"{i}+{i}", answer=str(2 * i)) for i in range(3)]
    exp = Experiment(run=tmp_path, engine="vllm-merged", progress=False)
    done = tmp_path / "eval" / "base" / "seed-0.jsonl"
    done.parent.mkdir(parents=True)
    done.write_text("".join(json.dumps({"id": p.id}) + "\n" for p in problems))
    opened: list[tuple[str, ...]] = []
    ran: list[tuple[str, int]] = []

    @contextlib.asynccontextmanager
    async def fake_engines(
        _exp: Experiment, models: Sequence[str]
    ) -> AsyncIterator[dict[str, Any]]:
        opened.append(tuple(models))
        yield {m: m for m in models}

    async def fake_run_seed(
        _exp: Experiment, engine: Any, _problems: Any, path: Path, seed: int, *_: Any
    ) -> None:
        assert path == tmp_path / "eval" / engine / f"seed-{seed}.jsonl"
        ran.append((engine, seed))

    monkeypatch.setattr(evaluate_module, "open_engines", fake_engines)
    monkeypatch.setattr(evaluate_module, "_run_seed", fake_run_seed)
    await evaluate_module.evaluate(exp, problems, ["base", "gsr", "direct"], [0, 1])
    assert ran == [("gsr", 0), ("direct", 0), ("base", 1), ("gsr", 1), ("direct", 1)]
    assert opened == [("gsr",), ("direct",), ("base",), ("gsr",), ("direct",)]
