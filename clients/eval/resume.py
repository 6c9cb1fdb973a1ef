"""How a results file was graded, which a resumed run must keep.

A run's records each say how their answers were read: ``answer_format`` and the
``thinking_markers`` whose end the answer follows. Grading the rest of a file another
way would mix two ways of counting in one accuracy, so :func:`check_resume` refuses it,
naming the format to resume with. Records written before the fields existed were read
leniently, after ``</think>``.

>>> run_formats([{"answer_format": "boxed"}, {"correct": True}])
'boxed, lenient'
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from scaffolds.evaluation.answers import ThinkingMarkers
from scaffolds.evaluation.results import Record, record_answer_format, record_thinking

__all__ = [
    "ResumeConflictError",
    "check_resume",
    "run_formats",
    "run_thinking",
]


class ResumeConflictError(ValueError):
    """A results file resumed with another answer format than it was graded in."""


def run_formats(records: Sequence[Record]) -> str:
    """The answer formats of a results file's finished records, for its report.

    >>> run_formats([{"answer_format": "boxed"}, {"correct": False}, {"error": "timeout"}])
    'boxed, lenient'
    """
    return ", ".join(sorted({record_answer_format(r) for r in records if not r.get("error")}))


def run_thinking(records: Sequence[Record]) -> dict[str, str] | None:
    """The thinking markers a results file's finished records were read after, for its
    report; None when they differ (a report says each run's own).

    >>> run_thinking([{"correct": True}, {"error": "timeout"}])
    {'start': '<think>', 'end': '</think>'}
    """
    marks = {record_thinking(r) for r in records if not r.get("error")}
    return marks.pop().as_dict() if len(marks) == 1 else None


def check_resume(
    path: Path,
    answer_format: str,
    records: Sequence[Record],
    thinking: ThinkingMarkers | None = None,
) -> None:
    """Raise :class:`ResumeConflictError` when a finished record of ``records`` (the
    results file at ``path``) was graded in another format than ``answer_format``, or
    read after other thinking markers than ``thinking`` (default ``<think>``/``</think>``).

    >>> check_resume(Path("run/results.jsonl"), "boxed", [{"answer_format": "boxed"}])
    >>> try:
    ...     check_resume(Path("run/results.jsonl"), "boxed", [{"correct": True}, {"error": "x"}])
    ... except ResumeConflictError as err:
    ...     print(*str(err).split(": "), sep="\\n")
    run/results.jsonl was graded with answer_format 'lenient' (1 samples), not 'boxed'
    resume it with --answer-format lenient, or write to a new --out
    """
    finished = [r for r in records if not r.get("error")]
    other = [fmt for fmt in map(record_answer_format, finished) if fmt != answer_format]
    if other:
        raise ResumeConflictError(
            f"{path} was graded with answer_format {other[0]!r} ({len(other)} samples), "
            f"not {answer_format!r}: resume it with --answer-format {other[0]}, "
            "or write to a new --out"
        )
    marks = thinking or ThinkingMarkers()
    moved = [m for m in map(record_thinking, finished) if m != marks]
    if moved:
        raise ResumeConflictError(
            f"{path} was graded after the thinking markers {moved[0].start!r}...{moved[0].end!r} "
            f"({len(moved)} samples), not {marks.start!r}...{marks.end!r} (the model's "
            "thinking markers changed on the server): write to a new --out"
        )
