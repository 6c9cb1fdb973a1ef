"""The stored responses: bounded by age and count, an unreachable database is a 503, and
what ``ponder serve`` stored survives its restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from scaffolds.processes.children import stop_group
from server.errors import StoreUnavailableError, api_error
from server.store.response_store import ResponseStore, StoredResponse
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.server.conftest import start_ponder_serve


def stored(response_id: str, at: float) -> StoredResponse:
    return StoredResponse(response_id, at, {"id": response_id}, [{"role": "user", "content": "x"}])


async def test_bounds_by_age_and_count(tmp_path: Path) -> None:
    store = ResponseStore(f"sqlite+aiosqlite:///{tmp_path}/r.db", max_age_s=100, max_count=3)
    now = time.time()
    try:
        await store.put(stored("old", now - 101))  # past the age bound: dropped at once
        for i in range(4):
            await store.put(stored(f"r{i}", now + i))
        assert await store.count() == 3
        assert [await store.get(f"r{i}") is not None for i in range(4)] == [False, True, True, True]
        assert await store.get("old") is None
        assert (await store.get("r3")).conversation == [{"role": "user", "content": "x"}]  # type: ignore[union-attr]
        assert await store.delete("r3") and not await store.delete("r3")
    finally:
        await store.aclose()


async def test_unreachable_database_is_503(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")  # a file where the database's folder should be
    store = ResponseStore(f"sqlite+aiosqlite:///{tmp_path}/file/r.db", max_age_s=1, max_count=1)
    with pytest.raises(StoreUnavailableError) as raised:
        await store.get("resp_x")
    assert api_error(raised.value).status == 503
    await store.aclose()


def test_stored_responses_survive_a_restart(tmp_path: Path) -> None:
    """``ponder serve`` keeps its responses in $PONDER_HOME/responses.db by default; the
    count bound (2) holds across the restart."""
    env = {**os.environ, "PONDER_HOME": str(tmp_path)}
    key = "sk-store"
    headers = {"Authorization": f"Bearer {key}"}
    with running_fake_engine(FakeEngineConfig()) as fake:
        ids = []
        proc, url = start_ponder_serve(fake.base_url, key, "--responses-max-count", "2", env=env)
        try:
            for question in ("1+1?", "2+2?", "3+3?"):
                body = {"model": "fake-model", "input": question}
                reply = httpx.post(f"{url}/v1/responses", json=body, headers=headers, timeout=60)
                assert reply.status_code == 200, reply.text
                ids.append(reply.json()["id"])
        finally:
            stop_group(proc)
        assert (tmp_path / "responses.db").is_file()
        proc, url = start_ponder_serve(fake.base_url, key, env=env)
        try:
            found = [
                httpx.get(f"{url}/v1/responses/{i}", headers=headers, timeout=60).status_code
                for i in ids
            ]
            assert found == [404, 200, 200]
            body = {"model": "fake-model", "input": "and 4+4?", "previous_response_id": ids[2]}
            follow = httpx.post(f"{url}/v1/responses", json=body, headers=headers, timeout=60)
            assert follow.status_code == 200, follow.text
            sent = fake.state.requests[-1].body["messages"]
            assert [m["content"] for m in sent[::2]] == ["3+3?", "and 4+4?"]
        finally:
            stop_group(proc)


async def test_each_owner_sees_only_its_own(tmp_path: Path) -> None:
    store = ResponseStore(f"sqlite+aiosqlite:///{tmp_path}/r.db", max_age_s=100, max_count=9)
    alice, bob = store.owned_by("team-a"), store.owned_by("team-b")
    try:
        await alice.put(stored("resp_a", time.time()))
        assert await bob.get("resp_a") is None and not await bob.delete("resp_a")
        assert await store.get("resp_a") is None  # anonymous is an owner like any other
        assert (await store.owned_by("team-a").get("resp_a")) is not None
        assert await alice.delete("resp_a") and await alice.get("resp_a") is None
    finally:
        await store.aclose()


async def test_a_table_from_before_owners_gains_the_column(tmp_path: Path) -> None:
    """A responses.db written by a server without owners: its rows are ``anonymous``'s
    (what no-keys serving sees, as before), and new rows carry their owner."""
    import sqlite3

    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE ponder_responses (id VARCHAR(80) PRIMARY KEY,"
            " created_at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL,"
            " conversation TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO ponder_responses VALUES ('resp_old', ?, '{\"id\": \"resp_old\"}', '[]')",
            (time.time(),),
        )
    store = ResponseStore(f"sqlite+aiosqlite:///{path}", max_age_s=100, max_count=9)
    try:
        assert (await store.get("resp_old")).body == {"id": "resp_old"}  # type: ignore[union-attr]
        assert await store.owned_by("team-a").get("resp_old") is None
        await store.owned_by("team-a").put(stored("resp_new", time.time()))
    finally:
        await store.aclose()
    again = ResponseStore(f"sqlite+aiosqlite:///{path}", max_age_s=100, max_count=9)
    try:  # opening a migrated table migrates nothing
        assert await again.owned_by("team-a").get("resp_new") is not None
        assert await again.count() == 2
    finally:
        await again.aclose()
    with sqlite3.connect(path) as db:
        owners = dict(db.execute("SELECT id, owner FROM ponder_responses").fetchall())
    assert owners == {"resp_old": "anonymous", "resp_new": "team-a"}
