"""What the SFT and GRPO trainers share: settings, loading, logging, resuming, saving.

``TrainSettings`` holds the knobs both trainers take; :func:`trainer_args` turns them
into the keyword arguments of a TRL config. Training logs go to ``log.jsonl`` in the
output directory, progress to a rich bar (on a terminal; piped, to stderr as
``train.log``'s lines) and to ``train.log`` (one line per log: step and percent, loss,
tokens/s, ETA; ``tail -f`` it when training runs in the background), checkpoints
to ``checkpoint-N/`` (a rerun resumes from the newest), and the finished model to
``final/`` with a
``ponder_training.json`` that names the prompt set it was trained with (a served model
must use the same set).

>>> trainer_args(TrainSettings(max_steps=2, batch_size=4), "out")["max_steps"]
2
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TextIO

from scaffolds.cli_options import Flag
from scaffolds.terminal import console

__all__ = [
    "MALLOC_RETAIN",
    "TrainSettings",
    "load_model",
    "log_callback",
    "model_to_train",
    "progress_log_callback",
    "retain_freed_memory",
    "save_final",
    "trainer_args",
    "trainer_callbacks",
]


@dataclass(frozen=True)
class TrainSettings:
    """Knobs both trainers take. ``max_steps`` > 0 wins over ``epochs``.

    Each field is also an option of ``ponder train sft`` and ``grpo`` (its docstring the
    help, :class:`~scaffolds.cli_options.Flag` what differs from ``--field-name``).
    """

    max_steps: int = -1
    """optimizer steps (-1: train --epochs)"""
    epochs: float = 1.0
    """passes over the data (when --max-steps is -1)"""
    batch_size: Annotated[int, Flag(min=1)] = 8
    """rows (SFT) or completions (GRPO) per device step"""
    grad_accum: Annotated[int, Flag(min=1)] = 1
    """device steps per optimizer step"""
    learning_rate: Annotated[float, Flag("--lr")] = 1e-5
    """learning rate"""
    warmup: float = 0.0
    """warmup steps, or a fraction of all steps if < 1"""
    weight_decay: Annotated[float, Flag(hidden=True)] = 0.0
    save_steps: Annotated[int, Flag(min=1)] = 200
    """steps between checkpoints"""
    save_total_limit: Annotated[int | None, Flag(hidden=True)] = 2
    """checkpoints kept (None: all)"""
    logging_steps: Annotated[int, Flag(min=1)] = 10
    """steps between log entries"""
    seed: int = 0
    """random seed"""
    bf16: bool = False
    """bf16 mixed precision (the weights stay float32)"""
    use_cpu: Annotated[bool, Flag("--cpu", off="--no-cpu")] = False
    """train on the CPU"""
    threads: int | None = None
    """torch threads (default: torch's)"""
    progress: bool = True
    """show progress bars (logs still go to log.jsonl and train.log)"""
    gradient_checkpointing: Annotated[bool, Flag(hidden=True)] = False
    """Recompute activations in the backward pass (TRL's default is on): less memory,
    about a third more compute; small models on a CPU train faster without it."""


def trainer_args(settings: TrainSettings, output_dir: str | Path) -> dict[str, Any]:
    """Keyword arguments for ``SFTConfig``/``GRPOConfig`` from ``settings``."""
    return {
        "output_dir": str(output_dir),
        "max_steps": settings.max_steps,
        "num_train_epochs": settings.epochs,
        "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.grad_accum,
        "learning_rate": settings.learning_rate,
        "warmup_steps": settings.warmup if settings.warmup < 1 else int(settings.warmup),
        "weight_decay": settings.weight_decay,
        "save_strategy": "steps",
        "save_steps": settings.save_steps,
        "save_total_limit": settings.save_total_limit,
        "logging_steps": settings.logging_steps,
        "seed": settings.seed,
        "bf16": settings.bf16,
        "use_cpu": settings.use_cpu,
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": settings.gradient_checkpointing,
    }


MALLOC_RETAIN = {
    "MALLOC_MMAP_MAX_": "0",  # no allocation gets a mapping of its own: all from the heap
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),  # never give freed heap back to the kernel
    "MALLOC_TOP_PAD_": str(1 << 30),  # grow the heap 1 GB at a time
    "MALLOC_ARENA_MAX": "1",  # one heap for every thread, so freed memory is found again
}
"""glibc's settings under which a process keeps the memory it frees for its next
allocations (see :func:`retain_freed_memory`)."""


def retain_freed_memory(argv: Sequence[str]) -> None:
    """Run this process again as ``argv`` with :data:`MALLOC_RETAIN` in its environment,
    unless one of them is set already (glibc reads them once, when the process starts).

    A training step frees and allocates again the same large tensors every pass (the
    logits over the vocabulary and their gradients are hundreds of MB). glibc serves
    anything over 32 MB with a fresh ``mmap`` and unmaps it when it is freed, so the
    kernel zeroes new pages for every such tensor: on SmolLM2's GRPO steps that was a
    third of the CPU time, as system time. The cost is memory not given back until exit.
    Not glibc (or asked not to, with ``PONDER_MALLOC_RETAIN=0``): nothing happens::

        if __name__ == "__main__":
            retain_freed_memory([sys.executable, "-m", "experiments.smollm2_refine", *sys.argv[1:]])
            main()
    """
    import platform

    if os.environ.get("PONDER_MALLOC_RETAIN") == "0" or platform.libc_ver()[0] != "glibc":
        return
    if any(name in os.environ for name in MALLOC_RETAIN):
        return  # set already: by the run before the exec, or by whoever started it
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], list(argv), {**os.environ, **MALLOC_RETAIN})


