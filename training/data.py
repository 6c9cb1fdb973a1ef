r"""SFT rows from scaffold traces, in TRL's prompt/completion form.

Every row's ``prompt`` is the step's prompt exactly as the trace recorded it (the same
:mod:`scaffolds.prompts` template that serving renders), so training and serving cannot
drift apart. The rows come from the strategies' own step builders
(:mod:`scaffolds.strategies.steps`), looked up by the template each traced step recorded; the
values a row needs (the candidates, the solution under review, the summary, which note
a solution read) are the step's recorded fields and parent links, never parsed back.
Chat runs give chat messages (``[{"role": "user", ...}]`` prompts and one assistant
message as completion: TRL's conversational form); text runs give strings.

Rows (``kind``; what the prompt holds -> what the completion is; which rows are kept):

- ``gsr_refine``: problem + numbered candidates -> the refined solution; kept when the
  refined answer is correct, including when every candidate is wrong
  (``candidates_correct`` counts the right ones; ``keep="all_wrong"`` keeps only those).
- ``rsa_aggregate``: problem + the k population members an RSA aggregation read -> its
  solution; kept when correct (``candidates_correct`` counts the right members,
  ``round`` says which round wrote it).
- ``direct``: the problem as asked -> a solution; kept when correct. GSR mixes these in
  at a chosen ratio (:func:`mix_rows`).
- ``rc_reasoning``: problem + summary so far -> the next reasoning chunk; kept when the
  chunk's answer is correct.
- ``rc_summary``: problem + previous summary + latest chunk -> the new summary; kept when
  the chunk reasoned from that summary is correct (``summaries="all"`` keeps all).
- ``self_refine_feedback``: problem + solution -> feedback; kept when its verdict
  (correct or not) is right. ``self_refine_refine``: problem + solution + feedback ->
  the new solution; kept when correct.
- ``abstraction_propose``: problem -> a note; kept when solutions that read it are right
  at least ``min_accuracy`` of the time. ``abstraction_solve``: note + problem -> a
  solution; kept when correct.

A helper step whose answer came back empty, so that the run passed on its thinking or a
placeholder instead (its ``helper_text`` note), makes no row of its own.

Each row also carries ``id``, ``answer``, ``step_id``, ``sample`` (the completion index
within the step), ``correct`` and ``prompt_set``. A new strategy's kinds join by its
step builders; :func:`row_kinds` lists them all.

>>> import asyncio
>>> from scaffolds.problem import Problem
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.core.run import run_scaffold
>>> from scaffolds.core.run_settings import RunSettings
>>> from scaffolds.strategies import GSR
>>> engine = MockEngine(lambda r: "7" if "[" in r.prompt_text() else "5")
>>> settings = RunSettings(prompts="compact")
>>> run = run_scaffold(GSR(n=2), Problem.from_text("3+4="), engine, settings)
>>> events = tuple(asyncio.run(run).events)
>>> record = TraceRecord("p1", "3+4=", "7", events, prompt_set="compact")
>>> [(r["kind"], r["prompt"], r["completion"], r["candidates_correct"]) for r in build_rows(record)]
[('gsr_refine', '3+4=[5,5]', '7', 0)]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from scaffolds.core.trace import PROVENANCE_SCHEMA
from scaffolds.evaluation.answers import is_correct
from scaffolds.spec.registry import Registry, default_registry, get_prompt_set
from scaffolds.strategies.steps import RowInputs, StepBuilder, TracedStep
from training.traces import TraceRecord

__all__ = [
    "Grade",
    "build_rows",
    "direct_solutions",
    "mix_rows",
    "right_solutions",
    "row_builders",
    "row_inputs",
    "row_kinds",
    "sft_columns",
]

Grade = Callable[[str, str], bool]
"""``grade(gold, text)``: is the solution ``text`` right? (default: :func:`is_correct`)."""

Row = dict[str, Any]


def row_builders(registry: Registry | None = None) -> dict[str, StepBuilder]:
    """Every step kind with SFT rows, by kind (sorted), from the registered strategies.

    >>> list(row_builders())[:3]
    ['abstraction_propose', 'abstraction_solve', 'direct']
    """
    registry = registry if registry is not None else default_registry()
    found = {
        builder.kind: builder
        for name in registry.names()
        for builder in registry.get(name).step_builders
        if builder.rows is not None
    }
    return dict(sorted(found.items()))


def row_kinds(registry: Registry | None = None) -> tuple[str, ...]:
    return tuple(row_builders(registry))


def _row(record: TraceRecord, step: TracedStep, sample: int, kind: str, **extra: Any) -> Row:
    # A row rule may train the step's prompt toward another text (``completion_text``).
    target = extra.pop("completion_text", None)
    return {
        "prompt": record.step_prompt(step),
        "completion": record.completion_for(step.texts[sample] if target is None else target),
        "kind": kind,
        "id": record.id,
        "answer": record.answer,
        "step_id": step.step_id,
        "sample": sample,
        "prompt_set": record.prompt_set,
        **extra,
    }


def row_inputs(
    record: TraceRecord,
    grade: Grade = is_correct,
    registry: Registry | None = None,
    options: Mapping[str, Any] | None = None,
) -> RowInputs:
    """What the row rules read of ``record``: its steps, prompt set and a grader."""
    answer = record.answer
    return RowInputs(
        record.view(),
        get_prompt_set(record.prompt_set, registry),
        record.problem,
        lambda text: None if answer is None else grade(answer, text),
        options or {},
    )


def build_rows(
    record: TraceRecord,
    grade: Grade = is_correct,
    *,
    kinds: Iterable[str] | None = None,
    registry: Registry | None = None,
    **options: Any,
) -> list[Row]:
    """Every row kind this record's trace supports (or only ``kinds``), in trace order.

    Scaffolds compose, so one trace can yield several kinds (``gsr(solver=rc)`` gives
    ``gsr_refine`` and ``rc_*`` rows). ``options`` go to the kinds' row rules
    (``gsr_keep``, ``rc_summaries``, ``min_accuracy``). A record saved before steps
    recorded their provenance (schema 1) raises, naming its version.
    """
    if record.schema < PROVENANCE_SCHEMA:
        raise ValueError(
            f"trace record {record.id!r} has schema version {record.schema}, which records "
            f"no step provenance; training rows need version {PROVENANCE_SCHEMA} or later: "
            "collect it again"
        )
    registry = registry if registry is not None else default_registry()
    builders = row_builders(registry)
    wanted = set(builders if kinds is None else kinds)
    if unknown := wanted - set(builders):
        known = ", ".join(builders)
        raise ValueError(f"unknown row kinds {sorted(unknown)} (known: {known})")
    inputs = row_inputs(record, grade, registry, options)
    view = inputs.view
    rows: list[Row] = []
    for kind, builder in builders.items():
        if kind not in wanted or builder.rows is None:
            continue
        for step in view.steps:
            if builder.matches(step, inputs):
                for sample in range(len(step.texts)):
                    # A helper step whose answer came back empty passed on its thinking
                    # (cut mid-thought) or a placeholder. The model never wrote that as
                    # an answer, and its whole message is an unfinished thought that
                    # would teach the step to think until the limit: no row. (The next
                    # step's row keeps its prompt as sent, substitute included.)
                    if sample in step.substitutes:
                        continue
                    if (extra := builder.rows(step, sample, inputs)) is not None:
                        rows.append(_row(record, step, sample, kind, **extra))
    order = {step.step_id: step.order for step in view.steps}
    rows.sort(key=lambda row: (order.get(row["step_id"], 0), row["sample"]))
    return rows


def direct_solutions(
    record: TraceRecord, grade: Grade = is_correct, registry: Registry | None = None
) -> list[str]:
    """The record's solutions of the problem as asked (its ``direct`` steps), right or
    wrong, in trace order; a helper step's substituted samples are left out."""
    registry = registry if registry is not None else default_registry()
    direct = row_builders(registry)["direct"]
    inputs = row_inputs(record, grade, registry)
    return [
        text
        for step in inputs.view.steps
        if direct.matches(step, inputs)
        for sample, text in enumerate(step.texts)
        if sample not in step.substitutes
    ]


