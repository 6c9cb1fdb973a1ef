"""GSR refine rows without refine calls: a problem's own samples, regrouped.

Rejection sampling starves when the model rarely refines to the right answer (SmolLM2-135M
on short arithmetic: 5% of refinements). Sampling is cheap next to refining, so this
builds the refine step's rows from plain samples instead: each problem's solutions (its
``direct`` steps, right and wrong, e.g. from ``majority(k=16)``) are cut into groups of
``n``, the group is rendered through gsr's own step builder exactly as ``gsr(n)`` would
show it, and the row trains toward a right solution of the same problem: a right one in
the group (``target="candidate"``) or, when the whole group is wrong, the next right one
from another group (``target="borrowed"``, solving afresh). Problems without a right
solution make no row.

>>> import asyncio
>>> from scaffolds.problem import Problem
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.core.run import run_scaffold
>>> from scaffolds.core.run_settings import RunSettings
>>> from scaffolds.strategies import Majority
>>> engine = MockEngine(lambda r: ["7", "8", "9", "6"])
>>> settings = RunSettings(prompts="compact")
>>> run = asyncio.run(run_scaffold(Majority(k=4), Problem.from_text("3+4="), engine, settings))
>>> record = TraceRecord("p", "3+4=", "7", tuple(run.events), prompt_set="compact")
>>> [(r["prompt"], r["completion"], r["target"]) for r in regrouped_refine_rows([record], n=2)]
[('3+4=[7,8]', '7', 'candidate'), ('3+4=[9,6]', '7', 'borrowed')]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from scaffolds.core.thinking import Thinking
from scaffolds.evaluation.answers import is_correct
from scaffolds.problem import StepPrompt
from scaffolds.spec.registry import Registry
from scaffolds.strategies.gsr import REFINE
from scaffolds.strategies.steps import render_step
from training.data import Grade, Row, direct_solutions
from training.traces import TraceRecord

__all__ = ["candidate_groups", "grpo_refine_rows", "regrouped_refine_rows"]


def regrouped_refine_rows(
    records: Iterable[TraceRecord],
    grade: Grade = is_correct,
    *,
    n: int = 4,
    registry: Registry | None = None,
) -> list[Row]:
    """``gsr_refine`` rows from each record's samples in groups of ``n`` (a short last
    group is dropped), targets as the module says."""
    rows: list[Row] = []
    for record in records:
        if record.answer is None:
            continue
        graded = _graded(record, grade, registry)
        right = [text for text, ok in graded if ok]
        lent = 0
        for group, flags in _groups(graded, n):
            own = [t for t, ok in zip(group, flags, strict=True) if ok]
            if own:
                target, source = own[0], "candidate"
            elif right:
                target, source = right[lent % len(right)], "borrowed"
                lent += 1
            else:
                continue
            prompt = render_step(
                REFINE, record.problem, {"candidates": group}, prompts=record.prompt_set
            )
            rows.append(_row(record, prompt, target, source, len(own), n))
    return rows


def candidate_groups(
    record: TraceRecord, grade: Grade = is_correct, *, n: int = 4, registry: Registry | None = None
) -> Iterator[tuple[list[str], list[bool]]]:
    """A record's samples in groups of ``n`` (a short last group is dropped), each as gsr
    shows its candidates, with whether each is right."""
    if record.answer is not None:
        yield from _groups(_graded(record, grade, registry), n)


def _graded(record: TraceRecord, grade: Grade, registry: Registry | None) -> list[tuple[str, bool]]:
    """Each of the record's samples with whether it is right (graded once)."""
    answer = str(record.answer)
    return [(t, grade(answer, t)) for t in direct_solutions(record, grade, registry)]


def _groups(graded: list[tuple[str, bool]], n: int) -> Iterator[tuple[list[str], list[bool]]]:
    shown = Thinking().after  # what gsr shows of a candidate
    for start in range(0, len(graded) - n + 1, n):
        group = graded[start : start + n]
        yield [shown(text) for text, _ in group], [ok for _, ok in group]


def grpo_refine_rows(
    records: Iterable[TraceRecord],
    grade: Grade = is_correct,
    *,
    n: int = 4,
    mixed_only: bool = True,
    registry: Registry | None = None,
) -> list[Row]:
    """``gsr_refine`` GRPO rows (:mod:`training.grpo`): the problem, its gold answer and a
    group of ``n`` of its own samples as the stored ``candidates``; the policy samples the
    refinement. ``mixed_only`` keeps the groups with right and wrong candidates: where a
    refinement can beat the vote or lose to it, and where its samples' rewards differ
    (a group whose rewards are all equal has no GRPO advantage to learn from)."""
    rows: list[Row] = []
    for record in records:
        for index, (group, flags) in enumerate(
            candidate_groups(record, grade, n=n, registry=registry)
        ):
            if mixed_only and (all(flags) or not any(flags)):
                continue
            rows.append(
                {
                    "prompt": record.prompt_for(record.problem),
                    "answer": record.answer,
                    "id": f"{record.id}#{index}",
                    "mode": "gsr_refine",
                    "candidates": group,
                    "candidates_correct": sum(flags),
                }
            )
    return rows


def _row(
    record: TraceRecord, prompt: StepPrompt, target: str, source: str, correct: int, n: int
) -> Row:
    # The rendered template is the last user turn, after the record's history (as in a run).
    return {
        "prompt": record.prompt_for(str(prompt.prompt)),
        "completion": record.completion_for(target),
        "kind": REFINE.kind,
        "id": record.id,
        "answer": record.answer,
        "template": prompt.template,
        "target": source,
        "correct": True,
        "candidates_correct": correct,
        "num_candidates": n,
        "prompt_set": record.prompt_set,
    }
