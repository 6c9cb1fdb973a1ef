"""Where ``ponder serve`` spends its CPU on pass-through requests: a cProfile on the CPU clock.

The fake engine (as in :mod:`benchmarks.proxy_overhead`) and ``ponder serve`` run as
subprocesses; the server runs under :class:`cProfile.Profile` timed by
``time.process_time``, so a function's time is CPU the process spent in it (a wall-clock
profile on a busy machine counts the time the process waited to be scheduled, which
shows up as socket writes). After a warm-up the profile is switched on (SIGUSR1), the load
generator drives ``--requests`` at ``--concurrency``, then the server is stopped, its
profile written to ``--out``, and the functions with the most own time printed.
Profiling makes every call slower (about 3x here), so read the shares, not the
milliseconds.

    python -m benchmarks.profile_serve --scaffold single --concurrency 16 --requests 4000
    python -m benchmarks.profile_serve --stream 256 --concurrency 16 --requests 200
"""

from __future__ import annotations

import argparse
import asyncio
import pstats
import signal
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    BODY,
    ENGINE_CODE,
    MODEL,
    CpuMeter,
    Target,
    drive,
    free_port,
    load_text,
    process,
    streamed_tokens,
    wait_ready,
)
from benchmarks.proxy_overhead import ponder_cmd

# ponder serve with a CPU-clock profile, on from SIGUSR1 and written when SIGTERM stops it
# (uvicorn re-raises the signal after its graceful shutdown: the handler makes it SystemExit).
PROFILED = """
import cProfile, runpy, signal, sys, time
out, sys.argv = sys.argv[1], ["ponder", *sys.argv[2:]]
profile = cProfile.Profile(time.process_time)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
try:
    runpy.run_module("clients.cli", run_name="__main__")
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(out)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scaffold", default="single")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("runs/profile_serve.prof"))
    parser.add_argument("--top", type=int, default=40, help="functions to print")
    parser.add_argument(
        "--stream",
        type=int,
        default=0,
        metavar="TOKENS",
        help="stream the replies, each this many tokens (one SSE chunk each)",
    )
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    engine_port = free_port()
    engine = Target("direct", f"http://127.0.0.1:{engine_port}/v1")
    print(f"start: {load_text()}", flush=True)
    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(engine_port), MODEL]
    load: dict[str, Any] = {}
    if args.stream:
        engine_cmd.append(str(args.stream))
        body = {**BODY, "max_tokens": args.stream + 16, "stream": True}
        load = {"body": body, "score": streamed_tokens}
    with process(engine_cmd) as engine_proc:
        wait_ready(engine, 60, engine_proc)
        target = Target("ponder", f"http://127.0.0.1:{free_port()}/v1")
        serve = ponder_cmd(engine, target.port, args.scaffold, [])[3:]  # after "-m clients.cli"
        with process([sys.executable, "-c", PROFILED, str(args.out.resolve()), *serve]) as proc:
            wait_ready(target, 120, proc)
            asyncio.run(drive(target, args.concurrency, 500, **load))  # imports, caches, pools
            proc.send_signal(signal.SIGUSR1)
            result = asyncio.run(
                drive(target, args.concurrency, args.requests, meter=CpuMeter(proc.pid), **load)
            )
    print(f"end: {load_text()}")
    print(
        f"{args.scaffold} at c={args.concurrency}: {result.rps:,.0f} req/s, "
        f"{result.cpu_ms or 0:.3f} ms CPU per {'token' if args.stream else 'request'} "
        f"(profiled), {result.errors} errors"
    )
    pstats.Stats(str(args.out)).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
