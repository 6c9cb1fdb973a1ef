"""Proxy overhead: direct to an engine vs through Ponder, optillm and the LiteLLM proxy.

A zero-latency fake OpenAI engine on loopback answers every chat completion with a
short fixed reply. The same non-streaming request is sent, at concurrency 1, 16 and 64,
straight to the engine and through each proxy in pass-through mode (Ponder ``single``,
optillm approach ``none``, LiteLLM with one ``openai/<model>`` deployment). Every server
runs as its own subprocess; the load generator (raw asyncio HTTP/1.1) runs here. Reported:
requests/s, and the added latency p50/p99 = the proxy's percentile minus the direct
percentile at the same concurrency. The limit is zero added latency.

optillm and ``litellm[proxy]`` are installed, when missing, into their own venvs under
``.cache/bench-venvs/`` (never into Ponder's venv); a tool whose install or start fails
is reported unavailable and the rest are still measured.

    python -m benchmarks.proxy_overhead
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from scaffolds.processes import owned_process

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".cache" / "bench-venvs"
MODEL = "fake-model"
INSTALL_TIMEOUT = 900.0  # seconds per pip install step
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "What is 6*7?"}],
    "max_tokens": 8,
    "temperature": 0,
}
# The fake engine as a subprocess with uvicorn's access log off, so that the engine costs
# as little CPU as it can on these shared cores.
ENGINE_CODE = """
import sys, uvicorn
from testing.fake_engine import FakeEngineConfig, FakeEngineState, create_app
reply = lambda body: ["The answer is 42."]
config = FakeEngineConfig(model=sys.argv[2], respond=reply, cached_tokens=0)
app = create_app(config, FakeEngineState())
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- installs -------------------------------------------------------------------------


def pip(venv: Path, *args: str) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return False, f"gave up after {INSTALL_TIMEOUT:.0f} s"
    lines = (done.stdout + done.stderr).splitlines()
    noise = ("is ignored", "Location")
    kept = [line for line in lines if not any(word in line for word in noise)]
    return done.returncode == 0, "\n".join(kept[-15:])


def ensure_venv(name: str, entry: str, steps: list[list[str]]) -> Path | None:
    """The venv's bin/ with ``entry`` in it, installing it first when missing."""
    venv = VENVS / name
    if (venv / "bin" / entry).exists():
        return venv / "bin"
    print(f"[setup] installing {name} into {venv} ...", flush=True)
    if not (venv / "bin" / "python").exists():
        made = subprocess.run(["python3", "-m", "venv", str(venv)], capture_output=True)
        if made.returncode:
            print(f"[setup] {name}: venv failed: {made.stderr.decode()[-500:]}")
            return None
    for step in steps:
        ok, out = pip(venv, *step)
        if not ok:
            print(f"[setup] {name}: pip install {' '.join(step)} failed:\n{out}")
            return None
    if not (venv / "bin" / entry).exists():
        print(f"[setup] {name}: installed, but bin/{entry} is missing")
        return None
    return venv / "bin"


def version(bin_dir: Path, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    done = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or "?"


# -- servers --------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str  # base URL ending in /v1
    note: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def process(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Iterator[subprocess.Popen[bytes]]:
    with (
        tempfile.TemporaryFile() as log,
        owned_process(
            cmd, grace_s=10, cwd=cwd, env={**os.environ, **(env or {})}, stdout=log,
            stderr=subprocess.STDOUT,
        ) as proc,
    ):  # fmt: skip
        try:
            yield proc
        except RuntimeError:
            log.seek(0)
            print(log.read().decode(errors="replace")[-2000:])
            raise


def wait_ready(target: Target, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{target.name} exited with status {proc.returncode}")
        try:
            reply = httpx.post(
                f"{target.url}/chat/completions", json=BODY, headers=target.headers, timeout=10
            )
            if reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]:
                return
            last = f"{reply.status_code} {reply.text[:200]}"
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise RuntimeError(f"{target.name} not ready after {timeout:.0f} s: {last}")


# -- load -----------------------------------------------------------------------------


@dataclass
class Result:
    rps: float
    latencies: list[float]
    errors: int

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def request_bytes(target: Target) -> tuple[str, int, bytes]:
    url = httpx.URL(target.url)
    payload = json.dumps(BODY).encode()
    head = [
        f"POST {url.path.rstrip('/')}/chat/completions HTTP/1.1",
        f"Host: {url.host}:{url.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{k}: {v}" for k, v in target.headers.items()),
    ]
    return url.host, int(url.port or 80), ("\r\n".join(head) + "\r\n\r\n").encode() + payload


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, keep-alive) of one HTTP/1.1 response: Content-Length or chunked."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size + 2))
        await reader.readuntil(b"\r\n")
        body = b"".join(part[:-2] for part in parts)
    else:
        body = await reader.read()
    keep = headers.get("connection", "").lower() != "close" and "content-length" in headers
    return status, body, keep or headers.get("transfer-encoding", "").lower() == "chunked"


