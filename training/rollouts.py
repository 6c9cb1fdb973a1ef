r"""Scaffold steps as RL rollouts: one shared context per group, the group's samples continue it.

A GRPO prompt row names a ``mode``: the scaffold step the policy practices. A mode is
a strategy's step builder (:mod:`scaffolds.strategies.steps`, looked up by ``mode`` among every
registered strategy's builders: :func:`rollout_modes`). It has a shared context, taken
from the row's stored columns or, when the row has none, made by the policy itself
(the builder's ``make_state``); the group's samples are the step that follows it,
rendered by the builder that ``solve()`` uses. The built-in modes:

- ``direct``: no context; samples solve the problem as asked (kind ``generate``).
- ``gsr_refine``: ``candidates`` (k solutions); samples refine them (``refine``).
- ``rc_continue``: ``summary`` (the policy writes one reasoning chunk, then its
  summary); samples are the next reasoning chunk (``reasoning``).
- ``rsa_aggregate``: ``candidates`` (k members of a population, else k solutions from
  the policy); samples aggregate them into one solution (``aggregate``), as each of
  RSA's aggregation calls does.
- ``self_refine_refine``: ``solution`` and its ``feedback``; samples are the new
  solution (``refine``).
- ``abstraction_solve``: ``abstraction`` (one note); samples solve with the note as a
  cheat sheet (``generate``).

Every prompt is rendered through a :class:`scaffolds.core.context.Context` with the run's
prompt set, exactly as serving renders it, and every call is traced. :func:`plan_step`
builds the context; :func:`sample_step` draws the group's samples and returns the
prompt's token ids, each sample's sampled token ids and their log-probabilities as the
engine produced them (never re-encoded text).

:class:`ScaffoldRollout` is TRL's ``rollout_func``: it receives the generation batch
(each prompt repeated ``num_generations`` times, consecutively), builds one context
per group on the trainer's own model (``LocalEngine.from_model``: logprobs under the
sampling distribution, the model's training mode restored after), and returns
``prompt_ids``, ``completion_ids``, ``logprobs`` and, for the reward functions,
``step_prompt`` and ``step_kind``.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> engine = MockEngine(lambda r: "9" if "[" in r.prompt_text() else "5")
>>> row = {"prompt": "4+5=", "mode": "gsr_refine", "candidates": ["8", "7"]}
>>> group = asyncio.run(rollout_group(row, engine, n=2, prompt_set="compact"))
>>> group.plan.prompt, [c.text for c in group.completions]
('4+5=[8,7]', ['9', '9'])
"""

from __future__ import annotations

import json
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

from scaffolds.cli_options import Flag
from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, TraceRecorder, event_to_dict
from scaffolds.engines.local import LocalEngine
from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.messages import messages_from_openai
from scaffolds.engines.protocol import Completion, Engine, Prompt, SamplingParams
from scaffolds.problem import Problem, StepPrompt
from scaffolds.spec.registry import Registry, default_registry
from scaffolds.strategies.steps import ContextLimits, StepBuilder
from training.rewards import run_sync

T = TypeVar("T")

__all__ = [
    "GroupRollout",
    "RolloutSettings",
    "ScaffoldRollout",
    "StepPlan",
    "context_columns",
    "plan_step",
    "problem_from_prompt",
    "rollout_group",
    "rollout_modes",
    "sample_step",
]


def rollout_modes(registry: Registry | None = None) -> dict[str, StepBuilder]:
    """Every step a GRPO group can practice, by mode (sorted), from the registered strategies.

    >>> print(*rollout_modes())
    abstraction_solve direct gsr_refine rc_continue rsa_aggregate self_refine_refine
    """
    registry = registry if registry is not None else default_registry()
    found = {
        builder.mode: builder
        for name in registry.names()
        for builder in registry.get(name).step_builders
        if builder.mode is not None and builder.build is not None
    }
    return dict(sorted(found.items()))


def context_columns(registry: Registry | None = None) -> tuple[str, ...]:
    """The dataset columns a GRPO row may store a mode's context in.

    >>> context_columns()
    ('abstraction', 'candidates', 'summary', 'solution', 'feedback')
    """
    columns = (key for builder in rollout_modes(registry).values() for key in builder.state)
    return tuple(dict.fromkeys(columns))


