"""Ponder's own request fields on every API (issue 50): ``answer_format`` and ``reference``
sent through the openai SDK's ``extra_body`` (chat completions, Responses) and the
anthropic SDK's (Messages), on the in-process app, change the run the same way on each,
and never reach the engine (an engine's own Responses API included)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from scaffolds.engines.protocol import GenerateRequest
from server.runs.request import PONDER_FIELDS
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder
from tests.server.conftest import STORE_IN_MEMORY, build_app

VOTES = ["The answer is 3", "so \\boxed{4}", "#### 3"]
"""Three samples: read leniently 3, 4, 3 (3 wins); boxed only 4 counts (4 wins)."""
KEY = "sk-fields"


def votes(request: GenerateRequest) -> list[str]:
    n = request.params.n
    return VOTES if n == len(VOTES) else ["so \\boxed{4}"] * n


@dataclass
class Clients:
    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic
    requests: list[GenerateRequest]


@asynccontextmanager
async def clients() -> AsyncIterator[Clients]:
    app, engine = build_app(votes, api_keys=(KEY,), aliases={"maj3": "majority(k=3)"})
    transport = httpx.ASGITransport(app=app)
    transport2 = httpx2.ASGITransport(app=app)  # the anthropic SDK's httpx
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as http,
        httpx2.AsyncClient(transport=transport2, base_url="http://ponder.test") as http2,
    ):
        yield Clients(
            openai.AsyncOpenAI(
                base_url="http://ponder.test/v1", api_key=KEY, http_client=http, max_retries=0
            ),
            anthropic.AsyncAnthropic(
                base_url="http://ponder.test", api_key=KEY, http_client=http2, max_retries=0
            ),
            engine.requests,
        )


async def answer(api: str, c: Clients, model: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The text answer and the whole body (as JSON) of one request to ``api``."""
    question = "What is 2+2?"
    if api == "chat":
        chat = await c.openai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], extra_body=fields
        )
        return {"text": chat.choices[0].message.content, "body": chat.model_dump()}
    if api == "responses":
        response = await c.openai.responses.create(model=model, input=question, extra_body=fields)
        return {"text": response.output_text, "body": response.model_dump()}
    message = await c.anthropic.messages.create(
        model=model,
        max_tokens=4096,
        messages=[{"role": "user", "content": question}],
        extra_body=fields,
    )
    texts = [block.text for block in message.content if block.type == "text"]
    return {"text": "".join(texts), "body": message.model_dump()}


def population_notes(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e["values"]
        for e in body.get("trace") or ()
        if e.get("type") == "step_note" and e.get("kind") == "population"
    ]


def never_sent(requests: list[GenerateRequest]) -> bool:
    return bool(requests) and all(
        not {"answer_format", "reference"} & set(r.params.extra) for r in requests
    )


APIS = ["chat", "responses", "messages"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({}, "so \\boxed{4}"),  # the model's default: boxed
        ({"answer_format": "boxed"}, "so \\boxed{4}"),
        ({"answer_format": "lenient"}, "The answer is 3"),
    ],
)
async def test_answer_format_decides_the_vote_on_every_api(
    api: str, fields: dict[str, str], text: str
) -> None:
    async with clients() as c:
        assert (await answer(api, c, "m+maj3", fields))["text"] == text
        assert never_sent(c.requests)


@pytest.mark.parametrize("api", APIS)
async def test_reference_scores_the_trace_on_every_api(api: str) -> None:
    fields: dict[str, Any] = {"scaffold": "rsa(n=2, k=2, rounds=1)", "return_trace": True}
    async with clients() as c:
        unscored = population_notes((await answer(api, c, "m", fields))["body"])
        scored = population_notes((await answer(api, c, "m", fields | {"reference": "4"}))["body"])
        assert never_sent(c.requests)
    assert [n["round"] for n in unscored] == [n["round"] for n in scored] == [0, 1]
    assert not any("accuracy" in n for n in unscored)
    assert [n["accuracy"] for n in scored] == [1.0, 1.0]


@pytest.mark.parametrize("api", APIS)
async def test_a_bad_answer_format_is_a_400_naming_it_on_every_api(api: str) -> None:
    async with clients() as c:
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as info:
            await answer(api, c, "m", {"answer_format": "strict"})
    error = info.value.body
    assert isinstance(error, dict)
    assert error.get("param", (error.get("error") or {}).get("param")) == "answer_format"


def test_ponders_fields_never_reach_an_engines_own_responses_api() -> None:
    """``single`` on ``/v1/responses`` goes to the engine's own Responses API: without
    Ponder's fields (before they were declared, answer_format and reference went on)."""
    with running_fake_engine(FakeEngineConfig(responses_api=True)) as fake:
        settings = Settings(model="fake-model", engines=(fake.base_url,), **STORE_IN_MEMORY)
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            fields = {"answer_format": "lenient", "reference": "4"}
            client.responses.create(model="fake-model", input="2+2?", extra_body=fields)
    sent = fake.state.requests[-1]
    assert sent.path == "/v1/responses" and sent.body["input"]
    assert not set(PONDER_FIELDS) & set(sent.body)
