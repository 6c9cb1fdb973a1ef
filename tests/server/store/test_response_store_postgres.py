"""The response store on a real Postgres (``--responses-db postgresql+asyncpg://...``): the
same table, bounds and lookups as on SQLite. Postgres runs from the machine's binaries
in a temporary folder (as ``nobody`` when the tests run as root, which Postgres refuses);
the test is skipped where there is no Postgres or no asyncpg."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import popen_owned, stop_group
from server.store.response_store import ResponseStore, StoredResponse
from tests.server.conftest import wait_until

BINARIES = ("initdb", "postgres", "pg_isready")


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "nobody", "--", *argv]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    if any(shutil.which(b) is None for b in BINARIES) or not importlib.util.find_spec("asyncpg"):
        pytest.skip("no Postgres binaries (initdb, postgres, pg_isready) or no asyncpg")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: Postgres will not start as root")
    # Its own folder in the system's temporary one, which ``nobody`` can reach (pytest's
    # per-user folder it cannot).
    with tempfile.TemporaryDirectory(prefix="ponder-postgres-") as name:
        folder = Path(name)
        if os.geteuid() == 0:
            shutil.chown(folder, "nobody")
        yield from _serve(folder)


def _serve(folder: Path) -> Iterator[str]:
    data = folder / "data"
    subprocess.run(
        _as_owner(["initdb", "-D", str(data), "-U", "ponder", "--auth=trust"]),
        check=True,
        capture_output=True,
    )
    port = free_port()
    server = popen_owned(
        _as_owner(
            ["postgres", "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(folder)]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        check = ["pg_isready", "-h", "127.0.0.1", "-p", str(port), "-U", "ponder"]
        return subprocess.run(check, capture_output=True).returncode == 0 or bool(server.poll())

    try:
        assert wait_until(ready, within=120) and server.poll() is None, "postgres did not start"
        yield f"postgresql+asyncpg://ponder@127.0.0.1:{port}/postgres"
    finally:
        stop_group(server)


async def test_store_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    store = ResponseStore(postgres_url, max_age_s=100, max_count=2)
    now = time.time()
    try:
        await store.put(StoredResponse("old", now - 101, {"id": "old"}, []))
        for i in range(3):
            conversation = [{"role": "user", "content": f"q{i}"}]
            await store.put(StoredResponse(f"r{i}", now + i, {"id": f"r{i}"}, conversation))
        assert await store.count() == 2
        assert [await store.get(i) is not None for i in ("old", "r0", "r1", "r2")] == [
            False,
            False,
            True,
            True,
        ]
        found = await store.get("r2")
        assert found is not None and found.body == {"id": "r2"}
        assert found.conversation == [{"role": "user", "content": "q2"}]
        assert await store.delete("r2") and not await store.delete("r2")
    finally:
        await store.aclose()


async def test_owners_on_postgres(postgres_url: str) -> None:
    store = ResponseStore(postgres_url, max_age_s=100, max_count=9)
    alice, bob = store.owned_by("team-a"), store.owned_by("team-b")
    try:
        await alice.put(StoredResponse("resp_pa", time.time(), {"id": "resp_pa"}, []))
        assert await bob.get("resp_pa") is None and not await bob.delete("resp_pa")
        assert await store.get("resp_pa") is None
        assert await alice.get("resp_pa") is not None and await alice.delete("resp_pa")
    finally:
        await store.aclose()


async def test_a_postgres_table_from_before_owners_gains_the_column(postgres_url: str) -> None:
    """A table without the owner column, opened by two servers at once: both migrate it
    (one adds the column, the other finds it added), its rows ``anonymous``'s."""
    import asyncpg

    admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await admin.execute("CREATE DATABASE before_owners")
    finally:
        await admin.close()
    url = postgres_url.rsplit("/", 1)[0] + "/before_owners"
    old = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await old.execute(
            "CREATE TABLE ponder_responses (id VARCHAR(80) PRIMARY KEY,"
            " created_at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL,"
            " conversation TEXT NOT NULL)"
        )
        await old.execute(
            "INSERT INTO ponder_responses VALUES ('resp_old', $1, '{\"id\": \"resp_old\"}', '[]')",
            time.time(),
        )
    finally:
        await old.close()
    one, two = (ResponseStore(url, max_age_s=100, max_count=9) for _ in range(2))
    try:
        found = await asyncio.gather(one.get("resp_old"), two.owned_by("team-a").get("resp_old"))
        assert found[0] is not None and found[0].body == {"id": "resp_old"}
        assert found[1] is None
    finally:
        await one.aclose()
        await two.aclose()
