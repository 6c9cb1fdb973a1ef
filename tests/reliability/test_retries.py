"""Engine faults seen through Ponder: what is retried, what is not, what the client sees.

Retried (with backoff, honouring ``Retry-After``): 408/429/5xx and connection errors
before any answer. Never retried: an engine's 4xx (the request's own fault), anything
once a stream has begun, a read timeout (the engine may still be working on it).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from scaffolds.engines.protocol import GenerateRequest, GenerateResult, StreamItem
from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineHandle
from tests.reliability.conftest import (
    ConnectionDropper,
    assert_answered,
    assert_openai_error,
    chat,
    client,
    ponder_settings,
    serving_ponder,
)
from tests.server.conftest import parse_sse


async def post(url: str, body: dict[str, Any]) -> Any:
    async with client(url) as c:
        return await c.post("/v1/chat/completions", json=body)


def port_of(fake: FakeEngineHandle) -> int:
    return int(fake.base_url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.parametrize(
    ("status", "retry_after", "stream"),
    [
        (429, "0", False),
        (500, "0", True),
        (502, "0", False),
        (503, None, True),  # no Retry-After: jittered exponential backoff
        (504, "0", False),
        (408, "0", True),
    ],
)
async def test_retryable_failures_are_retried_and_the_request_succeeds(
    fake: FakeEngineHandle, status: int, retry_after: str | None, stream: bool
) -> None:
    fake.config.fail_next(status, times=2, retry_after=retry_after)
    with serving_ponder(ponder_settings(fake, engine_max_retries=3)) as (url, _):
        response = await post(url, chat(stream=stream))
    assert_answered(response, stream)
    assert (fake.state.calls, fake.state.failed, fake.state.completed) == (3, 2, 1)


async def test_retry_after_from_the_engine_is_honoured(fake: FakeEngineHandle) -> None:
    fake.config.fail_next(429, retry_after="1")
    with serving_ponder(ponder_settings(fake)) as (url, _):
        response = await post(url, chat())
    assert response.status_code == 200
    first, second = list(fake.state.requests)
    assert second.at - first.at >= 0.9  # waited as told (a lower bound only)


async def test_connection_errors_are_retried(fake: FakeEngineHandle) -> None:
    with (
        ConnectionDropper(port_of(fake), drop=2) as front,
        # A set bound: no capacity probe at start, so the dropper sees only engine calls.
        serving_ponder(ponder_settings(front.base_url, max_sequences=4096)) as (url, _),
    ):
        response = await post(url, chat(scaffold="gsr(n=2)"))
    assert response.status_code == 200, response.text
    assert front.dropped == 2
    assert fake.state.calls == 2 and fake.state.completed == 2  # candidates, then refine


async def test_a_dead_engine_is_a_clear_503(fake: FakeEngineHandle) -> None:
    with (
        ConnectionDropper(port_of(fake), drop=100) as front,
        serving_ponder(
            ponder_settings(front.base_url, engine_max_retries=1, max_sequences=4096)
        ) as (url, _),
    ):
        response = await post(url, chat())
    error = assert_openai_error(response, 503)
    assert error["type"] == "engine_unavailable"
    assert "after 2 attempts" in error["message"], error
    assert front.dropped == 2 and fake.state.calls == 0


@pytest.mark.parametrize(
    ("engine_status", "status", "kind", "stream"),
    [
        (400, 400, "invalid_request_error", False),
        (400, 400, "invalid_request_error", True),
        (422, 400, "invalid_request_error", False),
        (413, 400, "invalid_request_error", True),
        (401, 502, "engine_error", False),  # the engine refused *our* key: not the caller's
        (404, 502, "engine_error", True),
    ],
)
async def test_an_engine_4xx_is_not_retried_and_reaches_the_client(
    fake: FakeEngineHandle, engine_status: int, status: int, kind: str, stream: bool
) -> None:
    reason = "This model's maximum context length is 4096 tokens (got 5000)"
    fake.config.fail_next(engine_status, message=reason)
    with serving_ponder(ponder_settings(fake)) as (url, _):
        response = await post(url, chat(stream=stream))
        if stream and status >= 500:  # the engine's fault: the stream's error event
            assert response.status_code == 200
            chunks = parse_sse(response.text)
            assert chunks[-1] == "[DONE]"
            error = chunks[-2]["error"]
        else:  # the caller's: its status before any stream starts, as vLLM answers
            error = assert_openai_error(response, status)
        again = await post(url, chat())
    assert error["type"] == kind
    assert reason in error["message"]
    if engine_status == 400:  # vLLM's own context-length refusal, passed on word for word
        assert error["code"] == "context_length_exceeded", error
    else:
        assert f"HTTP {engine_status}" in error["message"], error
    assert fake.state.calls == 2 and fake.state.failed == 1  # once, then the next request
    assert again.status_code == 200


@pytest.mark.parametrize("fault", ["drop", "truncate", "error_chunk"])
async def test_nothing_is_retried_after_a_stream_began(fake: FakeEngineHandle, fault: str) -> None:
    fake.config.respond = lambda body: ["one two three four five six seven \\boxed{8}"]
    if fault == "drop":
        fake.config.drop_after_chunks = 3
    elif fault == "truncate":
        fake.config.truncate_after_chunks = 3
    else:
        fake.config.fail_next(503)  # the first call fails before it begins: retried
        from testing.fake_engine import Failure

        fake.config.stream_error = Failure(503, message="engine overloaded mid-stream")
    with serving_ponder(ponder_settings(fake)) as (url, _):
        response = await post(url, chat(stream=True))
    assert response.status_code == 200
    chunks = parse_sse(response.text)
    assert chunks[-1] == "[DONE]"
    error = chunks[-2]["error"]
    assert error["type"] in ("engine_unavailable", "engine_error"), error
    assert error["message"]
    content = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks[:-2] if c.get("choices")
    )
    if fault == "error_chunk":
        assert "overloaded mid-stream" in error["message"]
        assert (fake.state.calls, fake.state.failed) == (2, 2)  # 1 retry before it began
    else:
        assert content == "one two three"  # what did arrive before the fault
        assert fake.state.calls == 1  # never started again: the client already has a part


async def test_malformed_engine_json_is_a_clear_502_not_a_crash(fake: FakeEngineHandle) -> None:
    fake.config.malformed = True
    with serving_ponder(ponder_settings(fake)) as (url, _):
        plain = await post(url, chat())
        streamed = await post(url, chat(stream=True))
    error = assert_openai_error(plain, 502)
    assert "malformed response" in error["message"] and error["type"] == "engine_error"
    chunks = parse_sse(streamed.text)
    assert "malformed response" in chunks[-2]["error"]["message"]
    assert fake.state.calls == 2


async def test_an_engine_that_hangs_is_a_504_and_its_call_is_closed(
    fake: FakeEngineHandle,
) -> None:
    fake.config.hang = True
    settings = ponder_settings(fake, engine_read_timeout_s=0.5)
    with serving_ponder(settings) as (url, _):
        response = await post(url, chat())
        assert await fake.wait_for(lambda s: s.open_calls == 0, within=10)
    error = assert_openai_error(response, 504)
    assert "did not answer within the timeout" in error["message"]
    assert fake.state.calls == 1 and fake.state.cancelled == 1  # a read timeout: no retry
    assert json.dumps(error)  # serialisable as is


@pytest.mark.parametrize("stream", [False, True])
async def test_retries_never_outlive_the_requests_deadline(
    fake: FakeEngineHandle, stream: bool
) -> None:
    # The deadline must not pass before the first call goes out: a first request pays
    # Ponder's one-off costs (about 0.4 s idle, seconds on a loaded machine), so one
    # request is answered first, and the deadline (3 s) is hundreds of times what a
    # warm first call takes (about 5 ms). The backoff the engine asks for (20 s, the
    # engine client's cap) stays far past the deadline, and the bound on ``took`` leaves
    # 12 s for a slow machine to answer once the deadline has cut the wait.
    with serving_ponder(ponder_settings(fake, engine_max_retries=3)) as (url, _):
        assert_answered(await post(url, chat(stream=stream)), stream)
        calls_before = fake.state.calls
        fake.config.fail_next(503, times=10, retry_after="20")  # "come back in 20 s"
        started = time.monotonic()
        response = await post(url, chat(budget={"timeout_s": 3}, stream=stream))
        took = time.monotonic() - started
        assert await fake.wait_for(lambda s: s.open_calls == 0, within=60)
    chunks = parse_sse(response.text) if stream else None
    error = chunks[-2]["error"] if chunks else assert_openai_error(response, 504)
    assert error["code"] == "deadline_exceeded", error
    assert took < 15, took  # cut at the 3 s deadline, not after the 20 s backoff
    assert fake.state.calls == calls_before + 1  # the first try only: no retry went out


class EmptyStream:
    """An engine whose stream ends before it says anything (a broken engine adapter)."""

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        raise AssertionError("only streams here")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return
        yield  # pragma: no cover


async def test_an_engine_stream_without_a_result_is_an_engine_error_not_a_crash() -> None:
    settings = Settings(model="m", engines=("http://engine.invalid/v1",))
    app = create_app(settings, engines={"m": EmptyStream()})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as c:
        response = await c.post("/v1/chat/completions", json=chat(stream=True))
    error = parse_sse(response.text)[-2]["error"]
    assert error["type"] == "engine_error" and "ended without a result" in error["message"]
