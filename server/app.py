"""The FastAPI application: everything is built in :func:`create_app`, state on app.state.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.settings import Settings
>>> app = create_app(
...     Settings(model="m", engines=("http://unused/v1",)),
...     engines={"m": MockEngine(lambda r: "ok")},
... )
>>> sorted(app.openapi()["paths"])[:3]
['/health', '/metrics', '/playground/spec']
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI

from scaffolds.engine import Engine
from server.auth import APIKeyAuth, RequireAPIKey
from server.errors import install_error_handlers
from server.limits import BodySizeLimit
from server.logs import RequestContext, configure_logging
from server.metrics import Metrics
from server.playground import mount_playground
from server.routes import api_router, ops_router
from server.serving import Serving
from server.settings import Settings

log = logging.getLogger("ponder.server")

VERSION = "0.1.0"


def create_app(settings: Settings, *, engines: Mapping[str, Engine] | None = None) -> FastAPI:
    """Build a ready-to-serve app. ``engines`` (by model name) replaces the HTTP engines."""
    metrics = Metrics()
    serving = Serving.build(settings, metrics=metrics, engines=engines)
    auth = APIKeyAuth(settings.client_api_keys())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        models = {name: list(s.config.engines) for name, s in serving.models.items()}
        log.info("serving %s", ", ".join(card["id"] for card in serving.model_cards()),
                 extra={"engines": str(models)})  # fmt: skip
        if not auth.enabled:
            log.warning("no API keys configured: /v1 is open to anyone who can reach it")
        await serving.start()
        try:
            yield
        finally:
            await serving.aclose()

    app = FastAPI(
        title="Ponder",
        version=VERSION,
        summary="OpenAI-compatible reasoning scaffold server",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.serving = serving
    app.state.metrics = metrics
    app.state.auth = auth
    install_error_handlers(app)
    app.include_router(api_router())
    app.include_router(ops_router())
    mount_playground(app)
    # Added last = outermost: request id, then auth, then the body limit.
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, metrics=metrics)
    app.add_middleware(RequireAPIKey, auth=auth, metrics=metrics)
    app.add_middleware(RequestContext)
    return app


def serve(settings: Settings) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM.

    On SIGTERM uvicorn stops accepting connections, lets in-flight requests finish for
    ``graceful_timeout_s``, then cancels them (which cancels their runs and engine calls).
    """
    import uvicorn

    app = create_app(settings)  # fails (naming the bad setting) before logging is touched
    configure_logging(settings.log_level, json_logs=settings.log_json)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=math.ceil(settings.graceful_timeout_s),
        lifespan="on",
    )
    uvicorn.Server(config).run()
