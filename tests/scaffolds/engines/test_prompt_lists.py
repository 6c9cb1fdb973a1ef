"""OpenAIEngine.generate_batch against the fake OpenAI-compatible server on loopback:
several text prompts as one request, each prompt's samples and share of the usage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest, SamplingParams, Usage
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine

MODEL = "fake-model"
PROMPTS = ["2+2=", "the capital of France is", "a"]


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model=MODEL)) as handle:
        yield handle


async def test_a_list_is_one_request_with_each_prompts_own_samples(fake: FakeEngineHandle) -> None:
    extra = {"return_token_ids": True}  # vLLM's: token ids of the samples and the prompt
    params = SamplingParams(n=2, max_tokens=6, seed=5, logprobs=True, extra=extra)
    requests = [GenerateRequest(p, params) for p in PROMPTS]
    async with OpenAIEngine(fake.base_url, MODEL) as engine:
        batch = await engine.generate_batch(requests)
        assert fake.state.calls == 1 and fake.state.requests[0].body["prompt"] == PROMPTS
        reported = fake.state.reported_usage[0]
        alone = [await engine.generate(r) for r in requests]
    for ours, theirs in zip(batch, alone, strict=True):
        assert [c.text for c in ours.completions] == [c.text for c in theirs.completions]
        assert [c.token_ids for c in ours.completions] == [c.token_ids for c in theirs.completions]
        assert [c.logprobs for c in ours.completions] == [c.logprobs for c in theirs.completions]
        # Token ids came back: each prompt's completion and prompt tokens are its own.
        assert ours.usage.completion_tokens == theirs.usage.completion_tokens
        assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens
        assert ours.prompt_token_ids == theirs.prompt_token_ids
    total = sum((r.usage for r in batch), Usage())
    assert (total.prompt_tokens, total.completion_tokens, total.calls) == (
        reported["prompt_tokens"],
        reported["completion_tokens"],
        1,
    )
    assert [r.usage.calls for r in batch] == [1, 0, 0]


async def test_without_prompt_token_ids_prompt_tokens_are_shared_by_size(
    fake: FakeEngineHandle,
) -> None:
    async with OpenAIEngine(fake.base_url, MODEL) as engine:
        batch = await engine.generate_batch([GenerateRequest(p) for p in PROMPTS])
    reported = fake.state.reported_usage[0]["prompt_tokens"]
    shares = [r.usage.prompt_tokens for r in batch]
    assert sum(shares) == reported and shares[1] > shares[0] > shares[2]


async def test_greedy_samples_vllm_refuses_go_as_repeated_prompts(fake: FakeEngineHandle) -> None:
    params = SamplingParams(n=2, max_tokens=4, temperature=0.0)
    async with OpenAIEngine(fake.base_url, MODEL) as engine:
        batch = await engine.generate_batch([GenerateRequest(p, params) for p in PROMPTS])
    [sent] = [r.body for r in fake.state.requests]
    assert sent["prompt"] == [p for p in PROMPTS for _ in range(2)] and sent["n"] == 1
    texts = [[c.text for c in r.completions] for r in batch]
    one = fake.config.respond({"prompt": PROMPTS[1], "n": 1})[0]
    assert len(texts) == 3 and texts[1] == [" ".join(one.split()[:4])] * 2
    assert sum((r.usage for r in batch), Usage()).calls == 1


async def test_a_dialect_without_lists_sends_one_request_per_prompt(fake: FakeEngineHandle) -> None:
    fake.config.dialect = "sglang"
    async with OpenAIEngine(fake.base_url, MODEL, dialect="sglang") as engine:
        assert not engine.takes_prompt_lists
        batch = await engine.generate_batch([GenerateRequest(p) for p in PROMPTS])
        alone = [await engine.generate(GenerateRequest(p)) for p in PROMPTS]
    sent = [r.body["prompt"] for r in fake.state.requests]
    assert sorted(sent[: len(PROMPTS)]) == sorted(PROMPTS)
    assert [r.completions[0].text for r in batch] == [r.completions[0].text for r in alone]
    assert sum((r.usage for r in batch), Usage()).calls == len(PROMPTS)


async def test_requests_that_cannot_share_a_request_are_refused(fake: FakeEngineHandle) -> None:
    mixed = [GenerateRequest("a"), GenerateRequest("b", SamplingParams(max_tokens=2))]
    async with OpenAIEngine(fake.base_url, MODEL) as engine:
        with pytest.raises(ValueError, match="same params"):
            await engine.generate_batch(mixed)
    assert fake.state.calls == 0
