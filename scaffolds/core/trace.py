"""Typed trace events: what a scaffold run did, step by step.

Every engine call of a run is a *step*. A step emits :class:`StepStarted`, zero or more
:class:`StepDelta` (when the run is streamed live), then :class:`StepFinished` with its
texts, extracted answers and usage. The server streams these, the eval client stores
them, and training turns them into datasets.

>>> rec = TraceRecorder()
>>> rec.emit(StepStarted(step_id="s1", parent_id=None, kind="generate", label="candidate 1"))
>>> [e.type for e in rec.events]
['step_started']
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from scaffolds.engines.protocol import Usage

TRACE_SCHEMA = 3
"""The version of saved traces. 3: a strategy may add ``step_note`` events (what it
concluded between engine calls, e.g. adaptive voting's stopping probability). 2: every
``step_started`` records its provenance (``template``, ``fields``, ``messages``,
``parent_step``, ``sample``); 1 had only the flattened ``prompt``."""

PROVENANCE_SCHEMA = 2
"""The first trace schema whose steps record their provenance (what training rows read)."""


@dataclass(frozen=True, slots=True)
class StepStarted:
    step_id: str
    parent_id: str | None
    kind: str
    label: str
    n: int = 1
    final: bool = False
    """This step's text *is* the run's final answer (it may be streamed as content)."""
    prompt: str | None = None
    """The rendered prompt, for datasets and the trace viewer."""
    max_tokens: int | None = None
    choice: int | None = None
    """Which response choice this step belongs to, when a request asked for several
    independent runs; None when one step serves all choices (samples by index)."""
    time: float = field(default_factory=time.time)
    type: Literal["step_started"] = "step_started"
    template: str | None = None
    """The template rendered into this step's prompt (None: the problem as asked)."""
    fields: dict[str, Any] | None = None
    """The values the template was filled with (a list where it joins several)."""
    messages: tuple[dict[str, str], ...] | None = None
    """The chat messages exactly as sent (None for a text prompt: ``prompt`` is it)."""
    parent_step: str | None = None
    """The step this one continues (a summary's reasoning chunk, a note's solutions)."""
    sample: int | None = None
    """Which sample of ``parent_step`` this step continues."""


@dataclass(frozen=True, slots=True)
class StepDelta:
    step_id: str
    index: int
    text: str = ""
    reasoning: str = ""
    type: Literal["step_delta"] = "step_delta"
    extra: Mapping[str, Any] | None = None
    """The engine's own fields of this piece
    (:attr:`~scaffolds.engines.protocol.EngineDelta.extra`)."""


@dataclass(frozen=True, slots=True)
class StepFinished:
    step_id: str
    texts: tuple[str, ...]
    answers: tuple[str | None, ...]
    finish_reasons: tuple[str | None, ...]
    usage: Usage
    reasonings: tuple[str | None, ...] = ()
    token_ids: tuple[tuple[int, ...] | None, ...] = ()
    logprobs: tuple[tuple[float, ...] | None, ...] = ()
    prompt_token_ids: tuple[int, ...] | None = None
    error: str | None = None
    time: float = field(default_factory=time.time)
    type: Literal["step_finished"] = "step_finished"
    completion_tokens: tuple[int, ...] = ()
    """Each sample's generated tokens (they add up to ``usage.completion_tokens``)."""
    extras: tuple[Mapping[str, Any] | None, ...] = ()
    """Each sample's own engine fields (:attr:`~scaffolds.engines.protocol.Completion.extra`)."""


@dataclass(frozen=True, slots=True)
class RunFinished:
    text: str
    answer: str | None
    usage: Usage
    cut_short: bool
    cut_reason: str | None = None
    choice: int = 0
    step_id: str | None = None
    time: float = field(default_factory=time.time)
    type: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True, slots=True)
