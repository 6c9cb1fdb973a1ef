"""The playground: a page at ``/`` that runs a scaffold and draws its steps as a tree.

The page (``server/app/static/``: plain HTML, JS and CSS, no build step) talks to the same
``/v1/chat/completions`` stream as any client, asking for ``stream_trace`` so each step
arrives as a structured event. Two small helper routes sit beside it, behind the same
API key as ``/v1``:

- ``POST /playground/spec`` parses and validates a spec with the server's registry and
  limits: 200 with its canonical forms, or the same 400 a run would get, whose ``param``
  names the bad field (``scaffold.solver.steps``).
- ``GET /playground/strategies`` lists the strategies with their parameters' defaults.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.app.app import create_app
>>> from server.settings import Settings
>>> from fastapi.testclient import TestClient
>>> app = create_app(Settings(model="m", engines=("http://unused/v1",)),
...                  engines={"m": MockEngine(lambda r: "ok")})
>>> client = TestClient(app)
>>> client.post("/playground/spec", json={"scaffold": "gsr( n = 3 )"}).json()["scaffold"]
'gsr(n=3)'
>>> client.post("/playground/spec", json={"scaffold": "rc(steps=0)"}).json()["error"]["param"]
'scaffold.steps'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from scaffolds.errors import FanOutError, NotFoundError, SpecError
from scaffolds.spec.build import build_strategy, spec_of, spec_string
from server.app.auth import require_api_key
from server.routing import serving_of

STATIC_DIR = Path(__file__).with_name("static")
"""The page's files, shipped as package data."""

PAGE_HEADERS = {
    # The page loads nothing from elsewhere and renders model output as text only.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class SpecCheck(BaseModel):
    """The body of ``POST /playground/spec``."""

    model_config = ConfigDict(extra="forbid")

    scaffold: str | dict[str, Any] = Field(description='a spec, e.g. "gsr(n=3)" or its JSON form')


def playground_router(static_dir: Path = STATIC_DIR) -> APIRouter:
    """The page at ``/`` and its helper routes under ``/playground``."""
    router = APIRouter(tags=["playground"])

    @router.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        index = static_dir / "index.html"
        if not index.is_file():
            raise NotFoundError(f"the playground's files are not installed (no {index})")
        return FileResponse(index, headers=PAGE_HEADERS)

    @router.post(
        "/playground/spec",
        summary="Parse and validate a scaffold spec",
        dependencies=[Depends(require_api_key)],
    )
    async def check_spec(body: SpecCheck, request: Request) -> dict[str, Any]:
        serving = serving_of(request)
        try:
            strategy = build_strategy(body.scaffold, serving.registry, serving.spec_limits)
        except SpecError as exc:
            # Rooted under ``scaffold`` like the 400 of a run with this spec.
            param = "scaffold" if exc.param in (None, "scaffold") else f"scaffold.{exc.param}"
            cls = FanOutError if isinstance(exc, FanOutError) else SpecError
            raise cls(exc.message, param=param) from None
        return {
            "scaffold": spec_string(strategy),
            "json": spec_of(strategy),
            "max_calls": strategy.max_calls(),
            "depth": strategy.depth(),
        }

    @router.get(
        "/playground/strategies",
        summary="Strategies and their parameters",
        dependencies=[Depends(require_api_key)],
    )
    async def strategies(request: Request) -> dict[str, Any]:
        described = serving_of(request).registry.describe()
        return {
            "data": [
                {"name": info.name, "summary": info.summary, "params": info.params}
                for info in described
            ]
        }

    return router


def mount_playground(app: FastAPI, static_dir: Path = STATIC_DIR) -> None:
    """Add the page, its static files (``/playground/static``) and helper routes.

    Missing files (an install without the package data) make the page a 404, never a
    server that fails to start.
    """
    app.include_router(playground_router(static_dir))
    if static_dir.is_dir():
        files = StaticFiles(directory=static_dir)
        app.mount("/playground/static", files, name="playground-static")
