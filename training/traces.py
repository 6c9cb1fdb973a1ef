"""Stored scaffold runs: one :class:`TraceRecord` per problem, and how to read its steps.

A record holds the problem, its gold answer and the typed trace events of
:func:`scaffolds.run.run_scaffold`. Records round-trip through JSON (one per line of a
run directory's ``traces.jsonl``), and :meth:`TraceRecord.steps` pairs each
``StepStarted`` with its ``StepFinished``, which is what the dataset builders read.

:func:`template_fields` inverts a prompt template: given a rendered step prompt and the
fields we already know (the problem), it recovers the others (candidates, summary,
solution, feedback), so a builder can check a trace prompt against the very template
serving uses.

>>> from scaffolds.prompts import get_prompt_set
>>> t = get_prompt_set("compact").rc_summary
>>> template_fields(t, "12+3=|old|15#", {"problem": "12+3="})
{'summary': 'old', 'attempt': '15'}
>>> template_fields(t, "something else", {"problem": "12+3="}) is None
True
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaffolds.engine import Message, Usage
from scaffolds.prompts import Template
from scaffolds.trace import (
    RunFinished,
    StepDelta,
    StepFinished,
    StepStarted,
    TraceEvent,
    event_to_dict,
)

__all__ = [
    "TraceRecord",
    "TraceStep",
    "event_from_dict",
    "read_records",
    "template_fields",
]

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "calls")


def _usage(data: Mapping[str, Any] | None) -> Usage:
    data = data or {}
    return Usage(**{key: int(data.get(key, 0)) for key in _USAGE_KEYS})


def _tuple(items: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(tuple(x) if isinstance(x, list) else x for x in (items or ()))


def event_from_dict(data: Mapping[str, Any]) -> TraceEvent:
    """The inverse of :func:`scaffolds.trace.event_to_dict`.

    >>> from scaffolds.trace import event_to_dict
    >>> e = StepStarted(step_id="run:1", parent_id="run", kind="generate", label="answer")
    >>> event_from_dict(event_to_dict(e)) == e
    True
    """
    kind = data.get("type")
    if kind == "step_started":
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
    if kind == "step_delta":
        return StepDelta(
            data["step_id"],
            int(data.get("index", 0)),
            data.get("text", ""),
            data.get("reasoning", ""),
        )
    raise ValueError(f"unknown trace event type {kind!r}")


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One finished engine call of a run: what was asked and what came back."""

    started: StepStarted
    finished: StepFinished
    order: int
    """Position among the run's steps, by start."""

    @property
    def step_id(self) -> str:
        return self.started.step_id

    @property
    def kind(self) -> str:
        return self.started.kind

    @property
    def label(self) -> str:
        return self.started.label

    @property
    def scope(self) -> str:
        return self.started.parent_id or ""

    @property
    def texts(self) -> tuple[str, ...]:
        return self.finished.texts


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

    def steps(self) -> list[TraceStep]:
        """Finished, error-free steps in start order."""
        started: dict[str, tuple[int, StepStarted]] = {}
        out: list[TraceStep] = []
        for event in self.events:
            if isinstance(event, StepStarted):
                started[event.step_id] = (len(started), event)
            elif (
                isinstance(event, StepFinished) and event.error is None and event.step_id in started
            ):
                order, start = started[event.step_id]
                out.append(TraceStep(start, event, order))
        return sorted(out, key=lambda s: s.order)

    def user_text(self, step: TraceStep) -> str | None:
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
            "events": [event_to_dict(e) for e in self.events],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceRecord:
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


def template_fields(
    template: Template, rendered: str, known: Mapping[str, str]
) -> dict[str, str] | None:
    """The values of ``template``'s unknown fields in ``rendered``, or None if it does not
    fit. Known fields must appear verbatim; an unknown field used twice must repeat."""
    pattern, unknown = _template_regex(template, dict(known))
    match = pattern.fullmatch(rendered)
    if match is None:
        return None
    return {name: match.group(name) for name in unknown}


def _template_regex(template: Template, known: dict[str, str]) -> tuple[re.Pattern[str], list[str]]:
    parts: list[str] = []
    unknown: list[str] = []
    at = 0
    for match in string.Template.pattern.finditer(template.text):
        parts.append(re.escape(template.text[at : match.start()]))
        at = match.end()
        if match.group("escaped") is not None:
            parts.append(re.escape("$"))
            continue
        name = match.group("named") or match.group("braced")
        if name in known:
            parts.append(re.escape(known[name]))
        elif name in unknown:
            parts.append(f"(?P={name})")
        else:
            unknown.append(name)
            parts.append(f"(?P<{name}>.*?)")
    parts.append(re.escape(template.text[at:]))
    return re.compile("".join(parts), re.DOTALL), unknown
