"""Problems to evaluate or train on: one type, :class:`ProblemRow`, and one loader,
:func:`load_problems`, for JSONL files, OpenAI Batch API files, Hugging Face datasets and
the benchmarks known by name (``gsm8k``, ``math500``, ``aime24``, ``aime25``: downloaded
once, then cached, :mod:`scaffolds.evaluation.named_datasets`) -- ``ponder eval``,
``ponder train`` and the experiments all read problems through it.

A problem row is ``{"id", "problem", "answer", ...}``; other fields are carried through
into the results as ``meta`` (a long ``solution`` is kept for judges but not copied).
A Batch API row is ``{"custom_id", "method", "url", "body": {"messages": [...], ...}}``;
its body is sent as is (with the run's model), and a reference answer may sit in
``answer`` or ``body.metadata.answer``. Bad rows never stop a load: each one is
reported with its line number and skipped.

>>> import json, tempfile, pathlib
>>> rows = ['{"id": "a", "problem": "1+1=", "answer": "2"}', "{oops", '{"problem": "2+2="}']
>>> path = pathlib.Path(tempfile.mkdtemp()) / "p.jsonl"
>>> _ = path.write_text("\\n".join(rows) + "\\n")
>>> loaded = load_problems(str(path))
>>> [p.id for p in loaded.problems], [b.line for b in loaded.bad]
(['a', 'line-3'], [2])
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaffolds.dependencies import require
from scaffolds.engines.protocol import Message
from scaffolds.evaluation.named_datasets import NAMED, named_dataset_file
from scaffolds.problem import Problem

__all__ = ["BadLine", "Loaded", "ProblemRow", "load_problems", "parse_row"]

_PROBLEM_KEYS = ("problem", "question", "prompt", "input")
_ANSWER_KEYS = ("answer", "expected_answer", "final_answer", "target")
_NOT_META = {"id", "custom_id", "body", "method", "url", "solution", *_PROBLEM_KEYS, *_ANSWER_KEYS}
_CHAT_URL = "/v1/chat/completions"
_NO_ANSWER = f"expected one of {', '.join(_ANSWER_KEYS)}; its samples are not graded"


@dataclass(frozen=True)
class ProblemRow:
    """One item to solve: an id, the text, the reference answer (None if unknown).

    ``messages`` wins over ``problem`` when a Batch API body gave them; ``history`` is the
    conversation before the problem when a scaffold runs it in process (:meth:`to_problem`).
    """

    id: str
    problem: str
    answer: str | None = None
    solution: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    """Batch API request body (minus ``model``), sent verbatim."""
    history: tuple[Message, ...] = field(default=(), repr=False)

    def messages(self, template: str = "{problem}") -> list[dict[str, Any]]:
        """The chat messages to send.

        >>> ProblemRow("x", "3+4=").messages("Solve: {problem}")
        [{'role': 'user', 'content': 'Solve: 3+4='}]
        """
        if self.body is not None and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return [{"role": "user", "content": template.replace("{problem}", self.problem)}]

    def to_problem(self, chat: bool) -> Problem:
        """What a scaffold solves in process: chat messages (after ``history``) or text.

        >>> ProblemRow("x", "3+4=").to_problem(chat=True).text
        '3+4='
        """
        if chat:
            return Problem.from_messages((*self.history, Message("user", self.problem)))
        return Problem.from_text(self.problem)

    def row(self) -> dict[str, Any]:
        """The problem as a dataset row: id, problem, answer, its ``meta`` and ``solution``.

        >>> ProblemRow("x", "3+4=", "7", "4 more than 3", {"level": 1}).row()
        {'id': 'x', 'problem': '3+4=', 'answer': '7', 'level': 1, 'solution': '4 more than 3'}
        """
        out = {"id": self.id, "problem": self.problem, "answer": self.answer, **self.meta}
        return out if self.solution is None else out | {"solution": self.solution}


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class Loaded:
    """The problems of a source, the lines that were skipped, and the lines of problems
    that have no reference answer (``unanswered``: kept, but their samples cannot be
    graded)."""

    problems: list[ProblemRow]
    bad: list[BadLine]
    source: str
    unanswered: list[BadLine] = field(default_factory=list)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    return None


def _message_text(messages: list[Any]) -> str:
    """The last user message's text (the problem a chat body poses)."""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
                return "".join(str(p) for p in parts)
            return str(content or "")
    return ""


