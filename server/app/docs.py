"""``/docs`` (Swagger UI) and ``/redoc`` without a CDN: every asset from this server.

FastAPI's own pages load Swagger UI's and ReDoc's scripts and styles from jsDelivr (and
ReDoc's fonts from Google), so on a machine without internet ``/docs`` is a blank page.
:func:`mount_docs` serves the same pages with the assets the ``fastapi-offline`` package
ships (Swagger UI's bundle and CSS, ReDoc's standalone script, a favicon), mounted at
:data:`ASSETS`; the pages name only same-origin URLs. ReDoc's script still shows
Redocly's logo from ``cdn.redoc.ly``: the pages' :data:`POLICY` keeps images, fonts and
fetches on this server, so the browser never asks (the logo is left out, as its
``onError`` does offline). The app must be built with ``docs_url=None, redoc_url=None``
(FastAPI's CDN pages off).

>>> from fastapi import FastAPI
>>> app = FastAPI(docs_url=None, redoc_url=None)
>>> mount_docs(app)
>>> sorted(r.path for r in app.routes if r.path.startswith(("/docs", "/redoc")))
['/docs', '/docs/assets', '/docs/oauth2-redirect', '/redoc']
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS", "POLICY", "mount_docs"]

ASSETS = "/docs/assets"
"""Where the pages' scripts, styles and favicon are served."""
POLICY = "img-src 'self' data:; font-src 'self' data:; connect-src 'self'"
"""The pages' Content-Security-Policy: nothing they load or fetch comes from elsewhere."""


def _same_origin(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = POLICY
    return page


def _asset_folder() -> Path:
    """The ``static`` folder of the installed ``fastapi-offline`` package."""
    return Path(str(files("fastapi_offline") / "static"))


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs``, its OAuth2 redirect page and ``/redoc`` from local assets."""
    app.mount(ASSETS, StaticFiles(directory=_asset_folder()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect_url}",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )
        return _same_origin(page)

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        return _same_origin(page)
