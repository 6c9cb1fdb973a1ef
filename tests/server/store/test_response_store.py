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
