"""A fake OpenAI-compatible engine server for tests and benchmarks.

It speaks enough of the vLLM/OpenAI API (``/health``, ``/v1/models``,
``/v1/completions``, ``/v1/chat/completions``; streaming, ``n``, usage with cached
tokens, logprobs with ``token_id:N`` tokens, ``reasoning_content``) for engine clients to
be tested over real HTTP. A mutable :class:`FakeEngineConfig` controls what it answers,
how slowly, and how it fails: a status for the next N calls (``fail_next``), fixed or
heavy-tailed latency per token, holding or hanging calls, a connection dropped or a
stream cut short mid-way, malformed JSON, an error inside a stream.
:class:`FakeEngineState` counts calls, open calls and calls the client abandoned, and
records every request body and header set.

With ``dialect="sglang"`` it answers the way SGLang's OpenAI-compatible server does
where that differs: reasoning in ``reasoning_content`` unless the request says
``separate_reasoning: false`` (then it stays inline in ``<think>`` tags),
``usage.prompt_tokens_details`` null unless some tokens were cached, a top-level
``reasoning_tokens``, flat error bodies (``{"object": "error", "message", "type",
"code"}``), and ``POST /abort_request`` (recorded in ``state.aborted``). These shapes come
from reading SGLang's public source, not from a running SGLang.

Tokens are whitespace-separated words (with their leading space), so counts are
predictable. ``latency_per_token`` is one decoding step: the n samples of a call advance
together, as in a batched engine.

>>> import httpx
>>> with running_fake_engine() as engine:
...     httpx.get(engine.base_url + "/models").json()["data"][0]["id"]
'fake-model'

From a shell: ``python -m server.fake_engine --port 9000 --latency-per-token 0.01``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import re
import time
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from server.threaded import serving_in_thread

__all__ = [
    "Failure",
    "FakeEngineConfig",
    "FakeEngineHandle",
    "FakeEngineState",
    "RecordedRequest",
    "create_app",
    "default_responder",
    "fake_engine",
    "running_fake_engine",
]

Responder = Callable[[dict[str, Any]], list[str]]
"""Request body -> one text per sample (``n`` of them)."""

_CACHE_BLOCK = 16
_POLL = 0.01
_HOLD_POLL = 0.05
"""How often waiting calls look at ``hold`` and ``stopping`` (disconnects wake them at once)."""


def default_responder(body: dict[str, Any]) -> list[str]:
    """Deterministic texts from the prompt, seed and sample index, ending in ``\\boxed{k}``."""
    prompt, seed, n = _prompt_text(body), body.get("seed"), int(body.get("n") or 1)
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
    reward: Callable[[str], float] = len
    """``POST /pooling`` (a vLLM reward model): the score of an assistant message."""
    dialect: Literal["vllm", "sglang"] = "vllm"
    """Which server's response and error shapes to imitate (see the module docstring)."""
    healthy: bool = True
    """``GET /health`` answers 200 when True, 503 when False."""
    stream_error: Failure | None = None
    """Streams: send this error as an SSE chunk after the first chunk, then ``[DONE]``."""

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
    _seen_prompts: list[list[str]] = field(default_factory=list)

    def enter(self) -> None:
        self.open_calls += 1
        self.max_open_calls = max(self.max_open_calls, self.open_calls)


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


# -- generation ----------------------------------------------------------------------


def _pieces(text: str) -> list[str]:
    pieces: list[str] = re.findall(r"\s*\S+", text)
    rest = text[len("".join(pieces)) :]
    return [*pieces, rest] if rest else pieces


def _common_prefix(a: list[str], b: list[str]) -> int:
    mismatches = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(mismatches, min(len(a), len(b)))


def _token_id(piece: str) -> int:
    return 100 + zlib.crc32(piece.encode()) % 50_000


def _prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        parts = []
        for m in body["messages"]:
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            parts.append(f"{m.get('role')}: {content or ''}")
        return "\n".join(parts)
    return str(body.get("prompt", ""))


