"""Shared helpers for the server tests: apps over MockEngine and SSE parsing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from scaffolds.engines.mock import Handler, MockEngine
from scaffolds.engines.vllm_server import VLLMServer, free_port
from scaffolds.processes.children import popen_owned
from server.app.app import create_app
from server.settings import Settings

UNUSED = "http://engine.invalid/v1"
STORE_IN_MEMORY = {"responses_db": "sqlite+aiosqlite:///:memory:"}
"""Test apps keep stored responses (POST /v1/responses) in memory, not under PONDER_HOME."""
ROOT = Path(__file__).resolve().parents[2]


def tiny_vllm_settings(engine: VLLMServer, **more: Any) -> Settings:
    """Ponder over the tiny vLLM ``engine`` as the model ``tiny``: the alias ``gsr2``, 12
    tokens a call unless asked, one retry; ``more`` adds or overrides settings."""
    fields: dict[str, Any] = {
        "model": "tiny",
        "engines": (engine.base_url,),
        "engine_model": engine.model,
        "aliases": {"gsr2": "gsr(n=2)"},
        "default_max_tokens": 12,
        "engine_max_retries": 1,
    }
    return Settings(**(fields | more))


def store_in(folder: Path) -> dict[str, str]:
    """The settings that keep stored responses in ``folder``'s ``responses.db`` (a
    server in a process of its own, whose store a test reads across requests)."""
    return {"responses_db": f"sqlite+aiosqlite:///{folder / 'responses.db'}"}


def boxed(request: Any) -> str:
    return "I think it through and get \\boxed{4}"


def build_app(
    handler: Handler = boxed, *, delay: float = 0.0, **settings: Any
) -> tuple[FastAPI, MockEngine]:
    engine = MockEngine(handler, delay=delay)
    fields: dict[str, Any] = {"model": "m", "engines": (UNUSED,), **STORE_IN_MEMORY, **settings}
    app = create_app(Settings(**fields), engines={fields["model"]: engine})
    return app, engine


@pytest.fixture
def make_client() -> Callable[..., Any]:
    """``async with make_client(handler, **settings) as (client, engine): ...``"""

    class _Maker:
        def __init__(self, handler: Handler = boxed, **kw: Any):
            self.app, self.engine = build_app(handler, **kw)
            self.client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self.app), base_url="http://ponder.test"
            )

        async def __aenter__(self) -> tuple[httpx.AsyncClient, MockEngine]:
            return self.client, self.engine

        async def __aexit__(self, *exc: object) -> None:
            await self.client.aclose()

    return _Maker


def chat_body(content: str = "2+2?", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def parse_sse(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded except ``[DONE]``."""
    out: list[Any] = []
    for block in text.split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def collect(chunks: list[Any]) -> dict[int, dict[str, str]]:
    """Per choice: concatenated content, reasoning and the finish reason."""
    out: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        if chunk == "[DONE]" or "error" in chunk:
            continue
        for choice in chunk["choices"]:
            acc = out.setdefault(choice["index"], {"content": "", "reasoning": "", "finish": ""})
            delta = choice.get("delta", choice)
            acc["content"] += delta.get("content") or delta.get("text") or ""
            acc["reasoning"] += delta.get("reasoning_content") or ""
            if choice.get("finish_reason"):
                acc["finish"] = choice["finish_reason"]
    return out


async def aiter_text(response: httpx.Response) -> AsyncIterator[str]:
    async for text in response.aiter_text():
        yield text


def wait_until(predicate: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def start_ponder_serve(
    engine_url: str, api_key: str, *args: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A ``ponder serve`` process (owned: its own process group) in front of
    ``engine_url`` as ``fake-model``, once its ``/health`` answers; (process, root URL)."""
    port = free_port()
    proc = popen_owned(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--engine",
            engine_url,
            "--model",
            "fake-model",
            "--port",
            str(port),
            "--api-key",
            api_key,
            "--engine-max-retries",
            "0",
            *args,
        ],
        cwd=ROOT,
        env=None if env is None else dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    assert wait_until(up, within=300), "ponder serve did not start"
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return proc, url
