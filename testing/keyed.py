"""Client keys on a test server: an ASGI wrapper that resolves each request's bearer
token to a :class:`~server.keys.ClientKey`, as the auth middleware does from the keys
file, for tests and benchmarks that build the app themselves.

>>> import asyncio
>>> from server.keys import ClientKey
>>> seen = []
>>> async def app(scope, receive, send):
...     seen.append(scope["state"]["client_key"].name)
>>> keyed = KeyedApp(app, {"sk-a": ClientKey("alice", "a")})
>>> scope = {"type": "http", "headers": [(b"authorization", b"Bearer sk-a")]}
>>> asyncio.run(keyed(scope, None, None)); seen
['alice']
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from server.keys import ANONYMOUS, ClientKey

__all__ = ["KeyedApp"]


class KeyedApp:
    """``app`` with ``request.state.client_key`` set from ``Authorization: Bearer <token>``
    by ``keys`` (an unknown or absent token: :data:`~server.keys.ANONYMOUS`)."""

    def __init__(self, app: ASGIApp, keys: Mapping[str, ClientKey]) -> None:
        self.app = app
        self.keys = dict(keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or ()).get(b"authorization", b"")
            token = header.decode("latin-1").removeprefix("Bearer ").strip()
            state = dict(scope.get("state") or {})
            state["client_key"] = self.keys.get(token, ANONYMOUS)
            scope = {**scope, "state": state}
        await self.app(scope, receive, send)
