"""OpenAIEngine against the fake OpenAI-compatible server over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from scaffolds.engines import openai_http, openai_retry
from scaffolds.engines.http_transport import aiohttp_available
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.openai_parse import parse_retry_after as _parse_retry_after
from scaffolds.engines.protocol import (
    Engine,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamItem,
)
from scaffolds.errors import (
    EngineError,
    EngineRejectedError,
    EngineTimeoutError,
    EngineUnavailableError,
)
from testing.fake_engine import (
    FakeEngineConfig,
    FakeEngineHandle,
    default_responder,
    running_fake_engine,
)

MODEL = "fake-model"


@pytest.fixture(autouse=True, params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs over both transports of the engine's calls (aiohttp when installed)."""
    if request.param == "aiohttp" and not aiohttp_available():
        pytest.skip("aiohttp is not installed")
    if request.param == "httpx":
        monkeypatch.setattr(openai_http, "aiohttp_available", lambda: False)
    return str(request.param)


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model=MODEL)) as handle:
        yield handle


def make_engine(fake: FakeEngineHandle, **kwargs: object) -> OpenAIEngine:
    options: dict[str, object] = {"backoff_base": 0.01, "backoff_max": 0.05, "max_retries": 3}
    options.update(kwargs)
    return OpenAIEngine(fake.base_url, MODEL, **options)  # type: ignore[arg-type]


@pytest.fixture
async def engine(fake: FakeEngineHandle) -> AsyncIterator[OpenAIEngine]:
    async with make_engine(fake) as eng:
        yield eng


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def collect(engine: OpenAIEngine, request: GenerateRequest) -> list[StreamItem]:
    return [item async for item in engine.stream(request)]


# -- request shape and parsing -------------------------------------------------------


async def test_n_samples_travel_in_one_request(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    result = await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(n=4, seed=7)))
    assert fake.state.calls == 1
    assert len(result.completions) == 4
    body = fake.state.requests[0].body
    assert fake.state.requests[0].path == "/v1/chat/completions"
    assert body["n"] == 4 and body["model"] == MODEL and body["seed"] == 7
    assert body["messages"] == [{"role": "user", "content": "2+2?"}]
    assert [c.text for c in result.completions] == default_responder(body)
    assert all(c.finish_reason == "stop" and c.reasoning is None for c in result.completions)


