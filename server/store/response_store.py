"""Stored responses of ``POST /v1/responses``: what ``previous_response_id`` continues.

One table in any SQL database SQLAlchemy reaches asynchronously: by default an embedded
SQLite file, ``$PONDER_HOME/responses.db`` (``~/.cache/ponder/responses.db``); with
``--responses-db URL`` any other (``postgresql+asyncpg://...`` with the ``postgres`` extra).
Each row is a response's id, its owner (the tenant of the client key that stored it),
creation time, the response object as returned, and the conversation it ends (chat
messages: the earlier turns, its input, its output), which is what a follow-up's run
starts from. A store is seen through one owner (:meth:`ResponseStore.owned_by`): another
owner's row is not there for it, exactly as an id never stored. A table written before
owners existed gains the column on first use, its rows owned by ``anonymous`` (the
owner when no keys are configured). The store is bounded: each write drops rows older
than ``max_age_s`` and all but the newest ``max_count``. The database is opened on first
use, so a server that never stores a response never creates the file.

>>> import asyncio, tempfile
>>> async def demo(folder: str) -> list[dict]:
...     store = ResponseStore(f"sqlite+aiosqlite:///{folder}/r.db", max_age_s=60, max_count=1)
...     await store.put(StoredResponse("resp_1", 1.0e12, {"id": "resp_1"}, []))
...     await store.put(StoredResponse("resp_2", 1.0e12 + 1, {"id": "resp_2"}, []))
...     found = [await store.get(i) for i in ("resp_1", "resp_2")]
...     await store.aclose()
...     return [f.body if f else None for f in found]
>>> with tempfile.TemporaryDirectory() as folder:
...     asyncio.run(demo(folder))
[None, {'id': 'resp_2'}]

Each owner sees only its own rows:

>>> async def owners(folder: str) -> list[bool]:
...     store = ResponseStore(f"sqlite+aiosqlite:///{folder}/r.db", max_age_s=60, max_count=9)
...     alice, bob = store.owned_by("alice"), store.owned_by("bob")
...     await alice.put(StoredResponse("resp_a", 1.0e12, {"id": "resp_a"}, []))
...     seen = [await alice.get("resp_a") is not None, await bob.get("resp_a") is not None,
...             await bob.delete("resp_a"), await alice.delete("resp_a")]
...     await store.aclose()
...     return seen
>>> with tempfile.TemporaryDirectory() as folder:
...     asyncio.run(owners(folder))
[True, False, False, True]
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from scaffolds import fastjson
from server.errors import StoreUnavailableError
from server.keys import ANONYMOUS

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["ResponseStore", "StoredResponse", "default_store_url"]

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ponder_responses ("
    " id VARCHAR(80) PRIMARY KEY,"
    " owner VARCHAR(80) NOT NULL DEFAULT 'anonymous',"
    " created_at DOUBLE PRECISION NOT NULL,"
    " body TEXT NOT NULL,"
    " conversation TEXT NOT NULL)"
)
_INDEX = "CREATE INDEX IF NOT EXISTS ponder_responses_created ON ponder_responses (created_at)"
_ADD_OWNER = (
    "ALTER TABLE ponder_responses ADD COLUMN owner VARCHAR(80) NOT NULL DEFAULT 'anonymous'"
)
"""The migration of a table from before owners: its rows belong to ``anonymous``."""


def default_store_url() -> str:
    """The embedded SQLite file under ``$PONDER_HOME`` (default ``~/.cache/ponder``).

    >>> default_store_url().startswith("sqlite+aiosqlite:///")
    True
    """
    home = os.environ.get("PONDER_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "ponder"
    return f"sqlite+aiosqlite:///{base / 'responses.db'}"


@dataclass(frozen=True)
class StoredResponse:
    """One stored response: the object as returned and the conversation it ends."""

    id: str
    created_at: float
    body: dict[str, Any]
    conversation: list[dict[str, Any]]
    """Chat messages: every earlier turn, this response's input and its output."""


class _Database:
    """The connection pool every owner's view of one store shares, opened on first use."""

    def __init__(self, url: str):
        self.url = url
        self.engine: AsyncEngine | None = None
        self.opening = asyncio.Lock()

    async def open(self) -> AsyncEngine:
        async with self.opening:
            if self.engine is None:
                from sqlalchemy.ext.asyncio import create_async_engine

                if self.url.startswith("sqlite"):
                    path = self.url.split(":///", 1)[-1]
                    if path and path != ":memory:":
                        Path(path).parent.mkdir(parents=True, exist_ok=True)
                engine = create_async_engine(self.url)
                try:
                    await _create_or_migrate(engine)
                except BaseException:
                    await engine.dispose()  # the next use tries again
                    raise
                self.engine = engine
            return self.engine


