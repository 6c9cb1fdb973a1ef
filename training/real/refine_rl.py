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
stages look for an arm's adapter.

>>> from pathlib import Path
>>> grpo_rows_path(Experiment(Path("runs/r3"), parent=Path("runs/r2")), "gsr").as_posix()
'runs/r3/train/gsr/grpo_rows.jsonl'
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from training.real.arms import Experiment, write_rows

__all__ = ["grpo_rows_path", "refine_grpo_rows", "train_refine_grpo"]


def grpo_rows_path(exp: Experiment, arm: str) -> Path:
    return exp.arm_dir(arm) / "grpo_rows.jsonl"


def refine_grpo_rows(
    exp: Experiment, arm: str = "gsr", *, mixed_only: bool = True, seed: int = 0
) -> list[dict[str, Any]]:
    """The arm's GRPO rows (shuffled by ``seed``), built from its samples on first use."""
    from scaffolds.answers import is_correct
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
            exp.base_dir(), rows, [reward], exp.arm_dir(arm), settings, grpo, rollout,
            init_adapter=init,
        )  # fmt: skip
