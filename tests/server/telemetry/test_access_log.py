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