@dataclass(frozen=True)
class RolloutSettings:
    """How contexts are built when a row does not store them.

    ``context_max_tokens`` bounds each context call (candidates, reasoning chunk,
    solution, feedback, note); ``summary_max_tokens`` the RC summary. None: the
    sampled step's own limit.
    """

    prompt_set: str = "default"
    """prompt set: default | compact"""
    num_candidates: Annotated[int, Flag(min=1)] = 4
    """gsr context size"""
    context_max_tokens: Annotated[int | None, Flag(min=1)] = None
    """tokens per context call (default: the sampled step's limit)"""
    summary_max_tokens: Annotated[int | None, Flag(min=1)] = None
    """tokens of an RC summary (default: the sampled step's limit)"""
    default_mode: Annotated[str, Flag("--mode")] = "direct"
    """mode of rows that name none"""


@dataclass(frozen=True)
class StepPlan:
    """The step a group samples: its mode, trace kind, rendered prompt and context."""

    mode: str
    kind: str
    prompt: Prompt
    context: dict[str, Any] = field(default_factory=dict)
    source: StepPrompt | None = None
    """The prompt with its provenance, for the trace."""

    @property
    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(m.content for m in self.prompt)


@dataclass(frozen=True)
class GroupRollout:
    """A group's samples of one planned step, with the ids training needs."""

    plan: StepPlan
    prompt_ids: list[int] | None
    completions: list[Completion]
    events: list[Any]


def problem_from_prompt(prompt: str | Sequence[Mapping[str, Any]]) -> Problem:
    """The problem a dataset prompt asks: text, or chat messages ending in a user turn."""
    if isinstance(prompt, str):
        return Problem.from_text(prompt)
    return Problem.from_messages(messages_from_openai(list(prompt)))


