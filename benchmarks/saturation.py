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
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
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
                await self.call(question + "\n" + "\n".join(candidates), 1)
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
            row = Row(server, spec, concurrency, wall, depth_of(spec) * latency, ok, refused,
                      len(statuses) - ok - refused, calls, sequences)  # fmt: skip
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
    cmd = python_cmd("clients.cli", "serve", "--engine", engine.url, "--model", "m",
                     "--engine-model", MODEL, "--port", str(port))  # fmt: skip
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
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    specs = [s.strip() for s in args.scaffolds.split(";") if s.strip()]
    unknown = [s for s in specs if s not in SCAFFOLDS]
    if unknown:
        parser.error(f"unknown scaffolds {unknown}; known: {list(SCAFFOLDS)}")
    raise_open_file_limit()  # a thousand runs hold thousands of sockets
    print(f"{load_text()}; engine latency {args.latency:g} s per call", flush=True)
    print("server   scaffold                  runs    wall ideal  ratio  calls   seqs")
    port = free_port()
    engine = Target("engine", f"http://127.0.0.1:{port}/v1")
    cmd = [sys.executable, "-c", ENGINE_CODE, str(port), MODEL, str(args.latency)]
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
