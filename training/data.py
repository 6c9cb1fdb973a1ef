r"""SFT rows from scaffold traces, in TRL's prompt/completion form.

Every row's ``prompt`` is the step's prompt exactly as the trace recorded it (the same
:mod:`scaffolds.prompts` template that serving renders), so training and serving cannot
drift apart. Chat runs give chat messages (``[{"role": "user", ...}]`` prompts and one
assistant message as completion: TRL's conversational form); text runs give strings.

Rows (``kind``; what the prompt holds -> what the completion is; which rows are kept):

- ``gsr_refine``: problem + numbered candidates -> the refined solution; kept when the
  refined answer is correct, including when every candidate is wrong
  (``candidates_correct`` counts the right ones; ``keep="all_wrong"`` keeps only those).
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

Each row also carries ``id``, ``answer``, ``step_id``, ``sample`` (the completion index
within the step), ``correct`` and ``prompt_set``.

>>> import asyncio
>>> from scaffolds.context import Problem
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.run import run_scaffold
>>> from scaffolds.strategies import GSR
>>> engine = MockEngine(lambda r: "7" if "[" in r.prompt_text() else "5")
>>> run = run_scaffold(GSR(n=2), Problem.from_text("3+4="), engine, prompts="compact")
>>> events = tuple(asyncio.run(run).events)
>>> record = TraceRecord("p1", "3+4=", "7", events, prompt_set="compact")
>>> [(r["kind"], r["prompt"], r["completion"], r["candidates_correct"]) for r in build_rows(record)]
[('gsr_refine', '3+4=[5,5]', '7', 0)]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from scaffolds.answers import is_correct
from scaffolds.prompts import PromptSet, get_prompt_set
from scaffolds.strategies.self_refine import says_correct
from training.traces import TraceRecord, TraceStep, template_fields

__all__ = [
    "KINDS",
    "Grade",
    "abstraction_rows",
    "build_rows",
    "direct_rows",
    "gsr_rows",
    "mix_rows",
    "rc_rows",
    "self_refine_rows",
    "sft_columns",
    "split_candidates",
]

Grade = Callable[[str, str], bool]
"""``grade(gold, text)``: is the solution ``text`` right? (default: :func:`is_correct`)."""

Row = dict[str, Any]

KINDS = (
    "direct",
    "gsr_refine",
    "rc_reasoning",
    "rc_summary",
    "self_refine_feedback",
    "self_refine_refine",
    "abstraction_propose",
    "abstraction_solve",
)


def _grade(grade: Grade, gold: str | None, text: str) -> bool | None:
    return None if gold is None else grade(gold, text)


def _row(
    record: TraceRecord,
    step: TraceStep,
    prompt_text: str,
    completion: str,
    kind: str,
    sample: int,
    correct: bool | None,
    **extra: Any,
) -> Row:
    return {
        "prompt": record.prompt_for(prompt_text),
        "completion": record.completion_for(completion),
        "kind": kind,
        "id": record.id,
        "answer": record.answer,
        "step_id": step.step_id,
        "sample": sample,
        "correct": correct,
        "prompt_set": record.prompt_set,
        **extra,
    }


def _steps_with(
    record: TraceRecord, template_name: str, kinds: Sequence[str]
) -> Iterable[tuple[TraceStep, str, dict[str, str]]]:
    """Steps of ``kinds`` whose prompt renders this record's ``template_name`` template,
    with the prompt's text and the template's recovered fields."""
    template = getattr(get_prompt_set(record.prompt_set), template_name)
    for step in record.steps():
        if step.kind not in kinds:
            continue
        text = record.user_text(step)
        if text is None:
            continue
        fields = template_fields(template, text, {"problem": record.problem})
        if fields is not None:
            yield step, text, fields


def split_candidates(prompts: PromptSet, block: str, pool: Iterable[str]) -> list[str] | None:
    """The candidate texts (drawn from ``pool``) that ``block`` numbers and joins, or None.

    >>> from scaffolds.prompts import get_prompt_set
    >>> ps = get_prompt_set("default")
    >>> split_candidates(ps, ps.candidates(["a", "b\\n\\nc"]), ["a", "b\\n\\nc", "b"])
    ['a', 'b\\n\\nc']
    """
    texts = sorted(set(pool), key=len, reverse=True)
    separator = prompts.candidate_separator
    dead: set[tuple[int, int]] = set()

    def search(at: int, index: int) -> list[str] | None:
        if (at, index) in dead:
            return None
        rest = block[at:]
        for text in texts:
            piece = prompts.candidate.render(index=str(index), text=text)
            if rest == piece:
                return [text]
            if rest.startswith(piece + separator):
                tail = search(at + len(piece) + len(separator), index + 1)
                if tail is not None:
                    return [text, *tail]
        dead.add((at, index))
        return None

    return search(0, 1) if block else None


def direct_rows(record: TraceRecord, grade: Grade = is_correct) -> list[Row]:
    """Correct solutions of steps that saw the problem as asked (or in the solve template)."""
    prompts = get_prompt_set(record.prompt_set)
    solve_text = prompts.solve.render(problem=record.problem)
    rows: list[Row] = []
    for step in record.steps():
        if step.kind not in ("generate", "candidate", "solve"):
            continue
        text = record.user_text(step)
        if text is None or text not in (record.problem, solve_text):
            continue
        for i, completion in enumerate(step.texts):
            if _grade(grade, record.answer, completion):
                rows.append(_row(record, step, text, completion, "direct", i, True))
    return rows


def gsr_rows(
    record: TraceRecord,
    grade: Grade = is_correct,
    *,
    keep: Literal["all", "all_wrong", "some_right"] = "all",
) -> list[Row]:
    """(problem + candidates) -> a correct refined solution, one row per correct sample."""
    prompts = get_prompt_set(record.prompt_set)
    rows: list[Row] = []
    steps = record.steps()
    for step, text, fields in _steps_with(record, "gsr_refine", ("refine",)):
        pool = [t for s in steps if s.order < step.order for t in s.texts]
        candidates = split_candidates(prompts, fields["candidates"], pool)
        right: int | None = None
        if candidates is not None and record.answer is not None:
            right = sum(bool(grade(record.answer, c)) for c in candidates)
        if keep == "all_wrong" and right != 0:
            continue
        if keep == "some_right" and not right:
            continue
        for i, completion in enumerate(step.texts):
            if _grade(grade, record.answer, completion):
                rows.append(
                    _row(
                        record,
                        step,
                        text,
                        completion,
                        "gsr_refine",
                        i,
                        True,
                        candidates_correct=right,
                        num_candidates=None if candidates is None else len(candidates),
                    )
                )
    return rows


def rc_rows(
    record: TraceRecord,
    grade: Grade = is_correct,
    *,
    summaries: Literal["next_correct", "all"] = "next_correct",
) -> list[Row]:
    """RC's two steps: summary-conditioned reasoning chunks and the summaries themselves."""
    prompts = get_prompt_set(record.prompt_set)
    rows: list[Row] = []
    reasoning: list[tuple[TraceStep, str, str]] = []  # step, prompt text, its summary
    for step, text, fields in _steps_with(record, "rc_reasoning_continue", ("reasoning",)):
        reasoning.append((step, text, fields["summary"]))
    for step, text, _ in _steps_with(record, "rc_reasoning_start", ("reasoning",)):
        reasoning.append((step, text, prompts.rc_no_summary))
    reasoning.sort(key=lambda item: item[0].order)
    for step, text, summary in reasoning:
        for i, chunk in enumerate(step.texts):
            if _grade(grade, record.answer, chunk):
                rows.append(
                    _row(
                        record,
                        step,
                        text,
                        chunk,
                        "rc_reasoning",
                        i,
                        True,
                        has_summary=bool(summary),
                    )
                )
    for step, text, _ in _steps_with(record, "rc_summary", ("summary",)):
        for i, summary in enumerate(step.texts):
            after = [s for s, _, used in reasoning if s.order > step.order and used == summary]
            correct: bool | None = None
            if after and record.answer is not None:
                correct = any(grade(record.answer, chunk) for chunk in after[0].texts)
            if summaries == "all" or correct:
                rows.append(_row(record, step, text, summary, "rc_summary", i, correct))
    return rows


