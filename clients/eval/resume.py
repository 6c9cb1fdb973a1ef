"""How a run reads answers: the served model's own format by default, and the format a
results file was graded in, which a resumed run must keep.

A run's records each say how their answers were read (``answer_format``); grading the
rest of a file another way would mix two ways of counting in one accuracy, so
:func:`check_resume` refuses it, naming the format to resume with. Records written
before the field existed were all read leniently.

>>> record_format({"answer_format": "boxed"}), record_format({"correct": True})
('boxed', 'lenient')
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from scaffolds.evaluation.answers import ANSWER_FORMATS, AnswerFormat
from scaffolds.evaluation.results import Record

__all__ = [
    "ResumeConflictError",
    "card_answer_format",
    "check_resume",
    "record_format",
    "run_formats",
    "served_answer_format",
]


def card_answer_format(cards: Sequence[dict[str, Any]], model: str) -> AnswerFormat | None:
    """The answer format Ponder's ``/v1/models`` card says ``model`` (or its base, for a
    ``base+spec`` id) is read with; None when no card says (any other server).

    >>> cards = [{"id": "m", "ponder": {"answer_format": "lenient"}}, {"id": "x"}]
    >>> card_answer_format(cards, "m+gsr(n=2)"), card_answer_format(cards, "x")
    ('lenient', None)
    """
    wanted = (model, model.partition("+")[0])
    for card in cards:
        ponder = card.get("ponder")
        if card.get("id") in wanted and isinstance(ponder, dict):
            said = ponder.get("answer_format")
            if said in ANSWER_FORMATS:
                return said  # type: ignore[no-any-return]
    return None


def served_answer_format(
    base_url: str, model: str, api_key: str | None, timeout_s: float = 30.0
) -> AnswerFormat | None:
    """What the server at ``base_url`` says ``model``'s answers are read as (its
    ``/v1/models`` cards); None when it does not say or cannot be asked."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        reply = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=timeout_s)
        cards = reply.json().get("data") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return card_answer_format(cards, model) if isinstance(cards, list) else None


class ResumeConflictError(ValueError):
    """A results file resumed with another answer format than it was graded in."""


def record_format(record: Record) -> str:
    """The answer format ``record`` was graded in (``lenient`` when it does not say)."""
    return str(record.get("answer_format") or "lenient")


def run_formats(records: Sequence[Record]) -> str:
    """The answer formats of a results file's finished records, for its report.

    >>> run_formats([{"answer_format": "boxed"}, {"correct": False}, {"error": "timeout"}])
    'boxed, lenient'
    """
    return ", ".join(sorted({record_format(r) for r in records if not r.get("error")}))


def check_resume(path: Path, answer_format: str, records: Sequence[Record]) -> None:
    """Raise :class:`ResumeConflictError` when a finished record of ``records`` (the
    results file at ``path``) was graded in another format than ``answer_format``.

    >>> check_resume(Path("run/results.jsonl"), "boxed", [{"answer_format": "boxed"}])
    >>> try:
    ...     check_resume(Path("run/results.jsonl"), "boxed", [{"correct": True}, {"error": "x"}])
    ... except ResumeConflictError as err:
    ...     print(*str(err).split(": "), sep="\\n")
    run/results.jsonl was graded with answer_format 'lenient' (1 samples), not 'boxed'
    resume it with --answer-format lenient, or write to a new --out
    """
    finished = [record_format(r) for r in records if not r.get("error")]
    other = [fmt for fmt in finished if fmt != answer_format]
    if other:
        raise ResumeConflictError(
            f"{path} was graded with answer_format {other[0]!r} ({len(other)} samples), "
            f"not {answer_format!r}: resume it with --answer-format {other[0]}, "
            "or write to a new --out"
        )