def _stored(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    return None if value is None or value == "" or value == [] else value


async def plan_step(
    mode: str,
    row: Mapping[str, Any],
    ctx: Context,
    problem: Problem,
    settings: RolloutSettings,
    registry: Registry | None = None,
) -> StepPlan:
    """Build the shared context of ``mode`` (from the row, else with the policy) and
    render the step's prompt. Context calls go through ``ctx``, so they are traced."""
    modes = rollout_modes(registry)
    builder = modes.get(mode)
    if builder is None or builder.build is None:
        raise ValueError(f"unknown rollout mode {mode!r} (known: {', '.join(modes)})")
    known = {
        key: value if isinstance(value, str) or not isinstance(value, Iterable) else list(value)
        for key in builder.state
        if (value := _stored(row, key)) is not None
    }
    state = known
    if builder.make_state is not None:
        limits = ContextLimits(
            settings.num_candidates, settings.context_max_tokens, settings.summary_max_tokens
        )
        state = await builder.make_state(ctx, problem, known, limits)
    source = builder.build(ctx, problem, state)
    return StepPlan(mode, builder.trace_kind, source.prompt, dict(state), source)


async def sample_step(
    ctx: Context, plan: StepPlan, *, n: int, max_tokens: int | None = None
) -> tuple[list[Completion], list[int] | None]:
    """Draw ``n`` samples of the planned step in one engine call; the prompt's token ids
    come from the engine (None if it gave none)."""
    prompt = plan.source if plan.source is not None else plan.prompt
    step = await ctx.generate(
        prompt,
        kind=plan.kind,
        label=plan.mode,
        n=n,
        max_tokens=max_tokens,
        role=StepRole(final=True),
    )
    finished = next(
        e
        for e in reversed(ctx.recorder.events)
        if isinstance(e, StepFinished) and e.step_id == step.step_id
    )
    ids = finished.prompt_token_ids
    return step.completions, None if ids is None else list(ids)


async def rollout_group(
    row: Mapping[str, Any],
    engine: Engine,
    *,
    n: int,
    max_tokens: int | None = None,
    prompt_set: str | None = None,
    settings: RolloutSettings | None = None,
    params: SamplingParams | None = None,
) -> GroupRollout:
    """Plan ``row``'s step once and sample it ``n`` times (one group)."""
    settings = settings or RolloutSettings()
    problem = problem_from_prompt(row["prompt"])
    recorder = TraceRecorder()
    ctx = Context.root(
        engine,
        RunSettings(
            prompts=prompt_set or settings.prompt_set,
            params=params or SamplingParams(logprobs=True),
            chat=not isinstance(row["prompt"], str),
        ),
        recorder=recorder,
    )
    mode = str(row.get("mode") or settings.default_mode)
    plan = await plan_step(mode, row, ctx, problem, settings)
    completions, prompt_ids = await sample_step(ctx, plan, n=n, max_tokens=max_tokens)
    return GroupRollout(plan, prompt_ids, completions, list(recorder.events))


def _groups(rows: Sequence[Mapping[str, Any]], size: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive groups: blocks of ``size`` when every block holds one
    prompt (TRL's layout), else runs of equal consecutive prompts."""
    count = len(rows)

    def key(row: Mapping[str, Any]) -> str:
        return json.dumps([row.get("prompt"), row.get("mode")], sort_keys=True, default=str)

    if size > 0 and count % size == 0:
        blocks = [(i, i + size) for i in range(0, count, size)]
        if all(len({key(rows[j]) for j in range(a, b)}) == 1 for a, b in blocks):
            return blocks
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, count + 1):
        if i == count or key(rows[i]) != key(rows[start]):
            out.append((start, i))
            start = i
    return out


async def _closing(engine: LocalEngine, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``, then close ``engine`` (its worker thread; the model is not touched)."""
    try:
        return await work
    finally:
        await engine.aclose()


class ScaffoldRollout:
    """TRL ``rollout_func``: each group of identical prompts shares one scaffold context.

    Rows come from :class:`training.grpo.ScaffoldGRPOTrainer` (which keeps the whole
    dataset rows, ``mode`` and stored contexts included); with a plain ``GRPOTrainer``
    only prompts arrive and every row uses ``settings.default_mode``. ``trace_path``
    appends each group's trace (JSONL) for inspection.
    """

    def __init__(
        self, settings: RolloutSettings | None = None, *, trace_path: str | Path | None = None
    ) -> None:
        self.__name__ = "scaffold_rollout"
        self.settings = settings or RolloutSettings()
        self.trace_path = Path(trace_path) if trace_path is not None else None

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        rows: list[Mapping[str, Any]] | None = getattr(trainer, "ponder_rows", None)
        if rows is None or len(rows) != len(prompts):
            rows = [{"prompt": p} for p in prompts]
        else:
            rows = [{**row, "prompt": p} for row, p in zip(rows, prompts, strict=True)]
        training = bool(trainer.model.training)
        size = int(trainer.num_generations if training else trainer.num_generations_eval)
        from trl.models.utils import unwrap_model_for_generation

        extra = {
            k: v
            for k, v in dict(getattr(trainer, "generation_kwargs", {}) or {}).items()
            if k in ("top_k", "min_p", "repetition_penalty", "cache_implementation")
            and v is not None
        }
        params = SamplingParams(
            temperature=float(trainer.temperature),
            top_p=float(trainer.top_p) if trainer.top_p is not None else None,
            logprobs=True,
        )
        tokenizer = trainer.processing_class
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as model:
            engine = LocalEngine.from_model(model, tokenizer, generation_kwargs=extra)
            run = self._run(rows, engine, size, trainer.max_completion_length, params)
            groups = run_sync(_closing(engine, run))
        return self._assemble(groups, tokenizer)

    async def _run(
        self,
        rows: Sequence[Mapping[str, Any]],
        engine: Engine,
        size: int,
        max_tokens: int | None,
        params: SamplingParams,
    ) -> list[tuple[Mapping[str, Any], GroupRollout, int]]:
        out = []
        for start, end in _groups(rows, size):
            group = await rollout_group(
                rows[start],
                engine,
                n=end - start,
                max_tokens=max_tokens,
                settings=self.settings,
                params=params,
            )
            out.append((rows[start], group, end - start))
        return out

    def _assemble(
        self, groups: list[tuple[Mapping[str, Any], GroupRollout, int]], tokenizer: Any
    ) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "step_prompt": [],
            "step_kind": [],
        }
        for row, group, _ in groups:
            prompt_ids = group.prompt_ids
            if prompt_ids is None:
                prompt_ids = encode_prompt(tokenizer, group.plan.prompt)
            for completion in group.completions:
                ids = list(completion.token_ids or ())
                logprobs = list(completion.logprobs or ())
                out["prompt_ids"].append(list(prompt_ids))
                out["completion_ids"].append(ids)
                out["logprobs"].append(logprobs if len(logprobs) == len(ids) else [0.0] * len(ids))
                out["step_prompt"].append(group.plan.prompt_text)
                out["step_kind"].append(group.plan.kind)
            self._write_trace(row, group)
        return out

    def _write_trace(self, row: Mapping[str, Any], group: GroupRollout) -> None:
        if self.trace_path is None:
            return
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "id": row.get("id"),
            "mode": group.plan.mode,
            "context": group.plan.context,
            "events": [event_to_dict(e) for e in group.events],
        }
        with self.trace_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")
