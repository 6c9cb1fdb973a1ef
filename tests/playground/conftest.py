"""The playground's end-to-end setting: a fake engine, ``ponder serve``, headless Chromium.

Chromium is Debian's ``chromium`` package (or ``PONDER_CHROMIUM=/path``), driven by the
``playwright`` Python package (its wheel bundles the driver; no browser download).
Without them the browser tests skip, unless ``PONDER_REQUIRE_BROWSER=1`` (CI sets it),
which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.threaded import serving_in_thread
from tests.server.conftest import make_client as make_client  # the route tests' app client

KEY = "sk-playground-test"
MODEL = "fake-model"
KEY_STORAGE = "ponder.apiKey"
"""The sessionStorage entry the page keeps the key in (server/static/app.js)."""
WAIT_MS = 30_000
"""How long a test waits for a run on the page to end."""


def chromium_path() -> str | None:
    """The Chromium to drive: ``PONDER_CHROMIUM``, else ``chromium`` on the PATH."""
    if chosen := os.environ.get("PONDER_CHROMIUM"):
        return chosen if os.access(chosen, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get("PONDER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"PONDER_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def launched_chromium() -> Iterator[Any]:
    """A headless Chromium under Playwright; skips (or fails, see above) without one."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("the playwright package is missing (pip install playwright)")
    path = chromium_path()
    if path is None and (chosen := os.environ.get("PONDER_CHROMIUM")):
        skip_or_fail(f"PONDER_CHROMIUM={chosen} is not an executable")
    if path is None:
        skip_or_fail("no Chromium: apt-get install chromium (or set PONDER_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def running_playground(
    engine: FakeEngineConfig | None = None, **settings: Any
) -> Iterator[tuple[str, FakeEngineHandle]]:
    """``ponder serve`` (uvicorn on loopback) in front of a fake engine; yields its URL."""
    with running_fake_engine(engine or FakeEngineConfig()) as fake:
        fields: dict[str, Any] = {
            "model": MODEL,
            "engines": (fake.base_url,),
            "api_keys": (KEY,),
            "aliases": {"gsr3": "gsr(n=3)", "rc2": "rc(steps=2, reasoning_tokens=60)"},
            "engine_max_retries": 0,
            **settings,
        }
        with serving_in_thread(create_app(Settings(**fields))) as url:
            yield url, fake


@contextlib.contextmanager
def open_page(browser: Any, url: str) -> Iterator[Any]:
    """A fresh tab (own session storage) whose key is already set, on the page at ``url``;
    fails if the page raised a JavaScript error meanwhile."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(f"sessionStorage.setItem({KEY_STORAGE!r}, {KEY!r})")
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"{url}/")
    tab.wait_for_selector("#model option", state="attached")
    yield tab
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def run_on_page(tab: Any, spec: str, problem: str) -> None:
    """Run ``spec`` on ``problem`` from the page, and wait until the run is done."""
    tab.fill("#problem", problem)
    tab.fill("#spec", spec)
    tab.click("#run-button")
    tab.wait_for_selector('#final[data-state="done"]', timeout=WAIT_MS)


@pytest.fixture
def served_page(browser: Any, served: tuple[str, FakeEngineHandle]) -> Iterator[Any]:
    """A fresh tab on the playground of the test module's own ``served`` fixture."""
    url, _ = served
    with open_page(browser, url) as tab:
        yield tab


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module scope: Playwright's sync API keeps its own event loop, which must be gone
    # before other modules' asyncio tests run in this process.
    with launched_chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def playground() -> Iterator[tuple[str, FakeEngineHandle]]:
    # A little latency per token, so steps are seen streaming.
    with running_playground(FakeEngineConfig(latency_per_token=0.02)) as served:
        yield served
