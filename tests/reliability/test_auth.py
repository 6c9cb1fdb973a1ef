"""Auth: every guarded route refuses a missing or wrong key; the caller's key goes nowhere.

The routes come from the app itself (its OpenAPI paths, plus any plain route), so a
route added later is covered without touching this file: every route but the few that
are open on purpose (:data:`OPEN`) must refuse, and every /v1 route must be among them.
The caller's key must never appear in a request to an engine (headers or body) nor in
any log line, at any level.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from server.telemetry.logs import JsonFormatter
from testing.fake_engine import Failure, FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.reliability.conftest import (
    ENGINE_KEY,
    KEY,
    MODEL,
    assert_openai_error,
    chat,
    client,
    ponder_settings,
    serving_ponder,
)
from tests.server.conftest import build_app

WRONG_KEYS = ["", "sk-nope", KEY + "x", KEY[:-1], KEY.upper(), f"{KEY} {KEY}"]
OPEN = {
    "/health",
    "/ready",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/version",
}
"""Routes open without a key, on purpose (probes, metrics scrapes, versions as vLLM's
``/version`` is, the API's own docs)."""


def guarded_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route but :data:`OPEN`: OpenAPI paths and plain routes."""
    found: set[tuple[str, str]] = set()
    for path, operations in app.openapi()["paths"].items():
        found |= {(method.upper(), path) for method in operations}
    for route in app.routes:
        path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or ()
        found |= {(m, path) for m in methods if m != "HEAD"}
    filled = {(m, re.sub(r"\{[^}]+\}", "some-id", p)) for m, p in found if p not in OPEN}
    return sorted(filled)


def test_every_v1_route_is_guarded() -> None:
    app, _ = build_app(api_keys=(KEY,))
    routes = guarded_routes(app)
    v1 = [(m, p) for m, p in routes if p.startswith("/v1/")]
    assert ("POST", "/v1/chat/completions") in v1 and ("GET", "/v1/models") in v1
    assert len(v1) >= 4


@pytest.mark.parametrize("key", [None, *WRONG_KEYS, "basic"])
async def test_every_v1_route_refuses_a_missing_or_wrong_key(key: str | None) -> None:
    app, engine = build_app(api_keys=(KEY,))
    if key is None:
        headers = {}
    elif key == "basic":
        headers = {"Authorization": f"Basic {KEY}"}
    else:
        headers = {"Authorization": f"Bearer {key}"}
    # Unknown paths under /v1 too: the guard is on the prefix, not on the route list.
    routes = [*guarded_routes(app), ("GET", "/v1/not-a-route"), ("POST", "/v1")]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as c:
        for method, path in routes:
            body = json.dumps(chat()).encode() if method == "POST" else None
            response = await c.request(method, path, headers=headers, content=body)
            error = assert_openai_error(response, 401)
            assert error["type"] == "authentication_error", (method, path)
            assert response.headers["www-authenticate"] == "Bearer"
            assert KEY not in response.text
            expected = "missing_api_key" if key is None else "invalid_api_key"
            assert error["code"] == expected, (method, path, error)
        ok = await c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200
    assert engine.requests == []  # nothing reached an engine


class Captured(logging.Handler):
    """Every record of every logger, formatted both as JSON and as plain text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.json = JsonFormatter()
        self.plain = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.json.format(record))
        self.lines.append(self.plain.format(record))
        self.lines.append(repr(record.__dict__))


@pytest.fixture
def every_log_line() -> Iterator[Captured]:
    names = ["", "ponder", "ponder.server", "ponder.access", "uvicorn", "uvicorn.error"]
    names += ["httpx", "httpcore", "scaffolds", "scaffolds.engines.openai_http", "fastapi"]
    handler = Captured()
    saved = {}
    for name in names:
        logger = logging.getLogger(name)
        saved[name] = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for name in names:
            logger = logging.getLogger(name)
            logger.removeHandler(handler)
            logger.setLevel(saved[name])


@pytest.mark.parametrize("engine_key", [ENGINE_KEY, None])
async def test_the_callers_key_never_reaches_an_engine_or_a_log_line(
    engine_key: str | None, every_log_line: Captured
) -> None:
    config = FakeEngineConfig(api_key=engine_key)
    with running_fake_engine(config) as fake:
        settings = ponder_settings(fake, engine_api_key=engine_key, log_level="debug")
        with serving_ponder(settings) as (url, _):
            await exercise_every_path(url, fake)
    assert len(fake.state.requests) >= 8
    for recorded in fake.state.requests:
        assert KEY not in json.dumps(recorded.body)
        assert all(KEY not in value for value in recorded.headers.values())
        expected = f"Bearer {engine_key}" if engine_key else None
        assert recorded.headers.get("authorization") == expected
    assert every_log_line.lines, "no log line was captured at all"
    leaked = [line for line in every_log_line.lines if KEY in line]
    assert not leaked, leaked[:3]


async def exercise_every_path(url: str, fake: FakeEngineHandle) -> None:
    """Successes, streams, both endpoints, refusals and engine failures: all that logs."""
    async with client(url) as c:
        ok = await c.post("/v1/chat/completions", json=chat(scaffold="gsr(n=2)", extra_field=1))
        assert ok.status_code == 200, ok.text
        streamed = await c.post("/v1/chat/completions", json=chat(stream=True))
        assert streamed.status_code == 200
        completion = await c.post("/v1/completions", json={"model": MODEL, "prompt": "2+2="})
        assert completion.status_code == 200
        assert (await c.get("/v1/models")).status_code == 200
        fake.config.fail_next(503, times=2, retry_after="0")  # retried, logged
        assert (await c.post("/v1/chat/completions", json=chat())).status_code == 200
        fake.config.fail_next(400, message="engine says no")
        assert (await c.post("/v1/chat/completions", json=chat())).status_code == 400
        fake.config.stream_error = Failure(500, message="mid-stream failure")
        await c.post("/v1/chat/completions", json=chat(stream=True))
        fake.config.stream_error = None
        bad = await c.post("/v1/chat/completions", json=chat(scaffold="gsr(n=-1)"))
        assert bad.status_code == 400
        for wrong in (KEY + "x", KEY[:-1]):
            refused = await c.get("/v1/models", headers={"Authorization": f"Bearer {wrong}"})
            assert refused.status_code == 401
        fake.config.failures = [Failure(503, retry_after="0")] * 10  # all retries fail: a 503
        failed: Any = await c.post("/v1/chat/completions", json=chat())
        assert failed.status_code == 503
        fake.config.failures.clear()