class StepNote:
    """What a strategy concluded from finished steps, between engine calls (no call of
    its own): ``kind`` names the note and ``values`` holds it (JSON-ready). Kinds so far:
    ``stopping`` (adaptive voting's probability that the leader is the majority, after a
    wave, about its scope), ``confidence`` (deepconf's per-sample confidence and kept
    flag, lists indexed by sample, about the step ``step_id``), ``population`` (RSA's
    answers after a round, and their accuracy when the reference answer is known),
    ``effort`` (what a request's reasoning effort ran and why: the server's note, first in
    its run's trace), ``scores`` (a verifier's ``scores`` of the candidates of its ``verify`` step
    ``step_id``, and a process reward model's per-step ``steps``) and ``helper_text`` (a
    helper step's samples whose answer was empty: ``samples`` maps each to ``reasoning``
    or ``empty``, ``texts`` to the text the run passed on instead)."""

    scope_id: str
    """The scope the note is about (its steps are those the note read)."""
    kind: str
    values: dict[str, Any]
    choice: int | None = None
    step_id: str | None = None
    """Set when the note is about one step's samples."""
    time: float = field(default_factory=time.time)
    type: Literal["step_note"] = "step_note"


TraceEvent = StepStarted | StepDelta | StepFinished | StepNote | RunFinished


def event_to_dict(event: TraceEvent) -> dict[str, Any]:
    """A JSON-ready dict of an event (usage flattened with ``total_tokens``)."""
    data = asdict(event)
    if isinstance(event, StepFinished | RunFinished):
        data["usage"] = event.usage.to_dict()
    return data


class TraceRecorder:
    """Collects a run's events and fans them out to live subscribers.

    ``live=True`` asks the run to stream engine output, so :class:`StepDelta` events
    exist; otherwise steps only start and finish.
    """

    def __init__(self, *, live: bool = False, keep_deltas: bool = False) -> None:
        self.live = live
        self.keep_deltas = keep_deltas
        self.events: list[TraceEvent] = []
        self._subscriptions: list[_Subscription] = []

    def emit(self, event: TraceEvent) -> None:
        if not isinstance(event, StepDelta) or self.keep_deltas:
            self.events.append(event)
        for subscription in self._subscriptions:
            subscription.push(event)

    def close(self) -> None:
        """Tell subscribers no more events come."""
        for subscription in self._subscriptions:
            subscription.close()

    def subscribe(self) -> AsyncIterator[TraceEvent]:
        """Iterate events from now on until :meth:`close`."""
        batches = self.subscribe_batches()

        async def iterate() -> AsyncIterator[TraceEvent]:
            async for batch in batches:
                for event in batch:
                    yield event

        return iterate()

    def subscribe_batches(self) -> AsyncIterator[list[TraceEvent]]:
        """Iterate events from now on until :meth:`close`, as lists: each holds every event
        emitted since the last one was taken (at least one), so a consumer that writes to
        a socket writes once for what arrived together.

        >>> async def demo() -> list[int]:
        ...     rec = TraceRecorder(live=True)
        ...     batches = rec.subscribe_batches()
        ...     rec.emit(StepDelta("s1", 0, "a")); rec.emit(StepDelta("s1", 0, "b")); rec.close()
        ...     return [len(batch) async for batch in batches]
        >>> asyncio.run(demo())
        [2]
        """
        subscription = _Subscription()
        self._subscriptions.append(subscription)
        return subscription.batches()

    def steps(self) -> list[StepFinished]:
        return [e for e in self.events if isinstance(e, StepFinished)]

    def to_json(self) -> list[dict[str, Any]]:
        return [event_to_dict(e) for e in self.events]


class _Subscription:
    """One subscriber's events: a buffer, and a future its consumer waits on when it is
    empty (cheaper per event than an :class:`asyncio.Queue`, which wakes a getter for
    every item)."""

    __slots__ = ("_buffer", "_closed", "_waiter")

    def __init__(self) -> None:
        self._buffer: list[TraceEvent] = []
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None

    def push(self, event: TraceEvent) -> None:
        self._buffer.append(event)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def batches(self) -> AsyncIterator[list[TraceEvent]]:
        while True:
            if self._buffer:
                batch, self._buffer = self._buffer, []
                yield batch
            elif self._closed:
                return
            else:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
