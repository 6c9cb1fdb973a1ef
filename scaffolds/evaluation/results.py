"""The results JSONL: one record per (scaffold, problem id, sample), appended as it lands.

Each record is one line written and flushed at once, so a kill loses at most the line
being written (a torn last line is skipped on load and dropped at the next compaction).
A record with ``error`` set is a failed request: it is counted, and a rerun retries it.
When a key has several records, a success always beats an error, then the latest wins.

>>> import tempfile, pathlib
>>> store = ResultStore(pathlib.Path(tempfile.mkdtemp()) / "results.jsonl")
>>> with store:
...     store.append({"scaffold": "single", "id": "a", "sample": 0, "error": "boom"})
...     store.append({"scaffold": "single", "id": "a", "sample": 0, "correct": True})
>>> loaded = store.load()
>>> len(loaded.records), loaded.done()
(1, {('single', 'a', 0)})
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from scaffolds.evaluation.answers import ANSWER_FORMATS, AnswerFormat, ThinkingMarkers
from scaffolds.evaluation.problems import BadLine

__all__ = [
    "Key",
    "LoadedResults",
    "ResultStore",
    "key_of",
    "read_results",
    "record_answer_format",
    "record_thinking",
]

Key = tuple[str, str, int]
"""(scaffold spec, problem id, sample index)."""

Record = dict[str, Any]


def key_of(record: Record) -> Key:
    """The resume key of a record (KeyError/ValueError if it has none)."""
    return (str(record["scaffold"]), str(record["id"]), int(record["sample"]))


def record_answer_format(record: Mapping[str, Any]) -> AnswerFormat:
    """The answer format ``record``'s answer was read in: its ``answer_format``, else
    ``lenient`` (records written before the field were all read so).

    >>> record_answer_format({"answer_format": "boxed"}), record_answer_format({})
    ('boxed', 'lenient')
    """
    said = record.get("answer_format")
    return said if said in ANSWER_FORMATS else "lenient"


def record_thinking(record: Mapping[str, Any]) -> ThinkingMarkers:
    """The thinking markers ``record``'s answer was read after: its ``thinking_markers``,
    else ``<think>``/``</think>`` (records written before the field were read so).

    >>> record_thinking({"thinking_markers": {"start": "<s>", "end": "</s>"}}).end
    '</s>'
    >>> record_thinking({}) == ThinkingMarkers()
    True
    """
    return ThinkingMarkers.of(record.get("thinking_markers")) or ThinkingMarkers()


def _better(new: Record, old: Record) -> bool:
    """Whether ``new`` (read later) should replace ``old`` for the same key."""
    return not (new.get("error") and not old.get("error"))


@dataclass
class LoadedResults:
    records: list[Record] = field(default_factory=list)
    """One per key, in first-seen order."""
    bad: list[BadLine] = field(default_factory=list)
    duplicates: int = 0

    def done(self) -> set[Key]:
        """Keys that need no more work (finished without an error)."""
        return {key_of(r) for r in self.records if not r.get("error")}

    def by_scaffold(self) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {}
        for record in self.records:
            out.setdefault(str(record["scaffold"]), []).append(record)
        return out


def _read(lines: Iterable[tuple[int, bytes]]) -> LoadedResults:
    out = LoadedResults()
    index: dict[Key, int] = {}
    for number, raw in lines:
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            continue
        try:
            record = json.loads(text)
            key = key_of(record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            out.bad.append(BadLine(number, f"unreadable result ({type(err).__name__})"))
            continue
        if key in index:
            out.duplicates += 1
            if _better(record, out.records[index[key]]):
                out.records[index[key]] = record
        else:
            index[key] = len(out.records)
            out.records.append(record)
    return out


def read_results(path: Path) -> LoadedResults:
    """Every usable record of a results file (an absent file reads as empty)."""
    if not path.is_file():
        return LoadedResults()
    with path.open("rb") as handle:
        return _read(enumerate(handle, start=1))


class ResultStore:
    """Append-only writer plus loading and compaction of one results file."""

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self._handle: IO[str] | None = None

    def load(self) -> LoadedResults:
        return read_results(self.path)

    def compact(self) -> LoadedResults:
        """Rewrite the file with one record per key (atomically) when it holds more."""
        loaded = self.load()
        if loaded.bad or loaded.duplicates:
            temp = self.path.with_name(self.path.name + ".tmp")
            with temp.open("w", encoding="utf-8") as handle:
                for record in loaded.records:
                    handle.write(json.dumps(record) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
        return loaded

    def open(self) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._ensure_newline()
            self._handle = self.path.open("a", encoding="utf-8")

    def _ensure_newline(self) -> None:
        """Terminate a torn last line so the next record starts on its own line."""
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb+") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")

    def append(self, record: Record) -> None:
        """Write one record as one line and flush it to the OS."""
        if self._handle is None:
            self.open()
        assert self._handle is not None
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> ResultStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Record]:
        return iter(self.load().records)