def self_refine_rows(record: TraceRecord, grade: Grade = is_correct) -> list[Row]:
    """Self-Refine's feedback (kept when its verdict is right) and refinements (when correct)."""
    prompts = get_prompt_set(record.prompt_set)
    marker = prompts.self_refine_correct_marker
    rows: list[Row] = []
    for step, text, fields in _steps_with(record, "self_refine_feedback", ("feedback",)):
        truth = _grade(grade, record.answer, fields["solution"])
        for i, feedback in enumerate(step.texts):
            if truth is not None and says_correct(feedback, marker) == truth:
                rows.append(
                    _row(
                        record,
                        step,
                        text,
                        feedback,
                        "self_refine_feedback",
                        i,
                        True,
                        solution_correct=truth,
                    )
                )
    for step, text, fields in _steps_with(record, "self_refine_refine", ("refine",)):
        before = _grade(grade, record.answer, fields["solution"])
        for i, refined in enumerate(step.texts):
            if _grade(grade, record.answer, refined):
                rows.append(
                    _row(
                        record,
                        step,
                        text,
                        refined,
                        "self_refine_refine",
                        i,
                        True,
                        previous_correct=before,
                    )
                )
    return rows


def abstraction_rows(
    record: TraceRecord, grade: Grade = is_correct, *, min_accuracy: float = 0.5
) -> list[Row]:
    """Notes that helped (solver accuracy >= ``min_accuracy``) and correct note-led solutions."""
    prompts = get_prompt_set(record.prompt_set)
    steps = record.steps()
    rows: list[Row] = []
    for step, text, _ in _steps_with(record, "abstraction_propose", ("abstraction",)):
        head, sep, _ = step.label.rpartition(" > ")
        prefix = head + sep
        for i, note in enumerate(step.texts):
            solve_text = prompts.abstraction_solve.render(abstraction=note, problem=record.problem)
            marker = f"{prefix}abstraction {i + 1} > "
            solves = [
                s
                for s in steps
                if s.order > step.order
                and s.label.startswith(marker)
                and s.scope.startswith(step.scope + ".")
            ]
            grades: list[bool] = []
            for solve in solves:
                solve_prompt = record.user_text(solve)
                for j, solution in enumerate(solve.texts):
                    ok = _grade(grade, record.answer, solution)
                    if ok is None:
                        continue
                    grades.append(ok)
                    if ok and solve_prompt is not None and solve_text in solve_prompt:
                        rows.append(
                            _row(
                                record, solve, solve_prompt, solution, "abstraction_solve", j, True
                            )
                        )
            accuracy = sum(grades) / len(grades) if grades else None
            if accuracy is not None and accuracy >= min_accuracy and accuracy > 0:
                rows.append(
                    _row(
                        record,
                        step,
                        text,
                        note,
                        "abstraction_propose",
                        i,
                        True,
                        accuracy=accuracy,
                    )
                )
    return rows


