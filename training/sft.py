"""Supervised fine-tuning on scaffold-step rows with TRL's ``SFTTrainer``.

Rows are TRL prompt/completion pairs (text, or chat messages), as
:mod:`training.data` builds them; the loss covers the completion only. The output
directory gets ``checkpoint-N/`` folders (a rerun resumes from the newest), a
``log.jsonl`` of training logs, and ``final/`` with the model, the tokenizer and
``ponder_training.json``. With ``lora`` (:class:`training.lora.LoraSettings`) only
LoRA adapters train, and ``final/`` holds the adapter (``adapter_model.safetensors``,
``adapter_config.json``) instead of the whole model.

Example::

    from training.sft import run_sft
    final = run_sft("Qwen/Qwen3-0.6B", rows, "runs/gsr/sft", TrainSettings(max_steps=500),
                    prompt_set="default")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training.common import (
    TrainSettings,
    model_to_train,
    save_final,
    settings_dict,
    trainer_args,
    trainer_callbacks,
)
from training.data import sft_columns
from training.lora import LoraSettings
from training.runs import last_checkpoint

__all__ = ["make_sft_trainer", "run_sft"]


def make_sft_trainer(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    output_dir: str | Path,
    settings: TrainSettings | None = None,
    *,
    max_length: int | None = 2048,
    lora: LoraSettings | None = None,
    **config: Any,
) -> Any:
    """An ``SFTTrainer`` over ``rows`` (only their prompt and completion are used);
    with ``lora``, it wraps ``model`` in peft LoRA adapters and trains only those.

    Extra keyword arguments go to ``SFTConfig`` (e.g. ``packing=True``).
    """
    from datasets import Dataset  # type: ignore[import-untyped]
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    settings = settings or TrainSettings()
    if not rows:
        raise ValueError("no SFT rows to train on")
    dataset = Dataset.from_list(sft_columns([dict(row) for row in rows]))
    args = SFTConfig(
        **trainer_args(settings, output_dir),
        max_length=max_length,
        completion_only_loss=True,
        **config,
    )
    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=trainer_callbacks(settings, output_dir),
        peft_config=lora.peft_config() if lora is not None else None,
    )


def run_sft(
    model: str | Path | Any,
    rows: Sequence[Mapping[str, Any]],
    output_dir: str | Path,
    settings: TrainSettings | None = None,
    *,
    tokenizer: Any = None,
    prompt_set: str | None = None,
    resume: bool = True,
    lora: LoraSettings | None = None,
    init_adapter: str | Path | None = None,
    **config: Any,
) -> Path:
    """Train, resuming from the newest checkpoint in ``output_dir`` if ``resume``;
    returns the ``final/`` folder. ``model`` is a path/hub name or a loaded model
    (then pass ``tokenizer``); ``init_adapter``: a trained LoRA adapter of that model to
    train further (instead of a new one from ``lora``)."""
    settings = settings or TrainSettings()
    if lora is not None and init_adapter is not None:
        raise ValueError("lora and init_adapter: a new adapter, or one to train further")
    model, tokenizer = model_to_train(
        model, tokenizer, threads=settings.threads, init_adapter=init_adapter
    )
    trainer = make_sft_trainer(model, tokenizer, rows, output_dir, settings, lora=lora, **config)
    checkpoint = last_checkpoint(output_dir) if resume else None
    trainer.train(resume_from_checkpoint=checkpoint)
    kinds = sorted({str(r.get("kind")) for r in rows if r.get("kind")})
    meta = {
        "trainer": "sft",
        "prompt_set": prompt_set,
        "kinds": kinds,
        "rows": len(rows),
        "settings": settings_dict(settings),
        "lora": None if lora is None else asdict(lora),
        "init_adapter": None if init_adapter is None else str(init_adapter),
    }
    return save_final(trainer, output_dir, meta)
