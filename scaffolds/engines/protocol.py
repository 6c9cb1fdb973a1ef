"""The Engine protocol: generate n samples for one prompt.

An engine is anything with an async ``generate`` method (and optionally a streaming
form); a :class:`Verifier` scores candidates. Every scaffold talks to engines only
through this module's types, so vLLM, SGLang, any OpenAI-compatible server, an
in-process model and the test double :class:`~scaffolds.engines.mock.MockEngine` are
interchangeable.

>>> req = GenerateRequest(prompt=(Message("user", "2+2?"),), params=SamplingParams(n=4))
>>> req.params.n, req.is_chat
(4, True)
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, runtime_checkable

from scaffolds.errors import InvalidRequestError

MAX_TOP_LOGPROBS = 20
"""The most top logprobs per position a call may ask for (OpenAI's and vLLM's cap)."""

Role = Literal["system", "user", "assistant", "tool", "developer"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message; an assistant turn of a tool conversation carries its
    ``tool_calls`` (OpenAI's shape), and a ``tool`` turn the ``tool_call_id`` it answers.

    >>> Message("tool", "19C", tool_call_id="c1").to_openai()
    {'role': 'tool', 'content': '19C', 'tool_call_id': 'c1'}
    """

    role: Role
    content: str
    tool_calls: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    tool_call_id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [dict(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


Prompt = str | tuple[Message, ...]
"""A plain-text prompt (``/v1/completions``) or chat messages (``/v1/chat/completions``)."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling parameters of one engine call; validation names the bad parameter.

    >>> SamplingParams(n=0)
    Traceback (most recent call last):
    ...
    scaffolds.errors.InvalidRequestError: n must be >= 1 (got 0)
    """

    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    """Also return the sampled token ids and their logprobs (training needs them)."""
    top_logprobs: int | None = None
    """Also return, at each position, the logprobs of the ``top_logprobs`` most likely
    tokens (0..20; vLLM's cap is 20): ``Completion.top_logprobs`` (deepconf needs them)."""
    top_logprob_texts: bool = False
    """The caller reads the top tokens' text, not only their logprobs (a generative
    verifier's yes/no). Otherwise a vLLM engine keys them by token id, since keyed by
    text, tokens that decode alike share one key and a position comes back short of k."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Engine-specific fields passed through verbatim (e.g. vLLM's ``ignore_eos``)."""
    final_extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields passed through verbatim on the calls that write the final answer only
    (steps marked ``final``: a request's ``response_format`` or ``logprobs``); they win
    over ``extra``."""

    def __post_init__(self) -> None:
        _check(self.n >= 1, "n", f"n must be >= 1 (got {self.n})")
        if self.max_tokens is not None:
            _check(
                self.max_tokens >= 1,
                "max_tokens",
                f"max_tokens must be >= 1 (got {self.max_tokens})",
            )
        if self.temperature is not None:
            _check(
                math.isfinite(self.temperature) and 0.0 <= self.temperature <= 2.0,
                "temperature",
                f"temperature must be in [0, 2] (got {self.temperature})",
            )
        if self.top_p is not None:
            _check(
                math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0,
                "top_p",
                f"top_p must be in (0, 1] (got {self.top_p})",
            )
        if self.top_logprobs is not None:
            _check(
                0 <= self.top_logprobs <= MAX_TOP_LOGPROBS,
                "top_logprobs",
                f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}] (got {self.top_logprobs})",
            )

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with some fields changed (validated again)."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return SamplingParams(**values)


def _check(ok: bool, param: str, message: str) -> None:
    if not ok:
        raise InvalidRequestError(message, param=param)


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """One engine call: a prompt and how to sample it."""

    prompt: Prompt
    params: SamplingParams = field(default_factory=SamplingParams)
    affinity_key: str | None = None
    """Calls with the same key share a prompt prefix (one scaffold run on one problem):
    a replica router keeps them on one replica so its prefix cache hits."""
    continue_final: bool = False
    """A chat prompt whose last message is a partial assistant message that the model
    continues (vLLM's ``continue_final_message``), rather than a new assistant turn.
    A text prompt is always continued as it is, so this only matters for chat."""

    def __post_init__(self) -> None:
        prompt = self.prompt
        ends_open = isinstance(prompt, str) or (bool(prompt) and prompt[-1].role == "assistant")
        if self.continue_final and not ends_open:
            raise InvalidRequestError(
                "continue_final needs a chat prompt that ends with an assistant message",
                param="messages",
            )

    @property
    def is_chat(self) -> bool:
        return not isinstance(self.prompt, str)

    def prompt_text(self) -> str:
        """The prompt flattened to text (for logs, token estimates and test doubles)."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(m.content for m in self.prompt)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token and call accounting; adds up across calls.

    >>> Usage(prompt_tokens=10, completion_tokens=5, calls=1) + Usage(prompt_tokens=3, calls=1)
    Usage(prompt_tokens=13, completion_tokens=5, cached_tokens=0, calls=2, reasoning_tokens=0)
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens the engine served from its prefix cache (when it reports them)."""
    calls: int = 0
    reasoning_tokens: int = 0
    """Completion tokens the engine itself reported as reasoning (a thinking model's
    ``completion_tokens_details.reasoning_tokens``); part of ``completion_tokens``."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.calls + other.calls,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
            "calls": self.calls,
            "reasoning_tokens": self.reasoning_tokens,
        }


FinishReason = str
"""``"stop"``, ``"length"`` or whatever the engine reports."""


@dataclass(frozen=True, slots=True)
class Completion:
    """One sample.

    ``reasoning`` holds the text the engine separated out as reasoning (vLLM's
    ``reasoning_content``/``reasoning``), if any. ``token_ids``/``logprobs`` are set
    when the request asked for logprobs; ``top_logprobs`` (one tuple of the most likely
    tokens' logprobs per generated position, best first) when it asked for
    ``top_logprobs``, and the engine gave them. ``extra`` holds the engine's own fields
    of the sample that Ponder does not model, as the engine sent them, so a pass-through
    answer can carry them on unchanged: the choice's (``logprobs``, ``stop_reason``...)
    and, under ``"message"``, a chat message's (``tool_calls``...).
    """

    text: str
    finish_reason: FinishReason | None = "stop"
    reasoning: str | None = None
    completion_tokens: int = 0
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    top_logprobs: tuple[tuple[float, ...], ...] | None = None
    extra: Mapping[str, Any] | None = field(default=None, compare=False)
    """(The wire form of the sample, left out of comparisons: a whole response and a
    stream of the same sample compare equal.)"""
    stop_matched: bool | None = None
    """Whether one of the request's stop strings ended the sample, by the engine's word:
    vLLM's ``stop_reason``, SGLang's ``matched_stop`` (the string: yes; null or a stop
    token id, such as another end-of-sequence token: no), the embedded engines' own
    check. None where the engine does not say (a plain OpenAI server)."""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def ended_at_eos(self) -> bool:
        """Whether the sample ended at the model's end of sequence: finished (``"stop"``)
        with no stop string matched. False when cut by length, stopped at a stop string,
        or the engine does not say which (:attr:`stop_matched` None).

        >>> Completion("12 * 4 = 48", "stop", stop_matched=False).ended_at_eos
        True
        >>> Completion("12 * 4 = 48", "stop").ended_at_eos  # the engine did not say
        False
        """
        return self.finish_reason == "stop" and self.stop_matched is False


@dataclass(frozen=True, slots=True)
class GenerateResult:
    """The n samples of one engine call and what the call cost."""

    completions: tuple[Completion, ...]
    usage: Usage
    prompt_token_ids: tuple[int, ...] | None = None
    no_room: bool = False
    """The prompt left no room in the model's context: nothing was generated or sent."""


@dataclass(frozen=True, slots=True)
class EngineDelta:
    """A piece of streamed text for sample ``index`` of a call; ``extra`` holds the
    chunk's own fields beyond the text as the engine sent them (its ``logprobs``; under
    ``"delta"``, a chat delta's ``tool_calls``...), like :attr:`Completion.extra`."""

    index: int
    text: str = ""
    reasoning: str = ""
    extra: Mapping[str, Any] | None = None


StreamItem = EngineDelta | GenerateResult
"""A stream yields deltas and ends with exactly one :class:`GenerateResult`."""


@runtime_checkable
class Engine(Protocol):
    """Generates samples. ``stream`` yields deltas, then the final result.

    >>> import asyncio
    >>> from scaffolds.engines.mock import MockEngine
    >>> engine = MockEngine(lambda request: "\\\\boxed{4}")
    >>> asyncio.run(engine.generate(GenerateRequest("2+2?"))).completions[0].text
    '\\\\boxed{4}'
    """

    async def generate(self, request: GenerateRequest) -> GenerateResult: ...

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]: ...


@runtime_checkable
class BatchEngine(Engine, Protocol):
    """An engine that can send several text prompts as ONE engine request
    (``prompt: [...]`` on ``/v1/completions``), e.g. the HTTP engine in front of vLLM.

    ``takes_prompt_lists`` says whether it can now (a wrapper asks what it wraps).
    ``generate_batch`` takes requests that :func:`batchable` accepts and returns one
    result per request, in order: request ``p``'s samples are the engine's choices
    ``p * n .. p * n + n - 1``. The engine reports one usage for the request, so the
    results' usages add up to it, with ``calls`` 1 in all (see
    :mod:`scaffolds.engines.prompt_lists` for how it is shared out).
    """

    takes_prompt_lists: bool

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]: ...


def batch_engine(engine: Engine) -> BatchEngine | None:
    """``engine`` when it can send a list of prompts as one request now, else None.

    >>> from scaffolds.engines.mock import MockEngine
    >>> batch_engine(MockEngine(lambda r: "4")) is None
    True
    """
    # Not isinstance(engine, BatchEngine): a runtime-checkable Protocol walks its members on
    # every check, which cost a seventh of a pass-through request's CPU (issue 23).
    if getattr(engine, "takes_prompt_lists", False) and callable(
        getattr(engine, "generate_batch", None)
    ):
        return cast(BatchEngine, engine)
    return None


def batchable(requests: Sequence[GenerateRequest]) -> bool:
    """Whether ``requests`` can be one engine request: text prompts, the same params.

    >>> batchable([GenerateRequest("a"), GenerateRequest("b")])
    True
    >>> batchable([GenerateRequest("a"), GenerateRequest("b", SamplingParams(n=2))])
    False
    """
    first = requests[0]
    return all(
        isinstance(r.prompt, str)
        and r.params == first.params
        and r.continue_final == first.continue_final
        for r in requests
    )


@dataclass(frozen=True, slots=True)
class Verdicts:
    """A verifier's ``scores`` (one per candidate, higher is better), a process reward
    model's per-step ``steps`` (when it gave them) and what it cost (``usage``).

    >>> Verdicts((0.9, 0.2), ((0.8, 0.9), (0.2,))).step_scores(1)
    (0.2,)
    >>> Verdicts((0.7,)).step_scores(0)
    (0.7,)
    """

    scores: tuple[float, ...]
    steps: tuple[tuple[float, ...], ...] | None = None
    usage: Usage = field(default_factory=Usage)

    def step_scores(self, index: int) -> tuple[float, ...]:
        """Candidate ``index``'s per-step scores (else its outcome score alone)."""
        if self.steps is not None and self.steps[index]:
            return self.steps[index]
        return (self.scores[index],)


@runtime_checkable
class Verifier(Protocol):
    """Scores candidates of a problem (implementations: :mod:`scaffolds.verifiers`).
    ``step`` joins the steps of partial solutions (a process reward model scores each).
    A run reserves ``requests(count)`` engine calls and ``generated_tokens`` per
    candidate from its budget before the call."""

    name: str
    generated_tokens: int

    def requests(self, count: int) -> int: ...

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts: ...


async def stream_from_generate(
    engine: Engine, request: GenerateRequest
) -> AsyncIterator[StreamItem]:
    """A streaming form for engines that cannot stream: one delta per sample, then the result."""
    result = await engine.generate(request)
    for index, completion in enumerate(result.completions):
        if completion.reasoning:
            yield EngineDelta(index, reasoning=completion.reasoning)
        if completion.text:
            yield EngineDelta(index, text=completion.text)
    yield result