def build_rows(
    record: TraceRecord,
    grade: Grade = is_correct,
    *,
    kinds: Iterable[str] | None = None,
    gsr_keep: Literal["all", "all_wrong", "some_right"] = "all",
    rc_summaries: Literal["next_correct", "all"] = "next_correct",
    min_accuracy: float = 0.5,
) -> list[Row]:
    """Every row kind this record's trace supports (or only ``kinds``), in trace order.

    Scaffolds compose, so one trace can yield several kinds (``gsr(solver=rc)`` gives
    ``gsr_refine`` and ``rc_*`` rows). A step feeds at most one non-direct kind.
    """
    wanted = set(KINDS if kinds is None else kinds)
    if unknown := wanted - set(KINDS):
        raise ValueError(f"unknown row kinds {sorted(unknown)} (known: {', '.join(KINDS)})")
    rows: list[Row] = []
    if "direct" in wanted:
        rows += direct_rows(record, grade)
    if "gsr_refine" in wanted:
        rows += gsr_rows(record, grade, keep=gsr_keep)
    if wanted & {"rc_reasoning", "rc_summary"}:
        rows += rc_rows(record, grade, summaries=rc_summaries)
    if wanted & {"self_refine_feedback", "self_refine_refine"}:
        rows += self_refine_rows(record, grade)
    if wanted & {"abstraction_propose", "abstraction_solve"}:
        rows += abstraction_rows(record, grade, min_accuracy=min_accuracy)
    order = {step.step_id: step.order for step in record.steps()}
    rows = [row for row in rows if row["kind"] in wanted]
    rows.sort(key=lambda row: (order.get(row["step_id"], 0), row["sample"]))
    return _dedupe(rows)


def _dedupe(rows: list[Row]) -> list[Row]:
    """Drop repeats of (kind, step, sample): a step can look "direct" to two builders."""
    seen: set[tuple[str, str, int]] = set()
    out = []
    for row in rows:
        key = (row["kind"], row["step_id"], row["sample"])
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


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