async def _create_or_migrate(engine: AsyncEngine, tries: int = 3) -> None:
    """The table and its index; a table without the owner column gains it. Another server
    doing the same at the same moment is no error: Postgres may refuse one of two
    concurrent ``CREATE ... IF NOT EXISTS`` (or ``ADD COLUMN``), and the statements are
    tried again once the other's are in."""
    from sqlalchemy import inspect, text
    from sqlalchemy.exc import SQLAlchemyError

    def has_owner(sync_conn: Any) -> bool:
        columns = inspect(sync_conn).get_columns("ponder_responses")
        return any(c["name"] == "owner" for c in columns)

    for attempt in range(tries):
        try:
            async with engine.begin() as conn:
                await conn.execute(text(_SCHEMA))
                await conn.execute(text(_INDEX))
                if not await conn.run_sync(has_owner):
                    await conn.execute(text(_ADD_OWNER))
            return
        except SQLAlchemyError:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.05 * (attempt + 1))


class ResponseStore:
    """The bounded response table behind a SQLAlchemy async URL, seen through one
    ``owner`` (:data:`~server.keys.ANONYMOUS`'s unless told: :meth:`owned_by`)."""

    def __init__(
        self,
        url: str,
        *,
        max_age_s: float,
        max_count: int,
        owner: str = ANONYMOUS.owner,
        _database: _Database | None = None,
    ):
        self.url = url
        self.max_age_s = max_age_s
        self.max_count = max_count
        self.owner = owner
        self._database = _database or _Database(url)

    def owned_by(self, owner: str) -> ResponseStore:
        """The same store (one table, one connection pool) seen by ``owner``: what it
        puts is its own, and it gets and deletes only its own."""
        if owner == self.owner:
            return self
        return ResponseStore(
            self.url,
            max_age_s=self.max_age_s,
            max_count=self.max_count,
            owner=owner,
            _database=self._database,
        )

    async def _open(self) -> AsyncEngine:
        return await self._database.open()

    async def _put(self, stored: StoredResponse) -> None:
        """Store one response, then drop what the age and count bounds leave out."""
        from sqlalchemy import text

        engine = await self._open()
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO ponder_responses (id, owner, created_at, body, conversation)"
                    " VALUES (:id, :owner, :created_at, :body, :conversation)"
                ),
                {
                    "id": stored.id,
                    "owner": self.owner,
                    "created_at": stored.created_at,
                    "body": fastjson.dumps(stored.body).decode(),
                    "conversation": fastjson.dumps(stored.conversation).decode(),
                },
            )
            await conn.execute(
                text("DELETE FROM ponder_responses WHERE created_at < :oldest"),
                {"oldest": time.time() - self.max_age_s},
            )
            await conn.execute(
                text(
                    "DELETE FROM ponder_responses WHERE id NOT IN (SELECT id FROM"
                    " (SELECT id FROM ponder_responses ORDER BY created_at DESC, id DESC"
                    " LIMIT :keep) AS newest)"
                ),
                {"keep": self.max_count},
            )

    async def _get(self, response_id: str) -> StoredResponse | None:
        """The stored response, or None when it was never stored or has expired."""
        from sqlalchemy import text

        engine = await self._open()
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT id, created_at, body, conversation FROM ponder_responses"
                        " WHERE id = :id AND owner = :owner AND created_at >= :oldest"
                    ),
                    {
                        "id": response_id,
                        "owner": self.owner,
                        "oldest": time.time() - self.max_age_s,
                    },
                )
            ).first()
        if row is None:
            return None
        return StoredResponse(row[0], row[1], fastjson.loads(row[2]), fastjson.loads(row[3]))

    async def _delete(self, response_id: str) -> bool:
        """Remove one response; whether it was there."""
        from sqlalchemy import text

        engine = await self._open()
        async with engine.begin() as conn:
            result = await conn.execute(
                text("DELETE FROM ponder_responses WHERE id = :id AND owner = :owner"),
                {"id": response_id, "owner": self.owner},
            )
        return bool(getattr(result, "rowcount", 0))

    async def _count(self) -> int:
        """How many responses the table holds."""
        from sqlalchemy import text

        engine = await self._open()
        async with engine.connect() as conn:
            value = (await conn.execute(text("SELECT COUNT(*) FROM ponder_responses"))).scalar()
        return int(value or 0)

    async def put(self, stored: StoredResponse) -> None:
        """Store one response, then drop what the age and count bounds leave out."""
        await _guarded(self._put(stored))

    async def get(self, response_id: str) -> StoredResponse | None:
        """The stored response, or None when it was never stored or has expired."""
        return await _guarded(self._get(response_id))

    async def delete(self, response_id: str) -> bool:
        """Remove one response; whether it was there."""
        return await _guarded(self._delete(response_id))

    async def count(self) -> int:
        """How many responses the table holds."""
        return await _guarded(self._count())

    async def aclose(self) -> None:
        """Close the connection pool (every owner's view shares it)."""
        database = self._database
        if database.engine is not None:
            await database.engine.dispose()
            database.engine = None


async def _guarded(work: Awaitable[T]) -> T:
    """``work``, with a database that cannot be reached as :class:`StoreUnavailableError`."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return await work
    except (SQLAlchemyError, OSError) as exc:
        raise StoreUnavailableError(f"the response store is unavailable: {exc}") from exc
