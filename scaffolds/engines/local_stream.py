"""Token-by-token text from :class:`~scaffolds.engines.local.LocalEngine`'s ``generate``.

:class:`RowStreamer` is a transformers streamer (``model.generate(..., streamer=...)``):
``generate`` hands it each step's new token of every row. It decodes each row as it
grows and passes on the text that is settled: never the start of a stop string that
may still complete, never half of a multi-byte character, nothing after the row
finished. ``emit(index, text)`` is called on the worker thread; :func:`bridge` carries
the calls onto an event loop as :class:`~scaffolds.engines.protocol.EngineDelta`.

>>> emitted = []
>>> streamer = RowStreamer(_Letters(), rows=1, emit=lambda i, t: emitted.append((i, t)),
...                        stop=["XY"], finished=lambda row: False)
>>> streamer.put(_Tensor([[0]]))          # the prompt: skipped
>>> for token in "abX":
...     streamer.put(_Tensor([ord(token)]))
>>> emitted  # "X" may start "XY": held back
[(0, 'a'), (0, 'b')]
>>> streamer.flush(0, "abX!")  # the final text settles the rest
>>> emitted[-1]
(0, 'X!')
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from scaffolds.engines.protocol import EngineDelta

__all__ = ["RowStreamer", "bridge"]

Emit = Callable[[int, str], None]
"""``emit(sample_index, text)``: a settled piece of one sample's text."""


class RowStreamer:
    """Per row of one ``generate``: the tokens so far, and the text already passed on.

    ``offset`` is the sample index of row 0 (a call split into batches); ``copies``
    repeats each row's text for that many samples (a greedy row stands for all n).
    ``finished(row)`` says whether a row had finished before this step (its later
    tokens are padding).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        rows: int,
        emit: Emit,
        stop: Sequence[str],
        finished: Callable[[int], bool],
        offset: int = 0,
        copies: int = 1,
    ) -> None:
        self.tokenizer = tokenizer
        self.emit = emit
        self.stop = tuple(s for s in stop if s)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.finished = finished
        self.offset = offset
        self.copies = copies
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.sent = [0] * rows
        self.done = [False] * rows
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        """One step: ``value`` holds each row's new token (first, the prompt: skipped)."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for row, token in enumerate(value.reshape(-1).tolist()):
            if row >= len(self.tokens) or self.done[row]:
                continue
            self.tokens[row].append(int(token))
            self.done[row] = self.finished(row)
            self._settle(row)

    def end(self) -> None:
        """Called by ``generate`` when it is done; the final texts come from :meth:`flush`."""

    def _settle(self, row: int) -> None:
        text = self.tokenizer.decode(self.tokens[row], skip_special_tokens=True)
        cuts = [at for s in self.stop if (at := text.find(s)) >= 0]
        if cuts:
            text, self.done[row] = text[: min(cuts)], True
        else:
            text = text[: len(text) - self.hold] if self.hold else text
        if text.endswith("\ufffd"):  # a character still incomplete
            text = text.rstrip("\ufffd")
        self._send(row, text)

    def flush(self, row: int, final: str) -> None:
        """Pass on the rest of ``row``'s final text (what the result holds)."""
        self._send(row, final)

    def _send(self, row: int, text: str) -> None:
        if len(text) <= self.sent[row]:
            return
        piece, self.sent[row] = text[self.sent[row] :], len(text)
        for copy in range(self.copies):
            self.emit(self.offset + row * self.copies + copy, piece)


def bridge(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[EngineDelta]) -> Emit:
    """An ``emit`` for the worker thread that puts each piece on ``queue`` in ``loop``."""

    def emit(index: int, text: str) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, EngineDelta(index, text=text))

    return emit


class _Tensor:
    """(Doctest stand-in for a torch tensor.)"""

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def reshape(self, *_: int) -> _Tensor:
        return self

    def tolist(self) -> list[Any]:
        return self.values


class _Letters:
    """(Doctest stand-in for a tokenizer: token ids are code points.)"""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)
