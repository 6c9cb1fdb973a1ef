"""Supervised: a child server that dies is restarted on its port; meanwhile a stand-in
answers 503 with the reason; nothing is left running after the block."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from scaffolds.engines.vllm_server import free_port, serving_process
from server.pool.supervised import Backoff, Supervised, stand_in
from tests.server.conftest import wait_until

HEALTHY = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _status(port: int) -> tuple[int, Any] | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    except httpx.HTTPError:
        return None
    body = response.json() if response.status_code != 200 else None
    return response.status_code, body


def test_a_dead_child_is_restarted_on_its_port_and_a_stand_in_says_why(tmp_path: Path) -> None:
    port = free_port()
    started: list[Any] = []

    @contextlib.contextmanager
    def start(abort: threading.Event) -> Iterator[Any]:
        command = [sys.executable, "-c", HEALTHY, str(port)]
        log = tmp_path / f"child-{len(started)}.log"
        with serving_process(command, port=port, log_path=log, abort=abort) as process:
            started.append(process)
            yield process

    said: list[str] = []
    backoff = Backoff(first_s=3.0, most_s=3.0)
    with Supervised(start, port=port, name="m", say=said.append, backoff=backoff, poll_s=0.2) as s:
        first = started[0]
        assert _status(port) == (200, None)
        first.send_signal(signal.SIGKILL)
        assert wait_until(lambda: (_status(port) or (0,))[0] == 503, within=60)
        _, body = _status(port) or (0, None)
        message = body["error"]["message"]
        assert "the embedded engine serving 'm' exited with code -9" in message
        assert body["error"]["type"] == "engine_unavailable"
        assert wait_until(lambda: s.restarts == 1, within=120)
        assert (
            _status(port) == (200, None) and len(started) == 2 and s.reason == "exited with code -9"
        )
        second = started[1]
    assert any("restarting it in 3 s (attempt 1)" in line for line in said)
    assert any("was restarted" in line for line in said)
    assert second.poll() is not None
    assert not _group_alive(first.pid) and not _group_alive(second.pid)
    assert _status(port) is None


def test_a_child_that_will_not_restart_is_tried_again_with_a_longer_wait() -> None:
    port = free_port()
    tries: list[int] = []

    @contextlib.contextmanager
    def start(abort: threading.Event) -> Iterator[Any]:
        tries.append(1)
        if len(tries) > 1:
            raise RuntimeError("it would not start")

        class Gone:
            def poll(self) -> int:
                return 1

        yield Gone()

    said: list[str] = []
    backoff = Backoff(first_s=0.1, most_s=0.4)
    with Supervised(start, port=port, name="m", say=said.append, backoff=backoff, poll_s=0.05):
        assert wait_until(lambda: len(tries) >= 4, within=60)
    waits = [line.split(" in ")[1] for line in said if "restarting it in" in line]
    assert waits[:3] == ["0 s (attempt 1)", "0 s (attempt 2)", "0 s (attempt 3)"]
    assert "did not restart (it would not start)" in said[1]
    assert [Backoff(1, 5).delay(k) for k in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_the_stand_in_answers_503_in_the_openai_shape() -> None:
    port = free_port()
    with stand_in(port, "down for a moment"):
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "down for a moment"
    assert _status(port) is None