async def test_completions_path_and_sampling_params(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    params = SamplingParams(
        n=2,
        max_tokens=3,
        temperature=0.7,
        top_p=0.9,
        stop=("\n\n",),
        seed=1,
        extra={"top_k": 5, "ignore_eos": True},
    )
    result = await engine.generate(GenerateRequest("Q: 1+1?\nA:", params))
    recorded = fake.state.requests[0]
    assert recorded.path == "/v1/completions"
    body = recorded.body
    assert body["prompt"] == "Q: 1+1?\nA:"
    assert body["max_tokens"] == 3 and body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["stop"] == ["\n\n"] and body["top_k"] == 5 and body["ignore_eos"] is True
    assert "stream" not in body and "logprobs" not in body
    assert [c.finish_reason for c in result.completions] == ["length", "length"]
    assert all(c.truncated and len(c.text.split()) == 3 for c in result.completions)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_under_either_name(field: str) -> None:
    config = FakeEngineConfig(reasoning="Think hard first.", reasoning_field=field)
    with running_fake_engine(config) as fake:
        async with make_engine(fake) as engine:
            result = await engine.generate(GenerateRequest(chat("hi"), SamplingParams(n=2)))
            items = await collect(engine, GenerateRequest(chat("hi")))
    assert [c.reasoning for c in result.completions] == ["Think hard first."] * 2
    assert "\\boxed" in result.completions[0].text
    deltas = [i for i in items if isinstance(i, EngineDelta)]
    assert "".join(d.reasoning for d in deltas) == "Think hard first."
    final = items[-1]
    assert isinstance(final, GenerateResult)
    assert final.completions[0].reasoning == "Think hard first."


async def test_usage_and_cached_tokens(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.cached_tokens = 2
    result = await engine.generate(GenerateRequest("one two three", SamplingParams(n=3)))
    usage = result.usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.calls) == (3, 2, 1)
    words = sum(len(text.split()) for text in default_responder(fake.state.requests[0].body))
    assert usage.completion_tokens == words
    # No token ids came back: the total is split evenly over the samples.
    assert sum(c.completion_tokens for c in result.completions) == usage.completion_tokens


@pytest.mark.parametrize("prompt", ["a plain prompt", chat("a chat prompt")])
async def test_logprobs_and_token_ids(
    engine: OpenAIEngine, fake: FakeEngineHandle, prompt: str | tuple[object, ...]
) -> None:
    request = GenerateRequest(prompt, SamplingParams(n=2, logprobs=True))  # type: ignore[arg-type]
    result = await engine.generate(request)
    body = fake.state.requests[0].body
    assert body["return_tokens_as_token_ids"] is True
    if request.is_chat:
        assert body["logprobs"] is True and body["top_logprobs"] == 0
    else:
        assert body["logprobs"] == 0
    for completion in result.completions:
        assert completion.token_ids is not None and completion.logprobs is not None
        assert all(isinstance(t, int) for t in completion.token_ids)
        assert len(completion.token_ids) == len(completion.logprobs)
        assert completion.completion_tokens == len(completion.token_ids)
        assert all(lp <= 0 for lp in completion.logprobs)
    streamed = (await collect(engine, request))[-1]
    assert isinstance(streamed, GenerateResult)
    assert streamed.completions == result.completions


async def test_newer_vllm_token_id_fields(engine: OpenAIEngine) -> None:
    params = SamplingParams(extra={"return_token_ids": True})
    result = await engine.generate(GenerateRequest(chat("x y z"), params))
    assert result.prompt_token_ids is not None and len(result.prompt_token_ids) == 4
    ids = result.completions[0].token_ids
    assert ids is not None and len(ids) == result.completions[0].completion_tokens
    assert result.completions[0].logprobs is None


async def test_choices_are_sorted_by_index() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        choices = [
            {"index": 1, "text": "second", "finish_reason": "length"},
            {"index": 0, "text": "first", "finish_reason": "stop"},
        ]
        return httpx.Response(200, json={"choices": choices, "usage": {"completion_tokens": 5}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        engine = OpenAIEngine("http://engine/v1", "m", client=client)
        result = await engine.generate(GenerateRequest("p", SamplingParams(n=2)))
        await engine.aclose()  # a client passed in stays open
        assert not client.is_closed
    assert [c.text for c in result.completions] == ["first", "second"]
    assert [c.completion_tokens for c in result.completions] == [3, 2]


@pytest.mark.parametrize(
    "payload",
    [{"choices": "nope"}, {"choices": [{"index": 0, "text": 3}]}, {"choices": []}, [1, 2]],
)
async def test_bad_shapes_raise_engine_error(payload: object) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=payload))
    async with httpx.AsyncClient(transport=transport) as client:
        engine = OpenAIEngine("http://engine/v1", "m", client=client)
        with pytest.raises(EngineError, match="malformed"):
            await engine.generate(GenerateRequest("p"))


async def test_malformed_json(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.malformed = True
    with pytest.raises(EngineError, match="invalid JSON"):
        await engine.generate(GenerateRequest("p"))
    with pytest.raises(EngineError, match="invalid JSON"):
        await collect(engine, GenerateRequest("p"))


# -- retries and errors --------------------------------------------------------------


async def test_retries_503_then_succeeds(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.fail_next(503, times=2)
    result = await engine.generate(GenerateRequest("p"))
    assert result.completions[0].text
    assert fake.state.calls == 3


async def test_gives_up_after_max_retries(fake: FakeEngineHandle) -> None:
    fake.config.fail_next(502, times=10, message="upstream is sad")
    async with make_engine(fake, max_retries=2) as engine:
        with pytest.raises(EngineUnavailableError) as info:
            await engine.generate(GenerateRequest("p"))
    assert fake.state.calls == 3
    assert info.value.status == 502
    assert fake.base_url in str(info.value) and "upstream is sad" in str(info.value)


@pytest.mark.parametrize("retries", [0, 2])
async def test_each_attempt_is_counted_and_each_retry_logged(
    fake: FakeEngineHandle, retries: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The first attempt runs outside the retry loop: the count and logs are the same."""
    fake.config.fail_next(503, times=10)
    async with make_engine(fake, max_retries=retries) as engine:
        with (
            caplog.at_level("WARNING", logger=openai_retry.logger.name),
            pytest.raises(EngineUnavailableError) as info,
        ):
            await engine.generate(GenerateRequest("p"))
    tries = retries + 1
    assert fake.state.calls == tries
    assert f"after {tries} attempt{'s' if tries > 1 else ''}:" in str(info.value)
    logged = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert [m.split("(")[0].split(": ")[1] for m in logged] == [
        f"attempt {i} failed " for i in range(1, tries)
    ]


async def test_429_honours_retry_after(fake: FakeEngineHandle) -> None:
    fake.config.fail_next(429, retry_after="1")
    async with make_engine(fake, backoff_max=5.0) as engine:
        started = time.monotonic()
        await engine.generate(GenerateRequest("p"))
        elapsed = time.monotonic() - started
    assert fake.state.calls == 2
    assert elapsed >= 0.9
    gap = fake.state.requests[1].at - fake.state.requests[0].at
    assert gap >= 0.9


async def test_retry_after_is_capped_by_backoff_max(fake: FakeEngineHandle) -> None:
    fake.config.fail_next(503, retry_after="3600")
    async with make_engine(fake, backoff_max=0.1) as engine:
        started = time.monotonic()
        await engine.generate(GenerateRequest("p"))
    assert time.monotonic() - started < 10
    assert fake.state.calls == 2


def test_parse_retry_after() -> None:
    assert _parse_retry_after("2") == 2.0
    assert _parse_retry_after("1.5") == 1.5
    assert _parse_retry_after(None) is None
    assert _parse_retry_after("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    value = _parse_retry_after(later)
    assert value is not None and 20 < value <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert _parse_retry_after(past) == 0.0


async def test_no_retry_on_400(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.fail_next(400, message="max_tokens is too large")
    with pytest.raises(EngineRejectedError) as info:
        await engine.generate(GenerateRequest("p"))
    assert info.value.status == 400
    assert "max_tokens is too large" in str(info.value)
    assert fake.state.calls == 1


async def test_server_side_validation_error_is_rejected(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    with pytest.raises(EngineRejectedError, match="'n' must be a positive integer"):
        await engine.generate(GenerateRequest("p", SamplingParams(extra={"n": -1})))
    assert fake.state.calls == 1


async def test_connection_refused_is_unavailable() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with OpenAIEngine(url, MODEL, max_retries=1, backoff_base=0.01) as engine:
        with pytest.raises(EngineUnavailableError, match="could not connect") as info:
            await engine.generate(GenerateRequest("p"))
        assert url in str(info.value)
        assert await engine.health() is False


async def test_read_timeout(fake: FakeEngineHandle) -> None:
    fake.config.hang = True
    async with make_engine(fake, read_timeout=0.3) as engine:
        with pytest.raises(EngineTimeoutError):
            await engine.generate(GenerateRequest("p"))
    assert fake.state.calls == 1
    assert await fake.wait_for(lambda s: s.cancelled == 1 and s.open_calls == 0)


# -- streaming -----------------------------------------------------------------------


async def test_stream_deltas_then_one_result(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    items = await collect(engine, GenerateRequest(chat("2+2?"), SamplingParams(n=3, seed=3)))
    body = fake.state.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert fake.state.calls == 1
    *deltas, final = items
    assert all(isinstance(d, EngineDelta) for d in deltas)
    assert isinstance(final, GenerateResult)
    expected = default_responder(body)
    for index in range(3):
        text = "".join(d.text for d in deltas if isinstance(d, EngineDelta) and d.index == index)
        assert text == expected[index] == final.completions[index].text
    assert final.usage.calls == 1 and final.usage.completion_tokens > 0
    assert [c.finish_reason for c in final.completions] == ["stop"] * 3


async def test_stream_completions_path(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    items = await collect(engine, GenerateRequest("p", SamplingParams(max_tokens=2)))
    assert fake.state.requests[0].path == "/v1/completions"
    final = items[-1]
    assert isinstance(final, GenerateResult)
    assert final.completions[0].finish_reason == "length"
    assert final.usage.completion_tokens == 2


async def test_stream_retries_before_it_starts(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.fail_next(503)
    items = await collect(engine, GenerateRequest("p"))
    assert isinstance(items[-1], GenerateResult)
    assert fake.state.calls == 2


async def test_no_retry_once_a_stream_has_started(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.drop_after_chunks = 2
    seen: list[StreamItem] = []
    with pytest.raises(EngineUnavailableError, match="streaming"):
        async for item in engine.stream(GenerateRequest("p")):
            seen.append(item)
    assert len(seen) == 2 and all(isinstance(i, EngineDelta) for i in seen)
    assert fake.state.calls == 1
    assert await fake.wait_for(lambda s: s.dropped == 1)


async def test_cancelling_a_stream_consumer_closes_the_connection(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.latency_per_token = 0.05
    fake.config.respond = lambda body: [" ".join(["word"] * 400)]
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.stream(GenerateRequest("p")):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    assert fake.state.open_calls == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fake.wait_for(lambda s: s.cancelled == 1 and s.open_calls == 0)
    assert fake.state.completed == 0


async def test_cancelling_generate_is_seen_by_the_engine(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.latency_per_token = 0.5
    task = asyncio.create_task(engine.generate(GenerateRequest("p")))
    assert await fake.wait_for(lambda s: s.open_calls == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await fake.wait_for(lambda s: s.cancelled == 1 and s.open_calls == 0)


# -- auth, health, models ------------------------------------------------------------


async def test_sends_only_the_engines_own_key(fake: FakeEngineHandle) -> None:
    fake.config.api_key = "sk-engine"
    async with make_engine(fake, api_key="sk-engine") as engine:
        await engine.generate(GenerateRequest("p"))
        items = await collect(engine, GenerateRequest(chat("p")))
        assert isinstance(items[-1], GenerateResult)
    for recorded in fake.state.requests:
        assert recorded.headers["authorization"] == "Bearer sk-engine"
        assert not {"x-api-key", "api-key", "openai-organization"} & set(recorded.headers)
    async with make_engine(fake) as anonymous:
        with pytest.raises(EngineRejectedError) as info:
            await anonymous.generate(GenerateRequest("p"))
    assert info.value.status == 401
    assert "authorization" not in fake.state.requests[-1].headers


async def test_a_runs_affinity_key_travels_as_the_session_header(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    """Each call that carries an affinity key names it in ``x-session-id``, the header
    vllm-router's consistent hash reads first (``SESSION_HEADER_NAMES`` in
    vllm-project/router ``src/policies/hash_key.rs``); a call without one sends none."""
    await engine.generate(GenerateRequest("p", affinity_key="k1"))
    await collect(engine, GenerateRequest(chat("p"), affinity_key="k2"))
    await engine.generate_batch(
        [GenerateRequest("a", affinity_key="k3"), GenerateRequest("b", affinity_key="k4")]
    )
    await engine.generate(GenerateRequest("p"))
    sent = [r.headers.get(openai_http.AFFINITY_HEADER) for r in fake.state.requests]
    assert sent == ["k1", "k2", "k3", None]


async def test_health_and_list_models(engine: OpenAIEngine) -> None:
    assert isinstance(engine, Engine)
    assert await engine.health() is True
    assert await engine.list_models() == [MODEL]


def test_default_responder_is_deterministic() -> None:
    body = {"prompt": "q", "seed": 1, "n": 2}
    assert default_responder(body) == default_responder(json.loads(json.dumps(body)))
    assert all(
        text.rstrip().endswith("}") and "\\boxed{" in text for text in default_responder(body)
    )


async def test_calls_take_the_connection_pools_in_turn(fake: FakeEngineHandle) -> None:
    engine = make_engine(fake, pool_shards=3)
    clients = [engine.client for _ in range(6)]
    assert len({id(c) for c in clients}) == 3 and clients[:3] == clients[3:]
    for _ in range(4):
        await engine.generate(GenerateRequest("hi", SamplingParams(max_tokens=2)))
    await engine.aclose()
    assert all(c.is_closed for c in clients)
    with pytest.raises(ValueError, match="pool_shards"):
        make_engine(fake, pool_shards=0)


async def test_a_client_passed_in_is_the_only_one_and_stays_open(fake: FakeEngineHandle) -> None:
    async with httpx.AsyncClient() as mine:
        engine = make_engine(fake, client=mine)
        assert engine.client is mine and engine.client is mine
        await engine.generate(GenerateRequest("hi", SamplingParams(max_tokens=2)))
        await engine.aclose()
        assert not mine.is_closed
