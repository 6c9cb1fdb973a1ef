"""Every API route listed once (server/app/routes.py): the app mounts exactly those, the
fast path answers the ones marked fast, and the OpenAPI document describes each."""

from __future__ import annotations

import pytest

from server.api.chat_completions.api_router import chat_completions
from server.app.fast_path import fast_routes
from server.app.routes import ROUTES
from server.routing import Route
from tests.server.conftest import build_app


def test_the_openapi_document_has_the_listed_routes_in_order() -> None:
    app, _ = build_app()
    paths = app.openapi()["paths"]
    described = [
        (method, path) for path, ops in paths.items() for method in ops if "playground" not in path
    ]
    assert described == [(r.method, r.openapi_path) for r in ROUTES]
    for route in ROUTES:
        operation = paths[route.openapi_path][route.method]
        assert operation["operationId"].startswith(route.handler.__name__)
        assert operation["summary"] == route.summary
        assert operation["tags"] == list(route.tags)
        assert all(str(status) in operation["responses"] for status in route.errors)


def test_the_fast_path_takes_the_routes_marked_fast() -> None:
    assert {path: endpoint for path, (endpoint, _) in fast_routes(ROUTES).items()} == {
        "/v1/chat/completions": "chat",
        "/v1/completions": "completions",
    }
    wrong = Route("get", "/v1/x", chat_completions, "x", ("openai",), fast="chat")
    with pytest.raises(ValueError, match="/v1/x"):
        fast_routes((wrong,))
