"""Multi-turn tool conversations: the turn after a tool call (chat's ``role: "tool"``
messages after an assistant turn with ``tool_calls``, a Responses ``function_call_output``
item, an Anthropic ``tool_result`` block) reaches the engine as the chat messages it
means, and the model goes on from the tool's result. Driven by the openai and anthropic
SDKs against Ponder on loopback in front of the fake engine server, which calls
``get_weather`` when it has tools and no tool result yet, and otherwise reads the result
back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.fake_engine.config import default_responder
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import store_in

MODEL = "fake-model"
CITY = '{"city": "Paris"}'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def call_weather(body: dict[str, Any]) -> dict[str, Any] | None:
    """Call the tool while the conversation has tools and no tool result at its end."""
    if body.get("tools") and body["messages"][-1]["role"] != "tool":
        return {"name": "get_weather", "arguments": CITY}
    return None


def read_result(body: dict[str, Any]) -> list[str]:
    last = body["messages"][-1]
    if last["role"] != "tool":
        return default_responder(body)
    return [f"It is {last['content']} in Paris."] * int(body.get("n") or 1)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    config = FakeEngineConfig(model=MODEL, respond=read_result, tool_call=call_weather)
    with running_fake_engine(config) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        engine_max_retries=0,
        **store_in(tmp_path_factory.mktemp("responses")),
    )
    with running_ponder(settings) as url:
        yield url


def sent_turn(fake: FakeEngineHandle) -> list[dict[str, Any]]:
    """The last engine request's messages after the user's question."""
    messages: list[dict[str, Any]] = fake.state.requests[-1].body["messages"]
    return messages[1:]


def assert_tool_turn(fake: FakeEngineHandle, call_id: str) -> None:
    """The engine saw the assistant's call and the tool's answer to it, as chat messages."""
    assistant, tool = sent_turn(fake)
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == [call_id]
    function = assistant["tool_calls"][0]["function"]
    assert function["name"] == "get_weather"
    assert json.loads(function["arguments"]) == {"city": "Paris"}
    assert tool == {"role": "tool", "content": "19C", "tool_call_id": call_id}


@pytest.mark.parametrize("scaffold", [None, "majority(k=3)"])
def test_chat_two_turn_tool_loop(ponder: str, fake: FakeEngineHandle, scaffold: str | None) -> None:
    client = openai_client(ponder)
    extra = {"scaffold": scaffold} if scaffold else {}
    question = {"role": "user", "content": "Weather in Paris?"}
    first = client.chat.completions.create(
        model=MODEL,
        messages=[question],
        tools=TOOLS,
        extra_body=extra,  # type: ignore[arg-type, list-item]
    )
    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"]  # type: ignore[union-attr]
    result = {"role": "tool", "tool_call_id": calls[0].id, "content": "19C"}
    second = client.chat.completions.create(
        model=MODEL,
        messages=[question, first.choices[0].message.model_dump(exclude_none=True), result],  # type: ignore[list-item]
        tools=TOOLS,  # type: ignore[arg-type]
        extra_body=extra,
    )
    assert second.choices[0].message.content == "It is 19C in Paris."
    assert second.choices[0].finish_reason == "stop"
    assert_tool_turn(fake, calls[0].id)


def test_a_scaffold_that_rewrites_the_conversation_refuses_a_tool_result(ponder: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": CITY}}
    messages: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "19C"},
    ]
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(ponder).chat.completions.create(model=f"{MODEL}+gsr(n=2)", messages=messages)
    assert refused.value.body["param"] == "messages"  # type: ignore[index]
    assert "tool result" in refused.value.message


def test_responses_function_call_output_after_a_stored_call(
    ponder: str, fake: FakeEngineHandle
) -> None:
    client = openai_client(ponder)
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": TOOLS[0]["function"]["parameters"],
        }
    ]
    first = client.responses.create(model=MODEL, input="Weather in Paris?", tools=tools)  # type: ignore[arg-type]
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "19C"}
    with client.responses.stream(
        model=MODEL,
        input=[output],
        previous_response_id=first.id,
        tools=tools,  # type: ignore[arg-type, list-item]
    ) as stream:
        second = stream.get_final_response()
    assert second.output_text == "It is 19C in Paris."
    assert_tool_turn(fake, call.call_id)

    # Stateless: the call and its output as input items, nothing stored.
    items: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "c7", "name": "get_weather", "arguments": CITY},
        {"type": "function_call_output", "call_id": "c7", "output": "19C"},
    ]
    third = client.responses.create(model=MODEL, input=items, store=False, tools=tools)  # type: ignore[arg-type]
    assert third.output_text == "It is 19C in Paris."
    assert_tool_turn(fake, "c7")


def test_anthropic_tool_result_turn(ponder: str, fake: FakeEngineHandle) -> None:
    client = anthropic.Anthropic(base_url=ponder, api_key="unused", max_retries=0, timeout=300)
    tools: Any = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    question: Any = {"role": "user", "content": "Weather in Paris?"}
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=[question], tools=tools
    ) as streamed:  # the call arrives through the stream's tool_use block
        first = streamed.get_final_message()
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert use.type == "tool_use" and use.input == {"city": "Paris"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "19C"}
    turns: Any = [
        question,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result]},
    ]
    second = client.messages.create(model=MODEL, max_tokens=64, tools=tools, messages=turns)
    assert [block.type for block in second.content] == ["text"]
    assert second.content[0].text == "It is 19C in Paris."  # type: ignore[union-attr]
    assert second.stop_reason == "end_turn"
    assert_tool_turn(fake, use.id)