async def drive(target: Target, concurrency: int, requests: int) -> Result:
    """``concurrency`` keep-alive HTTP/1.1 connections on raw asyncio streams.

    Not httpx.AsyncClient: on these cores its connection pool was itself the bottleneck
    (about 80 req/s at c=64 against the fake engine, which serves 900+ req/s).
    """
    host, port, request = request_bytes(target)
    latencies: list[float] = []
    errors = 0
    left = requests

    async def worker(record: bool) -> None:
        nonlocal left, errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while left > 0:
                left -= 1
                started = time.perf_counter()
                writer.write(request)
                await writer.drain()
                status, body, keep = await read_response(reader)
                elapsed = time.perf_counter() - started
                if status != 200 or not json.loads(body)["choices"][0]["message"]["content"]:
                    errors += 1
                elif record:
                    latencies.append(elapsed)
                if not keep:
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
        finally:
            writer.close()

    async def run(count: int, record: bool) -> float:
        nonlocal left
        left = count
        started = time.perf_counter()
        await asyncio.gather(*(worker(record) for _ in range(concurrency)))
        return time.perf_counter() - started

    await run(max(2 * concurrency, 20), False)  # warm-up: lazy imports, caches
    wall = await run(requests, True)
    return Result(requests / wall, latencies, errors)


