"""The playground's routes: the page, its static files, spec checking, strategies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from server.app.playground import STATIC_DIR, mount_playground
from server.errors import install_error_handlers
from tests.server.conftest import chat_body

KEY = "sk-routes"
AUTH = {"Authorization": f"Bearer {KEY}"}


async def test_page_is_open_even_behind_a_key(make_client: Any) -> None:
    async with make_client(api_keys=(KEY,)) as (client, _):
        page = await client.get("/")
        script = await client.get("/playground/static/app.js")
        models = await client.get("/v1/models")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>Ponder playground</title>" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert models.status_code == 401  # the page is open, the API is not


def test_every_asset_the_page_names_is_shipped() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    named = re.findall(r'(?:src|href)="/playground/static/([^"]+)"', html)
    for script in STATIC_DIR.glob("*.js"):
        named += re.findall(r'from "\./([^"]+)"', script.read_text())
    assert {"app.js", "api.js", "style.css", "tree.js", "saved.js"} <= set(named)
    assert all((STATIC_DIR / name).is_file() for name in named)
    # Nothing is loaded from elsewhere (no CDN).
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)


@pytest.mark.parametrize(
    ("scaffold", "canonical", "max_calls"),
    [
        ("gsr( n = 3 )", "gsr(n=3)", 2),
        ({"name": "rc", "steps": 2}, "rc(steps=2)", 3),
        ('{"name": "majority", "k": 5}', "majority(k=5)", 1),
        ("gsr(n=2, solver=rc(steps=2))", "gsr(n=2, solver=rc(steps=2))", 6),
    ],
)
async def test_spec_check_gives_canonical_forms(
    make_client: Any, scaffold: Any, canonical: str, max_calls: int
) -> None:
    async with make_client() as (client, _):
        r = await client.post("/playground/spec", json={"scaffold": scaffold})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["scaffold"] == canonical and body["max_calls"] == max_calls
    assert body["json"]["name"] == canonical.partition("(")[0]


@pytest.mark.parametrize(
    ("scaffold", "param", "code", "words"),
    [
        ("gsr(n=3, solver=rc(steps=0))", "scaffold.solver.steps", "invalid_scaffold_spec", ">= 1"),
        ("gsr(n=3", "scaffold", "invalid_scaffold_spec", "column 8"),
        ("gsrr(n=3)", "scaffold.name", "invalid_scaffold_spec", "did you mean 'gsr'"),
        ("gsr(m=3)", "scaffold.m", "invalid_scaffold_spec", "unknown parameter"),
        ("majority(k=200, solver=rc(steps=8))", "scaffold", "fan_out_exceeded", "cap"),
    ],
)
async def test_spec_check_errors_name_the_field_like_a_run_does(
    make_client: Any, scaffold: str, param: str, code: str, words: str
) -> None:
    async with make_client() as (client, _):
        check = await client.post("/playground/spec", json={"scaffold": scaffold})
        run = await client.post("/v1/chat/completions", json=chat_body(scaffold=scaffold))
    assert check.status_code == 400
    error = check.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert words in error["message"]
    assert run.status_code == 400 and run.json()["error"]["param"] == param


async def test_spec_check_needs_the_key_and_a_spec(make_client: Any) -> None:
    async with make_client(api_keys=(KEY,)) as (client, _):
        anonymous = await client.post("/playground/spec", json={"scaffold": "single"})
        wrong = await client.post(
            "/playground/spec", json={"scaffold": "single"}, headers={"Authorization": "Bearer x"}
        )
        empty = await client.post("/playground/spec", json={}, headers=AUTH)
        extra = await client.post(
            "/playground/spec", json={"scaffold": "single", "n": 2}, headers=AUTH
        )
        ok = await client.post("/playground/spec", json={"scaffold": "single"}, headers=AUTH)
    assert anonymous.status_code == wrong.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    assert empty.status_code == extra.status_code == 400
    assert ok.status_code == 200


async def test_strategies_lists_every_strategy_with_defaults(make_client: Any) -> None:
    async with make_client(api_keys=(KEY,)) as (client, _):
        denied = await client.get("/playground/strategies")
        r = await client.get("/playground/strategies", headers=AUTH)
    assert denied.status_code == 401
    by_name = {s["name"]: s for s in r.json()["data"]}
    assert {"single", "majority", "gsr", "rc"} <= set(by_name)
    assert by_name["gsr"]["params"]["n"] == 4
    assert by_name["gsr"]["params"]["solver"] == {"name": "single"}
    assert by_name["gsr"]["summary"]


async def test_missing_static_files_make_a_404_not_a_broken_server(tmp_path: Path) -> None:
    app = FastAPI()
    install_error_handlers(app)
    mount_playground(app, tmp_path / "absent")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as client:
        page = await client.get("/")
        script = await client.get("/playground/static/app.js")
    assert page.status_code == 404 and "not installed" in page.json()["error"]["message"]
    assert script.status_code == 404


async def test_a_stranger_gets_401_before_the_body_is_read(make_client: Any) -> None:
    async with make_client(api_keys=(KEY,)) as (client, _):
        malformed = await client.post(
            "/playground/spec", content=b"{not json", headers={"content-type": "application/json"}
        )
        asset = await client.get("/playground/static/app.js")
    assert malformed.status_code == 401, malformed.text
    assert malformed.headers["www-authenticate"] == "Bearer"
    assert asset.status_code == 200
