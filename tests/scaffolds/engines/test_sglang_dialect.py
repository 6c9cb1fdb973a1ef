"""OpenAIEngine's ``sglang`` dialect against the fake engine in SGLang mode.

SGLang cannot run on these machines (its kernels need CUDA), so these tests pin the
shapes read from SGLang's public source: request ids and ``/abort_request``, reasoning in
``reasoning_content`` (``separate_reasoning``), null ``prompt_tokens_details``, flat error
bodies, and logprobs without token ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

import pytest

from scaffolds.engines.dialects import reported_error
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import EngineDelta, GenerateRequest, GenerateResult, SamplingParams
from scaffolds.errors import EngineError, EngineRejectedError, EngineUnavailableError
from testing.fake_engine import Failure, FakeEngineConfig, FakeEngineHandle, running_fake_engine

MODEL = "fake-model"


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model=MODEL, dialect="sglang")) as handle:
        yield handle


def make_engine(fake: FakeEngineHandle, dialect: str = "sglang", **kw: object) -> OpenAIEngine:
    options: dict[str, object] = {"backoff_base": 0.01, "backoff_max": 0.05, "max_retries": 2}
    options.update(kw)
    return OpenAIEngine(fake.base_url, MODEL, dialect=dialect, **options)  # type: ignore[arg-type]


@pytest.fixture
async def engine(fake: FakeEngineHandle) -> AsyncIterator[OpenAIEngine]:
    async with make_engine(fake) as eng:
        yield eng


# -- requests ------------------------------------------------------------------------


async def test_every_call_carries_its_own_request_id(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(n=2, max_tokens=5)))
    await engine.generate(GenerateRequest("2+2=", SamplingParams(logprobs=True)))
    chat_body, text_body = (r.body for r in fake.state.requests)
    assert chat_body["rid"].startswith("ponder-") and text_body["rid"].startswith("ponder-")
    assert chat_body["rid"] != text_body["rid"]
    assert chat_body["separate_reasoning"] is True and "separate_reasoning" not in text_body
    assert chat_body["max_tokens"] == 5 and chat_body["n"] == 2
    assert text_body["logprobs"] == 1  # SGLang has no token-id logprobs option
    assert "return_tokens_as_token_ids" not in text_body


async def test_vllm_dialect_sends_no_request_id(fake: FakeEngineHandle) -> None:
    async with make_engine(fake, dialect="vllm") as vllm:
        await vllm.generate(GenerateRequest(chat("hi")))
    body = fake.state.requests[0].body
    assert "rid" not in body and "separate_reasoning" not in body


# -- responses -----------------------------------------------------------------------


async def test_reasoning_is_separated(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.reasoning = "First I add the units."
    fake.config.respond = lambda body: ["It is \\boxed{4}"] * int(body.get("n") or 1)
    result = await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(n=2)))
    assert [c.reasoning for c in result.completions] == ["First I add the units."] * 2
    assert [c.text for c in result.completions] == ["It is \\boxed{4}"] * 2
    items = [item async for item in engine.stream(GenerateRequest(chat("2+2?")))]
    deltas = [i for i in items if isinstance(i, EngineDelta)]
    assert "".join(d.reasoning for d in deltas) == "First I add the units."
    assert "".join(d.text for d in deltas) == "It is \\boxed{4}"
    final = items[-1]
    assert isinstance(final, GenerateResult)
    assert final.completions[0].reasoning == "First I add the units."


async def test_separate_reasoning_can_be_turned_off(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.reasoning = "hmm"
    fake.config.respond = lambda body: ["\\boxed{4}"]
    params = SamplingParams(extra={"separate_reasoning": False})
    result = await engine.generate(GenerateRequest(chat("2+2?"), params))
    assert fake.state.requests[0].body["separate_reasoning"] is False
    assert result.completions[0].reasoning is None
    assert result.completions[0].text == "<think>hmm</think>\\boxed{4}"


async def test_usage_without_or_with_cache_details(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.cached_tokens = 0
    result = await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(n=3)))
    assert fake.state.reported_usage[-1]["prompt_tokens_details"] is None
    assert result.usage.cached_tokens == 0 and result.usage.prompt_tokens > 0
    assert sum(c.completion_tokens for c in result.completions) == result.usage.completion_tokens
    fake.config.cached_tokens = 2
    items = [i async for i in engine.stream(GenerateRequest(chat("2+2?")))]
    final = items[-1]
    assert isinstance(final, GenerateResult) and final.usage.cached_tokens == 2
    # A usage object without the details key at all (older SGLang) counts no cache hits.
    usage = engine.parser.usage({"prompt_tokens": 7, "completion_tokens": 3})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (7, 3, 0)


async def test_logprobs_come_back_without_token_ids(engine: OpenAIEngine) -> None:
    result = await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(logprobs=True)))
    completion = result.completions[0]
    assert completion.token_ids is None
    assert completion.logprobs is not None and len(completion.logprobs) > 0
    assert completion.completion_tokens == len(completion.logprobs)


# -- errors --------------------------------------------------------------------------


async def test_flat_error_bodies(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.fail_next(400, message="The input (3000 tokens) is longer than the model")
    with pytest.raises(EngineRejectedError, match="longer than the model") as info:
        await engine.generate(GenerateRequest(chat("long")))
    assert info.value.status == 400
    fake.config.fail_next(503, times=3, message="scheduler is overloaded")
    with pytest.raises(EngineUnavailableError, match="scheduler is overloaded"):
        await engine.generate(GenerateRequest(chat("busy")))


async def test_error_chunks_in_a_stream(engine: OpenAIEngine, fake: FakeEngineHandle) -> None:
    fake.config.stream_error = Failure(400, message="stop_token_ids is out of vocabulary")
    with pytest.raises(EngineRejectedError, match="out of vocabulary"):
        [item async for item in engine.stream(GenerateRequest(chat("x")))]
    fake.config.stream_error = Failure(500, message="CUDA error: an illegal memory access")
    with pytest.raises(EngineError, match="illegal memory access") as info:
        [item async for item in engine.stream(GenerateRequest(chat("x")))]
    assert not isinstance(info.value, EngineRejectedError) and info.value.status == 500


def test_both_error_shapes_are_recognised() -> None:
    flat = {"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}
    nested = {"error": {"message": "bad", "type": "BadRequestError", "code": "400"}}
    assert reported_error(flat) == reported_error(nested) == ("bad", 400)
    assert reported_error({"object": "chat.completion", "choices": []}) is None


# -- abort ---------------------------------------------------------------------------


async def test_a_cancelled_call_is_aborted_by_request_id(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.hang = True
    task = asyncio.create_task(engine.generate(GenerateRequest(chat("slow"))))
    assert await fake.wait_for(lambda s: s.open_calls == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rid = fake.state.requests[0].body["rid"]
    assert await fake.wait_for(lambda s: s.aborted == [rid])


async def test_an_n_sample_call_aborts_every_sample_id(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.hang = True
    task = asyncio.create_task(engine.generate(GenerateRequest("slow", SamplingParams(n=2))))
    assert await fake.wait_for(lambda s: s.open_calls == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rid = fake.state.requests[0].body["rid"]
    assert await fake.wait_for(lambda s: s.aborted == [rid, f"{rid}_0", f"{rid}_1"])


async def test_a_stream_closed_early_is_aborted_and_a_finished_one_is_not(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    fake.config.latency_per_token = 0.05
    async with aclosing(engine.stream(GenerateRequest(chat("count")))) as stream:
        async for item in stream:
            if isinstance(item, EngineDelta) and item.text:
                break
    rid = fake.state.requests[0].body["rid"]
    assert await fake.wait_for(lambda s: s.aborted == [rid])
    fake.config.latency_per_token = 0.0
    await engine.generate(GenerateRequest(chat("quick")))
    [item async for item in engine.stream(GenerateRequest(chat("quick")))]
    await engine.aclose()  # waits for pending aborts
    assert fake.state.aborted == [rid]


# -- health --------------------------------------------------------------------------


async def test_health_is_the_servers_health_route(
    engine: OpenAIEngine, fake: FakeEngineHandle
) -> None:
    assert await engine.health() is True
    assert fake.state.health_checks == 1
    fake.config.healthy = False
    assert await engine.health() is False
    async with make_engine(fake, dialect="openai") as openai:
        assert await openai.health() is True  # GET /v1/models
    assert fake.state.health_checks == 2
