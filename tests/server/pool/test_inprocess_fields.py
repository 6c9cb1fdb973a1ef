"""The in-process engine honours a request field or refuses it, never ignores it.

Through the real server on loopback, with the embedded default (the shipped
``ponder-addition`` in the in-process transformers engine): on ``single``,
``majority(k=4)`` and with a named ``tool_choice``, each field the engine cannot honour
is a 400 in the OpenAI error shape whose message names the engine and whose ``param``
is the field; the fields it honours change what it writes (``logit_bias``), and off
values ask for nothing. Issue 49: ``tools`` used to come back as prose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from server.pool.embedded import EMBEDDED_MODEL, with_embedded_default
from server.settings import Settings
from testing.ponder import running_ponder

pytest.importorskip("torch")
pytest.importorskip("transformers")

SINGLE = EMBEDDED_MODEL
MAJORITY = f"{EMBEDDED_MODEL}+majority(k=4)"
ENGINE = "the in-process transformers engine"
SEVEN = "10"
"""The addition model's token id of ``7`` (``<pad>``, ``<eos>``, ``<unk>``, then digits)."""

TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
MESSAGES = [{"role": "user", "content": "347+589="}]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_ponder(with_embedded_default(Settings())) as root:
        yield root


def _chat(url: str, model: str, **fields: Any) -> httpx.Response:
    body = {"model": model, "messages": MESSAGES, **fields}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def _refused(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert ENGINE in error["message"] and param in error["message"], error
    assert error["code"] == "unsupported_parameter"
    return str(error["message"])


REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("tools", {"tools": [TOOL]}),
    ("tools", {"tools": [TOOL], "tool_choice": "auto"}),
    ("tool_choice", {"tools": [TOOL], "tool_choice": "required"}),
    (
        "tool_choice",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "add"}}},
    ),
    ("functions", {"functions": [TOOL["function"]]}),
    ("response_format", {"response_format": {"type": "json_object"}}),
    (
        "response_format",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "object"}},
            }
        },
    ),
    ("logprobs", {"logprobs": True}),
    ("top_logprobs", {"top_logprobs": 2}),
    ("guided_regex", {"guided_regex": "[0-9]+"}),
    ("stop_token_ids", {"stop_token_ids": [5]}),
    ("no_such_field", {"no_such_field": 1}),
]


@pytest.mark.parametrize("model", [SINGLE, MAJORITY])
@pytest.mark.parametrize(
    ("param", "fields"), REFUSED, ids=[f"{p}-{i}" for i, (p, _) in enumerate(REFUSED)]
)
def test_a_field_the_engine_cannot_honour_is_a_400_naming_it(
    url: str, model: str, param: str, fields: dict[str, Any]
) -> None:
    _refused(_chat(url, model, temperature=1.0, **fields), param)


def test_a_named_tool_choice_says_the_engine_cannot_force_it(url: str) -> None:
    choice = {"type": "function", "function": {"name": "add"}}
    message = _refused(_chat(url, SINGLE, tools=[TOOL], tool_choice=choice), "tool_choice")
    assert "cannot force a tool call" in message


def test_a_streamed_request_is_refused_before_its_stream(url: str) -> None:
    response = _chat(url, SINGLE, tools=[TOOL], stream=True)
    assert response.headers["content-type"].startswith("application/json")
    _refused(response, "tools")


def test_the_openai_sdk_sees_the_refusal(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MAJORITY,
            messages=MESSAGES,
            tools=[TOOL],
            temperature=1.0,  # type: ignore[list-item]
        )
    assert caught.value.status_code == 400 and ENGINE in str(caught.value)


def test_completions_echo_and_the_responses_and_messages_apis_refuse_too(url: str) -> None:
    body = {"model": SINGLE, "prompt": "347+589=", "echo": True, "max_tokens": 2}
    _refused(httpx.post(f"{url}/v1/completions", json=body, timeout=120), "echo")
    body = {
        "model": SINGLE,
        "input": "347+589=",
        "tools": [{"type": "function", **TOOL["function"]}],
    }
    _refused(httpx.post(f"{url}/v1/responses", json=body, timeout=120), "tools")
    tool = {"name": "add", "input_schema": TOOL["function"]["parameters"]}
    body = {"model": SINGLE, "max_tokens": 8, "messages": MESSAGES, "tools": [tool]}
    response = httpx.post(f"{url}/v1/messages", json=body, timeout=120)
    assert response.status_code == 400 and ENGINE in response.text, response.text


@pytest.mark.parametrize("model", [SINGLE, MAJORITY])
def test_logit_bias_is_honoured(url: str, model: str) -> None:
    # max_tokens bounds the whole run's generated tokens: majority's 4 samples share it.
    limit = 6 if model == SINGLE else 24
    response = _chat(url, model, temperature=1.0, max_tokens=limit, logit_bias={SEVEN: 100})
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    assert content == "777777" if model == SINGLE else set(content) == {"7"}, content


def test_a_logit_bias_outside_the_vocabulary_is_a_400(url: str) -> None:
    response = _chat(url, SINGLE, logit_bias={"100000": 5})
    assert response.status_code == 400 and response.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize("model", [SINGLE, MAJORITY])
def test_honoured_sampler_fields_and_off_values_answer(url: str, model: str) -> None:
    fields = {
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "repetition_penalty": 1.05,
        "top_k": 20,
        "min_p": 0.05,
        "user": "u1",
        "tool_choice": "none",
        "response_format": {"type": "text"},
        "logprobs": False,
        "parallel_tool_calls": True,
    }
    response = _chat(url, model, temperature=1.0, seed=3, **fields)
    assert response.status_code == 200, response.text
    assert (response.json()["choices"][0]["message"]["content"] or "").isdigit()


def test_a_bad_penalty_is_a_400_naming_it(url: str) -> None:
    response = _chat(url, SINGLE, presence_penalty=3)
    assert response.status_code == 400 and response.json()["error"]["param"] == "presence_penalty"