# -- main -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--requests-c1", type=int, default=200, help="requests at c=1")
    parser.add_argument("--requests", type=int, default=1000, help="requests at c>1")
    parser.add_argument(
        "--tools", default="ponder,optillm,litellm", help="proxies to measure (comma-separated)"
    )
    parser.add_argument("--start-timeout", type=float, default=240)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    tools = args.tools.split(",")

    def count(c: int) -> int:
        return args.requests_c1 if c == 1 else args.requests

    bins: dict[str, Path | None] = {}
    if "optillm" in tools:
        # optillm requires torch: the local CPU wheel first, so no CUDA torch is pulled.
        bins["optillm"] = ensure_venv("optillm", "optillm", [["torch==2.13.0"], ["optillm"]])
    if "litellm" in tools:
        bins["litellm"] = ensure_venv("litellm", "litellm", [["litellm[proxy]"]])
    versions = {tool: version(b, tool) for tool, b in bins.items() if b}
    ponder_bin = Path(sys.executable).parent / "ponder"
    if "ponder" in tools and not ponder_bin.exists():
        ponder_bin = Path(shutil.which("ponder") or "ponder")

    engine_port = free_port()
    engine = Target("direct", f"http://127.0.0.1:{engine_port}/v1")
    results: dict[str, dict[int, Result]] = {}
    unavailable: dict[str, str] = {tool: "install failed" for tool, b in bins.items() if b is None}

    def measure(target: Target) -> None:
        results[target.name] = {}
        for c in levels:
            result = asyncio.run(drive(target, c, count(c)))
            results[target.name][c] = result
            print(
                f"  {target.name:<16} c={c:<3} {result.rps:8.0f} req/s  "
                f"p50 {result.pct(0.5) * 1000:7.2f} ms  p99 {result.pct(0.99) * 1000:7.2f} ms"
                + (f"  errors {result.errors}" if result.errors else ""),
                flush=True,
            )

    def proxied(target: Target, cmd: list[str], env: dict[str, str] | None = None) -> None:
        print(f"[{target.name}] starting: {' '.join(cmd)}", flush=True)
        try:
            with process(cmd, env) as proc:
                started = time.monotonic()
                wait_ready(target, args.start_timeout, proc)
                print(f"[{target.name}] ready in {time.monotonic() - started:.1f} s", flush=True)
                measure(target)
        except RuntimeError as exc:
            print(f"[{target.name}] unavailable: {exc}")
            unavailable[target.name] = str(exc)[:200]

    engine_cmd = [sys.executable, "-c", ENGINE_CODE, str(engine_port), MODEL]
    with process(engine_cmd) as engine_proc:
        wait_ready(engine, 60, engine_proc)
        measure(engine)
        if "ponder" in tools:
            port = free_port()
            common = ["serve", "--engine", engine.url, "--model", MODEL, "--port", str(port)]
            proxied(
                Target("ponder", f"http://127.0.0.1:{port}/v1"),
                [str(ponder_bin), *common, "--default-scaffold", "single"],
            )
            port = free_port()
            common = ["serve", "--engine", engine.url, "--model", MODEL, "--port", str(port)]
            proxied(
                Target("ponder (mcr=64)", f"http://127.0.0.1:{port}/v1"),
                [
                    str(ponder_bin),
                    *common,
                    "--default-scaffold",
                    "single",
                    "--max-concurrent-runs",
                    "64",
                ],
            )
        if bins.get("optillm"):
            port = free_port()
            # The engine key comes from OPENAI_API_KEY; a client key without the "sk-"
            # prefix keeps optillm on its one shared client instead of a client per call.
            proxied(
                Target("optillm", f"http://127.0.0.1:{port}/v1", headers={"Authorization": "x"}),
                [
                    str(bins["optillm"] / "optillm"),
                    "--base-url",
                    engine.url,
                    "--approach",
                    "none",
                    "--port",
                    str(port),
                ],
                env={"OPENAI_API_KEY": "none", "OPTILLM_LOG_CONVERSATIONS": "false"},
            )
        if bins.get("litellm"):
            port = free_port()
            key = f"sk-{secrets.token_hex(24)}"  # LiteLLM refuses to start without one
            with tempfile.TemporaryDirectory() as tmp:
                config = Path(tmp) / "cfg.yaml"
                config.write_text(
                    "model_list:\n"
                    f"  - model_name: {MODEL}\n"
                    "    litellm_params:\n"
                    f"      model: openai/{MODEL}\n"
                    f"      api_base: {engine.url}\n"
                    "      api_key: none\n"
                    "general_settings:\n"
                    f"  master_key: {key}\n"
                )
                proxied(
                    Target(
                        "litellm",
                        f"http://127.0.0.1:{port}/v1",
                        headers={"Authorization": f"Bearer {key}"},
                    ),
                    [
                        str(bins["litellm"] / "litellm"),
                        "--config",
                        str(config),
                        "--port",
                        str(port),
                        "--host",
                        "127.0.0.1",
                    ],
                    env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"},
                )
        # Direct again at the end: the spread between the two direct runs is the noise.
        engine_again = Target("direct (again)", engine.url)
        measure(engine_again)

    direct = results["direct"]
    print()
    print(f"versions: {versions or 'none installed'}")
    for tool, why in unavailable.items():
        print(f"unavailable: {tool}: {why}")
    print("| target | c | req/s | x direct | p50 | p99 | added p50 | added p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, by_level in results.items():
        for c, r in by_level.items():
            d = direct[c]
            p50, p99 = r.pct(0.5) * 1000, r.pct(0.99) * 1000
            added = (
                ""
                if name.startswith("direct")
                else f"{p50 - d.pct(0.5) * 1000:+.2f} ms | {p99 - d.pct(0.99) * 1000:+.2f} ms"
            )
            print(
                f"| {name} | {c} | {r.rps:,.0f} | {r.rps / d.rps:.2f} | {p50:.2f} ms "
                f"| {p99:.2f} ms | {added or '- | -'} |"
                + (f" ({r.errors} errors)" if r.errors else "")
            )


if __name__ == "__main__":
    main()
