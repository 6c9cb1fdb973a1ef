"""Custom resources checked offline against their CustomResourceDefinitions' schemas.

kubernetes-validate knows the core Kubernetes kinds only (it warns, and passes, on any
other). The custom resources of deploy/k8s (KEDA's ScaledObject, the Gateway API's Gateway
and HTTPRoute, the Inference Extension's InferencePool) are checked here instead, against
the ``openAPIV3Schema`` of the CRDs vendored in deploy/k8s/crds/ (SOURCES.yaml there names
each one's release), as the API server would check them with strict field validation:
a structural schema's objects take no field they do not declare, unless they say
``x-kubernetes-preserve-unknown-fields``. The CEL rules (``x-kubernetes-validations``)
are not evaluated.

>>> schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
>>> strict_schema(schema)["additionalProperties"]
False
>>> strict_schema({"type": "object", "additionalProperties": {"type": "string"}})
{'type': 'object', 'additionalProperties': {'type': 'string'}}
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.deploy.artifacts import K8S_DIR

CRD_DIR = K8S_DIR / "crds"


def strict_schema(schema: Any) -> Any:
    """A CRD's structural schema as a JSON Schema that refuses undeclared fields: every
    object with ``properties`` and neither ``additionalProperties`` nor
    ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``, and
    ``nullable`` admits null."""
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_schema(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def git_blob_id(path: Path) -> str:
    """The id ``git hash-object`` gives a file's content."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def vendored_sources() -> list[dict[str, str]]:
    """deploy/k8s/crds/SOURCES.yaml: where each vendored CRD file comes from."""
    sources: list[dict[str, str]] = yaml.safe_load((CRD_DIR / "SOURCES.yaml").read_text())
    return sources


@cache
def crd_schemas() -> dict[tuple[str, str], tuple[dict[str, Any], str]]:
    """(apiVersion, kind) -> (the strict JSON Schema, the CRD's scope), for every served
    version of every vendored CRD."""
    found: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
    for source in vendored_sources():
        crd = yaml.safe_load((CRD_DIR / source["file"]).read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                api_version = f"{spec['group']}/{version['name']}"
                schema = strict_schema(version["schema"]["openAPIV3Schema"])
                found[(api_version, spec["names"]["kind"])] = (schema, spec["scope"])
    return found


def is_custom(obj: dict[str, Any]) -> bool:
    """Whether an object is of a kind that a vendored CRD defines."""
    return (obj.get("apiVersion", ""), obj.get("kind", "")) in crd_schemas()


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """What the object's CRD schema refuses in it ('path: message'); empty when valid.

    The object's kind must be one a vendored CRD defines, and a namespaced kind needs a
    namespace (the rendered kustomization sets it).
    """
    schema, scope = crd_schemas()[(obj["apiVersion"], obj["kind"])]
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(obj)
    ]
    name = obj.get("metadata", {}).get("name")
    if not name:
        errors.append("metadata.name: missing")
    if scope == "Namespaced" and not obj.get("metadata", {}).get("namespace"):
        errors.append("metadata.namespace: missing on a namespaced kind")
    return errors
