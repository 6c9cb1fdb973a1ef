"""The operations routes' handlers and routes (:data:`ROUTES`, which
:mod:`server.app.routes` mounts): what a deployment asks of the process, not of a model.

* ``GET /version``: Ponder's version in ``version`` (as vLLM's ``{"version": ...}``), and
  per base model in ``engines`` its engine's kind and version (a vLLM engine's own
  ``/version``, :mod:`server.pool.tokenizers`).
* ``GET /health``: liveness, the process answers.
* ``GET /ready``: readiness, every model has a reachable engine (a 503 otherwise, with the
  same body).
* ``GET /metrics``: Prometheus metrics.

All four are open (no key). Example::

    curl -s localhost:8000/ready
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from server.routing import Route, metrics_of, serving_of, tokenizers_of
from server.telemetry.metrics import CONTENT_TYPE

__all__ = ["ROUTES", "health", "metrics", "ready", "version"]


async def version(request: Request) -> dict[str, Any]:
    engines = await tokenizers_of(request).versions()
    return {"version": request.app.version, "engines": engines}


async def health() -> dict[str, str]:
    return {"status": "ok"}


async def ready(request: Request) -> JSONResponse:
    ok, detail = await serving_of(request).readiness()
    return JSONResponse(detail, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    registry = metrics_of(request)
    return Response(registry.render(), media_type=CONTENT_TYPE)


ROUTES: tuple[Route, ...] = (
    Route(
        "get",
        "/version",
        version,
        "Ponder's version, and each engine's",
        ("operations",),
        ok="Version",
    ),
    Route(
        "get",
        "/health",
        health,
        "Liveness: the process answers",
        ("operations",),
        ok="Health",
    ),
    Route(
        "get",
        "/ready",
        ready,
        "Readiness: every model has a reachable engine",
        ("operations",),
        ok="Readiness",
        errors=(503,),
        not_ready=True,
    ),
    Route(
        "get",
        "/metrics",
        metrics,
        "Prometheus metrics",
        ("operations",),
        text=True,
    ),
)
"""The operations routes."""
