"""The served OpenAPI document is true: schemathesis generates requests from it against
the app (a mock engine behind it, API keys on) and checks every answer: no server error,
no status the document does not list for the route, the body matching the documented
schema and content type. Bounded examples keep it CI-cheap."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.server.conftest import build_app

KEY = "sk-openapi"
APP, _ = build_app(api_keys=(KEY,), max_body_bytes=32 * 1024, aliases={"g2": "gsr(n=2)"})
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    response_schema_conformance,
    content_type_conformance,
]


@SCHEMA.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_answers_match_the_document(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {KEY}"}, checks=CHECKS)


def test_every_error_is_documented_in_the_openai_shape() -> None:
    doc = APP.openapi()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            for status, answer in responses.items():
                if int(status) >= 400 and path != "/ready":
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, status)
    runs = doc["paths"]["/v1/responses"]["post"]["responses"]
    assert sorted(runs) == ["200", "400", "401", "403", "404", "413", "429", "502", "503", "504"]
    assert sorted(runs["200"]["content"]) == ["application/json", "text/event-stream"]
    assert list(doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]


def test_a_run_routes_400_names_the_fields_an_engine_refuses() -> None:
    """Issue 49: the in-process engine refuses what it cannot honour with a 400; the
    document says so on every route that runs a scaffold."""
    doc = APP.openapi()
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"):
        why = doc["paths"][path]["post"]["responses"]["400"]["description"]
        assert "unsupported_parameter" in why and "in-process transformers engine" in why, path
