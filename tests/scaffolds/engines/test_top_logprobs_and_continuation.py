"""Top logprobs (deepconf) and continuing an assistant message (budget forcing) over HTTP,
against the fake engine, for each dialect's request fields and both response shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from scaffolds.engines.dialects import get_dialect
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest, Message, SamplingParams
from scaffolds.errors import EngineRejectedError, InvalidRequestError, UnsupportedError
from scaffolds.strategies.deepconf import token_confidence
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine

MODEL = "fake-model"
TEXT = "one two three"


def confidence(token: str) -> float:
    return {"one": 1.0, "two": 2.0}.get(token, 0.5)


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    config = FakeEngineConfig(model=MODEL, respond=lambda b: [TEXT] * int(b.get("n") or 1))
    config.token_confidence = confidence
    with running_fake_engine(config) as handle:
        yield handle


def engine_for(fake: FakeEngineHandle, dialect: str = "vllm") -> OpenAIEngine:
    return OpenAIEngine(fake.base_url, MODEL, max_retries=0, dialect=dialect)


@pytest.mark.parametrize("prompt", [chat("count"), "count:"], ids=["chat", "text"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_top_logprobs_come_back_per_token_in_both_shapes(
    fake: FakeEngineHandle, prompt: str | tuple[Message, ...], stream: bool
) -> None:
    request = GenerateRequest(prompt, SamplingParams(n=2, top_logprobs=4))
    async with engine_for(fake) as engine:
        if stream:
            items = [item async for item in engine.stream(request)]
            result = items[-1]
        else:
            result = await engine.generate(request)
    body = fake.state.requests[0].body
    if isinstance(prompt, str):
        assert body["logprobs"] == 4 and "top_logprobs" not in body
    else:
        assert (body["logprobs"], body["top_logprobs"]) == (True, 4)
    for completion in result.completions:  # type: ignore[union-attr]
        assert completion.top_logprobs is not None
        assert len(completion.top_logprobs) == completion.completion_tokens == 3
        assert all(
            len(top) == 4 and list(top) == sorted(top, reverse=True)
            for top in completion.top_logprobs
        )
        scores = [token_confidence(top) for top in completion.top_logprobs]
        assert scores == pytest.approx([1.0, 2.0, 0.5])


async def test_training_logprobs_alone_bring_no_top_logprobs(fake: FakeEngineHandle) -> None:
    async with engine_for(fake) as engine:
        result = await engine.generate(GenerateRequest(chat("x"), SamplingParams(logprobs=True)))
    assert result.completions[0].logprobs is not None
    assert result.completions[0].top_logprobs is None


async def test_an_engine_that_ignores_the_request_gives_none(fake: FakeEngineHandle) -> None:
    fake.config.logprobs = False
    async with engine_for(fake) as engine:
        result = await engine.generate(GenerateRequest(chat("x"), SamplingParams(top_logprobs=5)))
    assert result.completions[0].top_logprobs is None


def test_each_dialect_asks_for_top_logprobs_the_same_way() -> None:
    for name in ("vllm", "sglang", "openai"):
        dialect = get_dialect(name)
        # vLLM alone can key the top k by token id, so alike-decoding tokens stay apart
        by_id = {"return_tokens_as_token_ids": True} if name == "vllm" else {}
        chat_fields = {"logprobs": True, "top_logprobs": 3} | by_id
        assert dialect.top_logprob_fields(chat=True, top_logprobs=3) == chat_fields
        assert dialect.top_logprob_fields(chat=False, top_logprobs=3) == {"logprobs": 3} | by_id
        # a caller that reads the tokens' text gets them keyed by text, on every dialect
        assert dialect.top_logprob_fields(chat=False, top_logprobs=3, texts=True) == {"logprobs": 3}


async def test_a_continuation_sends_the_chat_template_options(fake: FakeEngineHandle) -> None:
    prompt = (*chat("count"), Message("assistant", "one Wait"))
    async with engine_for(fake) as engine:
        result = await engine.generate(GenerateRequest(prompt, continue_final=True))
    body = fake.state.requests[0].body
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["messages"][-1] == {"role": "assistant", "content": "one Wait"}
    assert result.completions[0].text == TEXT


async def test_the_fake_engine_rejects_a_continuation_vllm_would(fake: FakeEngineHandle) -> None:
    prompt = (*chat("count"), Message("assistant", "one"))
    request = GenerateRequest(prompt, SamplingParams(extra={"add_generation_prompt": True}))
    async with engine_for(fake) as engine:
        with pytest.raises(EngineRejectedError, match="Cannot set both"):
            await engine.generate(
                GenerateRequest(request.prompt, request.params, continue_final=True)
            )


async def test_openai_cannot_continue_a_message(fake: FakeEngineHandle) -> None:
    prompt = (*chat("count"), Message("assistant", "one"))
    async with engine_for(fake, "openai") as engine:
        with pytest.raises(UnsupportedError, match="continue"):
            await engine.generate(GenerateRequest(prompt, continue_final=True))
    assert fake.state.calls == 0


def test_a_continuation_needs_a_final_assistant_message() -> None:
    with pytest.raises(InvalidRequestError, match="assistant"):
        GenerateRequest(chat("count"), continue_final=True)
    assert GenerateRequest("count: one", continue_final=True).prompt_text() == "count: one"


async def test_a_continuation_is_counted_as_continued_for_the_context_fit() -> None:
    import httpx

    from tests.scaffolds.engines.test_context_fit import URL, FakeServer

    server = FakeServer(context=1024, prompt_tokens=300)
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    engine = OpenAIEngine(URL, "m", client=client, max_retries=0)
    prompt = (*chat("Think hard."), Message("assistant", "so far Wait"))
    await engine.generate(
        GenerateRequest(prompt, SamplingParams(max_tokens=4096), continue_final=True)
    )
    [count] = [r for r in server.seen if r.url.path == "/tokenize"]
    body = json.loads(count.content)
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert server.generation_bodies()[0]["max_tokens"] == 724
