"""Engine connection pools: one pool against several, through Ponder at high concurrency.

httpcore's connection pool walks every connection it holds on each request, so with one
pool the engine client's bookkeeping grows with the concurrency. ``OpenAIEngine`` spreads
its calls over ``--engine-pool-shards`` smaller pools (8 by default). This script runs the
sustained load of :mod:`benchmarks.load_test` (a zero-latency fake engine, raw asyncio
keep-alive clients, Ponder ``single`` in a subprocess) through Ponder with each pool count
in turn, alternating for ``--rounds`` rounds, and prints requests/s, added latency and the
ratio of each count to one pool.

    python -m benchmarks.pool_shards --shards 1 8 --rounds 2 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

from benchmarks.harness import Target, free_port, process, wait_ready
from benchmarks.load_test import BODY, ENGINE_CODE, MODEL, Run, sustain


def through_ponder(engine: Target, shards: int, concurrency: int, seconds: float) -> Run:
    port = free_port()
    ponder = Target(f"ponder x{shards}", f"http://127.0.0.1:{port}/v1")
    cmd = [
        sys.executable,
        "-m",
        "clients.cli",
        "serve",
        "--engine",
        engine.url,
        "--model",
        MODEL,
        "--port",
        str(port),
        "--max-concurrent-runs",
        str(concurrency),
        "--queue-size",
        "64",
        "--engine-pool-shards",
        str(shards),
        "--log-level",
        "warning",
    ]
    with process(cmd) as proc:
        wait_ready(ponder, 120, proc)
        return asyncio.run(sustain(ponder, concurrency, seconds, 3.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0, help="per run through Ponder")
    args = parser.parse_args()
    print(f"c={args.concurrency}, {args.seconds:.0f} s per run, request {BODY}", flush=True)
    engine_port = free_port()
    engine = Target("direct", f"http://127.0.0.1:{engine_port}/v1")
    runs: dict[int, list[Run]] = {s: [] for s in args.shards}
    with process([sys.executable, "-c", ENGINE_CODE, str(engine_port), MODEL]) as engine_proc:
        wait_ready(engine, 60, engine_proc)
        direct = asyncio.run(sustain(engine, args.concurrency, 10.0, 3.0))
        print(f"direct: {direct.rps:,.0f} req/s, p99 {direct.pct(0.99) * 1000:.1f} ms")
        for round_ in range(1, args.rounds + 1):
            for shards in args.shards:
                run = through_ponder(engine, shards, args.concurrency, args.seconds)
                runs[shards].append(run)
                print(
                    f"round {round_} pools {shards}: {run.rps:,.0f} req/s, errors {run.errors}, "
                    f"p99 {run.pct(0.99) * 1000:,.0f} ms",
                    flush=True,
                )
    base = statistics.median(r.rps for r in runs[args.shards[0]])
    print()
    print("| pools | req/s (median) | vs first | errors | added p50 | added p99 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for shards, done in runs.items():
        rps = statistics.median(r.rps for r in done)
        p50 = statistics.median(r.pct(0.5) for r in done) - direct.pct(0.5)
        p99 = statistics.median(r.pct(0.99) for r in done) - direct.pct(0.99)
        print(
            f"| {shards} | {rps:,.0f} | {rps / base:.2f}x | {sum(r.errors for r in done)} "
            f"| {p50 * 1000:+,.0f} ms | {p99 * 1000:+,.0f} ms |"
        )


if __name__ == "__main__":
    main()
