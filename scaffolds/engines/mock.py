"""MockEngine: a test double that answers engine calls with a Python function.

Like httpx's ``MockTransport``, it ships in the library so tests and examples need no
server. The handler gets the :class:`GenerateRequest` and returns the sample text, a
list of texts (one per sample), Completion objects, or a whole GenerateResult; it may be
async. Tokens are counted as whitespace-separated words, so usage is predictable. A call
that asks for ``top_logprobs`` gets deterministic synthetic ones for texts (see
:func:`synthetic_top_logprobs`), unless the engine was made with ``logprobs=False``.

>>> import asyncio
>>> from scaffolds.engines.protocol import SamplingParams
>>> engine = MockEngine(lambda req: f"echo {req.prompt_text()}")
>>> result = asyncio.run(engine.generate(GenerateRequest("hi", SamplingParams(n=2))))
>>> [c.text for c in result.completions], result.usage.calls
(['echo hi', 'echo hi'], 1)
"""

from __future__ import annotations

import asyncio
import inspect
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from scaffolds.engines.protocol import (
    Completion,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
)

HandlerResult = str | Sequence[str] | Sequence[Completion] | GenerateResult
Handler = Callable[[GenerateRequest], HandlerResult | Awaitable[HandlerResult]]

__all__ = ["MockEngine", "synthetic_top_logprobs", "word_confidence"]


def count_tokens(text: str) -> int:
    return len(text.split())


def word_confidence(word: str) -> float:
    """A deterministic made-up confidence of a token, in [1, 3).

    >>> word_confidence("7") == word_confidence("7")
    True
    """
    return 1.0 + (zlib.crc32(word.encode()) % 200) / 100


def synthetic_top_logprobs(confidence: float, k: int) -> tuple[float, ...]:
    """``k`` descending logprobs whose negative mean is ``confidence`` (DeepConf's token
    confidence), so a test double can set each token's confidence exactly.

    >>> synthetic_top_logprobs(2.0, 3)
    (-1.0, -2.0, -3.0)
    """
    return tuple(-confidence * 2 * j / (k + 1) for j in range(1, k + 1))


class MockEngine:
    """An in-process engine driven by ``handler``; records every request it saw.

    ``delay`` (seconds) is awaited before each answer, so tests can observe calls that
    are in flight and cancelled. ``max_tokens`` truncates texts word-wise and reports
    ``finish_reason="length"``, as a real engine would. A text's sample does not say
    how it stopped (``stop_matched`` None, as a plain OpenAI server); a handler that
    returns Completions scripts it (``stop_matched=False``: it ended at end of sequence).
    """

    def __init__(self, handler: Handler, *, delay: float = 0.0, logprobs: bool = True) -> None:
        self.handler = handler
        self.delay = delay
        self.logprobs = logprobs
        """False: never return top logprobs (an engine that ignores the request)."""
        self.requests: list[GenerateRequest] = []
        self.started = 0
        self.cancelled = 0
        self.in_flight = 0

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        self.started += 1
        self.in_flight += 1
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            produced = self.handler(request)
            if inspect.isawaitable(produced):
                produced = await produced
            return self._to_result(request, produced)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        result = await self.generate(request)
        for index, completion in enumerate(result.completions):
            if completion.reasoning:
                yield EngineDelta(index, reasoning=completion.reasoning)
            words = completion.text.split(" ")
            for i, word in enumerate(words):
                yield EngineDelta(index, text=word if i == 0 else " " + word)
        yield result

    def _to_result(self, request: GenerateRequest, produced: HandlerResult) -> GenerateResult:
        if isinstance(produced, GenerateResult):
            return produced
        n = request.params.n
        items: list[str | Completion]
        if isinstance(produced, str):
            items = [produced] * n
        else:
            items = list(produced)
            if len(items) != n:
                raise ValueError(f"handler returned {len(items)} samples for n={n}")
        top = request.params.top_logprobs if self.logprobs else None
        completions = [self._complete(item, request.params.max_tokens, top) for item in items]
        usage = Usage(
            prompt_tokens=count_tokens(request.prompt_text()),
            completion_tokens=sum(c.completion_tokens for c in completions),
            calls=1,
        )
        return GenerateResult(tuple(completions), usage)

    @staticmethod
    def _complete(item: str | Completion, max_tokens: int | None, top: int | None) -> Completion:
        if isinstance(item, Completion):
            return item
        words = item.split()
        finish = "stop"
        if max_tokens is not None and len(words) > max_tokens:
            words, item, finish = words[:max_tokens], " ".join(words[:max_tokens]), "length"
        tops = None
        if top:
            tops = tuple(synthetic_top_logprobs(word_confidence(w), top) for w in words)
        return Completion(item, finish, None, len(words), top_logprobs=tops)
