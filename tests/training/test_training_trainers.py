"""SFT and GRPO (with the scaffold rollout) each run 2 steps on a tiny model and change it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from scaffolds.spec import get_prompt_set

pytest.importorskip("trl")


def _snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _changed(model: Any, before: dict[str, Any]) -> list[str]:
    import torch

    return [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]


def test_sft_two_steps_change_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    from training.common import TrainSettings, load_model
    from training.sft import make_sft_trainer

    model, tokenizer = load_model(tiny_model_dir, threads=1)
    rows = [
        {
            "prompt": f"{a}+{b}=[{a + b - 1},{a + b + 1}]",
            "completion": str(a + b),
            "kind": "gsr_refine",
        }
        for a in range(10, 14)
        for b in range(20, 22)
    ]
    settings = TrainSettings(
        max_steps=2, batch_size=4, learning_rate=1e-2, progress=False, use_cpu=True
    )
    trainer = make_sft_trainer(model, tokenizer, rows, tmp_path / "sft", settings, max_length=64)
    before = _snapshot(model)
    started = time.perf_counter()
    trainer.train()
    print(f"sft 2 steps: {time.perf_counter() - started:.2f}s")
    assert trainer.state.global_step == 2
    assert _changed(model, before)
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"][0].tolist()
    assert labels[0] == -100  # the prompt is masked out of the loss


def digit_share(completions: list[Any], **kwargs: Any) -> list[float]:
    """A reward that varies inside a group: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def test_grpo_two_steps_with_scaffold_rollout(tiny_model_dir: Path, tmp_path: Path) -> None:
    from training.common import TrainSettings, load_model
    from training.grpo import GRPOSettings, grpo_rows, make_grpo_trainer
    from training.rewards import CorrectnessReward
    from training.rollouts import RolloutSettings

    model, tokenizer = load_model(tiny_model_dir, threads=1)
    problems = [
        {"id": str(i), "problem": f"{10 + i}+{20 + i}=", "answer": str(30 + 2 * i)}
        for i in range(4)
    ]
    rows = grpo_rows(problems, {"direct": 1, "gsr_refine": 1}, seed=0)
    stored = next(r for r in rows if r["mode"] == "gsr_refine")
    stored["candidates"] = ["31", "29"]  # a stored context; the other gsr row samples its own
    settings = TrainSettings(
        max_steps=2, batch_size=8, learning_rate=1e-2, progress=False, use_cpu=True, logging_steps=1
    )
    grpo = GRPOSettings(num_generations=4, max_completion_length=6)
    rollout = RolloutSettings(prompt_set="compact", num_candidates=2, context_max_tokens=4)
    correctness = CorrectnessReward(inline=True)
    trainer = make_grpo_trainer(
        model,
        tokenizer,
        rows,
        [digit_share, correctness],
        tmp_path / "grpo",
        settings,
        grpo,
        rollout,
        trace_path=tmp_path / "grpo" / "rollouts.jsonl",
    )
    before = _snapshot(model)
    started = time.perf_counter()
    trainer.train()
    print(f"grpo 2 steps: {time.perf_counter() - started:.2f}s")
    assert trainer.state.global_step == 2
    assert _changed(model, before)
    traces = [
        json.loads(line) for line in (tmp_path / "grpo" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert len(traces) == 4  # 2 steps x 2 groups
    compact = get_prompt_set("compact")
    by_id = {r["id"]: r for r in rows}
    for trace in traces:
        row = by_id[trace["id"]]
        assert trace["mode"] == row["mode"]
        starts = [e for e in trace["events"] if e["type"] == "step_started"]
        sampled = starts[-1]
        assert sampled["n"] == 4
        if row["mode"] == "direct":
            assert len(starts) == 1 and sampled["prompt"] == row["prompt"]
        else:
            candidates = trace["context"]["candidates"]
            if row.get("candidates"):
                assert candidates == row["candidates"] and len(starts) == 1
            else:  # made by the policy in one call of n=2, then refined
                assert len(starts) == 2 and starts[0]["n"] == 2
            assert sampled["prompt"] == compact.template("gsr_refine").render(
                problem=row["prompt"], candidates=compact.candidates(candidates), count="2"
            )
