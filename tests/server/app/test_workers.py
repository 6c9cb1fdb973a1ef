"""``ponder serve --workers 2``: two real processes on one loopback port.

Each worker has its own run slots (``--max-concurrent-runs 1 --queue-size 0``), so with
the engine holding every call, two requests in flight at once can only be one in each
worker (a third on either gets 429). ``/metrics`` from one worker then shows both runs,
SIGTERM to the parent drains both workers (the held requests still get their answers),
and every process is gone afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, multiprocess

from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import owned_process
from testing.fake_engine import FakeEngineConfig, fake_engine
from tests.server.conftest import wait_until

ROOT = Path(__file__).resolve().parents[3]
MODEL = "fake-model"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4}


def children(pid: int) -> set[int]:
    """Live child pids of ``pid``, from /proc."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return False


async def post(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120) as client:  # a new connection each time
        return await client.post(f"{url}/v1/chat/completions", json=BODY)


def metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def counted(folder: Path) -> dict[str, float]:
    """ponder_requests_total by status, summed over every worker's files."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(folder))  # type: ignore[no-untyped-call]
    totals: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "ponder_requests_total":
                status = sample.labels["status"]
                totals[status] = totals.get(status, 0.0) + sample.value
    return totals


async def test_two_workers_sum_their_metrics_and_drain_on_sigterm(tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    async with fake_engine(FakeEngineConfig(model=MODEL, hold=True)) as fake:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--engine",
            fake.base_url,
            "--model",
            MODEL,
            "--port",
            str(port),
            "--workers",
            "2",
            "--max-concurrent-runs",
            "1",
            "--queue-size",
            "0",
            "--engine-max-retries",
            "0",
            "--engine-health-interval",
            "0",
            "--graceful-timeout",
            "60",
        ]
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
        with (
            (tmp_path / "serve.log").open("w") as log,
            owned_process(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT) as proc,
        ):
            async with httpx.AsyncClient(timeout=5) as probe:
                for _ in range(1200):  # bounded: about 120 s on a busy machine
                    assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get(f"{url}/health")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
            held: list[asyncio.Task[httpx.Response]] = []
            refused = 0
            for _ in range(1200):  # new connections until each worker holds one run (the
                # second worker may still be starting: bounded, about 120 s)
                task = asyncio.create_task(post(url))
                opened = fake.state.open_calls
                while not task.done() and fake.state.open_calls == opened:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
                if task.done():
                    assert (await task).status_code == 429  # that worker's one slot is taken
                    refused += 1
                    await asyncio.sleep(0.1)
                else:
                    held.append(task)
                if len(held) == 2:
                    break
            assert len(held) == 2, f"only {len(held)} worker(s) took a run"

            async with httpx.AsyncClient(timeout=30) as c:
                text = (await c.get(f"{url}/metrics")).text
            assert metric(text, "ponder_runs_in_flight") == 2  # one run in each worker
            workers = children(proc.pid)
            assert len([pid for pid in workers if alive(pid)]) >= 2

            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)  # the drain has begun: the held runs are still going
            assert not any(task.done() for task in held)
            fake.config.hold = False
            for task in held:
                answer = await asyncio.wait_for(task, 60)
                assert answer.status_code == 200
                assert answer.json()["choices"][0]["message"]["content"]
            assert await asyncio.to_thread(proc.wait, 60) == 0
            # A worker the master no longer waits for may take a moment more to exit.
            gone = await asyncio.to_thread(
                wait_until, lambda: not any(alive(pid) for pid in workers), 30
            )
            assert gone, [pid for pid in workers if alive(pid)]

    assert counted(folder) == ({"200": 2.0, "429": float(refused)} if refused else {"200": 2.0})
