"""Saturation: concurrent scaffold runs against an engine that answers every call in 1 s.

A fake OpenAI engine (its own process) answers each call after ``--latency`` seconds,
however many are in flight, as a GPU engine with room in its batch does. ``concurrency``
runs of a scaffold start at once; the wall time until the last answer is compared with
the ideal (the scaffold's depth in generations times the latency) and, side by side in
the same run, with:

* **Ponder** at its defaults (``ponder serve --engine --model``, nothing raised), called
  over raw asyncio HTTP, one connection per run;
* **the floor**: a plain asyncio client (aiohttp) making the same call graph straight to
  the engine: ``gsr(n=4)`` one call of 4 then one refine; ``majority(k=8)`` one call of 8;
  ``rsa(n=8, k=4, rounds=2)`` one call of 8, then two rounds of 8 calls of 1 at once;
* **optillm** 0.4 (its own venv, ``make optillm``) with its nearest approaches: ``moa``
  for ``gsr`` (3 samples in one call, a critique, a final answer: 3 deep) and its
  ``majority_voting`` plugin for ``majority`` (k=8 samples in one call: 1 deep); optillm
  has no aggregation loop like RSA's.

Each row also says the engine calls and sequences in flight at the peak, and the 429s or
other failures. ``make bench-saturation`` runs all of it; smaller runs:

    python -m benchmarks.saturation --concurrency 16,64 --scaffolds 'gsr(n=4)' --no-optillm

**Fair share** (``--fair-share``): Ponder with two client keys. Key B's ``single``
request is timed alone on the idle server, then again and again while key A floods
``--flood`` (1,000) ``gsr(n=4)`` runs at once; the report is B's time under the flood
over its idle time (issue 52 asks for at most 2x). Side by side, on the same engine and
with the same two client processes, **the floor** sends the same flood straight to the
engine (per run the two calls Ponder makes for ``gsr(n=4)``, through :class:`Floor`, from
A's own process) and B's single call straight to it too, idle and under the flood; the
report divides Ponder's ratios by the floor's, which is what Ponder in the path adds
(``--no-floor`` leaves it out). ``--max-concurrent-runs`` makes the flood queue in
Ponder's admission, ``--max-sequences`` at its sequence gate (both serve the keys in
turn); ``--ponder-root`` runs the server from another checkout (e.g. one with a single
FIFO queue), same client:

    python -m benchmarks.saturation --fair-share --max-concurrent-runs 64
    python -m benchmarks.saturation --fair-share --max-sequences 256
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import (
    MODEL,
    Target,
    free_port,
    load_text,
    process,
    python_cmd,
    read_response,
    request_bytes,
)
from server.app.limits import raise_open_file_limit

ENGINE_CODE = """
import sys, uvicorn
from fastapi.responses import JSONResponse
from testing.fake_engine import FakeEngineConfig, FakeEngineState, create_app
reply = lambda body: ["\\\\boxed{42}"] * int(body.get("n") or 1)  # one token
config = FakeEngineConfig(model=sys.argv[2], respond=reply, cached_tokens=0,
                          latency_per_token=float(sys.argv[3]))
state = FakeEngineState()
app = create_app(config, state)
@app.get("/calls")
async def calls():
    return JSONResponse({"calls": state.calls})  # counted as each call arrives
@app.post("/peak")
async def peak():
    out = {"calls": state.max_open_calls, "sequences": state.max_open_sequences}
    state.max_open_calls, state.max_open_sequences = state.open_calls, state.open_sequences
    return JSONResponse(out)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False,
            log_level="warning", backlog=16384)
"""

SCAFFOLDS = {  # spec: (depth in generations, optillm's nearest approach, its depth)
    "gsr(n=4)": (2, "moa", 3),
    "majority(k=8)": (1, "majority_voting", 1),
    "rsa(n=8, k=4, rounds=2)": (3, None, 0),
}
QUESTION = "What is 6*7?"
REFINE_CHARS = 571
"""The size of the refine prompt Ponder sends the engine for ``gsr(n=4)`` over this
question and four ``\\boxed{42}`` candidates; the floor pads its refine call's prompt to
it (tests/benchmarks/test_saturation.py checks that the two send the same calls)."""


@dataclass
class Row:
    server: str
    scaffold: str
    concurrency: int
    wall: float
    ideal: float
    ok: int
    refused: int  # 429
    failed: int
    peak_calls: int
    peak_sequences: int


# -- the engine's peak ----------------------------------------------------------------


def take_peak(engine: Target) -> tuple[int, int]:
    """The engine's calls and sequences in flight at the peak since the last read."""
    data = httpx.post(engine.url.removesuffix("/v1") + "/peak", timeout=30).json()
    return int(data["calls"]), int(data["sequences"])


