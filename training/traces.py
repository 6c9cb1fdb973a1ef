"""Stored scaffold runs: one :class:`TraceRecord` per problem, and how to read its steps.

A record holds the problem, its gold answer and the typed trace events of
:func:`scaffolds.core.run.run_scaffold`. Records round-trip through JSON (one per line of a
run directory's ``traces.jsonl``), and :meth:`TraceRecord.steps` pairs each
``StepStarted`` with its ``StepFinished``, which is what the dataset builders read: each
start records its template, field values, messages as sent and parent step, so nothing
is parsed back out of a prompt.

A saved record carries its ``schema`` (:data:`scaffolds.core.trace.TRACE_SCHEMA`); one from
before provenance (1) still loads, and one from a newer Ponder fails naming its version.

>>> TraceRecord.from_json({"id": "p", "problem": "1+1=", "answer": "2", "schema": 9})
Traceback (most recent call last):
...
ValueError: trace record 'p' has schema version 9; this Ponder reads versions 1 to 3
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaffolds.core.trace import (
    TRACE_SCHEMA,
    RunFinished,
    StepDelta,
    StepFinished,
    StepNote,
    StepStarted,
    TraceEvent,
    event_to_dict,
)
from scaffolds.engines.protocol import Message, Usage
from scaffolds.strategies.steps import TracedStep, TraceView

__all__ = [
    "TraceRecord",
    "TraceStep",
    "event_from_dict",
    "read_records",
]

TraceStep = TracedStep
"""One finished engine call of a run (see :class:`scaffolds.strategies.steps.TracedStep`)."""

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "calls", "reasoning_tokens")


def _usage(data: Mapping[str, Any] | None) -> Usage:
    data = data or {}
    return Usage(**{key: int(data.get(key, 0)) for key in _USAGE_KEYS})


def _tuple(items: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(tuple(x) if isinstance(x, list) else x for x in (items or ()))


def event_from_dict(data: Mapping[str, Any]) -> TraceEvent:
    """The inverse of :func:`scaffolds.core.trace.event_to_dict`.

    >>> from scaffolds.core.trace import event_to_dict
    >>> e = StepStarted(step_id="run:1", parent_id="run", kind="generate", label="answer")
    >>> event_from_dict(event_to_dict(e)) == e
    True
    """
    kind = data.get("type")
    if kind == "step_started":
        messages = data.get("messages")
        return StepStarted(
            step_id=data["step_id"],
            parent_id=data.get("parent_id"),
            kind=data["kind"],
            label=data.get("label", ""),
            n=int(data.get("n", 1)),
            final=bool(data.get("final", False)),
            prompt=data.get("prompt"),
            max_tokens=data.get("max_tokens"),
            choice=data.get("choice"),
            time=float(data.get("time", 0.0)),
            template=data.get("template"),
            fields=data.get("fields"),
            messages=None if messages is None else tuple(dict(m) for m in messages),
            parent_step=data.get("parent_step"),
            sample=data.get("sample"),
        )
    if kind == "step_finished":
        prompt_ids = data.get("prompt_token_ids")
        return StepFinished(
            step_id=data["step_id"],
            texts=tuple(data.get("texts", ())),
            answers=tuple(data.get("answers", ())),
            finish_reasons=tuple(data.get("finish_reasons", ())),
            usage=_usage(data.get("usage")),
            reasonings=tuple(data.get("reasonings", ())),
            token_ids=_tuple(data.get("token_ids")),
            logprobs=_tuple(data.get("logprobs")),
            prompt_token_ids=tuple(prompt_ids) if prompt_ids is not None else None,
            error=data.get("error"),
            time=float(data.get("time", 0.0)),
            completion_tokens=tuple(int(t) for t in data.get("completion_tokens", ())),
            extras=tuple(data.get("extras", ())),
        )
    if kind == "run_finished":
        return RunFinished(
            text=data.get("text", ""),
            answer=data.get("answer"),
            usage=_usage(data.get("usage")),
            cut_short=bool(data.get("cut_short", False)),
            cut_reason=data.get("cut_reason"),
            choice=int(data.get("choice", 0)),
            step_id=data.get("step_id"),
            time=float(data.get("time", 0.0)),
        )
    if kind == "step_note":
        return StepNote(
            scope_id=str(data.get("scope_id", "")),
            kind=str(data.get("kind", "")),
            values=dict(data.get("values") or {}),
            choice=data.get("choice"),
            step_id=data.get("step_id"),
            time=float(data.get("time", 0.0)),
        )
    if kind == "step_delta":
        return StepDelta(
            data["step_id"],
            int(data.get("index", 0)),
            data.get("text", ""),
            data.get("reasoning", ""),
            extra=data.get("extra"),
        )
    raise ValueError(f"unknown trace event type {kind!r}")


@dataclass(frozen=True)
class TraceRecord:
    """One problem's scaffold run(s): the problem, the gold answer and the events.

    ``chat`` says whether the run sent chat messages (then the problem's ``history``
    preceded every step's rendered prompt) or plain text.
    """

    id: str
    problem: str
    answer: str | None
    events: tuple[TraceEvent, ...]
    chat: bool = False
    prompt_set: str = "default"
    scaffold: str = ""
    history: tuple[Message, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    schema: int = TRACE_SCHEMA
    """The trace schema the events were recorded with (1: no step provenance)."""

    def view(self) -> TraceView:
        """The finished, error-free steps with their parent links."""
        return TraceView(self.events)

    def steps(self) -> list[TracedStep]:
        """Finished, error-free steps in start order."""
        return self.view().steps

    def step_prompt(self, step: TracedStep) -> str | list[dict[str, str]] | None:
        """``step``'s prompt exactly as sent, as a training prompt: the chat messages for
        chat records, else the prompt's text."""
        started = step.started
        if self.chat and started.messages is not None:
            return [dict(m) for m in started.messages]
        return started.prompt

    def user_text(self, step: TracedStep) -> str | None:
        """The rendered template of ``step`` (its last user turn), or None if the
        recorded prompt does not start with this record's history."""
        prompt = step.started.prompt
        if prompt is None:
            return None
        prefix = "".join(m.content + "\n" for m in self.history) if self.chat else ""
        return prompt[len(prefix) :] if prompt.startswith(prefix) else None

    def prompt_for(self, text: str) -> str | list[dict[str, str]]:
        """``text`` as a training prompt: plain text, or chat messages for chat runs."""
        if not self.chat:
            return text
        return [m.to_openai() for m in self.history] + [{"role": "user", "content": text}]

    def completion_for(self, text: str) -> str | list[dict[str, str]]:
        """``text`` as a training completion: plain, or one assistant message."""
        return [{"role": "assistant", "content": text}] if self.chat else text

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "problem": self.problem,
            "answer": self.answer,
            "chat": self.chat,
            "prompt_set": self.prompt_set,
            "scaffold": self.scaffold,
            "history": [m.to_openai() for m in self.history],
            "meta": self.meta,
            "schema": self.schema,
            "events": [event_to_dict(e) for e in self.events],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceRecord:
        schema = data.get("schema", 1)
        if not isinstance(schema, int) or not 1 <= schema <= TRACE_SCHEMA:
            raise ValueError(
                f"trace record {data.get('id')!r} has schema version {schema}; "
                f"this Ponder reads versions 1 to {TRACE_SCHEMA}"
            )
        history = tuple(Message(m["role"], m["content"]) for m in data.get("history", ()))
        return cls(
            id=str(data["id"]),
            problem=data["problem"],
            answer=data.get("answer"),
            events=tuple(event_from_dict(e) for e in data.get("events", ())),
            chat=bool(data.get("chat", False)),
            prompt_set=data.get("prompt_set", "default"),
            scaffold=data.get("scaffold", ""),
            history=history,
            meta=dict(data.get("meta") or {}),
            schema=schema,
        )


def read_records(path: str | Path) -> Iterator[TraceRecord]:
    """Records from a JSONL file; a torn last line (an interrupted write) is skipped."""
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            yield TraceRecord.from_json(data)
