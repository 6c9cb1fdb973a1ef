"""A replica killed outright (SIGKILL) under load: no request lost, the breaker takes it out.

``tests/server/pool/test_replicas.py`` stops a replica politely (it answers 503 while it shuts
down); here the engine process dies mid-call, so Ponder sees connections reset with
half-done calls on them. Every request must still get its answer from the live replica,
the breaker must keep traffic off the dead one (one probe per cooldown at most), and the
replica must get traffic again once it is back.
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
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.reliability.conftest import chat, client, eventually, ponder_settings, serving_ponder

ROOT = Path(__file__).resolve().parents[2]
COOLDOWN_S = 1.0


@contextlib.contextmanager
def engine_process(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The fake engine in its own process (so that it can be killed), on ``port``.

    It starts in the background: :func:`wait_up` before relying on it.
    """
    cmd = [sys.executable, "-m", "testing.fake_engine", "--port", str(port)]
    with owned_process(
        [*cmd, "--latency-per-token", "0.02"],
        grace_s=0,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        yield proc


async def wait_up(proc: subprocess.Popen[bytes], port: int) -> None:
    async with httpx.AsyncClient(timeout=1) as c:

        async def up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200
            return False

        for _ in range(600):  # bounded: 60 s
            if proc.poll() is not None or await up():
                break
            await asyncio.sleep(0.1)
    assert proc.poll() is None and await up_once(port), "the fake engine did not start"


async def up_once(port: int) -> bool:
    async with httpx.AsyncClient(timeout=5) as c:
        return (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200


async def replica(url: str, name: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as c:
        ready = (await c.get(f"{url}/ready")).json()
    return next(r for r in ready["replicas"]["m"] if r["replica"] == name)


async def batch(url: str, count: int, tag: str) -> list[int]:
    async with client(url, timeout=120) as c:
        bodies = [chat(f"{tag} problem {i}?", scaffold="gsr(n=2)") for i in range(count)]
        responses = await asyncio.gather(*(c.post("/v1/chat/completions", json=b) for b in bodies))
    for r in responses:
        assert r.status_code != 200 or r.json()["choices"][0]["message"]["content"]
    return [r.status_code for r in responses]


async def test_a_replica_killed_under_load_loses_no_request() -> None:
    port = free_port()
    b_url = f"http://127.0.0.1:{port}/v1"
    with (
        engine_process(port) as b,  # starting while the rest starts
        running_fake_engine(FakeEngineConfig(latency_per_token=0.02)) as a,
    ):
        settings = ponder_settings(
            a,
            b_url,
            engine_max_retries=1,
            engine_breaker_threshold=2,
            engine_breaker_cooldown_s=COOLDOWN_S,
            max_concurrent_runs=64,
        )
        with serving_ponder(settings) as (url, _):
            await wait_up(b, port)
            load = asyncio.create_task(batch(url, 32, "first"))
            assert await eventually(lambda: a.state.open_calls >= 3, within=60)
            busy = 0  # wait until b has calls in flight too (however slow the machine)
            deadline = time.monotonic() + 60
            while not busy and time.monotonic() < deadline and not load.done():
                busy = (await replica(url, b_url))["outstanding"]
                await asyncio.sleep(0.02)
            b.send_signal(signal.SIGKILL)
            statuses = await load
            assert busy > 0, "the killed replica had no call in flight"
            assert statuses == [200] * 32, statuses

            # Its breaker is open; while it is down, at most one probe per cooldown.
            dead = await replica(url, b_url)
            assert dead["breaker"] == "open" and not dead["up"], dead
            assert await batch(url, 12, "second") == [200] * 12
            after = await replica(url, b_url)
            assert after["calls"] - dead["calls"] <= 1, (dead, after)

            with engine_process(port) as revived:  # back, on the same port
                await wait_up(revived, port)
                for attempt in range(60):  # bounded: a probe after each cooldown closes it
                    assert await batch(url, 4, f"third {attempt}") == [200] * 4
                    state = await replica(url, b_url)
                    if state["breaker"] == "closed" and state["calls"] > after["calls"]:
                        break
                    await asyncio.sleep(0.25)
                assert state["up"] and state["breaker"] == "closed", state
                calls = state["calls"]
                assert await batch(url, 8, "fourth") == [200] * 8
                assert (await replica(url, b_url))["calls"] > calls  # it carries load again
