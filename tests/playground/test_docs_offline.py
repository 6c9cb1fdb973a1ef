"""``/docs`` and ``/redoc`` work offline: every asset comes from Ponder itself.

Against ``ponder serve`` on loopback: the pages name only same-origin URLs, each of which
answers 200 with its asset; then headless Chromium, with every request off the server's
origin blocked and recorded, renders Swagger UI's operations and ReDoc's sections from
``/openapi.json`` and asks nothing of any other host. Skips without a browser (see
conftest), unless ``PONDER_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from testing.fake_engine import FakeEngineHandle
from tests.playground.conftest import running_playground

WAIT_MS = 60_000
URL_IN_PAGE = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\burl:\s*["']([^"']+)["']"""
)
"""Every script, style, icon and spec URL the HTML names (the spec: ReDoc's ``spec-url``,
Swagger UI's ``url: '...'``)."""
EXPECTED_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "json"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeEngineHandle]]:
    with running_playground() as served:
        yield served


def named_urls(html: str) -> list[str]:
    return [a or b for a, b in URL_IN_PAGE.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_pages_name_only_same_origin_assets_that_are_served(
    served: tuple[str, FakeEngineHandle], page: str
) -> None:
    url, _ = served
    answer = httpx.get(f"{url}{page}", timeout=30)
    html = answer.text
    urls = named_urls(html)
    assert any(u.endswith(".js") for u in urls), urls
    assert "/openapi.json" in urls
    for named in urls:
        parts = urlsplit(named)
        assert not parts.scheme and not parts.netloc and named.startswith("/"), named
        reply = httpx.get(f"{url}{named}", timeout=30)
        assert reply.status_code == 200, named
        assert len(reply.content) > 100, named
        suffix = "." + named.rsplit(".", 1)[-1]
        assert EXPECTED_TYPES[suffix] in reply.headers["content-type"], named
    assert "cdn" not in html.lower() and "fonts.googleapis" not in html
    assert "img-src 'self'" in answer.headers["content-security-policy"]


def test_pages_render_in_a_browser_without_leaving_the_server(
    browser: Any, served: tuple[str, FakeEngineHandle]
) -> None:
    url, _ = served
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    elsewhere: list[str] = []

    def only_the_server(route: Any) -> None:
        if route.request.url.startswith(origin + "/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context = browser.new_context()
    context.route("**/*", only_the_server)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        tab.goto(f"{url}/docs")
        tab.wait_for_selector(".swagger-ui .opblock", timeout=WAIT_MS)
        paths = tab.locator(".opblock-summary-path").all_inner_texts()
        assert any("/v1/chat/completions" in p for p in paths), paths
        tab.goto(f"{url}/redoc")
        tab.wait_for_selector("[data-section-id]", timeout=WAIT_MS)
        assert "chat/completions" in tab.content()
    finally:
        context.close()
    assert elsewhere == [], f"requests off the server: {elsewhere}"
    assert errors == [], f"JavaScript errors on the page: {errors}"