def _batch_row(row: Mapping[str, Any], fallback_id: str) -> ProblemRow:
    url = row.get("url", _CHAT_URL)
    if url != _CHAT_URL:
        raise ValueError(f"only {_CHAT_URL} batch requests are supported (got {url!r})")
    body = row["body"]
    if not isinstance(body, Mapping):
        raise ValueError("'body' must be an object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'body.messages' must be a non-empty list")
    metadata = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
    answer = _text(row.get("answer")) or _text((metadata or {}).get("answer"))
    kept = {k: v for k, v in body.items() if k not in ("model", "n", "stream")}
    meta = {k: v for k, v in row.items() if k not in _NOT_META}
    ident = _text(row.get("custom_id")) or fallback_id
    return ProblemRow(ident, _message_text(messages), answer, None, meta, kept)


def parse_row(row: Any, fallback_id: str) -> ProblemRow:
    """A :class:`ProblemRow` from one decoded row; ValueError says what is wrong.

    >>> parse_row({"question": "2+2?", "answer": 4, "level": 1}, "line-1")
    ProblemRow(id='line-1', problem='2+2?', answer='4', solution=None, meta={'level': 1}, body=None)
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"expected a JSON object (got {type(row).__name__})")
    if "body" in row and "custom_id" in row:
        return _batch_row(row, fallback_id)
    problem = next((_text(row[k]) for k in _PROBLEM_KEYS if _text(row.get(k))), None)
    if not problem:
        raise ValueError(f"no problem text (expected one of {', '.join(_PROBLEM_KEYS)})")
    answer = next((_text(row[k]) for k in _ANSWER_KEYS if _text(row.get(k)) is not None), None)
    ident = _text(row.get("id")) or fallback_id
    meta = {k: v for k, v in row.items() if k not in _NOT_META}
    return ProblemRow(ident, problem, answer, _text(row.get("solution")), meta)


def _from_rows(rows: Iterable[tuple[int, Any]], source: str) -> Loaded:
    problems: list[ProblemRow] = []
    bad: list[BadLine] = []
    unanswered: list[BadLine] = []
    seen: set[str] = set()
    for number, row in rows:
        if isinstance(row, BadLine):
            bad.append(row)
            continue
        try:
            problem = parse_row(row, f"line-{number}")
        except (ValueError, KeyError, TypeError) as err:
            bad.append(BadLine(number, str(err)))
            continue
        if problem.id in seen:
            bad.append(BadLine(number, f"duplicate id {problem.id!r}"))
            continue
        seen.add(problem.id)
        problems.append(problem)
        if problem.answer is None:
            unanswered.append(BadLine(number, f"{problem.id!r} has no answer ({_NO_ANSWER})"))
    return Loaded(problems, bad, source, unanswered)


def _jsonl_rows(path: Path) -> Iterable[tuple[int, Any]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                yield number, BadLine(number, f"not UTF-8 ({err.reason})")
                continue
            if not line:
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                yield number, BadLine(number, f"invalid JSON: {err.msg} at column {err.colno}")


def _hf_rows(name: str, split: str, config: str | None) -> Iterable[tuple[int, Any]]:
    """Rows of a Hugging Face dataset: a saved folder, a local script/data folder, or a hub
    name. ``datasets`` is imported only here (the ``hub`` extra; ``train`` has it too)."""
    require("hub", f"{name!r} is not a file; loading it as a dataset", modules=("datasets",))
    datasets: Any = importlib.import_module("datasets")
    path = Path(name)
    if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
        data = datasets.load_from_disk(str(path))
    elif (path / "dataset_dict.json").is_file():
        data = datasets.load_from_disk(str(path))[split]
    else:
        data = datasets.load_dataset(name, config, split=split)
    for number, row in enumerate(data, start=1):
        yield number, dict(row)


def load_problems(
    source: str | Path,
    *,
    split: str = "test",
    config: str | None = None,
    limit: int | None = None,
) -> Loaded:
    """Load problems from a JSONL/Batch file, a dataset folder, a benchmark's name, or a
    hub dataset name.

    ``limit`` keeps the first N good problems. A missing file with no ``/`` in its
    name (and not a known benchmark) is an error; ``owner/name`` goes to the hub
    through ``datasets``.
    """
    source = str(source)
    path = Path(source).expanduser()
    if path.is_file():
        loaded = _from_rows(_jsonl_rows(path), str(path))
    elif source in NAMED:
        loaded = _from_rows(_jsonl_rows(named_dataset_file(source)), source)
    elif path.is_dir() or "/" in source:
        if not path.is_dir() and path.suffix in (".jsonl", ".json"):
            raise ValueError(f"no such file: {source}")
        loaded = _from_rows(_hf_rows(source, split, config), source)
    else:
        named = ", ".join(NAMED)
        raise ValueError(f"no such file: {source} (or a benchmark by name: {named})")
    if limit is not None:
        loaded.problems = loaded.problems[:limit]
    return loaded
