"""SFT and GRPO (with the scaffold rollout) each run 2 steps on a tiny model and change it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from scaffolds.spec.registry import get_prompt_set

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


def test_sft_lora_saves_an_adapter_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """LoRA trains adapters only, final/ holds just the adapter, a rerun with more steps
    resumes from the checkpoint, and train.log tells the step and the ETA."""
    from safetensors.torch import load_file

    from training.common import TrainSettings
    from training.lora import LoraSettings
    from training.sft import run_sft

    rows = [
        {"prompt": f"{a}+{b}=", "completion": str(a + b), "kind": "direct"}
        for a in range(10, 14)
        for b in range(20, 22)
    ]
    lora = LoraSettings(r=4, alpha=8, targets="q,v,up")
    out = tmp_path / "lora"

    def train(steps: int) -> Path:
        settings = TrainSettings(
            max_steps=steps,
            batch_size=4,
            learning_rate=1e-2,
            progress=False,
            use_cpu=True,
            save_steps=2,
            logging_steps=1,
        )
        return run_sft(tiny_model_dir, rows, out, settings, lora=lora, max_length=64)

    final = train(2)
    assert (out / "checkpoint-2").is_dir()
    assert {"adapter_model.safetensors", "adapter_config.json"} <= {p.name for p in final.iterdir()}
    assert not (final / "model.safetensors").exists()
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    assert sorted(config["target_modules"]) == ["q_proj", "up_proj", "v_proj"]
    weights = load_file(str(final / "adapter_model.safetensors"))
    names = set(weights)
    assert any("q_proj.lora_B" in n for n in names) and any("up_proj.lora_A" in n for n in names)
    assert not any("k_proj" in n for n in names)
    assert any(w.abs().sum() > 0 for n, w in weights.items() if "lora_B" in n)  # trained

    final = train(3)  # resumes from checkpoint-2: one more step
    meta = json.loads((final / "ponder_training.json").read_text())
    assert meta["global_step"] == 3 and meta["lora"]["r"] == 4
    log = (out / "train.log").read_text()
    assert "start at step 2/3" in log
    assert "step 3/3" in log and "eta 0:00:00" in log


def test_lora_settings_refuse_bad_values() -> None:
    from training.lora import LoraSettings

    with pytest.raises(ValueError, match="lora r"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match="lora targets"):
        LoraSettings(targets=" , ")
    assert LoraSettings(targets="q, gate,down").target_modules() == [
        "q_proj",
        "gate_proj",
        "down_proj",
    ]


def test_sft_refuses_a_new_lora_and_an_adapter_to_continue_at_once(tmp_path: Path) -> None:
    from training.lora import LoraSettings
    from training.sft import run_sft

    rows = [{"prompt": "1+1=", "completion": "2"}]
    with pytest.raises(ValueError, match="lora and init_adapter"):
        run_sft("unused", rows, tmp_path, lora=LoraSettings(), init_adapter=tmp_path / "a")


def test_grpo_trains_a_given_lora_adapter_and_saves_only_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from training.common import TrainSettings, load_model
    from training.grpo import GRPOSettings, grpo_rows, run_grpo
    from training.rollouts import RolloutSettings

    model, _ = load_model(tiny_model_dir, threads=1)
    start = tmp_path / "start"
    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    get_peft_model(model, lora).save_pretrained(str(start))
    problems = [{"id": str(i), "problem": f"{10 + i}+7=", "answer": str(17 + i)} for i in range(4)]
    rows = grpo_rows(problems, {"gsr_refine": 1}, seed=0)
    for row in rows:
        row["candidates"] = ["1a", "b2"]
    settings = TrainSettings(
        max_steps=2, batch_size=8, learning_rate=1e-2, progress=False, use_cpu=True, threads=1
    )
    final = run_grpo(
        tiny_model_dir,
        rows,
        [digit_share],
        tmp_path / "grpo",
        settings,
        GRPOSettings(num_generations=4, max_completion_length=6),
        RolloutSettings(prompt_set="compact", num_candidates=2),
        init_adapter=start,
    )
    info = json.loads((final / "ponder_training.json").read_text())
    assert info["init_adapter"] == str(start) and info["global_step"] == 2
    assert not (final / "model.safetensors").exists()  # the adapter, not the merged model
    after, before = (load_file(f / "adapter_model.safetensors") for f in (final, start))
    assert after.keys() == before.keys()
    assert any(not torch.equal(after[k], before[k]) for k in after if "lora_B" in k)
