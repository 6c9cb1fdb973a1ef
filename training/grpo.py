r"""GRPO on scaffold steps: TRL's ``GRPOTrainer`` with the scaffold rollout.

Each dataset row is a problem (``prompt``: text or chat messages), its gold
``answer`` and a ``mode`` (see :mod:`training.rollouts`): ``direct`` samples the
problem as asked; ``gsr_refine``, ``rc_continue``, ``self_refine_refine`` and
``abstraction_solve`` first build the step's context (from the row's stored
``candidates``/``summary``/``solution``+``feedback``/``abstraction``, else with the
policy itself), then sample the step ``num_generations`` times. One run can mix modes:
:func:`grpo_rows` deals modes out to problems by weight.

:class:`ScaffoldGRPOTrainer` is ``GRPOTrainer`` plus one thing: it hands the rollout
the whole rows of the generation batch (TRL passes only prompts), so the rollout sees
each row's mode and stored context.

>>> rows = grpo_rows([{"id": "a", "problem": "1+1=", "answer": "2"}] * 4,
...                  {"direct": 1, "gsr_refine": 1}, seed=0)
>>> sorted(r["mode"] for r in rows)
['direct', 'direct', 'gsr_refine', 'gsr_refine']
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from scaffolds.cli_options import Flag
from training.common import (
    TrainSettings,
    model_to_train,
    save_final,
    settings_dict,
    trainer_args,
    trainer_callbacks,
)
from training.rollouts import RolloutSettings, ScaffoldRollout, context_columns, rollout_modes
from training.runs import last_checkpoint

__all__ = [
    "GRPOSettings",
    "grpo_rows",
    "make_grpo_trainer",
    "parse_mix",
    "run_grpo",
    "scaffold_grpo_trainer_class",
]

"""Stored contexts a row may carry for its mode (None: the policy makes one)."""


@dataclass(frozen=True)
class GRPOSettings:
    """GRPO-specific knobs (the common ones are in :class:`TrainSettings`)."""

    num_generations: Annotated[int, Flag(min=2)] = 4
    """samples per group"""
    max_completion_length: Annotated[int, Flag(min=1)] = 256
    """tokens per sampled completion"""
    temperature: float = 1.0
    """sampling temperature"""
    top_p: Annotated[float, Flag(hidden=True)] = 1.0
    beta: float = 0.0
    """KL weight"""
    loss_type: Annotated[str | None, Flag(hidden=True)] = None
    """TRL's loss type (None: TRL's default)."""
    mask_truncated_completions: Annotated[bool, Flag(hidden=True)] = False


def parse_mix(text: str) -> dict[str, float]:
    """``"direct=1,gsr_refine=3"`` -> weights by mode (a bare mode weighs 1).

    >>> parse_mix("direct=1, gsr_refine=3"), parse_mix("rc_continue")
    ({'direct': 1.0, 'gsr_refine': 3.0}, {'rc_continue': 1.0})
    """
    mix: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in (modes := rollout_modes()):
            raise ValueError(f"unknown mode {name!r} (known: {', '.join(modes)})")
        value = float(weight) if weight.strip() else 1.0
        if value < 0:
            raise ValueError(f"mode {name!r} has a negative weight")
        mix[name] = value
    if not mix or sum(mix.values()) <= 0:
        raise ValueError("the mode mix needs at least one positive weight")
    return mix


def grpo_rows(
    problems: Sequence[Mapping[str, Any]],
    mix: Mapping[str, float] | None = None,
    *,
    seed: int = 0,
    chat: bool = False,
) -> list[dict[str, Any]]:
    """GRPO rows from problems (``id``/``problem``/``answer``, or rows that already have a
    ``prompt``). A row's own ``mode`` is kept; the others get modes in proportion to
    ``mix`` (largest remainder, then shuffled with ``seed``). ``chat`` turns a text
    problem into one user message."""
    mix = dict(mix or {"direct": 1.0})
    known = rollout_modes()
    for mode in mix:
        if mode not in known:
            raise ValueError(f"unknown mode {mode!r} (known: {', '.join(known)})")
    columns = context_columns()
    free = [i for i, p in enumerate(problems) if not p.get("mode")]
    total = sum(mix.values())
    quotas = {m: len(free) * w / total for m, w in mix.items()}
    counts = {m: int(q) for m, q in quotas.items()}
    by_remainder = sorted(mix, key=lambda m: quotas[m] - counts[m], reverse=True)
    for m in by_remainder[: len(free) - sum(counts.values())]:
        counts[m] += 1
    modes = [m for m in mix for _ in range(counts[m])]
    random.Random(seed).shuffle(modes)
    assigned = dict(zip(free, modes, strict=True))
    rows = []
    for i, problem in enumerate(problems):
        prompt = problem.get("prompt", problem.get("problem"))
        if chat and isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        row: dict[str, Any] = {
            "prompt": prompt,
            "answer": None if problem.get("answer") is None else str(problem["answer"]),
            "id": str(problem.get("id", i)),
            "mode": problem.get("mode") or assigned[i],
        }
        for column in columns:
            row[column] = problem.get(column)
        rows.append(row)
    return rows


_TRAINER_CLASS: type | None = None


def scaffold_grpo_trainer_class() -> type:
    """``GRPOTrainer`` that keeps the generation batch's rows for the rollout (lazy import)."""
    global _TRAINER_CLASS
    if _TRAINER_CLASS is None:
        from trl.trainer.grpo_trainer import GRPOTrainer

        class ScaffoldGRPOTrainer(GRPOTrainer):
            """GRPOTrainer whose ``rollout_func`` can read ``self.ponder_rows``."""

            ponder_rows: list[dict[str, Any]] | None = None

            def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> Any:
                self.ponder_rows = [dict(row) for row in inputs]
                try:
                    return super()._generate_and_score_completions(inputs)
                finally:
                    self.ponder_rows = None

        _TRAINER_CLASS = ScaffoldGRPOTrainer
    return _TRAINER_CLASS


