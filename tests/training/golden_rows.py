"""The training rows the demo and ``ponder train data`` build on a fixed seed.

:func:`golden_rows` runs every built-in scaffold (and two compositions) over a seeded
set of demo addition problems through :func:`training.pipeline.make_data`, with a
deterministic MockEngine, in both prompt sets (compact text, default chat), and one
GRPO rollout group per mode and set (:func:`training.rollouts.rollout_group`). The demo
trainers' own rows are pinned beside them, in ``experiments/tiny_models/tests``.
``tests/training/fixtures/rows_before.json`` pins its output as it was before the
scaffold code path was unified; :mod:`tests.training.test_training_golden` compares.

Run ``python -m tests.training.golden_rows OUT.json`` to write it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.evaluation.addition_task import problems
from scaffolds.evaluation.problems import ProblemRow
from training.pipeline import make_data
from training.rollouts import rollout_group
from training.runs import RunDir

SCAFFOLDS = (
    "single",
    'single(prompt="solve")',
    "majority(k=3)",
    "best_of_n(n=3)",
    "gsr(n=3)",
    "rc(steps=3)",
    "self_refine(max_rounds=2)",
    "abstraction(m=2, n=2)",
    "gsr(n=2, solver=rc(steps=2))",
    "majority(k=2, solver=abstraction(m=2, n=1))",
)
MODES = ("direct", "gsr_refine", "rc_continue", "self_refine_refine", "abstraction_solve")


def _reply(request: GenerateRequest) -> list[str]:
    """Deterministic samples: each a hash-picked mix of right and wrong sums."""
    text = request.prompt_text()
    digits = [part for part in text.replace("=", "+").split("+") if part[-3:].isdigit()]
    try:
        a, b = int(digits[0][-3:]), int(digits[1][:3])
        gold = a + b
    except (IndexError, ValueError):
        gold = 0
    out = []
    for i in range(request.params.n):
        h = int(hashlib.sha256(f"{text}|{i}".encode()).hexdigest(), 16)
        pick = h % 4
        answer = gold if pick < 2 else gold + (h % 7) + 1
        if "VERDICT" in text or text.endswith("?"):
            out.append("ok" if pick == 0 else "VERDICT: CORRECT" if pick == 1 else "bad")
        else:
            out.append(f"\\boxed{{{answer}}}" if pick % 2 else str(answer))
    return out


async def _data_rows(prompt_set: str, chat: bool) -> dict[str, Any]:
    items = problems("train", 4, seed=7)
    history = (Message("system", "Be brief."),) if chat else ()
    rows = [ProblemRow(p.id, p.problem, p.answer, history=history) for p in items]
    out: dict[str, Any] = {}
    for spec in SCAFFOLDS:
        with tempfile.TemporaryDirectory() as tmp:
            run = RunDir(tmp)
            await make_data(
                run,
                rows,
                MockEngine(_reply),
                scaffold=spec,
                prompt_set=prompt_set,
                chat=chat,
                progress=False,
                inline_grading=True,
                concurrency=1,
                direct_ratio=0.25,
            )
            data = Path(tmp) / "data"
            out[spec] = {
                path.stem: [json.loads(line) for line in path.read_text().splitlines()]
                for path in sorted(data.glob("*.jsonl"))
            }
    return out


async def _rollouts(prompt_set: str, chat: bool) -> dict[str, Any]:
    item = problems("train", 1, seed=3)[0]
    prompt: Any = item.problem
    if chat:
        prompt = [{"role": "user", "content": item.problem}]
    out: dict[str, Any] = {}
    for mode in MODES:
        for stored in (False, True):
            row: dict[str, Any] = {"prompt": prompt, "mode": mode}
            if stored:
                row |= {
                    "candidates": ["1", "2"],
                    "summary": "S",
                    "solution": "X",
                    "feedback": "F",
                    "abstraction": "N",
                }
            group = await rollout_group(row, MockEngine(_reply), n=2, prompt_set=prompt_set)
            plan = group.plan
            out[f"{mode}/{'stored' if stored else 'made'}"] = {
                "kind": plan.kind,
                "prompt": plan.prompt_text,
                "context": plan.context,
                "completions": [c.text for c in group.completions],
                "steps": [
                    [e.kind, e.label, e.prompt]
                    for e in group.events
                    if getattr(e, "type", "") == "step_started"
                ],
            }
    return out


def golden_rows() -> dict[str, Any]:
    """Every row and rollout above, as JSON-ready data."""
    return {
        "data/compact": asyncio.run(_data_rows("compact", False)),
        "data/default-chat": asyncio.run(_data_rows("default", True)),
        "rollouts/compact": asyncio.run(_rollouts("compact", False)),
        "rollouts/default-chat": asyncio.run(_rollouts("default", True)),
    }


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(golden_rows(), indent=1, sort_keys=True) + "\n")