def _validate(body: Any, chat: bool) -> str | None:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            return "'messages' must be a non-empty list of objects"
    elif not isinstance(body.get("prompt"), str):
        return "'prompt' must be a string"
    for name in ("n", "max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            return f"'{name}' must be a positive integer"
    return None


@dataclass
class _Sample:
    pieces: list[tuple[str, str]]  # (kind: "reasoning" | "content", text)
    finish: str


@dataclass
class _Plan:
    chat: bool
    body: dict[str, Any]
    samples: list[_Sample]
    prompt_pieces: list[str]
    cached: int
    step_delays: list[float]
    """Seconds before each decoding step (one step = one token of every sample)."""
    dialect: str = "vllm"
    id: str = field(default_factory=lambda: f"fake-{uuid.uuid4().hex[:12]}")
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def steps(self) -> int:
        return max((len(s.pieces) for s in self.samples), default=0)

    def logprobs_wanted(self) -> bool:
        lp = self.body.get("logprobs")
        return lp is True if self.chat else lp is not None and lp is not False

    def logprobs(self, pieces: list[str]) -> dict[str, Any]:
        """Logprobs in the chat or completions shape (``token_id:N`` tokens if asked)."""
        as_ids = self.body.get("return_tokens_as_token_ids")
        tokens = [f"token_id:{_token_id(p)}" if as_ids else p for p in pieces]
        values = [-(_token_id(p) % 997) / 997 for p in pieces]
        if not self.chat:
            return {"tokens": tokens, "token_logprobs": values, "top_logprobs": None}
        pairs = zip(tokens, values, strict=True)
        return {"content": [{"token": t, "logprob": v, "top_logprobs": []} for t, v in pairs]}

    def usage(self) -> dict[str, Any]:
        completion = sum(len(s.pieces) for s in self.samples)
        prompt = len(self.prompt_pieces)
        out: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }
        if self.dialect == "sglang":  # details only when something was cached
            out["prompt_tokens_details"] = {"cached_tokens": self.cached} if self.cached else None
            kinds = [k for s in self.samples for k, _ in s.pieces]
            out["reasoning_tokens"] = kinds.count("reasoning")
        return out


def _plan(
    body: dict[str, Any], chat: bool, config: FakeEngineConfig, state: FakeEngineState
) -> _Plan:
    n = int(body.get("n") or 1)
    texts = config.respond(body)
    if len(texts) != n:
        raise ValueError(f"responder returned {len(texts)} texts for n={n}")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    stops = body.get("stop") or []
    stops = [stops] if isinstance(stops, str) else list(stops)
    samples = []
    for text in texts:
        finish = "stop"
        cuts = [text.find(s) for s in stops if s and s in text]
        text = text[: min(cuts)] if cuts else text
        pieces = [("reasoning", p) for p in _pieces(config.reasoning or "")] if chat else []
        if pieces and config.dialect == "sglang" and body.get("separate_reasoning") is False:
            inline = f"<think>{config.reasoning}</think>"  # SGLang leaves it in the text
            pieces, text = [], inline + text
        pieces += [("content", p) for p in _pieces(text)]
        if limit is not None and len(pieces) > limit:
            pieces, finish = pieces[:limit], "length"
        samples.append(_Sample(pieces, finish))
    prompt_pieces = _pieces(_prompt_text(body))
    if config.cached_tokens is not None:
        cached = min(config.cached_tokens, len(prompt_pieces))
    else:
        common = [_common_prefix(s, prompt_pieces) for s in state._seen_prompts]
        cached = max(common, default=0) // _CACHE_BLOCK * _CACHE_BLOCK
        state._seen_prompts = [*state._seen_prompts[-255:], prompt_pieces]
    steps = max((len(s.pieces) for s in samples), default=0)
    step, alpha = config.latency_per_token, config.tail_alpha
    if alpha and step and config.tail_per_token:
        delays = [step * random.paretovariate(alpha) for _ in range(steps)]
    else:
        delays = [step * random.paretovariate(alpha) if alpha and step else step] * steps
    return _Plan(chat, body, samples, prompt_pieces, cached, delays, config.dialect)


def _full_body(plan: _Plan, config: FakeEngineConfig) -> dict[str, Any]:
    choices = []
    for i, sample in enumerate(plan.samples):
        content = "".join(t for k, t in sample.pieces if k == "content")
        reasoning = "".join(t for k, t in sample.pieces if k == "reasoning")
        pieces = [t for _, t in sample.pieces]
        logprobs = plan.logprobs(pieces) if plan.logprobs_wanted() else None
        choice: dict[str, Any] = {"index": i, "finish_reason": sample.finish, "logprobs": logprobs}
        if plan.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning:
                message[_reasoning_field(config)] = reasoning
            choice["message"] = message
        else:
            choice["text"] = content
        if plan.body.get("return_token_ids"):
            choice["token_ids"] = [_token_id(p) for p in pieces]
        choices.append(choice)
    obj = "chat.completion" if plan.chat else "text_completion"
    out = {"id": plan.id, "object": obj, "created": plan.created, "model": plan.body.get("model")}
    out |= {"choices": choices, "usage": plan.usage()}
    if plan.body.get("return_token_ids"):
        out["prompt_token_ids"] = [_token_id(p) for p in plan.prompt_pieces]
    return out


