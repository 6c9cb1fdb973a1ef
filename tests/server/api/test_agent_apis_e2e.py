"""The Responses and Anthropic Messages APIs end to end: uvicorn on loopback in front of
the fake engine server, driven by the openai and anthropic SDKs with their own parsers
(the streaming helpers accumulate every event and fail on one out of order)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.fake_engine.config import Failure
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import store_in, wait_until

KEY = "sk-agents"
MODEL = "fake-model"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(cached_tokens=2)) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        api_keys=(KEY,),
        aliases={"gsr2": "gsr(n=2)"},
        engine_max_retries=0,
        engine_breaker_threshold=100,  # the injected engine errors must not open it
        **store_in(tmp_path_factory.mktemp("responses")),
    )
    with running_ponder(settings) as url:
        yield url


def claude(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=300)


def reported(fake: FakeEngineHandle, since: int) -> tuple[int, int]:
    usage = fake.state.reported_usage[since:]
    return sum(u["prompt_tokens"] for u in usage), sum(u["completion_tokens"] for u in usage)


def test_responses_scaffold_alias_plain(ponder: str, fake: FakeEngineHandle) -> None:
    before = len(fake.state.reported_usage)
    response = openai_client(ponder, KEY).responses.create(
        model=f"{MODEL}+gsr2", input="What is 2+3?"
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    summary = response.output[0].summary  # type: ignore[union-attr]
    # gsr(n=2): two candidates (one summary part each), then the refine writes the answer.
    assert [part.text.splitlines()[0] for part in summary] == [
        "### candidates > candidate 1",
        "### candidates > candidate 2",
    ]
    assert "\\boxed{" in response.output_text
    prompt, completion = reported(fake, before)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (prompt, completion)
    assert response.usage.input_tokens_details.cached_tokens == 2 * 2  # 2 calls, 2 cached
    assert response.status == "completed"
    assert response.model_extra and response.model_extra["ponder"]["scaffold"] == "gsr(n=2)"


def test_responses_stream_matches_and_continues(ponder: str, fake: FakeEngineHandle) -> None:
    client = openai_client(ponder, KEY)
    with client.responses.stream(
        model=f"{MODEL}+gsr2", input="What is 7+8?", instructions="Be brief."
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.count("response.reasoning_summary_part.added") == 2
    assert "response.output_text.delta" in types
    assert [item.type for item in final.output] == ["reasoning", "message"]
    stored = client.responses.retrieve(final.id)
    assert stored.output_text == final.output_text

    # A follow-up sees the earlier turn (its input and answer), not its instructions.
    follow = client.responses.create(
        model=MODEL, input="And times 2?", previous_response_id=final.id
    )
    sent = fake.state.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "What is 7+8?"
    assert sent[1]["content"] == final.output_text
    assert follow.previous_response_id == final.id
    assert [item.type for item in follow.output] == ["message"]


def test_responses_errors(ponder: str) -> None:
    client = openai_client(ponder, KEY)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_nope")
    assert missing.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="hi", extra_body={"scaffold": "gsr(n=0)"})
    assert "n" in str(bad.value)
    with pytest.raises(openai.BadRequestError) as several:
        client.responses.create(model=MODEL, input="hi", extra_body={"n": 2})
    assert several.value.body["param"] == "n"  # type: ignore[index]
    unstored = client.responses.create(model=MODEL, input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_messages_plain_and_streamed(ponder: str, fake: FakeEngineHandle) -> None:
    client = claude(ponder)
    before = len(fake.state.reported_usage)
    message = client.messages.create(
        model=f"{MODEL}+gsr2",
        max_tokens=256,
        system="Be brief.",
        messages=[{"role": "user", "content": "What is 4+4?"}],
    )
    assert [block.type for block in message.content] == ["thinking", "thinking", "text"]
    assert message.stop_reason == "end_turn"
    prompt, completion = reported(fake, before)
    assert message.usage.output_tokens == completion
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == prompt

    with client.messages.stream(
        model=f"{MODEL}+gsr2", max_tokens=256, messages=[{"role": "user", "content": "5+5?"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [block.type for block in final.content] == ["thinking", "thinking", "text"]
    text = final.content[-1]
    assert text.type == "text" and "\\boxed{" in text.text
    assert final.usage.output_tokens > 0


def test_messages_auth_takes_x_api_key(ponder: str) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        claude(ponder, key="wrong").messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    reply: Any = claude(ponder).messages.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[-1].type == "text"


def test_responses_budget_trace_and_engine_errors(ponder: str, fake: FakeEngineHandle) -> None:
    client = openai_client(ponder, KEY)
    # gsr(n=2) with one engine call: the candidates, then the budget cuts the refine.
    cut = client.responses.create(
        model=f"{MODEL}+gsr2",
        input="What is 9+9?",
        extra_body={"budget": {"max_calls": 1}, "return_trace": True},
    )
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    extra = cut.model_extra or {}
    assert extra["ponder"]["cut_reason"] == "calls"
    assert cut.usage is not None and (cut.usage.model_extra or {})["engine_calls"] == 1
    assert any(event["type"] == "step_finished" for event in extra["trace"])

    fake.config.failures.append(Failure(status=400, message="prompt too long"))
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi")
    # Streamed, the engine's 400 on the run's first call is the request's 400, before
    # the stream begins (as vLLM answers); a later failure is the stream's error event.
    fake.config.failures.append(Failure(status=400, message="prompt too long"))
    with pytest.raises(openai.BadRequestError), client.responses.stream(model=MODEL, input="hi"):
        pass
    fake.config.failures.append(Failure(status=503, message="engine down"))
    with client.responses.stream(model=MODEL, input="hi") as stream:
        events = [event.type for event in stream]
    assert events[0] == "response.created" and events[-1] == "response.failed"

    fake.config.failures.append(Failure(status=400, message="prompt too long"))
    streamed = claude(ponder).messages.stream(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    with pytest.raises(anthropic.BadRequestError), streamed as messages:
        for _ in messages:
            pass
    fake.config.failures.append(Failure(status=503, message="engine down"))
    streamed = claude(ponder).messages.stream(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    with pytest.raises(anthropic.APIError), streamed as messages:  # its error event, raised
        for _ in messages:
            pass


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_client_that_leaves_cancels_the_engine_call(
    ponder: str, fake: FakeEngineHandle, api: str
) -> None:
    # stream_trace: the stream begins at the run's first event (a plain stream's headers
    # wait for its first answer, which the held engine never gives).
    bodies = {
        "responses": {"model": MODEL, "input": "hi", "stream": True, "stream_trace": True},
        "messages": {
            "model": MODEL,
            "max_tokens": 8,
            "stream": True,
            "stream_trace": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    }
    cancelled, calls = fake.state.cancelled, fake.state.calls
    fake.config.hold = True
    try:
        with httpx.stream(
            "POST",
            f"{ponder}/v1/{api}",
            json=bodies[api],
            timeout=60,
            headers={"Authorization": f"Bearer {KEY}"},
        ) as response:
            assert response.status_code == 200
            lines = response.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)  # the stream began; then its engine call arrives and is held
            assert wait_until(lambda: fake.state.calls == calls + 1)
        assert wait_until(lambda: fake.state.cancelled == cancelled + 1, within=60)
    finally:
        fake.config.hold = False
