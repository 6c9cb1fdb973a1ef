"""deepconf and budget_forcing end to end: uvicorn on loopback, the fake engine server
(synthetic top logprobs, continuation requests), the official openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.test_e2e import MODEL, fake_reported_usage, messages, sdk, settings_for

SURE, UNSURE = "\\boxed{2}", "\\boxed{1}"


def traces(body: dict[str, Any]) -> list[str]:
    """One confident trace answering 2, the rest less sure answering 1."""
    n = int(body.get("n") or 1)
    return [f"so it is {SURE}"] + [f"maybe it is {UNSURE}"] * (n - 1)


def confidence(token: str) -> float:
    return 5.0 if token == SURE else 1.0


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    config = FakeEngineConfig(model=MODEL, cached_tokens=0, respond=traces)
    config.token_confidence = confidence
    with running_fake_engine(config) as handle:
        yield handle


@pytest.fixture
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    with running_ponder(settings_for(fake)) as url:
        yield url


def test_deepconf_keeps_the_confident_trace_and_accounts_its_tokens(
    fake: FakeEngineHandle, ponder: str
) -> None:
    out = sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        extra_body={"scaffold": "deepconf(n=4, keep=0.25, top_k=5)", "return_trace": True},
    )
    assert out.choices[0].message.content == f"so it is {SURE}"  # the vote would say 1
    [request] = fake.state.requests
    assert request.body["n"] == 4
    assert (request.body["logprobs"], request.body["top_logprobs"]) == (True, 5)
    reported = fake_reported_usage(fake)
    assert out.usage is not None and out.usage.completion_tokens == reported["completion_tokens"]
    assert out.model_extra is not None
    [note] = [e for e in out.model_extra["trace"] if e["type"] == "step_note"]
    assert note["kind"] == "confidence"
    assert note["values"]["kept"] == [True, False, False, False]
    first, *rest = note["values"]["confidence"]
    assert all(first > c for c in rest)


def test_deepconf_streams_its_answer(fake: FakeEngineHandle, ponder: str) -> None:
    content, reasoning = "", ""
    with sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        stream=True,
        extra_body={"scaffold": "deepconf(n=3, keep=0.34)"},
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
    assert content.strip() == f"so it is {SURE}"
    assert "maybe it is" in reasoning  # the traces stream as reasoning


def test_deepconf_on_an_engine_without_logprobs_is_a_400_naming_it(
    fake: FakeEngineHandle, ponder: str
) -> None:
    fake.config.logprobs = False
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": "deepconf(n=2)"}
        )
    assert info.value.status_code == 400
    assert info.value.code == "unsupported"
    assert "deepconf" in str(info.value.message)


def test_deepconf_online_is_refused_before_any_call(fake: FakeEngineHandle, ponder: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": 'deepconf(mode="online")'}
        )
    assert "not built yet" in str(info.value.message)
    assert fake.state.calls == 0


def test_budget_forcing_continues_the_message_and_counts_every_call(
    fake: FakeEngineHandle, ponder: str
) -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        again = body.get("continue_final_message")
        return ["checked it again \\boxed{4}" if again else "quick \\boxed{4}"]

    fake.config.respond = respond
    content = ""
    usage = None
    with sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"scaffold": "budget_forcing(min_tokens=10, waits=2)"},
    ) as stream:
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
    wait = "\n\nWait"
    expected = "quick \\boxed{4}" + wait + "checked it again \\boxed{4}"
    assert content.strip() == (expected + wait + "checked it again \\boxed{4}").strip()
    first, second, third = (r.body for r in fake.state.requests)
    assert "continue_final_message" not in first
    for body in (second, third):
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
        assert body["messages"][:-1] == messages()
    assert second["messages"][-1] == {"role": "assistant", "content": "quick \\boxed{4}" + wait}
    assert third["messages"][-1]["content"] == expected + wait
    reported = fake_reported_usage(fake)
    assert usage is not None and usage.model_extra is not None
    assert usage.model_extra["engine_calls"] == reported["calls"] == 3
    assert usage.completion_tokens == reported["completion_tokens"]
    assert usage.prompt_tokens == reported["prompt_tokens"]


def test_budget_forcing_stops_at_the_configured_end_of_thinking(fake: FakeEngineHandle) -> None:
    marker = "<|im_start|>answer"  # s1's, from the served model's config

    def respond(body: dict[str, Any]) -> list[str]:
        if marker not in body.get("stop", []):
            return [" \\boxed{42}"]  # after the closed thinking: the answer
        return [" so 42" if body.get("continue_final_message") else "<|im_start|>think 6*7"]

    fake.config.respond = respond
    settings = settings_for(fake, thinking=True, thinking_end=marker)
    with running_ponder(settings) as url:
        out = sdk(url).chat.completions.create(
            model=MODEL,
            messages=messages(),
            extra_body={"scaffold": 'budget_forcing(mode="ignore", waits=1, cue=" Wait")'},
        )
    first, wait, answer = (r.body for r in fake.state.requests)
    assert [b.get("stop") for b in (first, wait)] == [[marker], [marker]]
    assert marker not in (answer.get("stop") or [])
    assert wait["messages"][-1]["content"] == "<|im_start|>think 6*7 Wait"
    assert answer["messages"][-1]["content"] == "<|im_start|>think 6*7 Wait so 42" + marker
    thought = "<|im_start|>think 6*7 Wait so 42"
    assert out.choices[0].message.content == thought + marker + " \\boxed{42}"
    reported = fake_reported_usage(fake)
    assert out.usage is not None and out.usage.completion_tokens == reported["completion_tokens"]