def right_solutions(
    records: Iterable[TraceRecord], grade: Grade = is_correct, registry: Registry | None = None
) -> dict[str, list[str]]:
    """Per problem id, the right direct solutions (candidates) its records hold, in
    trace order: what ``gsr_borrow`` lends a refine row whose own refinement is wrong."""
    registry = registry if registry is not None else default_registry()
    pool: dict[str, list[str]] = {}
    for record in records:
        if record.answer is None:
            continue
        for text in direct_solutions(record, grade, registry):
            if grade(record.answer, text):
                pool.setdefault(record.id, []).append(text)
    return pool


def mix_rows(
    rows: Sequence[Row], direct: Sequence[Row], direct_ratio: float, *, seed: int = 0
) -> list[Row]:
    """``rows`` plus direct-solve rows so that ``direct_ratio`` of the result is direct
    (as many as are available), shuffled. The GSR recipe mixes refine and solve data.

    >>> mixed = mix_rows([{"k": "r"}] * 3, [{"k": "d"}] * 10, 0.25)
    >>> len(mixed), sum(r["k"] == "d" for r in mixed)
    (4, 1)
    """
    if not 0.0 <= direct_ratio < 1.0:
        raise ValueError(f"direct_ratio must be in [0, 1) (got {direct_ratio})")
    rng = random.Random(seed)
    wanted = round(len(rows) * direct_ratio / (1.0 - direct_ratio))
    chosen = rng.sample(list(direct), min(wanted, len(direct)))
    mixed = [*rows, *chosen]
    rng.shuffle(mixed)
    return mixed


def sft_columns(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Only ``prompt`` and ``completion``: what an SFT dataset needs."""
    return [{"prompt": row["prompt"], "completion": row["completion"]} for row in rows]
