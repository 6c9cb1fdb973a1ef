"""Several samples at temperature 0: one request each where the server refuses them (vLLM),
one request with ``n`` elsewhere; the same samples and usage either way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest, GenerateResult, SamplingParams
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model="m")) as handle:
        yield handle


@pytest.mark.parametrize("stream", [False, True])
async def test_greedy_samples_go_one_by_one_to_vllm(fake: FakeEngineHandle, stream: bool) -> None:
    request = GenerateRequest("2+2=", SamplingParams(n=3, temperature=0.0, seed=5))
    async with OpenAIEngine(fake.base_url, "m", dialect="vllm") as engine:
        if stream:
            items = [item async for item in engine.stream(request)]
            result = items[-1]
            assert isinstance(result, GenerateResult)
        else:
            result = await engine.generate(request)
    bodies = [r.body for r in fake.state.requests]
    assert [b["n"] for b in bodies] == [1, 1, 1]
    assert len(result.completions) == 3 and result.usage.calls == 1
    assert result.usage.completion_tokens == sum(c.completion_tokens for c in result.completions)


async def test_sampled_or_openai_calls_keep_n(fake: FakeEngineHandle) -> None:
    sampled = GenerateRequest("2+2=", SamplingParams(n=3, temperature=0.7))
    greedy = GenerateRequest("2+2=", SamplingParams(n=3, temperature=0.0))
    async with OpenAIEngine(fake.base_url, "m", dialect="vllm") as engine:
        await engine.generate(sampled)
    async with OpenAIEngine(fake.base_url, "m", dialect="openai") as engine:
        await engine.generate(greedy)
    assert [r.body["n"] for r in fake.state.requests] == [3, 3]
