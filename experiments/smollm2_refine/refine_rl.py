"""GRPO on the gsr refine step, from an arm's adapter: the ``grpo`` stage of a run with a
parent.

The prompts are refine contexts made of the policy's own candidates: the parent arm's
``majority(k)`` samples (the ``sample --model ARM`` stage) cut into groups of ``n``, by
default only the groups with right and wrong candidates (:func:`grpo_refine_rows`).
Each GRPO group samples the refinement ``num_generations`` times through gsr's own step
builder on the trainer's policy (:mod:`training.grpo`); the reward is the answer's
correctness. The rows are fixed on first use, so a resumed run trains on the same::

    RUN/sample-ARM/    majority(k) traces of the parent's ARM
    RUN/train/ARM/     grpo_rows.jsonl, checkpoint-N/, rollouts.jsonl, train.log, final/

``final/`` is the parent's adapter trained further, where the ``eval`` and ``ship``
stages look for an arm's adapter. Before training, :func:`reward_spread` (the ``spread``
stage) measures how many groups would give GRPO a gradient at each rollout temperature
(``spread.json`` there).

>>> from pathlib import Path
>>> grpo_rows_path(Experiment(Path("runs/r3"), parent=Path("runs/r2")), "gsr").as_posix()
'runs/r3/train/gsr/grpo_rows.jsonl'
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.smollm2_refine.arms import Experiment, open_engines, write_rows

__all__ = ["grpo_rows_path", "refine_grpo_rows", "reward_spread", "train_refine_grpo"]


def grpo_rows_path(exp: Experiment, arm: str) -> Path:
    return exp.arm_dir(arm) / "grpo_rows.jsonl"


def refine_grpo_rows(
    exp: Experiment, arm: str = "gsr", *, mixed_only: bool = True, seed: int = 0
) -> list[dict[str, Any]]:
    """The arm's GRPO rows (shuffled by ``seed``), built from its samples on first use."""
    from scaffolds.evaluation.answers import is_correct
    from training.regroup import grpo_refine_rows
    from training.runs import RunDir, read_rows

    path = grpo_rows_path(exp, arm)
    if path.exists():
        return read_rows(path)
    samples = exp.sample_dir(arm)
    if not (samples / "traces.jsonl").exists():
        raise ValueError(f"{samples}: no samples; run `sample --model {arm}` first")
    records = list(RunDir(samples).records())
    rows = grpo_refine_rows(records, is_correct, n=exp.n, mixed_only=mixed_only)
    if not rows:
        raise ValueError(f"{samples}: no candidate group to train the refine step on")
    random.Random(seed).shuffle(rows)
    write_rows(path, rows)
    return rows


def train_refine_grpo(
    exp: Experiment,
    settings: Any,
    grpo: Any,
    *,
    arm: str = "gsr",
    mixed_only: bool = True,
) -> Path:
    """GRPO of the parent's ``arm`` adapter on its refine step (resuming from the newest
    checkpoint); returns the adapter folder. ``settings``/``grpo``: TrainSettings,
    GRPOSettings."""
    from training.grpo import run_grpo
    from training.rewards import CorrectnessReward
    from training.rollouts import RolloutSettings

    init = exp.init_adapter(arm)
    if init is None:
        raise ValueError("the grpo stage trains an arm of the parent run: pass --parent")
    rows = refine_grpo_rows(exp, arm, mixed_only=mixed_only, seed=settings.seed)
    rollout = RolloutSettings(prompt_set=exp.prompts, num_candidates=exp.n)
    print(f"GRPO of arm {arm!r} (from {init}) on {len(rows)} refine groups; in {exp.arm_dir(arm)}")
    with CorrectnessReward(workers=1) as reward:
        return run_grpo(
            exp.base_dir(),
            rows,
            [reward],
            exp.arm_dir(arm),
            settings,
            grpo,
            rollout,
            init_adapter=init,
        )


def reward_spread(
    exp: Experiment,
    temperatures: Sequence[float],
    *,
    arm: str = "gsr",
    generations: int = 8,
    max_tokens: int = 128,
    limit: int | None = None,
    mixed_only: bool = True,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """What GRPO would see on the parent ``arm``'s refine step at each temperature: the
    mean reward of ``generations`` refinements per group, and the share of groups whose
    refinements are not all equally right (a group of equal rewards gives no gradient).
    The first ``limit`` GRPO rows, sampled through gsr's step builder on the parent's
    adapter (served as the ``eval`` stage serves it); written to ``spread.json`` in the
    arm's training folder."""
    from scaffolds.engines.protocol import Engine, SamplingParams
    from scaffolds.evaluation.answers import is_correct
    from training.rollouts import RolloutSettings, rollout_group

    if exp.parent is None:
        raise ValueError("the spread stage samples an arm of the parent run: pass --parent")
    rows = refine_grpo_rows(exp, arm, mixed_only=mixed_only, seed=seed)[:limit]
    rollout = RolloutSettings(prompt_set=exp.prompts, num_candidates=exp.n)
    gate = asyncio.Semaphore(exp.concurrency)

    async def rewards(engine: Engine, row: dict[str, Any], temperature: float) -> list[bool]:
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
        async with gate:
            group = await rollout_group(
                row,
                engine,
                n=generations,
                max_tokens=max_tokens,
                settings=rollout,
                params=params,
            )
        return [is_correct(str(row["answer"]), c.text) for c in group.completions]

    async def measure() -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        async with open_engines(exp.parent_run(), [arm], logs=exp.run) as engines:
            for temperature in temperatures:
                groups = await asyncio.gather(
                    *(rewards(engines[arm], row, temperature) for row in rows)
                )
                right = sum(sum(g) for g in groups)
                out[str(temperature)] = {
                    "mean_reward": right / max(1, generations * len(groups)),
                    "groups_with_spread": sum(0 < sum(g) < len(g) for g in groups)
                    / max(1, len(groups)),
                    "groups": len(groups),
                    "generations": generations,
                }
                print(f"T={temperature}: {out[str(temperature)]}", flush=True)
        return out

    result = asyncio.run(measure())
    exp.arm_dir(arm).mkdir(parents=True, exist_ok=True)
    (exp.arm_dir(arm) / "spread.json").write_text(json.dumps(result, indent=1) + "\n")
    return result
