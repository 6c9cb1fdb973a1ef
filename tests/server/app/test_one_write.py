"""server/app/one_write.py: a response's head and body leave in one socket write, over a
real uvicorn on loopback and on a recording transport."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx
import openai
import pytest

from server.app import one_write
from server.app.app import ONE_WRITE
from server.app.one_write import GatheringTransport
from testing.threaded import serving_in_thread
from tests.server.conftest import build_app, chat_body


class Recorder:
    """The transport underneath: what reached it, and whether it closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_writes_of_one_turn_leave_together_at_the_next() -> None:
    under = Recorder()
    gathering = GatheringTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    gathering.write(b"HTTP/1.1 200 OK\r\n\r\n")
    gathering.write(memoryview(b"body"))
    assert under.writes == [] and gathering.get_write_buffer_size() == 23
    await asyncio.sleep(0)
    assert under.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    gathering.writelines([b"a", b"b"])
    await asyncio.sleep(0)
    gathering.write(b"c")
    await asyncio.sleep(0)
    assert under.writes[1:] == [b"ab", b"c"]
    assert gathering.get_extra_info("peername") == "info:peername"


async def test_close_flushes_first_and_abort_drops() -> None:
    under = Recorder()
    gathering = GatheringTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    gathering.write(b"last words")
    gathering.close()
    assert under.writes == [b"last words"] and under.closed
    gathering.write(b"too late")
    await asyncio.sleep(0)
    assert under.writes == [b"last words"]

    under = Recorder()
    gathering = GatheringTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    gathering.write(b"never sent")
    gathering.abort()
    await asyncio.sleep(0)
    assert under.writes == [] and under.aborted


def test_ponder_answers_in_one_write_per_response(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a real uvicorn with ``ponder serve``'s protocol: three answers on one
    keep-alive connection are three socket writes (uvicorn alone makes six), each made
    as its response completes, and a stream still arrives whole."""
    writes: list[int] = []
    callers: list[str] = []
    flush = GatheringTransport.flush

    def counting(self: GatheringTransport) -> None:
        if self._pending:
            writes.append(len(self._pending))
            callers.append(sys._getframe(1).f_code.co_name)
        flush(self)

    monkeypatch.setattr(one_write.GatheringTransport, "flush", counting)
    app, _ = build_app()
    with serving_in_thread(app, http=ONE_WRITE) as url, httpx.Client(base_url=url) as client:
        for _ in range(3):
            reply = client.post("/v1/chat/completions", json=chat_body())
            assert reply.status_code == 200 and reply.headers["x-request-id"]
            assert reply.json()["choices"][0]["message"]["content"].endswith("\\boxed{4}")
        assert writes == [2, 2, 2]  # head and body, gathered
        # each left as its response completed, not a loop turn later (a callback
        # behind every other request's step, under a burst)
        assert callers == ["on_response_complete"] * 3

        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        stream: Any = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2+2?"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text.endswith("\\boxed{4}")