def load_model(path: str | Path, *, threads: int | None = None) -> tuple[Any, Any]:
    """A causal LM (float32) and its tokenizer from a folder (or hub name); left padding,
    a pad token."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads is not None:
        torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # float32 master weights whatever the folder holds (a prepared SmolLM2 is bf16): pure
    # bf16 training on a CPU is slower and rounds small updates away; --bf16 autocasts.
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model, tokenizer


def model_to_train(
    model: str | Path | Any,
    tokenizer: Any = None,
    *,
    threads: int | None = None,
    init_adapter: str | Path | None = None,
) -> tuple[Any, Any]:
    """The model and tokenizer a trainer starts from: ``model`` a folder (or hub name) is
    loaded with :func:`load_model`, a loaded model needs its ``tokenizer``; with
    ``init_adapter``, that LoRA adapter of the model, trainable, wraps it.

    >>> model_to_train(object())
    Traceback (most recent call last):
    ...
    ValueError: pass the tokenizer with a loaded model
    """
    if isinstance(model, str | Path):
        model, tokenizer = load_model(model, threads=threads)
    elif tokenizer is None:
        raise ValueError("pass the tokenizer with a loaded model")
    if init_adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(init_adapter), is_trainable=True)
    return model, tokenizer


def log_callback(path: str | Path) -> Any:
    """A trainer callback that appends every log entry (with the step) to ``path``."""
    from transformers import TrainerCallback

    target = Path(path)

    class JsonlLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not state.is_world_process_zero or not logs:
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            entry = {"step": state.global_step, "time": time.time(), **logs}
            with target.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, default=str) + "\n")

    return JsonlLog()


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_log_callback(path: str | Path, echo: TextIO | None = None) -> Any:
    """A trainer callback that appends a readable line per log entry to ``path``: the
    step (and its percent of all), the loss, training tokens per second and the ETA
    (from the steps this process has trained, so a resumed run's ETA is right too).
    With ``echo``, each line is also written there (the progress of a piped run)."""
    from transformers import TrainerCallback

    target = Path(path)

    class ProgressLog(TrainerCallback):
        start: tuple[float, int] | None = None

        def _write(self, line: str) -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            stamped = time.strftime("%H:%M:%S ") + line + "\n"
            with target.open("a", encoding="utf-8") as handle:
                handle.write(stamped)
            if echo is not None:
                echo.write(stamped)
                echo.flush()

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.start = (time.monotonic(), state.global_step)
            self._write(f"start at step {state.global_step}/{state.max_steps}")

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not state.is_world_process_zero or not logs or self.start is None:
                return
            began, first_step = self.start
            tokens = float(logs.get("num_tokens", 0.0))  # TRL's: cumulative over all steps
            elapsed = time.monotonic() - began
            done = state.global_step - first_step
            left = max(0, state.max_steps - state.global_step)
            eta = elapsed / done * left if done else 0.0
            share = f" ({100 * state.global_step // state.max_steps}%)" if state.max_steps else ""
            parts = [f"step {state.global_step}/{state.max_steps}{share}"]
            if "loss" in logs:
                parts.append(f"loss {float(logs['loss']):.4f}")
            if tokens and elapsed > 0 and done:
                per_step = tokens / max(1, state.global_step)
                parts.append(f"tokens/s {per_step * done / elapsed:.0f}")
            parts += [f"elapsed {_clock(elapsed)}", f"eta {_clock(eta)}"]
            self._write("  ".join(parts))

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._write(f"done at step {state.global_step}")

    return ProgressLog()


def trainer_callbacks(settings: TrainSettings, output_dir: str | Path) -> list[Any]:
    """The log callbacks, and with ``settings.progress`` the progress: a rich bar on a
    terminal, else ``train.log``'s lines echoed to stderr (a bar piped is one line at
    its end)."""
    terminal = console(stderr=True).is_terminal
    echo = sys.stderr if settings.progress and not terminal else None
    callbacks = [
        log_callback(Path(output_dir) / "log.jsonl"),
        progress_log_callback(Path(output_dir) / "train.log", echo=echo),
    ]
    if settings.progress and terminal:
        from trl.trainer.callbacks import RichProgressCallback

        progress: Any = RichProgressCallback  # untyped in TRL
        callbacks.append(progress())
    return callbacks


def save_final(trainer: Any, output_dir: str | Path, meta: dict[str, Any]) -> Path:
    """Save the trained model and tokenizer to ``output_dir/final`` with training metadata."""
    final = Path(output_dir) / "final"
    trainer.save_model(str(final))
    processing = getattr(trainer, "processing_class", None)
    if processing is not None:
        processing.save_pretrained(str(final))
    info = {"saved": time.time(), "global_step": trainer.state.global_step, **meta}
    (final / "ponder_training.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    return final


def settings_dict(settings: TrainSettings) -> dict[str, Any]:
    return asdict(settings)
