"""Sustained load: concurrency 100 for 60 s through Ponder, against a zero-latency engine.

Starts the fake OpenAI engine and ``ponder serve`` as subprocesses on loopback, then
keeps ``--concurrency`` keep-alive connections busy for ``--seconds`` (first straight to
the engine, then through Ponder), and stops by itself. Reported per target: requests/s,
errors (any non-200, bad body or broken connection), latency p50/p95/p99, and for Ponder
the added latency (its percentile minus the direct one). Zero errors expected.

    python -m benchmarks.load_test                      # c=100, 60 s, scaffold single
    python -m benchmarks.load_test --seconds 10 --scaffold 'gsr(n=2)'

The load generator is raw asyncio HTTP/1.1 (see :mod:`benchmarks.proxy_overhead`, whose
helpers it reuses); everything runs on this machine, so its cores are shared by the
engine, Ponder and the load generator alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field

from benchmarks.harness import (
    BODY,
    MODEL,
    Target,
    free_port,
    process,
    read_response,
    request_bytes,
    wait_ready,
)

# The fake engine as in proxy_overhead, but answering the n samples a scaffold asks for.
ENGINE_CODE = """
import sys, uvicorn
from testing.fake_engine import FakeEngineConfig, FakeEngineState, create_app
reply = lambda body: ["The answer is \\\\boxed{42}."] * int(body.get("n") or 1)
config = FakeEngineConfig(model=sys.argv[2], respond=reply, cached_tokens=0)
app = create_app(config, FakeEngineState())
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning")
"""


@dataclass
class Run:
    """What one sustained run saw."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def fail(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


async def sustain(target: Target, concurrency: int, seconds: float, warmup: float) -> Run:
    """``concurrency`` connections send requests back to back for ``seconds``.

    A warm-up of ``warmup`` seconds runs first and is not counted.
    """
    host, port, request = request_bytes(target)
    run = Run()

    async def worker(until: float, record: bool) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.monotonic() < until:
                started = time.perf_counter()
                try:
                    writer.write(request)
                    await writer.drain()
                    status, body, keep = await asyncio.wait_for(read_response(reader), 60)
                except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                    if record:
                        run.fail(type(exc).__name__)
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                elapsed = time.perf_counter() - started
                if record:
                    if status != 200:
                        run.fail(f"HTTP {status}")
                    elif not _answered(body):
                        run.fail("bad body")
                    else:
                        run.latencies.append(elapsed)
                if not keep:
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
        finally:
            writer.close()

    if warmup > 0:
        until = time.monotonic() + warmup
        await asyncio.gather(*(worker(until, False) for _ in range(concurrency)))
    started = time.monotonic()
    until = started + seconds
    await asyncio.gather(*(worker(until, True) for _ in range(concurrency)))
    run.seconds = time.monotonic() - started
    return run


def _answered(body: bytes) -> bool:
    try:
        return bool(json.loads(body)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        return False


def describe(name: str, run: Run) -> str:
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(run.error_kinds.items())) or "none"
    return (
        f"{name:<8} {run.rps:8.1f} req/s  {len(run.latencies):7d} ok  errors {run.errors} "
        f"({kinds})  p50 {run.pct(0.5) * 1000:7.2f} ms  p95 {run.pct(0.95) * 1000:7.2f} ms  "
        f"p99 {run.pct(0.99) * 1000:7.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0, help="through Ponder")
    parser.add_argument("--direct-seconds", type=float, default=20.0, help="straight to the engine")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--scaffold", default="single", help="Ponder's default scaffold")
    parser.add_argument(
        "--ponder-args",
        default="--max-concurrent-runs 100 --queue-size 64",
        help="extra ponder serve flags (the defaults, 16 runs + 64 queued, refuse c=100)",
    )
    args = parser.parse_args()

    engine_port, ponder_port = free_port(), free_port()
    engine = Target("direct", f"http://127.0.0.1:{engine_port}/v1")
    ponder = Target("ponder", f"http://127.0.0.1:{ponder_port}/v1")
    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(engine_port), MODEL]
    ponder_cmd = [
        sys.executable,
        "-m",
        "clients.cli",
        "serve",
        "--engine",
        engine.url,
        "--model",
        MODEL,
        "--port",
        str(ponder_port),
        "--default-scaffold",
        args.scaffold,
        *args.ponder_args.split(),
    ]
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    print(
        f"load: c={args.concurrency}, {args.seconds:.0f} s through Ponder "
        f"({args.direct_seconds:.0f} s direct), request {json.dumps(BODY)}"
    )
    print(f"ponder: {' '.join(ponder_cmd[2:])}", flush=True)
    with process(engine_cmd) as engine_proc:
        wait_ready(engine, 60, engine_proc)
        direct = asyncio.run(sustain(engine, args.concurrency, args.direct_seconds, args.warmup))
        print(describe("direct", direct), flush=True)
        with process(ponder_cmd) as ponder_proc:
            wait_ready(ponder, 120, ponder_proc)
            through = asyncio.run(sustain(ponder, args.concurrency, args.seconds, args.warmup))
            if ponder_proc.poll() is not None:
                through.fail("ponder exited")
        print(describe("ponder", through), flush=True)
    print()
    print("| target | c | seconds | req/s | ok | errors | p50 | p95 | p99 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, run in (("direct", direct), ("Ponder", through)):
        cells = [f"{run.pct(q) * 1000:.1f} ms" for q in (0.5, 0.95, 0.99)]
        print(
            f"| {name} | {args.concurrency} | {run.seconds:.0f} | {run.rps:,.0f} "
            f"| {len(run.latencies):,} | {run.errors} | {' | '.join(cells)} |"
        )
    added = [f"{(through.pct(q) - direct.pct(q)) * 1000:+.1f} ms" for q in (0.5, 0.95, 0.99)]
    print(f"| added by Ponder | | | | | | {' | '.join(added)} |")
    sys.exit(1 if through.errors or direct.errors else 0)


if __name__ == "__main__":
    main()
