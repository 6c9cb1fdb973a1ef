"""Ponder's own CPU per run in bursts of concurrent runs against the 1 s fake engine, for
the working tree and (``--baseline REV``) a git revision, side by side in turns.

The engine is :mod:`benchmarks.saturation`'s (each call answered after ``--latency``
seconds, however many are in flight). Each Ponder (``ponder serve`` at its defaults) gets
a warm-up burst, then ``--bursts`` bursts of ``--concurrency`` runs of ``--scaffold``
(one connection per run, all at once). Per burst: the wall time; Ponder's CPU per run
(user+system seconds of its process tree; this barely moves with the machine's load,
where the wall time does); the engine's CPU per run; and Ponder's garbage collector: the
seconds its collections took (wall clock, from ``gc.callbacks``) and how many ran in each
generation. ``--rounds N`` measures the Ponders N times in turn (baselines first).

    python -m benchmarks.burst_cpu --baseline main --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import (
    MODEL,
    ROOT,
    CpuMeter,
    Target,
    free_port,
    load_text,
    process,
    source_at,
    with_pylibs,
)
from benchmarks.saturation import ENGINE_CODE, burst, chat_body, one_request, wait_http
from server.app.limits import raise_open_file_limit

# ponder serve, its collections timed; SIGUSR2 appends the totals since the last one to
# argv[1] as a JSON line.
GC_TIMED = """
import gc, json, runpy, signal, sys, time
out, sys.argv = sys.argv[1], ["ponder", *sys.argv[2:]]
totals = {"seconds": 0.0, "counts": [0, 0, 0]}
started = [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        totals["seconds"] += time.perf_counter() - started[0]
        totals["counts"][info["generation"]] += 1
def report(*_):
    with open(out, "a") as f:
        f.write(json.dumps(totals) + "\\n")
    totals.update(seconds=0.0, counts=[0, 0, 0])
gc.callbacks.append(timed)
signal.signal(signal.SIGUSR2, report)
runpy.run_module("clients.cli", run_name="__main__")
"""


@dataclass
class Burst:
    ponder: str
    wall: float
    ok: int
    cpu_ms: float  # Ponder's CPU per run
    engine_ms: float  # the engine's CPU per run
    gc_s: float
    gc_counts: list[int]
    load: str


@contextlib.contextmanager
def ponder(engine: Target, src: Path | None, stats: Path) -> Iterator[tuple[Target, int]]:
    """``ponder serve`` at its defaults from ``src`` (None: this tree), collections timed."""
    port = free_port()
    cmd = [
        sys.executable,
        "-c",
        GC_TIMED,
        str(stats),
        "serve",
        "--engine",
        engine.url,
        "--model",
        "m",
        "--engine-model",
        MODEL,
        "--port",
        str(port),
    ]
    env = with_pylibs(str(src)) if src is not None else {}
    with process(cmd, env, cwd=src or ROOT) as proc:
        wait_http(f"http://127.0.0.1:{port}/ready", proc, 300)
        yield Target("ponder", f"http://127.0.0.1:{port}/v1"), proc.pid


async def bursts(
    name: str, target: Target, pid: int, engine_pid: int, stats: Path, args: argparse.Namespace
) -> list[Burst]:
    async def run(tag: int) -> int:
        return await one_request(target, {**chat_body("m", tag), "scaffold": args.scaffold})

    meter, engine_meter = CpuMeter(pid), CpuMeter(engine_pid)
    await burst(run, args.concurrency)  # warm-up: connections, caches, imports
    out = []
    for _ in range(args.bursts):
        signal_and_wait(pid)
        cpu, engine_cpu = meter.seconds(), engine_meter.seconds()
        wall, statuses = await burst(run, args.concurrency)
        cpu, engine_cpu = meter.seconds() - cpu, engine_meter.seconds() - engine_cpu
        signal_and_wait(pid)
        gc = json.loads(last_line(stats))
        row = Burst(
            name,
            wall,
            statuses.count(200),
            1000 * cpu / args.concurrency,
            1000 * engine_cpu / args.concurrency,
            gc["seconds"],
            gc["counts"],
            load_text(),
        )
        print(describe(row), flush=True)
        out.append(row)
    return out


def signal_and_wait(pid: int) -> None:
    """Have the server write its collector's totals (and start new ones)."""
    os.kill(pid, signal.SIGUSR2)
    time.sleep(0.3)


def last_line(path: Path) -> str:
    with path.open() as f:
        return f.readlines()[-1]


def describe(b: Burst) -> str:
    return (
        f"{b.ponder:<22} wall {b.wall:5.2f} s  ok {b.ok}  ponder {b.cpu_ms:5.2f} ms/run  "
        f"engine {b.engine_ms:5.2f} ms/run  gc {b.gc_s:5.3f} s {b.gc_counts}  ({b.load})"
    )


def table(rows: list[Burst], names: list[str]) -> str:
    """Medians per Ponder, and each one's CPU per run against the first's."""
    lines = [
        "| ponder | bursts | wall (median) | Ponder CPU per run (min-median-max) | vs first "
        "| engine CPU per run | GC seconds per burst | collections per burst (gen 0/1/2) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    first = statistics.median(r.cpu_ms for r in rows if r.ponder == names[0])
    for name in names:
        mine = [r for r in rows if r.ponder == name]
        cpu = sorted(r.cpu_ms for r in mine)
        counts = "/".join(str(statistics.median(r.gc_counts[g] for r in mine)) for g in range(3))
        lines.append(
            f"| {name} | {len(mine)} | {statistics.median(r.wall for r in mine):.2f} s "
            f"| {cpu[0]:.2f}-{statistics.median(cpu):.2f}-{cpu[-1]:.2f} ms "
            f"| {statistics.median(cpu) / first:.2f}x "
            f"| {statistics.median(r.engine_ms for r in mine):.2f} ms "
            f"| {statistics.median(r.gc_s for r in mine):.3f} s | {counts} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scaffold", default="gsr(n=4)")
    parser.add_argument("--concurrency", type=int, default=1024, help="runs per burst")
    parser.add_argument("--bursts", type=int, default=4, help="measured bursts per Ponder")
    parser.add_argument("--rounds", type=int, default=1, help="times to measure each Ponder")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per engine call")
    parser.add_argument("--baseline", help="also run Ponder from these git revisions (A,B)")
    args = parser.parse_args()
    raise_open_file_limit()  # a thousand runs hold thousands of sockets
    print(f"start: {load_text()}", flush=True)
    revs = args.baseline.split(",") if args.baseline else []
    names = [*(f"ponder@{rev}" for rev in revs), "ponder (this tree)"]
    rows: list[Burst] = []
    port = free_port()
    engine = Target("engine", f"http://127.0.0.1:{port}/v1")
    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(port), MODEL, str(args.latency)]
    with process(engine_cmd) as engine_proc, tempfile.TemporaryDirectory() as tmp:
        wait_http(f"http://127.0.0.1:{port}/health", engine_proc, 120)
        for _ in range(args.rounds):
            for name, rev in zip(names, [*revs, None], strict=True):
                stats = Path(tmp) / f"gc-{len(rows)}.jsonl"
                with contextlib.ExitStack() as stack:
                    src = stack.enter_context(source_at(rev)) if rev is not None else None
                    target, pid = stack.enter_context(ponder(engine, src, stats))
                    found = bursts(name, target, pid, engine_proc.pid, stats, args)
                    rows += asyncio.run(found)
    print(f"end: {load_text()}\n")
    print(table(rows, names))


if __name__ == "__main__":
    main()