# -- clients ------------------------------------------------------------------------


async def one_request(target: Target, body: dict[str, Any]) -> int:
    """One request on its own connection; its status (0 when the connection failed)."""
    host, port, request = request_bytes(target, body)
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return 0
    try:
        writer.write(request)
        await writer.drain()
        status, data, _ = await read_response(reader)
        if status == 200 and not json.loads(data)["choices"][0]["message"]["content"]:
            return 0
        return status
    except (OSError, asyncio.IncompleteReadError, ValueError, KeyError, IndexError):
        return 0
    finally:
        writer.close()


async def burst(run: Callable[[int], Awaitable[int]], concurrency: int) -> tuple[float, list[int]]:
    """``concurrency`` runs at once; (wall seconds to the last one, their statuses)."""
    started = time.perf_counter()
    statuses = await asyncio.gather(*(run(i) for i in range(concurrency)))
    return time.perf_counter() - started, list(statuses)


class Floor:
    """The same call graphs straight to the engine, on one aiohttp session."""

    def __init__(self, engine: Target) -> None:
        import aiohttp

        self.url = engine.url + "/chat/completions"
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def call(self, content: str, n: int) -> list[str]:
        """One engine call; a broken connection is retried (up to 3 times), as Ponder's
        engine client and any SDK do (a kept-alive socket the engine closed between
        bursts, a reset under a thousand connections)."""
        import aiohttp

        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "n": n}
        for attempt in range(4):
            try:
                async with self.session.post(self.url, json=body) as response:
                    data = await response.json(content_type=None)
                    if response.status != 200:
                        raise RuntimeError(f"engine answered {response.status}")
                return [c["message"]["content"] for c in data["choices"]]
            except aiohttp.ClientConnectionError:
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    async def run(self, spec: str, tag: int) -> int:
        question = f"{QUESTION} ({tag})"
        try:
            if spec.startswith("gsr"):
                candidates = await self.call(question, 4)
                refine = question + "\n" + "\n".join(candidates) + "\n"
                filler = " candidate" * (REFINE_CHARS // 10)
                await self.call((refine + filler)[:REFINE_CHARS], 1)
            elif spec.startswith("majority"):
                answers = await self.call(question, 8)
                max(set(answers), key=answers.count)
            else:
                population = await self.call(question, 8)
                for _ in range(2):
                    members = [population[(i + j) % 8] for i in range(8) for j in range(4)]
                    groups = [members[4 * i : 4 * i + 4] for i in range(8)]
                    calls = [self.call(question + "\n" + "\n".join(g), 1) for g in groups]
                    population = [texts[0] for texts in await asyncio.gather(*calls)]
        except Exception:
            return 0
        return 200

    async def close(self) -> None:
        await self.session.close()


# -- one server at several concurrencies ------------------------------------------------

Runner = Callable[[str, int], Awaitable[int]]


async def measure(
    server: str,
    runner: Runner,
    engine: Target,
    specs: list[str],
    levels: list[int],
    latency: float,
    depth_of: Callable[[str], int],
) -> list[Row]:
    """Each scaffold at each concurrency through ``runner`` (one warm-up burst first)."""
    rows = []
    for spec in specs:
        await asyncio.gather(*(runner(spec, -i - 1) for i in range(4)))  # warm-up
        for concurrency in levels:
            take_peak(engine)
            wall, statuses = await burst(functools.partial(runner, spec), concurrency)
            calls, sequences = take_peak(engine)
            ok, refused = statuses.count(200), statuses.count(429)
            row = Row(
                server,
                spec,
                concurrency,
                wall,
                depth_of(spec) * latency,
                ok,
                refused,
                len(statuses) - ok - refused,
                calls,
                sequences,
            )
            rows.append(row)
            print(describe(row), flush=True)
    return rows


async def floor_rows(
    engine: Target, specs: list[str], levels: list[int], latency: float
) -> list[Row]:
    floor = Floor(engine)
    try:
        return await measure("floor", floor.run, engine, specs, levels, latency, depth)
    finally:
        await floor.close()


async def ponder_rows(
    engine: Target, specs: list[str], levels: list[int], latency: float
) -> list[Row]:
    port = free_port()
    target = Target("ponder", f"http://127.0.0.1:{port}/v1")
    cmd = python_cmd(
        "clients.cli",
        "serve",
        "--engine",
        engine.url,
        "--model",
        "m",
        "--engine-model",
        MODEL,
        "--port",
        str(port),
    )
    with process(cmd) as proc:
        wait_http(f"http://127.0.0.1:{port}/ready", proc, 300)

        async def runner(spec: str, tag: int) -> int:
            return await one_request(target, {**chat_body("m", tag), "scaffold": spec})

        return await measure("ponder", runner, engine, specs, levels, latency, depth)


async def optillm_rows(
    engine: Target, binary: Path, specs: list[str], levels: list[int], latency: float
) -> list[Row]:
    port = free_port()
    target = Target("optillm", f"http://127.0.0.1:{port}/v1")
    cmd = [str(binary), "--base-url", engine.url, "--port", str(port)]
    env = {"OPENAI_API_KEY": "none", "OPTILLM_LOG_CONVERSATIONS": "false"}
    ours = [s for s in specs if SCAFFOLDS[s][1]]
    with process(cmd, env) as proc:
        wait_http(f"http://127.0.0.1:{port}/health", proc, 300)

        async def runner(spec: str, tag: int) -> int:
            return await one_request(target, chat_body(f"{SCAFFOLDS[spec][1]}-{MODEL}", tag))

        return await measure(
            "optillm", runner, engine, ours, levels, latency, lambda s: SCAFFOLDS[s][2]
        )


# -- fair share: one key's flood, another key's single request --------------------------

KEYED_SERVER_CODE = """
import sys, uvicorn
from server.app.app import ONE_WRITE, create_app
from server.app.collector import tune_collector
from server.keys import ANONYMOUS, ClientKey
from server.settings import Settings
port, engine, model, running = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
sequences = int(sys.argv[5]) if sys.argv[5:] else None
keys = {b"Bearer sk-a": ClientKey("a", "team-a"), b"Bearer sk-b": ClientKey("b", "team-b")}
app = create_app(Settings(model="m", engines=(engine,), engine_model=model,
                          max_concurrent_runs=running, max_sequences=sequences))
async def keyed(scope, receive, send):  # as auth does from a keys file
    if scope["type"] == "http":
        key = keys.get(dict(scope["headers"]).get(b"authorization"), ANONYMOUS)
        scope = {**scope, "state": {**scope.get("state", {}), "client_key": key}}
    await app(scope, receive, send)
tune_collector()  # as ponder serve runs: its protocol, its collector
uvicorn.run(keyed, host="127.0.0.1", port=port, access_log=False, log_level="warning",
            backlog=16384, timeout_keep_alive=60, http=ONE_WRITE)
"""
"""Ponder with two client keys, ``sk-a`` and ``sk-b`` (a stand-in for a keys file: it
sets the request's key as the auth middleware does), served as ``ponder serve`` serves
(:func:`server.app.app.serve`: its one-write HTTP protocol, and the collector tuned)."""


@dataclass
class FairShare:
    server: str  # "ponder", or "floor": the same two clients straight to the engine
    max_running: int | None  # Ponder's bounds (None on the floor)
    max_sequences: int | None  # the gate's bound where set (else the default)
    flood: int
    idle: float  # B's single alone (median of 5)
    under_flood: list[float]  # B's single, one after another while A's flood runs
    flood_wall: float
    flood_ok: int
    flood_other: int

    def over_idle(self) -> tuple[float, float]:
        """B's median and worst time under the flood over its idle time (NaN without any).

        >>> FairShare("floor", None, None, 2, 2.0, [3.0, 2.0, 5.0], 4.0, 2, 0).over_idle()
        (1.5, 2.5)
        """
        probes = sorted(self.under_flood)
        if not probes:
            return math.nan, math.nan
        return probes[len(probes) // 2] / self.idle, probes[-1] / self.idle


async def timed(target: Target, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    status = await one_request(target, body)
    if status != 200:
        raise RuntimeError(f"key B's request answered {status}")
    return time.perf_counter() - started


async def flood_client(url: str, runs: int) -> list[int]:
    """Key A's flood (its own process, so that its thousand connections do not slow key
    B's client): ``runs`` gsr(n=4) requests at once; their statuses."""
    a = Target("a", url, headers={"Authorization": "Bearer sk-a"})
    body = {**chat_body("m", 0), "scaffold": "gsr(n=4)"}
    return list(
        await asyncio.gather(*(one_request(a, {**body, **chat_body("m", i)}) for i in range(runs)))
    )


async def floor_flood_client(url: str, runs: int) -> list[int]:
    """Key A's flood on the floor (its own process too): ``runs`` gsr(n=4) call graphs at
    once straight to the engine at ``url``, the calls Ponder makes for each (one of 4,
    then the refine), on one aiohttp session as Ponder's engine client; their statuses."""
    floor = Floor(Target("engine", url))
    try:
        return list(await asyncio.gather(*(floor.run("gsr(n=4)", i) for i in range(runs))))
    finally:
        await floor.close()


async def idle_time(b: Target, single: dict[str, Any], warm_up: dict[str, Any]) -> float:
    """Key B's ``single`` alone: the median of 5, after two ``warm_up`` requests."""
    for _ in range(2):
        await timed(b, warm_up)
    return sorted([await timed(b, single) for _ in range(5)])[2]


async def flood_and_probe(
    b: Target, single: dict[str, Any], flood: list[str], flood_in: Callable[[], Awaitable[None]]
) -> tuple[list[float], float, list[int]]:
    """Key A's flood from a process of its own (``flood``: its ``--flood-client``
    arguments); once ``flood_in`` returns, B's ``single`` one after another until the flood
    is done (at least one). (B's times, the flood's wall time, A's statuses.)"""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "statuses.json"
        cmd = python_cmd("benchmarks.saturation", *flood, "--flood-out", str(out))
        started = time.perf_counter()
        with process(cmd) as proc:
            await flood_in()
            probes = [await timed(b, single)]
            while proc.poll() is None:
                probes.append(await timed(b, single))
            wall = time.perf_counter() - started
            if proc.returncode != 0:
                raise RuntimeError(f"key A's flood client exited with {proc.returncode}")
            statuses: list[int] = json.loads(await asyncio.to_thread(out.read_text))
    return probes, wall, statuses


async def fair_share_row(
    url: str, flood: int, max_running: int, max_sequences: int | None
) -> FairShare:
    b = Target("b", url, headers={"Authorization": "Bearer sk-b"})
    single = {**chat_body("m", -1), "scaffold": "single"}
    idle = await idle_time(b, single, {**single, "scaffold": "gsr(n=4)"})
    args = ["--flood-client", url, "--flood", str(flood)]
    # A's runs are all in: running, and queued past the slots
    probes, wall, statuses = await flood_and_probe(b, single, args, lambda: all_in(url, flood))
    ok = statuses.count(200)
    other = flood - ok
    return FairShare("ponder", max_running, max_sequences, flood, idle, probes, wall, ok, other)


async def floor_fair_share_row(engine: Target, flood: int) -> FairShare:
    """The floor's row: A's flood and B's single (the engine call Ponder makes for it,
    from the same client) straight to the engine."""
    b = Target("b", engine.url)
    single = {**chat_body(MODEL, -1), "n": 1}
    idle = await idle_time(b, single, {**single, "n": 4})
    before = await engine_calls(engine)
    args = ["--flood-client", engine.url, "--flood", str(flood), "--flood-floor"]
    # A's runs are all in: each one's first call has reached the engine
    probes, wall, statuses = await flood_and_probe(
        b, single, args, lambda: all_arrived(engine, before + flood)
    )
    ok = statuses.count(200)
    return FairShare("floor", None, None, flood, idle, probes, wall, ok, flood - ok)


async def all_in(url: str, runs: int, within: float = 60.0) -> None:
    """Wait until the server holds ``runs`` runs (executing or queued), per /metrics."""
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(timeout=30) as client:
        while time.monotonic() < deadline:
            text = (await client.get(url.removesuffix("/v1") + "/metrics")).text
            held = sum(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith(("ponder_runs_in_flight ", "ponder_runs_queued "))
            )
            if held >= runs:
                return
            await asyncio.sleep(0.05)


async def engine_calls(engine: Target) -> int:
    """The calls the fake engine has received so far."""
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await client.get(engine.url.removesuffix("/v1") + "/calls")
    return int(reply.json()["calls"])


async def all_arrived(engine: Target, calls: int, within: float = 60.0) -> None:
    """Wait until the fake engine has received ``calls`` calls in all."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await engine_calls(engine) >= calls:
            return
        await asyncio.sleep(0.05)


def fair_share(
    engine: Target, flood: int, max_running: int, root: Path, max_sequences: int | None = None
) -> FairShare:
    port = free_port()
    cmd = [sys.executable, "-c", KEYED_SERVER_CODE, str(port), engine.url, MODEL, str(max_running)]
    if max_sequences is not None:
        cmd.append(str(max_sequences))
    env = {"PYTHONPATH": str(root)}
    with process(cmd, env, cwd=root) as proc:
        wait_http(f"http://127.0.0.1:{port}/ready", proc, 300)
        url = f"http://127.0.0.1:{port}/v1"
        return asyncio.run(fair_share_row(url, flood, max_running, max_sequences))


def describe_fair(row: FairShare) -> str:
    probes = sorted(row.under_flood)
    median = probes[len(probes) // 2] if probes else math.nan
    worst = probes[-1] if probes else math.nan
    over_median, over_worst = row.over_idle()
    running = "" if row.max_running is None else str(row.max_running)
    gate = "" if row.server == "floor" else row.max_sequences or "default"
    return (
        f"| {row.server} | {running} | {gate} | {row.flood} x `gsr(n=4)` | {row.idle:.2f} s "
        f"| {len(probes)} | {median:.2f} s ({over_median:.2f}x) "
        f"| {worst:.2f} s ({over_worst:.2f}x) "
        f"| {row.flood_wall:.1f} s | {row.flood_ok} / {row.flood_other} |"
    )


FAIR_HEADER = (
    "| server | runs at once | sequences at once | key A's flood | key B's `single` idle "
    "| B's requests under the flood | B median | B worst | flood wall | A's 200 / other |\n"
    "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
)


def versus_floor(ponder: FairShare, floor: FairShare) -> str:
    """B's median and worst over its idle time, Ponder's and the floor's, and Ponder's
    over the floor's: what Ponder in the path adds to B's time under A's flood.

    >>> ponder = FairShare("ponder", 1024, None, 9, 1.0, [1.2, 1.8, 2.4], 6.0, 9, 0)
    >>> floor = FairShare("floor", None, None, 9, 1.0, [1.0, 1.2, 1.6], 5.0, 9, 0)
    >>> print(versus_floor(ponder, floor).splitlines()[-1])
    | Ponder / floor | 1.50 | 1.50 |
    """
    ponder_median, ponder_worst = ponder.over_idle()
    floor_median, floor_worst = floor.over_idle()
    return "\n".join(
        [
            "| B under the flood / B idle | median | worst |",
            "|---|---:|---:|",
            f"| Ponder | {ponder_median:.2f}x | {ponder_worst:.2f}x |",
            f"| floor | {floor_median:.2f}x | {floor_worst:.2f}x |",
            f"| Ponder / floor | {ponder_median / floor_median:.2f} "
            f"| {ponder_worst / floor_worst:.2f} |",
        ]
    )


def depth(spec: str) -> int:
    return SCAFFOLDS[spec][0]


def chat_body(model: str, tag: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": f"{QUESTION} ({tag})"}]}


def wait_http(url: str, proc: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer 200 within {timeout:.0f} s")


# -- report ---------------------------------------------------------------------------


def describe(row: Row) -> str:
    failures = f"{row.refused} x 429, {row.failed} failed" if row.refused or row.failed else ""
    return (
        f"{row.server:<8} {row.scaffold:<24} {row.concurrency:>5} {row.wall:>7.2f}s "
        f"{row.ideal:>5.1f}s {row.wall / row.ideal:>6.2f}x {row.peak_calls:>6} "
        f"{row.peak_sequences:>6}  {failures}"
    )


def table(rows: list[Row]) -> str:
    floors = {(r.scaffold, r.concurrency): r.wall for r in rows if r.server == "floor"}
    lines = [
        "| server | scaffold | runs at once | wall | ideal | wall / ideal | wall / floor "
        "| engine calls at peak | sequences at peak | 429 / failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        floor = floors.get((r.scaffold, r.concurrency))
        versus = f"{r.wall / floor:.2f}" if floor and r.server == "ponder" else ""
        name = (
            r.scaffold if r.server != "optillm" else f"{SCAFFOLDS[r.scaffold][1]} (~{r.scaffold})"
        )
        lines.append(
            f"| {r.server} | `{name}` | {r.concurrency} | {r.wall:.2f} s | {r.ideal:.0f} s "
            f"| {r.wall / r.ideal:.2f} | {versus} | {r.peak_calls} | {r.peak_sequences} "
            f"| {r.refused} / {r.failed} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", default="16,64,256,1024", help="comma-separated")
    parser.add_argument("--scaffolds", default=";".join(SCAFFOLDS), help="';'-separated")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per engine call")
    parser.add_argument("--optillm", type=Path, default=Path(".venv-optillm/bin/optillm"))
    parser.add_argument("--no-optillm", action="store_true")
    parser.add_argument("--fair-share", action="store_true", help="two keys: A floods, B asks")
    parser.add_argument("--flood", type=int, default=1000, help="key A's runs (fair share)")
    parser.add_argument(
        "--no-floor", action="store_true", help="fair share: leave out the floor's row"
    )
    parser.add_argument(
        "--max-concurrent-runs", type=int, default=1024, help="Ponder's (fair share)"
    )
    parser.add_argument(
        "--max-sequences", type=int, default=None, help="Ponder's sequence gate (fair share)"
    )
    parser.add_argument(
        "--ponder-root",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the checkout the fair-share server runs from",
    )
    parser.add_argument("--flood-client", help=argparse.SUPPRESS)  # key A's flood, its URL
    parser.add_argument("--flood-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--flood-floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_client:
        raise_open_file_limit()
        flood = floor_flood_client if args.flood_floor else flood_client
        statuses = asyncio.run(flood(args.flood_client, args.flood))
        args.flood_out.write_text(json.dumps(statuses))
        return
    levels = [int(c) for c in args.concurrency.split(",")]
    specs = [s.strip() for s in args.scaffolds.split(";") if s.strip()]
    unknown = [s for s in specs if s not in SCAFFOLDS]
    if unknown:
        parser.error(f"unknown scaffolds {unknown}; known: {list(SCAFFOLDS)}")
    raise_open_file_limit()  # a thousand runs hold thousands of sockets
    print(f"{load_text()}; engine latency {args.latency:g} s per call", flush=True)
    port = free_port()
    engine = Target("engine", f"http://127.0.0.1:{port}/v1")
    cmd = [sys.executable, "-c", ENGINE_CODE, str(port), MODEL, str(args.latency)]
    if args.fair_share:
        with process(cmd) as proc:
            wait_http(f"http://127.0.0.1:{port}/health", proc, 120)
            row = fair_share(
                engine, args.flood, args.max_concurrent_runs, args.ponder_root, args.max_sequences
            )
            floor = None if args.no_floor else asyncio.run(floor_fair_share_row(engine, args.flood))
        print(f"fair share, server from {args.ponder_root}")
        print(FAIR_HEADER)
        print(describe_fair(row))
        if floor is not None:
            print(describe_fair(floor))
            print()
            print(versus_floor(row, floor))
        return
    print("server   scaffold                  runs    wall ideal  ratio  calls   seqs")
    with process(cmd) as proc:
        wait_http(f"http://127.0.0.1:{port}/health", proc, 120)
        rows = asyncio.run(floor_rows(engine, specs, levels, args.latency))
        rows += asyncio.run(ponder_rows(engine, specs, levels, args.latency))
        if not args.no_optillm:
            if args.optillm.exists():
                found = optillm_rows(engine, args.optillm, specs, levels, args.latency)
                rows += asyncio.run(found)
            else:
                print(f"[optillm] {args.optillm} missing: run `make optillm` (skipped)")
    order = {"ponder": 0, "floor": 1, "optillm": 2}
    rows.sort(key=lambda r: (specs.index(r.scaffold), r.concurrency, order[r.server]))
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
