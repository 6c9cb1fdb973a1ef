"""Graceful shutdown under load: SIGTERM to a real ``ponder serve`` process.

Every request already in (running or queued) finishes with its answer within the grace
period; requests that come after are refused cleanly (connection refused, or an OpenAI
error), never left hanging or cut mid-answer; the process then exits by itself.
(``tests/server/test_cli.py`` covers the two-request case and the grace period running
out.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import owned_process
from testing.fake_engine import FakeEngineHandle
from tests.reliability.conftest import KEY, MODEL, assert_answered, auth, chat

ROOT = Path(__file__).resolve().parents[2]
RUNNING, QUEUED = 6, 6
GRACE_S = 20


@contextlib.contextmanager
def ponder_process(
    fake: FakeEngineHandle, *args: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "clients.cli",
        "serve",
        "--engine",
        fake.base_url,
        "--model",
        MODEL,
        "--engine-model",
        "fake-model",
        "--port",
        str(port),
        "--api-key",
        KEY,
        "--engine-max-retries",
        "0",
        *args,
    ]
    with owned_process(
        cmd, grace_s=0, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        yield proc, f"http://127.0.0.1:{port}"


async def wait_serving(proc: subprocess.Popen[str], url: str) -> None:
    async with httpx.AsyncClient(timeout=2) as c:
        for _ in range(600):  # bounded: 60 s
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
            with contextlib.suppress(httpx.HTTPError):
                if (await c.get(f"{url}/health")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("ponder serve did not start")


async def wait_queued(c: httpx.AsyncClient, count: int) -> None:
    """Return once Ponder's /metrics shows ``count`` requests waiting for a run slot."""
    for _ in range(600):  # bounded: 60 s
        if f"ponder_runs_queued {count}.0" in (await c.get("/metrics")).text:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{count} requests never queued")


async def one_request(url: str, i: int) -> tuple[bool, httpx.Response]:
    stream = i % 2 == 1
    async with httpx.AsyncClient(base_url=url, headers=auth(), timeout=60) as c:
        body = chat(f"in flight {i}", scaffold="gsr(n=2)", stream=stream)
        return stream, await c.post("/v1/chat/completions", json=body)


async def late_request(url: str, c: httpx.AsyncClient | None = None) -> Any:
    """A request sent during the drain (on a new connection, or ``c``'s kept-alive one)."""
    try:
        if c is not None:
            return await c.post("/v1/chat/completions", json=chat("too late"))
        async with httpx.AsyncClient(base_url=url, headers=auth(), timeout=10) as fresh:
            return await fresh.post("/v1/chat/completions", json=chat("too late"))
    except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
        return exc  # refused before any answer: clean, a client may retry elsewhere


async def test_sigterm_under_load_finishes_in_flight_and_refuses_new(
    fake: FakeEngineHandle,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await sigterm_under_load(fake, stack)


async def sigterm_under_load(fake: FakeEngineHandle, stack: contextlib.AsyncExitStack) -> None:
    # Calls are held until the late requests are in, so those come mid-drain and the queued
    # ones are in before the signal, however slow the machine; then ~0.7 s per call.
    fake.config.latency_per_token = 0.05
    fake.config.hold = True
    limits = ["--max-concurrent-runs", str(RUNNING), "--queue-size", str(QUEUED)]
    with ponder_process(fake, "--graceful-timeout", str(GRACE_S), *limits) as (proc, url):
        await wait_serving(proc, url)
        kept_alive = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers=auth(), timeout=10)
        )
        assert (await kept_alive.get("/v1/models")).status_code == 200  # an idle connection
        in_flight = [asyncio.create_task(one_request(url, i)) for i in range(RUNNING + QUEUED)]
        assert await fake.wait_for(lambda s: s.open_calls == RUNNING, within=30)
        await wait_queued(kept_alive, QUEUED)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        await asyncio.sleep(0.3)  # uvicorn looks at its exit flag every 0.1 s
        late = [await late_request(url) for _ in range(3)]
        late.append(await late_request(url, kept_alive))
        draining = not all(t.done() for t in in_flight)  # the late ones came mid-drain
        fake.config.hold = False
        results = await asyncio.gather(*in_flight)
        code = await asyncio.to_thread(proc.wait, GRACE_S + 10)
        took = time.monotonic() - signalled
        stderr = proc.stderr.read() if proc.stderr else ""
    assert code in (0, -signal.SIGTERM), (code, stderr[-2000:])
    assert took < GRACE_S, f"took {took:.1f} s to drain"
    assert draining
    for stream, response in results:
        assert_answered(response, stream)
    assert fake.state.cancelled == 0 and fake.state.completed == 2 * (RUNNING + QUEUED)
    for outcome in late:
        if isinstance(outcome, httpx.Response):  # answered: then completely and cleanly
            assert outcome.status_code in (200, 429, 503), outcome.text
            if outcome.status_code != 200:
                assert outcome.json()["error"]["message"]
    assert KEY not in stderr
