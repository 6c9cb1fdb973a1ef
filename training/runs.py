"""A resumable run directory, and rich progress bars.

Layout of a run directory (every command writes only its own part)::

    RUN/
      run.json            what the run was started with; a rerun must agree with it
      traces.jsonl        ponder train data: one scaffold trace per problem (appended)
      data/<kind>.jsonl   rows per kind (rebuilt from all traces on every run)
      data/sft.jsonl      the SFT mix (prompt/completion only)
      sft/  grpo/         trainer output: checkpoint-N/ (resumed from), final/, log.jsonl
      grpo/rollouts.jsonl the traces of GRPO's scaffold rollouts

Rerunning a command with the same run directory resumes it: finished problems are
skipped, and training continues from the last checkpoint.

>>> import tempfile
>>> run = RunDir(tempfile.mkdtemp())
>>> run.agree("data", {"scaffold": "gsr", "limit": 5}, ignore=("limit",))
>>> run.agree("data", {"scaffold": "rc", "limit": 9}, ignore=("limit",))
Traceback (most recent call last):
...
training.runs.RunConflictError: run.json: data.scaffold was 'gsr', now 'rc' (use a new run dir)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from training.traces import TraceRecord, read_records

__all__ = [
    "RunConflictError",
    "RunDir",
    "last_checkpoint",
    "progress_bar",
    "prompt_set_of",
    "read_rows",
]


class RunConflictError(ValueError):
    """A rerun asked for something other than what the run directory was started with."""


def last_checkpoint(folder: str | Path) -> str | None:
    """The newest ``checkpoint-N`` folder under ``folder`` (None if none)."""
    path = Path(folder)
    if not path.is_dir():
        return None
    found = [
        (int(p.name.split("-", 1)[1]), p)
        for p in path.iterdir()
        if p.is_dir() and p.name.startswith("checkpoint-") and p.name.split("-", 1)[1].isdigit()
    ]
    return str(max(found)[1]) if found else None


class RunDir:
    """A run directory; see the module docstring for its layout."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def config_path(self) -> Path:
        return self.path / "run.json"

    @property
    def traces_path(self) -> Path:
        return self.path / "traces.jsonl"

    @property
    def data_dir(self) -> Path:
        return self.path / "data"

    def config(self) -> dict[str, Any]:
        if not self.config_path.exists():
            return {}
        data = json.loads(self.config_path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    def agree(
        self, section: str, settings: Mapping[str, Any], *, ignore: Sequence[str] = ()
    ) -> None:
        """Record ``settings`` under ``section``, or check them against a previous run.

        Keys in ``ignore`` (e.g. a limit that may grow) may change between runs.
        """
        config = self.config()
        before = config.get(section)
        now = json.loads(json.dumps(dict(settings), default=str))
        if isinstance(before, dict):
            for key, value in now.items():
                if key in ignore or key not in before:
                    continue
                if before[key] != value:
                    raise RunConflictError(
                        f"run.json: {section}.{key} was {before[key]!r}, now {value!r} "
                        "(use a new run dir)"
                    )
        config[section] = {**(before if isinstance(before, dict) else {}), **now}
        self._write_atomic(self.config_path, json.dumps(config, indent=2) + "\n")

    def done_ids(self) -> set[str]:
        return {record.id for record in self.records()}

    def records(self) -> Iterator[TraceRecord]:
        if self.traces_path.exists():
            yield from read_records(self.traces_path)

    def append_record(self, record: TraceRecord) -> None:
        """Append one trace and flush it, so an interrupted run keeps it."""
        with self.traces_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            handle.flush()

    def write_rows(self, name: str, rows: Iterable[Mapping[str, Any]]) -> Path:
        """Write ``data/<name>.jsonl`` atomically; returns its path."""
        path = self.data_dir / f"{name}.jsonl"
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        self._write_atomic(path, text)
        return path

    @staticmethod
    def _write_atomic(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file (blank lines skipped); a line that is not a JSON object is a
    ValueError naming the file and the line.

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = bad.write_text('{"prompt": "a", "completion": "b"}\\n\\n{"prompt": "a",\\n')
    >>> try:
    ...     read_rows(bad)
    ... except ValueError as err:
    ...     print(str(err).replace(str(bad), "rows.jsonl"))
    rows.jsonl line 3: invalid JSON (Expecting property name enclosed in double quotes at column 16)
    """
    rows = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not (text := line.strip()):
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{path} line {number}: invalid JSON ({err.msg} at column {err.colno})"
                ) from None
            if not isinstance(row, dict):
                raise ValueError(f"{path} line {number}: not a JSON object")
            rows.append(row)
    return rows


SFT_FIELDS = ("prompt", "completion")
"""The fields an SFT row needs (what ``ponder train data`` writes to ``data/sft.jsonl``)."""


def check_sft_rows(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """A ValueError, in one line naming the file, the row and the fields expected, for
    the first row that is not an SFT row (a problems file, say).

    >>> check_sft_rows("sft.jsonl", [{"prompt": "1+1=", "completion": "2"}])
    >>> try:
    ...     check_sft_rows("p.jsonl", [{"id": "a", "problem": "1+1=", "answer": "2"}])
    ... except ValueError as err:
    ...     print(str(err).partition(":")[2].partition(" (")[0])
     row 1 needs prompt and completion to be an SFT row
    """
    for number, row in enumerate(rows, start=1):
        if all(row.get(name) not in (None, "") for name in SFT_FIELDS):
            continue
        problems = "problem" in row or "question" in row
        hint = ": a problems file? `ponder train data` turns problems into SFT rows" * problems
        raise ValueError(
            f"{path}: row {number} needs {' and '.join(SFT_FIELDS)} to be an SFT row "
            f"(it has {', '.join(row) or 'no fields'}{hint})"
        )


def prompt_set_of(data: Path, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The prompt set ``rows`` were made with: from the rows, else from the run directory
    that holds them (``RUN/data/sft.jsonl`` -> ``RUN/run.json``); ``None`` if neither says.

    >>> prompt_set_of(Path("x.jsonl"), [{"prompt_set": "compact"}, {}])
    'compact'
    >>> import tempfile
    >>> run = RunDir(tempfile.mkdtemp())
    >>> run.agree("data", {"prompt_set": "compact"})
    >>> prompt_set_of(run.data_dir / "sft.jsonl", [{}])
    'compact'
    >>> prompt_set_of(run.path / "sft.jsonl", [{}]) is None
    True
    """
    sets = {r.get("prompt_set") for r in rows if r.get("prompt_set")}
    if len(sets) == 1:
        return str(sets.pop())
    folder = data.resolve().parent
    if folder.name != "data":
        return None
    found = RunDir(folder.parent).config().get("data", {}).get("prompt_set")
    return None if found is None else str(found)


@contextmanager
def progress_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Any]:
    """A rich progress bar; yields ``advance(k)``. Disabled: a no-op ``advance``."""
    if not enabled:
        yield lambda k=1: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from scaffolds.terminal import progress

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with progress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda k=1: bar.advance(task, k)
