"""What a fake engine is told (:class:`FakeEngineConfig`) and what it counts
(:class:`FakeEngineState`), and the handle of a running one."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from scaffolds.engines.mock import word_confidence
from testing.fake_engine.tokens import prompt_text

Responder = Callable[[dict[str, Any]], list[str]]
"""Request body -> one text per sample (``n`` of them)."""

CACHE_BLOCK = 16
_POLL = 0.01
HOLD_POLL = 0.05
"""How often waiting calls look at ``hold`` and ``stopping`` (disconnects wake them at once)."""


def default_responder(body: dict[str, Any]) -> list[str]:
    """Deterministic texts from the prompt, seed and sample index, ending in ``\\boxed{k}``."""
    prompt, seed, n = prompt_text(body), body.get("seed"), int(body.get("n") or 1)
    answers = [zlib.crc32(f"{prompt}|{seed}|{i}".encode()) % 100 for i in range(n)]
    return [f"Let me work through this step by step. The answer is \\boxed{{{a}}}" for a in answers]


@dataclass
class Failure:
    """An injected error answer; ``retry_after`` becomes a ``Retry-After`` header."""

    status: int = 503
    retry_after: str | None = None
    message: str = "injected failure"


@dataclass
class FakeEngineConfig:
    """How the fake engine behaves; may be changed while it runs."""

    model: str = "fake-model"
    respond: Responder = default_responder
    latency_per_token: float = 0.0
    tail_alpha: float | None = None
    """When set, latency is multiplied by a Pareto(alpha) draw (heavy tail): one draw per
    call, or one per token with ``tail_per_token``."""
    tail_per_token: bool = False
    failures: list[Failure] = field(default_factory=list)
    """Consumed in order, one per generation call, before anything else happens."""
    hang: bool = False
    """Never answer (until the client goes away or the server stops)."""
    drop_after_chunks: int | None = None
    """Streams: abort the connection after this many content chunks."""
    truncate_after_chunks: int | None = None
    """Streams: end the response cleanly after this many content chunks, without a finish
    reason or ``[DONE]`` (a truncated stream, not a broken connection)."""
    hold: bool = False
    """Hold every generation call (before its first token) until this is set back to False."""
    malformed: bool = False
    """Answer 200 with a body (or one stream chunk) that is not valid JSON."""
    reasoning: str | None = None
    """Chat only: reasoning text put before the answer, in ``reasoning_field``."""
    reasoning_field: str = "reasoning_content"
    cached_tokens: int | None = None
    """Reported cached prompt tokens; None simulates a prefix cache of 16-token blocks."""
    api_key: str | None = None
    """When set, requests without ``Authorization: Bearer <api_key>`` get 401."""
    reward: Callable[[str], float | list[float]] = len
    """``POST /pooling`` (a vLLM reward model): the score of an assistant message, or a
    process reward model's score of each step (its rows ``[1 - s, s]``)."""
    dialect: Literal["vllm", "sglang"] = "vllm"
    """Which server's response and error shapes to imitate (see the module docstring)."""
    responses_api: bool = False
    """Serve ``POST /v1/responses`` (else it is a 404, as on an engine without it)."""
    healthy: bool = True
    """``GET /health`` answers 200 when True, 503 when False."""
    max_running: int | None = None
    """The sequences it says it runs at once: SGLang's ``GET /get_server_info``
    ``max_running_requests``, or vLLM's ``GET /server_info`` ``max_num_seqs`` (as with
    ``VLLM_SERVER_DEV_MODE=1``). None: those routes answer 404, as a plain vLLM does."""
    stream_error: Failure | None = None
    """Streams: send this error as an SSE chunk after the first chunk, then ``[DONE]``."""
    logprobs: bool = True
    """False: answer without any logprobs, even when asked (a server that ignores them)."""
    tool_call: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    """Chat only: from the request body, the function call (``{"name", "arguments"}``)
    every sample makes instead of a text answer (finish reason ``tool_calls``), or None
    to answer with text."""
    token_confidence: Callable[[str], float] = word_confidence
    """Top logprobs: the confidence (negative mean top-k logprob, as DeepConf defines it)
    of a token, from its text (stripped); the k values are made to have that mean."""

    def fail_next(
        self, status: int, times: int = 1, *, retry_after: str | None = None, message: str = ""
    ) -> None:
        """Make the next ``times`` calls answer ``status``."""
        msg = message or f"injected HTTP {status}"
        self.failures.extend(Failure(status, retry_after, msg) for _ in range(times))


@dataclass
class RecordedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


@dataclass
class FakeEngineState:
    """Counters and recorded requests (generation endpoints only)."""

    calls: int = 0
    open_calls: int = 0
    max_open_calls: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    dropped: int = 0
    requests: deque[RecordedRequest] = field(default_factory=lambda: deque(maxlen=10_000))
    """The most recent generation requests (at most 10,000)."""
    stopping: bool = False
    reported_usage: list[dict[str, Any]] = field(default_factory=list)
    """The ``usage`` object of every answer sent (stream or not), in order."""
    aborted: list[str] = field(default_factory=list)
    """The ``rid`` of every ``POST /abort_request`` (SGLang mode)."""
    health_checks: int = 0
    responses_refused: int = 0
    """``POST /v1/responses`` answered 404 (``FakeEngineConfig.responses_api`` off)."""
    open_sequences: int = 0
    """Samples of the open calls (each call's ``n``, times its prompts)."""
    max_open_sequences: int = 0
    _seen_prompts: list[list[str]] = field(default_factory=list)

    def enter(self, sequences: int = 1) -> None:
        self.open_calls += 1
        self.max_open_calls = max(self.max_open_calls, self.open_calls)
        self.open_sequences += sequences
        self.max_open_sequences = max(self.max_open_sequences, self.open_sequences)

    def leave(self, sequences: int = 1) -> None:
        self.open_calls -= 1
        self.open_sequences -= sequences


@dataclass
class FakeEngineHandle:
    """A running fake engine: ``base_url`` ends in ``/v1``."""

    base_url: str
    config: FakeEngineConfig
    state: FakeEngineState

    async def wait_for(
        self, predicate: Callable[[FakeEngineState], bool], within: float = 5.0
    ) -> bool:
        """Poll until ``predicate(state)`` holds; False on timeout."""
        deadline = time.monotonic() + within
        while not predicate(self.state):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(_POLL)
        return True
