"""Readers for the deployment files (docker/, deploy/) that the deploy tests check.

Nothing here restates what those files say: the tests take the image's command, its
environment, the compose services and the Kubernetes objects from the files themselves.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from scaffolds.engines.vllm_server import ROOT

DOCKER_DIR = ROOT / "docker"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
LOCK_FILE = DOCKER_DIR / "requirements.lock"
DASHBOARD = DOCKER_DIR / "grafana" / "dashboards" / "ponder.json"
K8S_DIR = ROOT / "deploy" / "k8s"
K8S_BASE = K8S_DIR / "base"
"""The base kustomization (Ponder and its engines); deploy/k8s/overlays build on it."""

REQUIRE_TOOLS_ENV = "PONDER_REQUIRE_DEPLOY_TOOLS"


# -- Dockerfile ------------------------------------------------------------------------


@dataclass
class Instruction:
    """One Dockerfile instruction: its keyword, its flags (``--from=builder``) and the rest."""

    keyword: str
    flags: dict[str, str]
    args: str
    mounts: list[dict[str, str]] = field(default_factory=list)
    """One dict per ``--mount`` flag: ``--mount=type=secret,id=x`` is
    ``{"type": "secret", "id": "x"}``."""

    def exec_form(self) -> list[str]:
        """The JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD as an argv."""
        text = self.args.removeprefix("CMD").strip() if self.keyword == "HEALTHCHECK" else self.args
        argv = json.loads(text)
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), text
        return argv


@dataclass
class Stage:
    """A build stage: its base image, its name (if any) and its instructions."""

    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        """Every instruction of this stage with ``keyword``."""
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        """The instruction that counts (the last one) for CMD, ENTRYPOINT, USER..."""
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        """The stage's ENV, in order, with ``$NAME`` and ``${NAME}`` of earlier values expanded."""
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for item in shlex.split(instruction.args):
                name, _, value = item.partition("=")
                values[name] = re.sub(
                    r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), value
                )
        return values


def _logical_lines(text: str) -> list[str]:
    """Dockerfile lines with comments dropped and ``\\`` continuations joined."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse_dockerfile(path: Path = DOCKERFILE) -> list[Stage]:
    """The Dockerfile's stages; global ARG defaults (which may use earlier ones) are
    substituted into FROM lines."""
    args: dict[str, str] = {}
    stages: list[Stage] = []

    def substitute(text: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)

    for line in _logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        flags: dict[str, str] = {}
        mounts: list[dict[str, str]] = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            key, _, value = flag[2:].partition("=")
            flags[key] = value
            if key == "mount":
                mounts.append(dict(item.partition("=")[::2] for item in value.split(",")))
            rest = rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = substitute(default)
            continue
        if keyword == "FROM":
            base = substitute(rest)
            image, _, name = base.partition(" AS ")
            if not name:
                image, _, name = base.partition(" as ")
            stages.append(Stage(image.strip(), name.strip() or None))
            continue
        stages[-1].instructions.append(Instruction(keyword, flags, rest, mounts))
    return stages


def final_stage() -> Stage:
    """The stage the image is made of (the last one)."""
    return parse_dockerfile()[-1]


def image_command() -> list[str]:
    """ENTRYPOINT followed by CMD of the final stage, as the container runs them."""
    stage = final_stage()
    entrypoint, cmd = stage.last("ENTRYPOINT"), stage.last("CMD")
    return (entrypoint.exec_form() if entrypoint else []) + (cmd.exec_form() if cmd else [])


def image_ponder_env() -> dict[str, str]:
    """The final stage's ``PONDER_*`` ENV."""
    return {k: v for k, v in final_stage().env().items() if k.startswith("PONDER_")}


# -- compose ---------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Compose's ``${NAME:-default}`` with nothing set in the environment: the default."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def compose_services() -> dict[str, dict[str, Any]]:
    """compose.yaml's services (anchors merged, variables at their defaults)."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    services: dict[str, dict[str, Any]] = interpolate(document["services"])
    return services


def service_environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's environment as a dict (either of compose's two spellings)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def network_names(name: str, service: dict[str, Any]) -> set[str]:
    """The names a service answers to on the default network: its own and its aliases."""
    names = {name}
    for network in (service.get("networks") or {}).values():
        names.update((network or {}).get("aliases") or [])
    return names


def ponder_services() -> dict[str, dict[str, Any]]:
    """Compose services that run the Ponder image (built from docker/Dockerfile)."""
    return {
        name: service
        for name, service in compose_services().items()
        if (service.get("build") or {}).get("dockerfile") == "docker/Dockerfile"
    }


# -- Kubernetes ------------------------------------------------------------------------


def k8s_objects() -> list[dict[str, Any]]:
    """Every object of the resources listed in deploy/k8s/base/kustomization.yaml."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        objects.extend(d for d in yaml.safe_load_all((K8S_BASE / resource).read_text()) if d)
    return objects


def k8s_generated_secret(name: str) -> dict[str, str]:
    """The data kustomization's secretGenerator gives Secret ``name``, read from its env
    files (the git-ignored real file where it exists, else its ``.example``)."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    (generator,) = [g for g in kustomization["secretGenerator"] if g["name"] == name]
    data: dict[str, str] = {}
    for env_file in generator["envs"]:
        path = K8S_BASE / env_file
        path = path if path.exists() else path.with_name(path.name + ".example")
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                data[key.strip()] = value.strip()
    return data


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` named ``name``."""
    found = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


# -- metrics and the dashboard ----------------------------------------------------------

# The sample names each metric type exposes beside (or instead of) its family name.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
}


@dataclass(frozen=True)
class Exposition:
    """What one scrape of /metrics offers: sample names, with the labels seen on each."""

    declared: frozenset[str]
    labels: dict[str, set[str]]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        """Parse Prometheus text format; a declared family with no samples yet still
        counts for its type's sample names."""
        declared: set[str] = set()
        labels: dict[str, set[str]] = {}
        for family in text_string_to_metric_families(text):
            declared.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
            for sample in family.samples:
                declared.add(sample.name)
                labels.setdefault(sample.name, set()).update(sample.labels)
        return cls(frozenset(declared), labels)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, and the variable queries."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query["query"] if isinstance(query, dict) else query
        queries.append((f"${variable['name']}", text))
    return queries


# -- external tools --------------------------------------------------------------------


def tool_or_skip(name: str, install_hint: str) -> str:
    """The path of a command-line tool, or skip: the one installed beside this
    interpreter (the version the project's environment pins) first, else one on PATH.

    With ``PONDER_REQUIRE_DEPLOY_TOOLS=1`` (CI) a missing tool fails instead.
    """
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed ({install_hint})"
    if os.environ.get(REQUIRE_TOOLS_ENV) == "1":
        pytest.fail(f"{REQUIRE_TOOLS_ENV}=1 but {message}")
    pytest.skip(message)
