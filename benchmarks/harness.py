"""What the proxy benchmarks share: servers as owned subprocesses, tool venvs, a raw
asyncio HTTP/1.1 load generator, and the CPU time of a process tree.

CPU time is the measure that survives a busy machine: wall-clock throughput on these
shared cores moves with whatever else runs, but the user+system seconds a proxy spends
per request barely do. :class:`CpuMeter` reads them for a server and all its children
(a ``--workers N`` server, a math-verify pool) from ``/proc`` through psutil.

>>> meter = CpuMeter(os.getpid())
>>> meter.seconds() > 0
True
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from scaffolds.processes.children import owned_process

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
# as little CPU as it can on these shared cores. It answers the n samples a scaffold asks
# for; with a word count (argv[3]) each answer is that many words, to stream.
ENGINE_CODE = """
import sys, uvicorn
from testing.fake_engine import FakeEngineConfig, FakeEngineState, create_app
words = int(sys.argv[3]) if len(sys.argv) > 3 else 0
text = " ".join(["word"] * words) if words else "The answer is \\\\boxed{42}."
reply = lambda body: [text] * int(body.get("n") or 1)
config = FakeEngineConfig(model=sys.argv[2], respond=reply, cached_tokens=0)
app = create_app(config, FakeEngineState())
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning")
"""

# Packages the benchmarks may use that Ponder's venv lacks (aiohttp, orjson), installed
# with `python -m pip install --target .cache/pylibs aiohttp orjson`, never into the venv.
PYLIBS = ROOT / ".cache" / "pylibs"


def floor_cmd(target: Target, engine: Target, client: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of the floor (:mod:`benchmarks.floor`) with ``client``."""
    cmd = [sys.executable, "-m", "benchmarks.floor", target.port, engine.url, client]
    return cmd, with_pylibs(os.environ.get("PYTHONPATH"))


def with_pylibs(path: str | None) -> dict[str, str]:
    """A PYTHONPATH of ``path`` plus .cache/pylibs when it exists."""
    parts = [p for p in (path, str(PYLIBS) if PYLIBS.is_dir() else None) if p]
    return {"PYTHONPATH": os.pathsep.join(parts)} if parts else {}


def default_floor_clients() -> str:
    """The floor's clients: Ponder's (aiohttp when importable) first, then httpx."""
    return "aiohttp,httpx" if importlib.util.find_spec("aiohttp") else "httpx"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_text() -> str:
    """The load average, as RESULTS.md reports it."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


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


@contextlib.contextmanager
def source_at(rev: str) -> Iterator[Path]:
    """This repository's tree at git revision ``rev``, unpacked in a temporary folder
    (to run a baseline Ponder beside the working tree's, A/B in one run)."""
    with tempfile.TemporaryDirectory(prefix="ponder-base-") as tmp:
        archive = Path(tmp) / "src.tar"
        # Symlinked venvs (a worktree's .venv) are not source: leave them out.
        skip = [":(exclude).venv", ":(exclude).venv-vllm"]
        cmd = ["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "--", ".", *skip]
        subprocess.run(cmd, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(Path(tmp) / "src", filter="data")
        yield Path(tmp) / "src"


# -- servers --------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str  # base URL ending in /v1
    note: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> str:
        return str(httpx.URL(self.url).port)


@contextlib.contextmanager
def process(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Iterator[subprocess.Popen[bytes]]:
    with (
        tempfile.TemporaryFile() as log,
        owned_process(
            cmd,
            grace_s=10,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        ) as proc,
    ):
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


class CpuMeter:
    """User+system CPU seconds of a process and its live descendants."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self._seen: dict[int, psutil.Process] = {}

    def seconds(self) -> float:
        total = 0.0
        with contextlib.suppress(psutil.Error):
            for proc in [self.root, *self.root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = self._seen.setdefault(proc.pid, proc).cpu_times()
                    total += times.user + times.system
        return total


# -- load -----------------------------------------------------------------------------


@dataclass
class Result:
    rps: float
    latencies: list[float]
    errors: int
    cpu_s: float | None = None  # the measured server's CPU seconds over the timed part
    count: int = 0  # requests (or tokens, for streams) the timed part got

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    @property
    def cpu_ms(self) -> float | None:
        """The server's CPU milliseconds per request (or per token)."""
        return None if self.cpu_s is None or not self.count else self.cpu_s * 1000 / self.count


def request_bytes(target: Target, body: dict[str, object] = BODY) -> tuple[str, int, bytes]:
    url = httpx.URL(target.url)
    payload = json.dumps(body).encode()
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


def answered(body: bytes) -> int:
    """1 for a completion with an answer, else 0."""
    return 1 if json.loads(body)["choices"][0]["message"]["content"] else 0


def streamed_tokens(body: bytes) -> int:
    """Content deltas in an SSE body (0 when it did not end with ``[DONE]``)."""
    count = 0
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:]).get("choices") or ():
                count += bool((choice.get("delta") or {}).get("content"))
    return count if body.rstrip().endswith(b"data: [DONE]") else 0


async def drive(
    target: Target,
    concurrency: int,
    requests: int,
    *,
    body: dict[str, object] = BODY,
    score: Callable[[bytes], int] = answered,
    meter: CpuMeter | None = None,
) -> Result:
    """``concurrency`` keep-alive HTTP/1.1 connections on raw asyncio streams.

    ``score`` counts what a response brought (1 per answered request, or its streamed
    tokens); 0 is an error. ``meter``'s CPU seconds are read around the timed part.
    Not httpx.AsyncClient: on these cores its connection pool was itself the bottleneck
    (about 80 req/s at c=64 against the fake engine, which serves 900+ req/s).
    """
    host, port, request = request_bytes(target, body)
    latencies: list[float] = []
    errors = 0
    counted = 0
    left = requests

    async def worker(record: bool) -> None:
        nonlocal left, errors, counted
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while left > 0:
                left -= 1
                started = time.perf_counter()
                writer.write(request)
                await writer.drain()
                status, data, keep = await read_response(reader)
                elapsed = time.perf_counter() - started
                got = score(data) if status == 200 else 0
                if not got:
                    errors += 1
                elif record:
                    latencies.append(elapsed)
                    counted += got
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
    cpu_before = meter.seconds() if meter else 0.0
    wall = await run(requests, True)
    cpu = meter.seconds() - cpu_before if meter else None
    return Result(len(latencies) / wall, latencies, errors, cpu, counted)


def python_cmd(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