def _sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


class _DropConnection(Exception):
    """Raised inside a stream to make the server abort the connection."""


async def _stream(
    plan: _Plan, config: FakeEngineConfig, state: FakeEngineState
) -> AsyncIterator[str]:
    state.enter()
    outcome = "cancelled"
    obj = "chat.completion.chunk" if plan.chat else "text_completion"
    head = {"id": plan.id, "object": obj, "created": plan.created, "model": plan.body.get("model")}

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        return _sse({**head, "choices": choices, **extra})

    try:
        await _while_held(config, state)  # a disconnect cancels this generator
        if plan.chat:
            yield chunk(
                [
                    {"index": i, "delta": {"role": "assistant", "content": ""}}
                    for i in range(len(plan.samples))
                ]
            )
        if config.malformed:
            yield "data: {this is not json\n\n"
        if config.stream_error is not None:
            failure = config.stream_error
            outcome = "failed"
            yield _sse(_error_body(config, failure.status, failure.message))
            yield _sse("[DONE]")
            return
        sent = 0
        for step in range(plan.steps):
            if plan.step_delays[step]:
                await asyncio.sleep(plan.step_delays[step])
            for i, sample in enumerate(plan.samples):
                if step >= len(sample.pieces):
                    continue
                kind, piece = sample.pieces[step]
                choice: dict[str, Any] = {"index": i, "finish_reason": None}
                if plan.chat:
                    key = _reasoning_field(config) if kind == "reasoning" else "content"
                    choice["delta"] = {key: piece}
                else:
                    choice["text"] = piece
                if plan.logprobs_wanted():
                    choice["logprobs"] = plan.logprobs([piece])
                yield chunk([choice])
                sent += 1
                if config.drop_after_chunks is not None and sent >= config.drop_after_chunks:
                    outcome = "dropped"
                    raise _DropConnection("fake engine: dropping the connection mid-stream")
                cut = config.truncate_after_chunks
                if cut is not None and sent >= cut:
                    outcome = "dropped"
                    return
        empty: dict[str, Any] = {"delta": {}} if plan.chat else {"text": ""}
        yield chunk(
            [{"index": i, **empty, "finish_reason": s.finish} for i, s in enumerate(plan.samples)]
        )
        if (plan.body.get("stream_options") or {}).get("include_usage"):
            state.reported_usage.append(plan.usage())
            yield chunk([], usage=plan.usage())
        yield _sse("[DONE]")
        outcome = "completed"
    finally:
        state.open_calls -= 1
        setattr(state, outcome, getattr(state, outcome) + 1)


