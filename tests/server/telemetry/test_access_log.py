"""The access log: every request by default up to a rate, errors always, samples counted."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.server.conftest import chat_body


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ponder.access"]


async def test_successes_past_the_rate_are_sampled_errors_never(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ponder.access")
    async with make_client(access_log_rate=0.001) as (client, _):
        for _ in range(10):
            assert (await client.post("/v1/chat/completions", json=chat_body())).status_code == 200
        bad = await client.post("/v1/chat/completions", json=chat_body(model="nope"))
        assert bad.status_code == 404
        ok = await client.post("/v1/chat/completions", json=chat_body())
        assert ok.status_code == 200
    lines = access_lines(caplog)
    # The bucket starts with less than one token: no success is written, the 404 is.
    assert [r.status for r in lines] == [404]
    assert lines[0].sampled == 1


async def test_rate_zero_writes_every_line(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ponder.access")
    async with make_client(access_log_rate=0) as (client, _):
        for _ in range(5):
            await client.post("/v1/chat/completions", json=chat_body())
    lines = access_lines(caplog)
    assert len(lines) == 5 and {r.sampled for r in lines} == {1}
    assert all(r.status == 200 for r in lines)


async def test_sampled_lines_account_for_every_request(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ponder.access")
    async with make_client(access_log_rate=1) as (client, _):
        for _ in range(6):
            await client.post("/v1/chat/completions", json=chat_body())
        await asyncio.sleep(1.1)  # a token again: the next line is written
        await client.post("/v1/chat/completions", json=chat_body())
    lines = access_lines(caplog)
    assert len(lines) >= 2
    assert sum(r.sampled for r in lines) == 7


async def test_lines_carry_the_keys_name_never_the_key(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The access line names the request's key (``key-2``: the second bare key); each JSON
    line written while the request runs carries it as ``key``."""
    import json

    from server.telemetry.logs import JsonFormatter, key_name_var, request_id_var

    caplog.set_level(logging.INFO, logger="ponder.access")
    async with make_client(access_log_rate=0, api_keys=("sk-a", "sk-b")) as (client, _):
        headers = {"Authorization": "Bearer sk-b"}
        ok = await client.post("/v1/chat/completions", json=chat_body(), headers=headers)
        assert ok.status_code == 200
        refused = await client.post("/v1/chat/completions", json=chat_body())
        assert refused.status_code == 401
    lines = access_lines(caplog)
    assert [(r.status, r.key) for r in lines] == [(200, "key-2"), (401, "anonymous")]
    formatted = [JsonFormatter().format(r) for r in lines]
    assert json.loads(formatted[0])["key"] == "key-2"
    assert not any("sk-b" in line for line in formatted)
    rid, name = request_id_var.set("r1"), key_name_var.set("alice")
    try:
        record = logging.LogRecord("ponder", logging.INFO, "f.py", 1, "a step", (), None)
        assert json.loads(JsonFormatter().format(record))["key"] == "alice"
    finally:
        request_id_var.reset(rid)
        key_name_var.reset(name)