def make_grpo_trainer(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    reward_funcs: Sequence[Callable[..., Any]],
    output_dir: str | Path,
    settings: TrainSettings | None = None,
    grpo: GRPOSettings | None = None,
    rollout: RolloutSettings | None = None,
    *,
    trace_path: str | Path | None = None,
    **config: Any,
) -> Any:
    """A :class:`ScaffoldGRPOTrainer` with the scaffold rollout on ``rows``.

    The per-device batch (``settings.batch_size``) counts completions, so it must be a
    multiple of ``grpo.num_generations``. Extra keyword arguments go to ``GRPOConfig``.
    """
    from datasets import Dataset  # type: ignore[import-untyped]
    from trl.trainer.grpo_config import GRPOConfig

    settings = settings or TrainSettings()
    grpo = grpo or GRPOSettings()
    if not rows:
        raise ValueError("no GRPO rows to train on")
    if settings.batch_size % grpo.num_generations:
        raise ValueError(
            f"batch_size ({settings.batch_size}) must be a multiple of "
            f"num_generations ({grpo.num_generations})"
        )
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    extra = dict(config)
    if grpo.loss_type is not None:
        extra["loss_type"] = grpo.loss_type
    args = GRPOConfig(
        **trainer_args(settings, output_dir),
        num_generations=grpo.num_generations,
        max_completion_length=grpo.max_completion_length,
        temperature=grpo.temperature,
        top_p=grpo.top_p,
        beta=grpo.beta,
        mask_truncated_completions=grpo.mask_truncated_completions,
        remove_unused_columns=False,
        **extra,
    )
    dataset = Dataset.from_list([dict(row) for row in rows])
    trainer_class = scaffold_grpo_trainer_class()
    return trainer_class(
        model=model,
        processing_class=tokenizer,
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=dataset,
        rollout_func=ScaffoldRollout(rollout, trace_path=trace_path),
        callbacks=trainer_callbacks(settings, output_dir),
    )


def run_grpo(
    model: str | Path | Any,
    rows: Sequence[Mapping[str, Any]],
    reward_funcs: Sequence[Callable[..., Any]],
    output_dir: str | Path,
    settings: TrainSettings | None = None,
    grpo: GRPOSettings | None = None,
    rollout: RolloutSettings | None = None,
    *,
    tokenizer: Any = None,
    resume: bool = True,
    init_adapter: str | Path | None = None,
    **config: Any,
) -> Path:
    """Train with the scaffold rollout, resuming from the newest checkpoint; returns
    ``final/``. Rollout traces go to ``output_dir/rollouts.jsonl``. ``init_adapter``: a
    LoRA adapter of ``model`` to train (the rollout samples from the adapted model;
    ``final/`` is the adapter), instead of all the weights."""
    settings = settings or TrainSettings()
    grpo = grpo or GRPOSettings()
    rollout = rollout or RolloutSettings()
    model, tokenizer = model_to_train(
        model, tokenizer, threads=settings.threads, init_adapter=init_adapter
    )
    trainer = make_grpo_trainer(
        model,
        tokenizer,
        rows,
        reward_funcs,
        output_dir,
        settings,
        grpo,
        rollout,
        trace_path=Path(output_dir) / "rollouts.jsonl",
        **config,
    )
    checkpoint = last_checkpoint(output_dir) if resume else None
    trainer.train(resume_from_checkpoint=checkpoint)
    modes = sorted({str(r.get("mode")) for r in rows})
    meta = {
        "trainer": "grpo",
        "prompt_set": rollout.prompt_set,
        "modes": modes,
        "rows": len(rows),
        "settings": settings_dict(settings),
        "grpo": asdict(grpo),
        "rollout": asdict(rollout),
        "init_adapter": None if init_adapter is None else str(init_adapter),
    }
    return save_final(trainer, output_dir, meta)