async def _while_held(config: FakeEngineConfig, state: FakeEngineState) -> None:
    """Return once ``config.hold`` is off (or the server stops)."""
    while True:
        if not config.hold or state.stopping:
            return
        await asyncio.sleep(_HOLD_POLL)


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (the body was already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _sleep_unless_gone(
    request: Request, seconds: float, config: FakeEngineConfig, state: FakeEngineState
) -> bool:
    """Sleep ``seconds`` (and while ``config.hold``); False as soon as the client
    disconnects or the server stops.

    The disconnect is awaited, not polled, so hundreds of waiting calls cost nothing.
    """
    gone = asyncio.ensure_future(_disconnected(request))
    deadline = time.monotonic() + seconds
    try:
        while True:
            if state.stopping or gone.done():
                return False
            left = deadline - time.monotonic()
            if left <= 0 and not config.hold:
                return True
            await asyncio.wait({gone}, timeout=min(_HOLD_POLL, left) if left > 0 else _HOLD_POLL)
    finally:
        gone.cancel()


def _reasoning_field(config: FakeEngineConfig) -> str:
    return "reasoning_content" if config.dialect == "sglang" else config.reasoning_field


def _error_body(config: FakeEngineConfig, status: int, message: str) -> dict[str, Any]:
    error = {"message": message, "type": "FakeEngineError", "param": None, "code": status}
    return {"object": "error", **error} if config.dialect == "sglang" else {"error": error}


def _error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    config: FakeEngineConfig | None = None,
) -> JSONResponse:
    body = _error_body(config or FakeEngineConfig(), status, message)
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(config: FakeEngineConfig, state: FakeEngineState) -> FastAPI:
    """The FastAPI app of a fake engine driven by ``config``, counting into ``state``."""
    app = FastAPI(title="fake OpenAI-compatible engine")

    def denied(request: Request) -> JSONResponse | None:
        if config.api_key and request.headers.get("authorization") != f"Bearer {config.api_key}":
            return _error(401, "invalid API key", config=config)
        return None

    async def generate(request: Request, chat: bool) -> Response:
        try:
            raw = await request.body()
        except ClientDisconnect:  # gone before its request was even read
            state.cancelled += 1
            return Response(status_code=499)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        state.calls += 1
        recorded = body if isinstance(body, dict) else {"_raw": raw.decode("utf-8", "replace")}
        state.requests.append(
            RecordedRequest(request.url.path, recorded, dict(request.headers), time.time())
        )
        if (refusal := denied(request)) is not None:
            return refusal
        if config.failures:
            failure = config.failures.pop(0)
            state.failed += 1
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            return _error(failure.status, failure.message, headers, config)
        if (problem := _validate(body, chat)) is not None:
            return _error(400, problem, config=config)
        plan = _plan(body, chat, config, state)
        if body.get("stream") and not config.hang:
            return StreamingResponse(_stream(plan, config, state), media_type="text/event-stream")
        state.enter()
        try:
            wait = math.inf if config.hang else sum(plan.step_delays)
            if not await _sleep_unless_gone(request, wait, config, state):
                state.cancelled += 1
                if state.stopping:  # shutting down: what a real server answers then
                    return _error(503, "the engine is shutting down", config=config)
                return Response(status_code=499)
            state.completed += 1
            if config.malformed:
                return Response(b'{"choices": [', media_type="application/json")
            state.reported_usage.append(plan.usage())
            return JSONResponse(_full_body(plan, config))
        finally:
            state.open_calls -= 1

    @app.post("/pooling")
    async def pooling(request: Request) -> Response:
        """vLLM's pooling API for a reward model: per-token rewards, the last is the score."""
        body = await request.json()
        state.requests.append(
            RecordedRequest(request.url.path, body, dict(request.headers), time.time())
        )
        messages = body.get("messages") or []
        answer = messages[-1].get("content", "") if messages else ""
        data = [[0.0], [float(config.reward(answer))]]
        return JSONResponse({"object": "list", "data": [{"index": 0, "data": data}]})

    @app.get("/health")
    async def health() -> Response:
        state.health_checks += 1
        return Response(status_code=200 if config.healthy else 503)

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        """SGLang's abort route: records the ``rid`` (a 404 in vLLM mode, as in vLLM)."""
        if config.dialect != "sglang":
            return _error(404, "Not Found", config=config)
        body = await request.json()
        state.aborted.append(str(body.get("rid", "")))
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if (refusal := denied(request)) is not None:
            return refusal
        entry = {"id": config.model, "object": "model", "created": 0, "owned_by": "fake"}
        return JSONResponse({"object": "list", "data": [entry]})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    return app


# -- running it ----------------------------------------------------------------------


@contextlib.contextmanager
def running_fake_engine(
    config: FakeEngineConfig | None = None, *, port: int = 0
) -> Iterator[FakeEngineHandle]:
    """Serve a fake engine on 127.0.0.1 in a background thread.

    ``port`` 0 picks a free port; pass a stopped engine's port to bring it back there.
    """
    config = config or FakeEngineConfig()
    state = FakeEngineState()

    def stopping() -> None:
        state.stopping = True

    with serving_in_thread(
        create_app(config, state),
        port=port,
        on_stop=stopping,
        lifespan="off",
        timeout_keep_alive=30,
    ) as root:
        yield FakeEngineHandle(f"{root}/v1", config, state)


@contextlib.asynccontextmanager
async def fake_engine(config: FakeEngineConfig | None = None) -> AsyncIterator[FakeEngineHandle]:
    """Async form of :func:`running_fake_engine` (starts and stops it off the event loop)."""
    manager = running_fake_engine(config)
    handle = await asyncio.to_thread(manager.__enter__)
    try:
        yield handle
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI-compatible engine.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--latency-per-token", type=float, default=0.0)
    parser.add_argument("--tail-alpha", type=float, default=None, help="Pareto latency tail")
    parser.add_argument("--tail-per-token", action="store_true", help="draw the tail per token")
    parser.add_argument("--reasoning", default=None, help="reasoning text for chat answers")
    args = parser.parse_args(argv)
    config = FakeEngineConfig(
        model=args.model,
        latency_per_token=args.latency_per_token,
        tail_alpha=args.tail_alpha,
        tail_per_token=args.tail_per_token,
        reasoning=args.reasoning,
    )
    uvicorn.run(create_app(config, FakeEngineState()), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
