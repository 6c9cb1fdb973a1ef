"""Keys that own their data, against the real server (uvicorn on loopback, the fake engine,
the openai SDK): every route of the served OpenAPI document that names a stored response,
and ``previous_response_id`` on create, answer another tenant's key exactly as for an id
that never existed; the owner's keys (one tenant, two keys) still see it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from server.keys import hash_key, write_keys_document
from server.settings import Settings
from testing.fake_engine import FakeEngineHandle, running_fake_engine
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import store_in

MODEL = "fake-model"
ALICE, ALICE_TOO, BOB, FLAT = "sk-alice-1", "sk-alice-2", "sk-bob-1", "sk-flat-1"
NEVER = "resp_0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine() as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("owners")
    keys = folder / "keys.yaml"
    write_keys_document(
        keys,
        {
            "keys": [
                {"name": "alice", "tenant": "team-a", "key_sha256": hash_key(ALICE)},
                {"name": "alice-ci", "tenant": "team-a", "key": ALICE_TOO},
                {"name": "bob", "tenant": "team-b", "key_sha256": hash_key(BOB)},
            ]
        },
    )
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        api_keys=(FLAT,),  # key-1, a tenant of its own
        keys_file=keys,
        **store_in(folder),
        engine_max_retries=0,
    )
    with running_ponder(settings) as url:
        yield url


def call(url: str, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=300, **kw)


def stored_object_routes(url: str) -> list[tuple[str, str]]:
    """(method, path) of every served route with ``{response_id}`` in its path."""
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    return sorted(
        (method.upper(), path)
        for path, operations in paths.items()
        if "{response_id}" in path
        for method in operations
        if method in {"get", "post", "put", "patch", "delete"}
    )


def test_another_tenant_gets_404_on_every_stored_object_route(ponder: str) -> None:
    created = openai_client(ponder, ALICE).responses.create(model=MODEL, input="What is 2+3?")
    routes = stored_object_routes(ponder)
    known = {
        ("GET", "/v1/responses/{response_id}"),
        ("DELETE", "/v1/responses/{response_id}"),
        ("GET", "/v1/responses/{response_id}/input_items"),
    }
    assert known <= set(routes)
    # Reads first, deletes last: a delete that went through would hide a read's leak.
    for method, template in sorted(routes, key=lambda r: r[0] == "DELETE"):
        theirs = call(ponder, BOB, method, template.format(response_id=created.id))
        never = call(ponder, BOB, method, template.format(response_id=NEVER))
        assert (theirs.status_code, never.status_code) == (404, 404), (method, template)
        assert theirs.json() == _with_id(never.json(), NEVER, created.id), (method, template)
        flat = call(ponder, FLAT, method, template.format(response_id=created.id))
        assert flat.status_code == 404  # a bare --api-key is a tenant of its own too
    # Still there for its owner's keys (both of team-a's), and whole.
    for key in (ALICE, ALICE_TOO):
        got = call(ponder, key, "GET", f"/v1/responses/{created.id}")
        assert got.status_code == 200 and got.json()["id"] == created.id
        items = call(ponder, key, "GET", f"/v1/responses/{created.id}/input_items")
        assert items.status_code == 200 and items.json()["data"]


def test_previous_response_id_of_another_tenant_is_404_as_never_stored(ponder: str) -> None:
    created = openai_client(ponder, ALICE).responses.create(model=MODEL, input="What is 2+3?")

    def follow(key: str, previous: str) -> httpx.Response:
        body = {"model": MODEL, "input": "And times 4?", "previous_response_id": previous}
        return call(ponder, key, "POST", "/v1/responses", json=body)

    theirs, never = follow(BOB, created.id), follow(BOB, NEVER)
    assert (theirs.status_code, never.status_code) == (404, 404)
    assert theirs.json() == _with_id(never.json(), NEVER, created.id)
    assert follow(ALICE_TOO, created.id).status_code == 200  # same tenant: continues


def test_the_sdk_raises_not_found_for_another_tenant(ponder: str) -> None:
    created = openai_client(ponder, ALICE).responses.create(model=MODEL, input="What is 2+3?")
    bob = openai_client(ponder, BOB)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model=MODEL, input="Go on", previous_response_id=created.id)
    alice = openai_client(ponder, ALICE)
    assert alice.responses.retrieve(created.id).id == created.id
    alice.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_usage_is_counted_by_key_name_never_by_key(ponder: str) -> None:
    openai_client(ponder, BOB).responses.create(model=MODEL, input="What is 2+3?")
    text = httpx.get(f"{ponder}/metrics").text
    runs = re.search(r'^ponder_key_runs_total\{key="bob"\} (\S+)$', text, re.MULTILINE)
    out = re.search(
        r'^ponder_key_tokens_total\{direction="out",key="bob"\} (\S+)$', text, re.MULTILINE
    )
    assert runs and float(runs.group(1)) >= 1
    assert out and float(out.group(1)) > 0
    labels = set(re.findall(r'key="([^"]*)"', text))
    assert labels <= {"alice", "alice-ci", "bob", "key-1", "anonymous"}
    for key in (ALICE, ALICE_TOO, BOB, FLAT):
        assert key not in text and hash_key(key) not in text


def test_bare_keys_do_not_share(fake: FakeEngineHandle, tmp_path: Path) -> None:
    """The issue's report: ``--api-key key-alice --api-key key-bob``; each bare key is a
    tenant of its own, so Bob's four requests are 404."""
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        api_keys=("key-alice", "key-bob"),
        **store_in(tmp_path),
    )
    with running_ponder(settings) as url:
        created = openai_client(url, "key-alice").responses.create(
            model=MODEL, input="What is 2+3?"
        )
        path = f"/v1/responses/{created.id}"
        body = {"model": MODEL, "input": "More", "previous_response_id": created.id}
        assert [
            call(url, "key-bob", "GET", path).status_code,
            call(url, "key-bob", "POST", "/v1/responses", json=body).status_code,
            call(url, "key-bob", "DELETE", path).status_code,
            call(url, "key-bob", "GET", f"{path}/input_items").status_code,
        ] == [404, 404, 404, 404]
        assert call(url, "key-alice", "GET", path).status_code == 200


def _with_id(body: Any, old: str, new: str) -> Any:
    """``body`` with the id ``old`` written as ``new`` (an error message names the id)."""
    if isinstance(body, dict):
        return {k: _with_id(v, old, new) for k, v in body.items()}
    if isinstance(body, list):
        return [_with_id(v, old, new) for v in body]
    return body.replace(old, new) if isinstance(body, str) else body
