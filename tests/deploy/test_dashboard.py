"""The Grafana dashboard (docker/grafana/) asks only for what Ponder's /metrics exports.

Ponder runs in process against a fake engine; a few requests (one through a scaffold,
one cut short by its budget, one refused) make the labelled series exist; then every
metric and label each panel's PromQL names is looked up in the scraped exposition.
vLLM's metrics (``vllm:*``) are checked against a live vLLM in test_cpu_profile.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr

from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import running_fake_engine
from tests.deploy.artifacts import (
    DASHBOARD,
    DOCKER_DIR,
    Exposition,
    compose_services,
    dashboard_queries,
)

KEY = "sk-dashboard"
PONDER_METRIC = re.compile(r"\bponder_[a-z0-9_]+")
ANY_METRIC = re.compile(r"\b(ponder_[a-z0-9_]+|vllm:[a-z0-9_:]+)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b(ponder_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")


@pytest.fixture(scope="module")
def exposition() -> Iterator[Exposition]:
    """Ponder's /metrics after a scaffold request, a budget cut-off and a refused request."""
    with running_fake_engine() as engine:
        settings = Settings(
            model="m",
            engines=(engine.base_url,),
            engine_model=engine.config.model,
            api_keys=(SecretStr(KEY),),
        )
        with TestClient(create_app(settings)) as client:
            auth = {"Authorization": f"Bearer {KEY}"}
            body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
            scaffolded = {**body, "scaffold": "gsr(n=2)"}
            ok = client.post("/v1/chat/completions", json=scaffolded, headers=auth)
            assert ok.status_code == 200, ok.text
            cut = client.post(
                "/v1/chat/completions",
                json={**body, "scaffold": "majority(k=2)", "budget": {"max_tokens": 2}},
                headers=auth,
            )
            assert cut.status_code == 200 and cut.json()["choices"][0]["finish_reason"] == "length"
            assert client.post("/v1/chat/completions", json=body).status_code == 401
            yield Exposition.parse(client.get("/metrics").text)


def test_every_dashboard_metric_is_exported(exposition: Exposition) -> None:
    missing = [
        (title, name)
        for title, expr in dashboard_queries()
        for name in PONDER_METRIC.findall(expr)
        if name not in exposition.declared
    ]
    assert not missing, f"panels ask for metrics Ponder does not export: {missing}"
    assert all(ANY_METRIC.search(expr) for _, expr in dashboard_queries())


def test_every_dashboard_label_exists_on_its_metric(exposition: Exposition) -> None:
    problems = []
    for title, expr in dashboard_queries():
        metrics = [m for m in PONDER_METRIC.findall(expr) if m in exposition.labels]
        grouped = {label.strip() for group in GROUPING.findall(expr) for label in group.split(",")}
        for label in grouped - {"", "le"}:
            problems += [(title, m, label) for m in metrics if label not in exposition.labels[m]]
        for metric, matchers in SELECTOR.findall(expr):
            for label in MATCHER.findall(matchers):
                if label not in exposition.labels.get(metric, {label}):
                    problems.append((title, metric, label))
    assert not problems, f"(panel, metric, label) with no such label: {problems}"


def test_dashboard_shows_every_metric_ponder_exports(exposition: Exposition) -> None:
    """A metric added to server/telemetry/metrics.py needs a panel here too."""
    used = {name for _, expr in dashboard_queries() for name in PONDER_METRIC.findall(expr)}
    families = {
        name.removesuffix("_total")
        .removesuffix("_bucket")
        .removesuffix("_sum")
        .removesuffix("_count")
        for name in exposition.declared
        if name.startswith("ponder_") and not name.endswith("_created")
    }
    unused = sorted(f for f in families if not any(u.startswith(f) for u in used))
    assert not unused, f"no panel shows {unused}"


def test_dashboard_covers_requests_latency_tokens_calls_cutoffs_inflight_per_scaffold() -> None:
    queries = [expr for _, expr in dashboard_queries()]
    used = {name for expr in queries for name in PONDER_METRIC.findall(expr)}
    assert {
        "ponder_requests_total",
        "ponder_request_duration_seconds_bucket",
        "ponder_prompt_tokens_total",
        "ponder_completion_tokens_total",
        "ponder_engine_calls_total",
        "ponder_budget_cutoffs_total",
        "ponder_runs_in_flight",
    } <= used
    per_scaffold = [e for e in queries if "scaffold" in " ".join(GROUPING.findall(e))]
    assert any("ponder_requests_total" in e for e in per_scaffold)
    assert any("ponder_request_duration_seconds_bucket" in e for e in per_scaffold)


def test_grafana_provisioning_matches_the_dashboard_and_compose() -> None:
    provisioning = DOCKER_DIR / "grafana" / "provisioning"
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"] if p["type"] != "row"}
    assert uids == {datasource["uid"]}

    services = compose_services()
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", datasource["url"]).groups()  # type: ignore[union-attr]
    assert host in services and any(p.endswith(f":{port}") for p in services[host]["ports"])

    (provider,) = yaml.safe_load((provisioning / "dashboards" / "ponder.yaml").read_text())[
        "providers"
    ]
    mounts = dict(
        v.rsplit(":", 2)[:2] if v.endswith(":ro") else v.split(":", 1)
        for v in services["grafana"]["volumes"]
    )
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
