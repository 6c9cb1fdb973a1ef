"""The fake engine's FastAPI app, and running it in a thread (sync or async)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from testing.fake_engine.config import (
    HOLD_POLL,
    FakeEngineConfig,
    FakeEngineHandle,
    FakeEngineState,
    RecordedRequest,
)
from testing.fake_engine.generation import (
    each_prompt,
    error_body,
    list_body,
    make_plan,
    stream_body,
    summed_usage,
    validate,
)
from testing.fake_engine.responses import chat_body, response_events, response_object
from testing.threaded import serving_in_thread


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
            await asyncio.wait({gone}, timeout=min(HOLD_POLL, left) if left > 0 else HOLD_POLL)
    finally:
        gone.cancel()


def _error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    config: FakeEngineConfig | None = None,
) -> JSONResponse:
    body = error_body(config or FakeEngineConfig(), status, message)
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
        if (problem := validate(body, chat)) is not None:
            return _error(400, problem, config=config)
        plans = [make_plan(one, chat, config, state) for one in each_prompt(body)]
        plan = plans[0]
        if body.get("stream") and not config.hang:
            return StreamingResponse(
                stream_body(plan, config, state), media_type="text/event-stream"
            )
        sequences = sum(len(p.samples) for p in plans)
        state.enter(sequences)
        try:
            wait = math.inf if config.hang else max(sum(p.step_delays) for p in plans)
            if not await _sleep_unless_gone(request, wait, config, state):
                state.cancelled += 1
                if state.stopping:  # shutting down: what a real server answers then
                    return _error(503, "the engine is shutting down", config=config)
                return Response(status_code=499)
            state.completed += 1
            if config.malformed:
                return Response(b'{"choices": [', media_type="application/json")
            state.reported_usage.append(summed_usage(plans))
            return JSONResponse(list_body(plans, config))
        finally:
            state.leave(sequences)

    @app.post("/pooling")
    async def pooling(request: Request) -> Response:
        """vLLM's pooling API (``PoolingResponse``) for a reward model: an outcome score
        as one value, or a process model's steps as rows ``[p(bad), p(good)]``."""
        body = await request.json()
        state.requests.append(
            RecordedRequest(request.url.path, body, dict(request.headers), time.time())
        )
        messages = body.get("messages") or []
        answer = messages[-1].get("content", "") if messages else ""
        reward = config.reward(answer)
        data = [[1.0 - r, r] for r in reward] if isinstance(reward, list) else [float(reward)]
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        return JSONResponse(
            {
                "id": f"pool-{len(state.requests)}",
                "object": "list",
                "created": int(time.time()),
                "model": body.get("model"),
                "data": [{"index": 0, "object": "pooling", "data": data}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens,
                    "completion_tokens": 0,
                    "prompt_tokens_details": None,
                },
            }
        )

    @app.get("/health")
    async def health() -> Response:
        state.health_checks += 1
        return Response(status_code=200 if config.healthy else 503)

    @app.get("/get_server_info")
    async def get_server_info() -> Response:
        """SGLang's server info: its ``max_running_requests`` (404 in vLLM mode)."""
        if config.dialect != "sglang" or config.max_running is None:
            return _error(404, "Not Found", config=config)
        return JSONResponse({"max_running_requests": config.max_running})

    @app.get("/server_info")
    async def server_info() -> Response:
        """vLLM's config (a dev-mode route): ``max_num_seqs`` (404 unless set)."""
        if config.dialect != "vllm" or config.max_running is None:
            return _error(404, "Not Found", config=config)
        scheduler = {"max_num_seqs": config.max_running}
        return JSONResponse({"vllm_config": {"scheduler_config": scheduler}})

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

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        """vLLM's Responses API (only with ``config.responses_api``)."""
        if not config.responses_api:
            state.responses_refused += 1
            return _error(404, "Not Found", config=config)
        body = await request.json()
        state.calls += 1
        state.requests.append(
            RecordedRequest(request.url.path, body, dict(request.headers), time.time())
        )
        if config.failures:
            failure = config.failures.pop(0)
            state.failed += 1
            return _error(failure.status, failure.message, config=config)
        plan = make_plan(chat_body(body), True, config, state)
        plan.body = body
        if body.get("stream"):
            events = response_events(plan, config, state)
            return StreamingResponse(events, media_type="text/event-stream")
        state.enter()
        try:
            if not await _sleep_unless_gone(request, sum(plan.step_delays), config, state):
                state.cancelled += 1
                return Response(status_code=499)
        finally:
            state.leave()
        state.reported_usage.append(plan.usage())
        state.completed += 1
        return JSONResponse(response_object(plan))

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
