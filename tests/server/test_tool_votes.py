"""Tool calls through voting scaffolds: majority, adaptive and best_of_n send the request's
tools to their samples and answer with the most common call (name + canonical JSON
arguments); other scaffolds keep the 400 naming the field. Served by uvicorn on loopback,
read by the openai SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest
from server.app.app import create_app
from server.settings import Settings
from testing.threaded import serving_in_thread

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def call(city: str, arguments: str) -> Completion:
    tool_call = {
        "id": f"call_{city}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    return Completion("", "tool_calls", extra={"message": {"tool_calls": [tool_call]}})


SAMPLES = [
    Completion("It is \\boxed{4}", "stop"),  # votes as text
    call("London", '{"city": "London", "unit": "C"}'),
    call("Paris", '{"city": "Paris", "unit": "C"}'),
    call("Paris", '{"unit": "C", "city": "Paris"}'),  # the same call, keys reordered
    call("Paris", '{ "unit":"C",  "city":"Paris" }'),
]
"""5 samples, 3 of which call get_weather for Paris with their keys in different orders."""


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, list[GenerateRequest]]]:
    seen: list[GenerateRequest] = []

    def answer(request: GenerateRequest) -> list[Completion]:
        seen.append(request)
        return SAMPLES[: request.params.n]

    settings = Settings(model="m", engines=("http://engine.invalid/v1",))
    app = create_app(settings, engines={"m": MockEngine(answer)})
    with serving_in_thread(app) as url:
        yield url, seen


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.mark.parametrize(
    "scaffold", ["majority(k=5)", "adaptive(max_k=5, wave=5)", "best_of_n(n=5)"]
)
def test_the_most_common_call_wins(
    served: tuple[str, list[GenerateRequest]], scaffold: str
) -> None:
    url, seen = served
    reply = client(url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,  # type: ignore[arg-type]
        extra_body={"scaffold": scaffold, "return_trace": True},
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Paris", "unit": "C"})
    ]
    assert seen[-1].params.n == 5 and seen[-1].params.extra["tools"] == TOOLS
    trace: list[dict[str, Any]] = (reply.model_extra or {})["trace"]
    votes = [e["values"] for e in trace if e.get("kind") == "tool_vote"]
    assert [len(g["samples"]) for g in votes[-1]["groups"]] == [3, 1, 1]
    assert votes[-1]["winner"] == 2  # the first Paris sample


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"scaffold": "gsr(n=2)"}, "tools"),
        ({"scaffold": "majority(k=3, solver=rc(steps=2))"}, "tools"),
        ({"scaffold": "majority(k=3)", "stream": True}, "stream"),
    ],
)
def test_other_scaffolds_refuse_tools(
    served: tuple[str, list[GenerateRequest]], body: dict[str, Any], param: str
) -> None:
    url, _ = served
    with pytest.raises(openai.BadRequestError) as refused:
        client(url).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS,  # type: ignore[arg-type]
            extra_body=body,
        )
    assert refused.value.body["param"] == param  # type: ignore[index]
