"""Dialects are classes in a registry: a new one is one class, selectable from settings."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from scaffolds.engines.dialects import (
    Dialect,
    OpenAIDialect,
    SGLangDialect,
    VLLMDialect,
    dialect_names,
    get_dialect,
)
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest
from server.pool.metered import model_engine
from server.settings import Settings, setting_errors

URL = "http://engine:8000/v1"


class CachePromptDialect(OpenAIDialect, name="cache_prompt_test"):
    """A made-up server: OpenAI's API plus a ``cache_prompt`` field and a ``/ping`` route."""

    def request_fields(self, *, chat: bool, logprobs: bool) -> dict[str, Any]:
        return super().request_fields(chat=chat, logprobs=logprobs) | {"cache_prompt": True}

    def health_route(self) -> tuple[bool, str]:
        return (True, "/ping")


def test_the_shipped_dialects_are_registered() -> None:
    assert {"vllm", "sglang", "openai"} <= set(dialect_names())
    assert isinstance(get_dialect("vllm"), VLLMDialect)
    assert isinstance(get_dialect("sglang"), SGLangDialect)
    assert get_dialect(get_dialect("openai")).name == "openai"
    with pytest.raises(ValueError, match=r"unknown dialect 'tgi'.*vllm"):
        get_dialect("tgi")


def test_a_class_without_a_name_is_not_a_dialect() -> None:
    class Helper(Dialect):
        pass

    assert "" not in dialect_names() and Helper.name == ""


def test_a_new_dialect_is_selectable_from_settings() -> None:
    assert "cache_prompt_test" in dialect_names()
    settings = Settings(model="m", engines=(URL,), dialect="cache_prompt_test")
    engine = model_engine(settings.served_models()[0], settings)
    assert isinstance(engine, OpenAIEngine) and isinstance(engine.dialect, CachePromptDialect)


async def test_a_new_dialect_shapes_requests_and_routes() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/ping":
            return httpx.Response(200)
        message = {"role": "assistant", "content": "4"}
        body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    engine = OpenAIEngine(URL, "m", client=client, dialect="cache_prompt_test", max_retries=0)
    result = await engine.generate(GenerateRequest(chat("2+2?")))
    assert result.completions[0].text == "4"
    [call] = [r for r in seen if r.url.path.endswith("/chat/completions")]
    assert json.loads(call.content)["cache_prompt"] is True
    assert await engine.health() and seen[-1].url.path == "/ping"
    await client.aclose()


def test_settings_refuse_an_unknown_dialect_naming_the_field_and_the_known() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(model="m", engines=(URL,), dialect="tgi")
    message = setting_errors(info.value)
    assert message.startswith("dialect: unknown dialect 'tgi'")
    assert all(name in message for name in ("openai", "sglang", "vllm"))
