"""The FastAPI application: everything is built in :func:`create_app`, state on app.state.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.settings import Settings
>>> app = create_app(
...     Settings(model="m", engines=("http://unused/v1",)),
...     engines={"m": MockEngine(lambda r: "ok")},
... )
>>> sorted(app.openapi()["paths"])[:3]
['/detokenize', '/health', '/metrics']
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import signal
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from scaffolds.engines.protocol import Engine
from scaffolds.processes.children import set_parent_death_signal
from server.app.auth import APIKeyAuth, RequireAPIKey
from server.app.collector import tune_collector
from server.app.docs import mount_docs
from server.app.fast_path import CompletionRoutes
from server.app.limits import BodySizeLimit, raise_open_file_limit
from server.app.listener import bind_listener, listener_url
from server.app.openapi import install_openapi
from server.app.playground import mount_playground
from server.app.routes import api_router
from server.errors import install_error_handlers
from server.pool.tokenizers import Tokenizers
from server.runs.handler import Serving
from server.settings import Settings
from server.store.response_store import ResponseStore, default_store_url
from server.telemetry.logs import RequestContext, configure_logging
from server.telemetry.metrics import MULTIPROC_ENV, Metrics

log = logging.getLogger("ponder.server")

VERSION = "0.1.0"
ONE_WRITE = "server.app.one_write:OneWriteProtocol"
"""uvicorn's HTTP protocol for ``ponder serve`` (a name, so that workers can load it)."""


def create_app(settings: Settings, *, engines: Mapping[str, Engine] | None = None) -> FastAPI:
    """Build a ready-to-serve app. ``engines`` (by model name) replaces the HTTP engines."""
    metrics = Metrics()
    serving = Serving.build(settings, metrics=metrics, engines=engines)
    responses = ResponseStore(
        settings.responses_db or default_store_url(),
        max_age_s=settings.responses_max_age_s,
        max_count=settings.responses_max_count,
    )
    auth = APIKeyAuth(
        settings.key_table(), load=settings.key_table, required=settings.keys_file is not None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        models = {name: list(s.config.engines) for name, s in serving.models.items()}
        log.info(
            "serving %s",
            ", ".join(card["id"] for card in serving.model_cards()),
            extra={"engines": str(models)},
        )
        if not auth.enabled:
            log.warning("no API keys configured: /v1 is open to anyone who can reach it")
        reloads = reload_on_hangup(auth) if settings.keys_file or settings.api_key_file else False
        await serving.start()
        try:
            yield
        finally:
            if reloads:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            await serving.aclose()
            await responses.aclose()
            metrics.worker_exited()

    app = FastAPI(
        title="Ponder",
        version=VERSION,
        summary="OpenAI-compatible reasoning scaffold server",
        lifespan=lifespan,
        docs_url=None,  # mount_docs serves them without a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.serving = serving
    app.state.responses = responses
    app.state.metrics = metrics
    app.state.auth = auth
    app.state.tokenizers = Tokenizers(serving.served)
    install_error_handlers(app)
    app.include_router(api_router())  # server.app.routes: every route, listed once
    mount_playground(app)
    mount_docs(app)
    install_openapi(app)
    # Added last = outermost: request id, then auth, then the body limit, then the
    # completion routes served without FastAPI's routing (the same routes as api_router's:
    # those server.app.routes marks fast).
    app.add_middleware(CompletionRoutes, serving=serving, metrics=metrics)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, metrics=metrics)
    app.add_middleware(RequireAPIKey, auth=auth, metrics=metrics)
    app.add_middleware(RequestContext, access_log_rate=settings.access_log_rate)
    return app


def reload_on_hangup(auth: APIKeyAuth) -> bool:
    """Re-read the keys on SIGHUP (``kill -HUP``), when this server runs on the process's
    main thread (``ponder serve``; not a server in a test's thread). Whether it will."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        return False
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, auth.reload)
    return True


def serve(settings: Settings, sock: socket.socket | None = None) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM, in ``settings.workers`` processes.

    ``sock`` is the listening socket when the caller bound it already
    (:func:`~server.app.listener.bind_listener`); else it is bound here.

    On SIGTERM uvicorn stops accepting connections, lets in-flight requests finish for
    ``graceful_timeout_s``, then cancels them (which cancels their runs and engine calls).
    With several workers the parent passes SIGTERM on to each, and each drains its own.
    """
    import uvicorn

    raise_open_file_limit()  # sockets: clients plus every engine call in flight
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": math.ceil(settings.graceful_timeout_s),
        "lifespan": "on",
    }
    if importlib.util.find_spec("httptools") is not None:
        options["http"] = ONE_WRITE  # a response's head and body in one socket write
    if sock is None:
        sock = bind_listener(settings.host, settings.port)
    if settings.workers > 1:
        serve_workers(settings, options, sock)
        return
    app = create_app(settings)  # fails (naming the bad setting) before logging is touched
    configure_logging(settings.log_level, json_logs=settings.log_json)
    tune_collector()  # start-up objects frozen, young collections spaced out
    log.info("serving at %s/v1", listener_url(sock))
    try:
        uvicorn.Server(uvicorn.Config(app, **options)).run(sockets=[sock])
    finally:
        sock.close()


@dataclass(frozen=True)
class WorkerApp:
    """Builds one server process's app; uvicorn pickles it to each worker it starts.

    >>> import pickle
    >>> factory = WorkerApp(Settings(model="m", engines=("http://unused/v1",)))
    >>> pickle.loads(pickle.dumps(factory)).settings.model
    'm'
    """

    settings: Settings
    parent: int | None = None
    """The supervisor's pid, when this runs in a worker process."""

    def __call__(self) -> FastAPI:
        if self.parent is not None:
            # A worker stops (draining) when its supervisor goes, however that went.
            set_parent_death_signal(signal.SIGTERM)
            if os.getppid() != self.parent:
                os.kill(os.getpid(), signal.SIGTERM)
            configure_logging(self.settings.log_level, json_logs=self.settings.log_json)
        app = create_app(self.settings)
        tune_collector()
        return app


def serve_workers(settings: Settings, options: dict[str, Any], sock: socket.socket) -> None:
    """``settings.workers`` uvicorn workers on one listening socket, with Prometheus in
    multiprocess mode: each worker writes its metrics to files in ``PROMETHEUS_MULTIPROC_DIR``
    (a temporary folder unless set), and any worker's ``/metrics`` sums them all."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    with tempfile.TemporaryDirectory(prefix="ponder-metrics-") as scratch:
        folder = Path(os.environ.get(MULTIPROC_ENV) or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):  # a previous run's values must not count
            stale.unlink()
        os.environ[MULTIPROC_ENV] = str(folder)  # read by each worker as it starts
        create_app(settings)  # fails (naming the bad setting) before logging is touched
        configure_logging(settings.log_level, json_logs=settings.log_json)
        factory = WorkerApp(settings, parent=os.getpid())
        config = uvicorn.Config(factory, factory=True, workers=settings.workers, **options)
        log.info("starting %d workers, serving at %s/v1", settings.workers, listener_url(sock))
        try:
            Multiprocess(config, sockets=[sock]).run()
        finally:
            sock.close()
