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
>>> from scaffolds.context import Problem
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.run import run_scaffold
>>> from scaffolds.strategies import Majority
>>> engine = MockEngine(lambda r: ["7", "8", "9", "6"])
>>> run = asyncio.run(run_scaffold(Majority(k=4), Problem.from_text("3+4="), engine,
...     prompts="compact"))
>>> record = TraceRecord("p", "3+4=", "7", tuple(run.events), prompt_set="compact")
>>> [(r["prompt"], r["completion"], r["target"]) for r in regrouped_refine_rows([record], n=2)]
[('3+4=[7,8]', '7', 'candidate'), ('3+4=[9,6]', '7', 'borrowed')]
"""

from __future__ import annotations

from collections.abc import Iterable

from scaffolds.answers import is_correct
from scaffolds.problem import StepPrompt
from scaffolds.spec import Registry
from scaffolds.steps import render_step
from scaffolds.strategies.gsr import REFINE
from scaffolds.thinking import Thinking
from training.data import Grade, Row, direct_solutions
from training.traces import TraceRecord

__all__ = ["regrouped_refine_rows"]


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
    shown = Thinking().after  # what gsr shows of a candidate
    for record in records:
        if record.answer is None:
            continue
        texts = direct_solutions(record, grade, registry)
        right = [t for t in texts if grade(record.answer, t)]
        lent = 0
        for start in range(0, len(texts) - n + 1, n):
            group = [shown(t) for t in texts[start : start + n]]
            own = [t for t, g in zip(group, texts[start : start + n], strict=True) if g in right]
            if own:
                target, source = own[0], "candidate"
            elif right:
                target, source = right[lent % len(right)], "borrowed"
                lent += 1
            else:
                continue
            prompt = render_step(REFINE, record.problem, {"candidates": group},
                                 prompts=record.prompt_set)  # fmt: skip
            rows.append(_row(record, prompt, target, source, len(own), n))
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
