"""Proxy overhead: direct to an engine vs through Ponder, a minimal floor, optillm and LiteLLM.

A zero-latency fake OpenAI engine on loopback answers every chat completion with a
short fixed reply. The same non-streaming request is sent, at concurrency 1, 16 and 64,
straight to the engine and through each proxy in pass-through mode: the floor (the least
a proxy on Ponder's stack can do: uvicorn, a bare ASGI callable, Ponder's client; see
:mod:`benchmarks.floor`, whose ``--floor-clients`` compare HTTP clients), Ponder
``single`` (also with ``--workers 2``) and ``gsr(n=4)`` (two engine calls, four
candidates), optillm approach ``none``, LiteLLM with one ``openai/<model>`` deployment.
Every server runs as its own subprocess; the load generator (raw asyncio HTTP/1.1) runs
here. Reported: requests/s, the added latency p50/p99 (the proxy's percentile minus the
direct one at the same concurrency) and **CPU milliseconds per request**: the proxy
process tree's user+system time over the timed requests divided by the requests
answered. CPU time is what survives a busy machine, so the ratios of the CPU columns are
the result to read; wall times move with the load average (printed).

``--baseline REV`` also runs Ponder from git revision ``REV`` (unpacked to a temporary
folder) beside the working tree's Ponder, for an A/B of a change in one run; several
revisions (``--baseline A,B,C``) measure a series of changes side by side. With
``--rounds N`` the Ponders are measured N times in turn (baselines, then the working
tree's, N times over), and each one's rounds are pooled (requests, CPU seconds and
latencies summed, req/s averaged), so that a load that drifts during the run is spread
over every side alike.

optillm and ``litellm[proxy]`` are installed, when missing, into their own venvs under
``.cache/bench-venvs/`` (never into Ponder's venv); a tool whose install or start fails
is reported unavailable and the rest are still measured.

    python -m benchmarks.proxy_overhead
    python -m benchmarks.proxy_overhead --tools floor,ponder --baseline main --concurrency 16
    python -m benchmarks.proxy_overhead --tools ponder --baseline b4cfe4a,85cce36 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import (
    ENGINE_CODE,
    MODEL,
    CpuMeter,
    Result,
    Target,
    default_floor_clients,
    drive,
    ensure_venv,
    floor_cmd,
    free_port,
    load_text,
    process,
    source_at,
    version,
    wait_ready,
    with_pylibs,
)

TOOLS = "floor,ponder,workers2,gsr,optillm,litellm"
GOAL_ADDED_P50_MS = 0.5
GOAL_X_DIRECT_C16 = 0.8
GOAL_CPU_MS = 0.7


def ponder_cmd(engine: Target, port: str, scaffold: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "clients.cli",
        "serve",
        "--engine",
        engine.url,
        "--model",
        MODEL,
        "--port",
        port,
        "--default-scaffold",
        scaffold,
        *extra,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--requests-c1", type=int, default=300, help="requests at c=1")
    parser.add_argument("--requests", type=int, default=1500, help="requests at c>1")
    parser.add_argument("--tools", default=TOOLS, help=f"what to measure ({TOOLS})")
    parser.add_argument("--baseline", help="also run Ponder from these git revisions (A,B)")
    parser.add_argument("--rounds", type=int, default=1, help="times to measure each Ponder")
    parser.add_argument(
        "--floor-clients",
        default=default_floor_clients(),
        help="the floor's HTTP clients, the first is 'floor' (httpx, httpcore, aiohttp)",
    )
    parser.add_argument("--ponder-args", default="", help="extra `ponder serve` flags")
    parser.add_argument("--start-timeout", type=float, default=240)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    tools = args.tools.split(",")
    extra = args.ponder_args.split()

    def count(c: int) -> int:
        return args.requests_c1 if c == 1 else args.requests

    bins: dict[str, Path | None] = {}
    if "optillm" in tools:
        # optillm requires torch: the local CPU wheel first, so no CUDA torch is pulled.
        bins["optillm"] = ensure_venv("optillm", "optillm", [["torch==2.13.0"], ["optillm"]])
    if "litellm" in tools:
        bins["litellm"] = ensure_venv("litellm", "litellm", [["litellm[proxy]"]])
    versions = {tool: version(b, tool) for tool, b in bins.items() if b}

    engine_port = free_port()
    engine = Target("direct", f"http://127.0.0.1:{engine_port}/v1")
    results: dict[str, dict[int, Result]] = {}
    unavailable: dict[str, str] = {tool: "install failed" for tool, b in bins.items() if b is None}
    print(f"start: {load_text()}", flush=True)

    def measure(target: Target, pid: int) -> None:
        pooled = results.setdefault(target.name, {})
        for c in levels:
            result = asyncio.run(drive(target, c, count(c), meter=CpuMeter(pid)))
            pooled[c] = pool(pooled[c], result) if c in pooled else result
            print(
                f"  {target.name:<18} c={c:<3} {result.rps:8.0f} req/s  "
                f"p50 {result.pct(0.5) * 1000:7.2f} ms  p99 {result.pct(0.99) * 1000:7.2f} ms  "
                f"cpu {result.cpu_ms or 0:6.3f} ms/req"
                + (f"  errors {result.errors}" if result.errors else ""),
                flush=True,
            )

    def proxied(
        target: Target, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        print(f"[{target.name}] starting: {' '.join(cmd[-12:])}", flush=True)
        try:
            with process(cmd, env, **({"cwd": cwd} if cwd else {})) as proc:
                started = time.monotonic()
                wait_ready(target, args.start_timeout, proc)
                print(f"[{target.name}] ready in {time.monotonic() - started:.1f} s", flush=True)
                measure(target, proc.pid)
        except RuntimeError as exc:
            print(f"[{target.name}] unavailable: {exc}")
            unavailable[target.name] = str(exc)[:200]

    def local(name: str) -> Target:
        return Target(name, f"http://127.0.0.1:{free_port()}/v1")

    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(engine_port), MODEL]
    with process(engine_cmd) as engine_proc:
        wait_ready(engine, 60, engine_proc)
        measure(engine, engine_proc.pid)
        if "floor" in tools:
            for i, client in enumerate(args.floor_clients.split(",")):
                floor = local("floor" if i == 0 else f"floor {client}")
                proxied(floor, *floor_cmd(floor, engine, client))
        for _ in range(args.rounds):
            for rev in args.baseline.split(",") if args.baseline else ():
                with source_at(rev) as src:
                    base = local(f"ponder@{rev}")
                    cmd = ponder_cmd(engine, base.port, "single", extra)
                    proxied(base, cmd, env=with_pylibs(str(src)), cwd=src)
            for tool, name, scaffold, more in (
                ("ponder", "ponder", "single", []),
                ("workers2", "ponder --workers 2", "single", ["--workers", "2"]),
                ("gsr", "ponder gsr(n=4)", "gsr(n=4)", []),
            ):
                if tool in tools:
                    target = local(name)
                    proxied(target, ponder_cmd(engine, target.port, scaffold, [*extra, *more]))
        if bins.get("optillm"):
            # The engine key comes from OPENAI_API_KEY; a client key without the "sk-"
            # prefix keeps optillm on its one shared client instead of a client per call.
            target = local("optillm")
            target.headers = {"Authorization": "x"}
            proxied(
                target,
                [
                    str(bins["optillm"] / "optillm"),
                    "--base-url",
                    engine.url,
                    "--approach",
                    "none",
                    "--port",
                    target.port,
                ],
                env={"OPENAI_API_KEY": "none", "OPTILLM_LOG_CONVERSATIONS": "false"},
            )
        if bins.get("litellm"):
            target = local("litellm")
            key = f"sk-{secrets.token_hex(24)}"  # LiteLLM refuses to start without one
            target.headers = {"Authorization": f"Bearer {key}"}
            with tempfile.TemporaryDirectory() as tmp:
                config = Path(tmp) / "cfg.yaml"
                config.write_text(
                    f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n"
                    f"      model: openai/{MODEL}\n      api_base: {engine.url}\n"
                    f"      api_key: none\ngeneral_settings:\n  master_key: {key}\n"
                )
                proxied(
                    target,
                    [
                        str(bins["litellm"] / "litellm"),
                        "--config",
                        str(config),
                        "--port",
                        target.port,
                        "--host",
                        "127.0.0.1",
                    ],
                    env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"},
                )
        # Direct again at the end: the spread between the two direct runs is the noise.
        measure(Target("direct (again)", engine.url), engine_proc.pid)
    print(f"end: {load_text()}")
    report(results, versions, unavailable)


def pool(a: Result, b: Result) -> Result:
    """Two measurements of one target as one: requests, CPU seconds and latencies summed,
    req/s averaged."""
    cpu = None if a.cpu_s is None or b.cpu_s is None else a.cpu_s + b.cpu_s
    return Result(
        (a.rps + b.rps) / 2, a.latencies + b.latencies, a.errors + b.errors, cpu, a.count + b.count
    )


def report(
    results: dict[str, dict[int, Result]], versions: dict[str, str], unavailable: dict[str, str]
) -> None:
    direct = results["direct"]
    print()
    print(f"versions: {versions or 'none installed'}")
    for tool, why in unavailable.items():
        print(f"unavailable: {tool}: {why}")
    print("| target | c | req/s | x direct | p50 | p99 | added p50 | added p99 | CPU / req |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, by_level in results.items():
        for c, r in by_level.items():
            d = direct[c]
            p50, p99 = r.pct(0.5) * 1000, r.pct(0.99) * 1000
            added = (
                "- | -"
                if name.startswith("direct")
                else f"{p50 - d.pct(0.5) * 1000:+.2f} ms | {p99 - d.pct(0.99) * 1000:+.2f} ms"
            )
            print(
                f"| {name} | {c} | {r.rps:,.0f} | {r.rps / d.rps:.2f} | {p50:.2f} ms "
                f"| {p99:.2f} ms | {added} | {r.cpu_ms or 0:.3f} ms |"
                + (f" ({r.errors} errors)" if r.errors else "")
            )
    cpu_table(results)
    goals(results)


def cpu_table(results: dict[str, dict[int, Result]]) -> None:
    """Ponder's CPU per request against the floor's, and LiteLLM's and optillm's against it."""
    print()
    print("CPU per request (the proxy's user+sys time / requests answered), side by side:")
    print("| Ponder | c | CPU / req | x floor | LiteLLM / Ponder | optillm / Ponder |")
    print("|---|---|---|---|---|---|")

    def ratio(other: str, c: int, mine: float, *, invert: bool) -> str:
        theirs = results.get(other, {}).get(c)
        if theirs is None or not theirs.cpu_ms or not mine:
            return "-"
        return f"{(theirs.cpu_ms / mine) if invert else (mine / theirs.cpu_ms):.2f}x"

    for name, by_level in results.items():
        if not name.startswith("ponder"):
            continue
        for c, r in by_level.items():
            mine = r.cpu_ms or 0.0
            print(
                f"| {name} | {c} | {mine:.3f} ms | {ratio('floor', c, mine, invert=False)} "
                f"| {ratio('litellm', c, mine, invert=True)} "
                f"| {ratio('optillm', c, mine, invert=True)} |"
            )


def goals(results: dict[str, dict[int, Result]]) -> None:
    """Issue 23's goals, for Ponder ``single``."""
    ponder, direct = results.get("ponder"), results["direct"]
    if not ponder:
        return
    print()
    with contextlib.suppress(KeyError):
        added = (ponder[1].pct(0.5) - direct[1].pct(0.5)) * 1000
        print(f"goal: added p50 at c=1 {added:+.2f} ms (goal <= {GOAL_ADDED_P50_MS} ms)")
    with contextlib.suppress(KeyError):
        ratio = ponder[16].rps / direct[16].rps
        print(f"goal: req/s at c=16 {ratio:.2f}x direct (goal >= {GOAL_X_DIRECT_C16}x)")
    cpus = [r.cpu_ms for r in ponder.values() if r.cpu_ms]
    if cpus:
        best = min(cpus)
        print(
            f"goal: CPU per request {best:.3f} ms at best = {1000 / best:,.0f} req/s per core "
            f"(goal <= {GOAL_CPU_MS} ms)"
        )


if __name__ == "__main__":
    main()
