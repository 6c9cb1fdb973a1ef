"""Streaming relay cost: tokens relayed per second, and per CPU-second of the proxy.

A zero-latency fake engine streams a reply of ``--words`` tokens (one SSE chunk each).
The same streamed chat completion is read straight from the engine, through the floor
(uvicorn + a bare ASGI relay of the engine's bytes, :mod:`benchmarks.floor`)
and through Ponder ``single``, with one stream at a time and with 64 at once. Reported:
tokens/s (wall, all streams together), the server's CPU seconds over the timed streams,
and tokens per CPU-second (one core relaying flat out); for the direct rows that is the
engine's own cost of producing them. ``--baseline REV`` adds Ponder from a git revision.

    python -m benchmarks.stream_relay
    python -m benchmarks.stream_relay --baseline main --streams 64
    python -m benchmarks.stream_relay --baseline main --repeat 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

from benchmarks.harness import (
    BODY,
    ENGINE_CODE,
    MODEL,
    CpuMeter,
    Result,
    Target,
    default_floor_clients,
    drive,
    floor_cmd,
    free_port,
    load_text,
    process,
    source_at,
    streamed_tokens,
    wait_ready,
    with_pylibs,
)
from benchmarks.proxy_overhead import ponder_cmd, pool


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--words", type=int, default=256, help="tokens per streamed reply")
    parser.add_argument("--streams", default="1,64", help="streams at once")
    parser.add_argument("--rounds", type=int, default=3, help="streams per connection (timed)")
    parser.add_argument("--tools", default="floor,ponder")
    parser.add_argument("--baseline", help="also run Ponder from this git revision")
    parser.add_argument("--ponder-args", default="--max-concurrent-runs 64")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every server this many times, in turn, and pool the rounds",
    )
    args = parser.parse_args()
    levels = [int(c) for c in args.streams.split(",")]
    tools = args.tools.split(",")
    extra = args.ponder_args.split()
    body = {**BODY, "max_tokens": args.words + 16, "stream": True}
    results: dict[str, dict[int, Result]] = {}
    print(f"start: {load_text()}", flush=True)

    def measure(target: Target, pid: int) -> None:
        for c in levels:
            streams = max(c * args.rounds, 20)
            run = drive(target, c, streams, body=body, score=streamed_tokens, meter=CpuMeter(pid))
            result = asyncio.run(run)
            rate, cost = tokens_per_s(result), per_cpu_s(result)
            print(
                f"  {target.name:<16} streams={c:<3} {rate:9,.0f} tokens/s  "
                f"{cost:9,.0f} tokens/CPU-s  errors {result.errors}",
                flush=True,
            )
            seen = results.setdefault(target.name, {})
            seen[c] = pool(seen[c], result) if c in seen else result

    def local(name: str) -> Target:
        return Target(name, f"http://127.0.0.1:{free_port()}/v1")

    # Every server runs from the start, and each round measures them all in turn, so a
    # load that drifts during the run is spread over all of them.
    with contextlib.ExitStack() as stack:
        engine = local("direct")
        cmd = [sys.executable, "-c", ENGINE_CODE, engine.port, MODEL, str(args.words)]
        targets = [(engine, started(stack, engine, cmd))]
        if "floor" in tools:
            floor = local("floor")
            cmd, env = floor_cmd(floor, engine, default_floor_clients().split(",")[0])
            targets.append((floor, started(stack, floor, cmd, env=env)))
        if args.baseline:
            src = stack.enter_context(source_at(args.baseline))
            base = local(f"ponder@{args.baseline}")
            cmd = ponder_cmd(engine, base.port, "single", extra)
            targets.append((base, started(stack, base, cmd, env=with_pylibs(str(src)), cwd=src)))
        if "ponder" in tools:
            ponder = local("ponder")
            cmd = ponder_cmd(engine, ponder.port, "single", extra)
            targets.append((ponder, started(stack, ponder, cmd)))
        for _ in range(args.repeat):
            for target, pid in targets:
                measure(target, pid)
    print(f"end: {load_text()}")
    print()
    print(f"{args.words} tokens per stream, one SSE chunk each; {args.repeat} round(s) pooled")
    print("| target | streams | tokens/s | x direct | server CPU-s | tokens / CPU-s | x floor |")
    print("|---|---|---|---|---|---|---|")
    for name, by_level in results.items():
        for c, r in by_level.items():
            direct = tokens_per_s(results["direct"][c])
            floor = results.get("floor", {}).get(c)
            vs_floor = f"{per_cpu_s(r) / per_cpu_s(floor):.2f}x" if floor else "-"
            print(
                f"| {name} | {c} | {tokens_per_s(r):,.0f} | {tokens_per_s(r) / direct:.2f} "
                f"| {r.cpu_s or 0:.2f} | {per_cpu_s(r):,.0f} | {vs_floor} |"
            )


def started(stack: contextlib.ExitStack, target: Target, cmd: list[str], **kw: Any) -> int:
    """Start ``target``'s server on ``stack`` and wait until it answers; its pid."""
    proc = stack.enter_context(process(cmd, **kw))
    begun = time.monotonic()
    wait_ready(target, 120, proc)
    print(f"[{target.name}] ready in {time.monotonic() - begun:.1f} s", flush=True)
    return proc.pid


def tokens_per_s(result: Result) -> float:
    return result.rps * result.count / max(1, len(result.latencies))


def per_cpu_s(result: Result) -> float:
    return result.count / result.cpu_s if result.cpu_s else 0.0


if __name__ == "__main__":
    main()
