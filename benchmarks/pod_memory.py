"""Ponder's resident memory idle and with ``N`` concurrent ``gsr(n=4)`` requests in flight,
to size a pod's memory (deploy/README.md, "Capacity on paper").

``ponder serve`` at its defaults in front of :mod:`benchmarks.saturation`'s fake engine
(each call answered after ``--latency`` seconds, so the runs stay in flight); a warm-up
burst of 64, then one burst of each ``--concurrency`` level (one connection per request,
all at once; past ``--max-concurrent-runs`` (1,024) the rest wait in Ponder's queue).
Resident memory is psutil's RSS of the server's process tree, sampled every 0.1 s.

    python -m benchmarks.pod_memory --concurrency 1024,4096 --latency 5
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

import psutil

from benchmarks.harness import MODEL, Target, free_port, load_text, process
from benchmarks.saturation import ENGINE_CODE, burst, chat_body, one_request, wait_http


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its children."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


def measure(target: Target, pid: int, concurrency: int, scaffold: str) -> str:
    """One burst of ``concurrency`` requests; the line that reports it."""

    async def run(tag: int) -> int:
        return await one_request(target, {**chat_body("m", tag), "scaffold": scaffold})

    idle = tree_rss(pid)
    peak = [idle]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wall, statuses = asyncio.run(burst(run, concurrency))
    finally:
        stop.set()
        sampler.join()
    mib = 2**20
    return (
        f"{concurrency} requests: wall {wall:.2f} s, ok {statuses.count(200)}, RSS idle "
        f"{idle / mib:.0f} MiB, peak {peak[0] / mib:.0f} MiB, "
        f"{(peak[0] - idle) / concurrency / 1024:.0f} KiB per request ({load_text()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1024,4096", help="comma-separated levels")
    parser.add_argument("--latency", type=float, default=5.0, help="seconds per engine call")
    parser.add_argument("--scaffold", default="gsr(n=4)")
    args = parser.parse_args()

    port = free_port()
    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(port), MODEL, str(args.latency)]
    with process(engine_cmd) as engine_proc:
        wait_http(f"http://127.0.0.1:{port}/health", engine_proc, 300)
        ponder_port = free_port()
        serve = [
            *(sys.executable, "-m", "clients.cli", "serve"),
            *("--engine", f"http://127.0.0.1:{port}/v1", "--model", "m"),
            *("--engine-model", MODEL, "--port", str(ponder_port)),
        ]
        with process(serve, {}) as server:
            wait_http(f"http://127.0.0.1:{ponder_port}/ready", server, 300)
            target = Target("ponder", f"http://127.0.0.1:{ponder_port}/v1")
            measure(target, server.pid, 64, args.scaffold)  # warm-up
            for level in (int(c) for c in args.concurrency.split(",")):
                print(measure(target, server.pid, level, args.scaffold), flush=True)


if __name__ == "__main__":
    main()
