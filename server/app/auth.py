"""Bearer API keys for ``/v1/*``, compared in constant time; Anthropic's clients' ``x-api-key``
header is read as the same key when no ``Authorization`` header is sent.

A key resolves to its :class:`~server.keys.ClientKey` (name, tenant, limits), which the
middleware leaves on the request's state (``scope["state"]["client_key"]``, read by
:func:`server.routing.client_key_of`) and whose name every log line of the request
carries. Keys are held as SHA-256 digests (:class:`~server.keys.KeyTable`); a reload
(SIGHUP) swaps the whole table at once, so a request sees the old table or the new one.
With no keys configured, auth is off (the server logs a warning at start) and every
request is :data:`~server.keys.ANONYMOUS`. The client's key is only checked, never
forwarded: engines use their own configured key.

>>> auth = APIKeyAuth(["sk-one", "sk-two"])
>>> auth.check("Bearer sk-two").name
'key-2'
>>> auth.check("Bearer nope")
Traceback (most recent call last):
...
server.errors.AuthenticationError: invalid API key
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import AuthenticationError, api_error
from server.keys import ANONYMOUS, ClientKey, KeyTable
from server.telemetry.logs import key_name_var

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics


log = logging.getLogger("ponder.server")


class APIKeyAuth:
    """Checks ``Authorization: Bearer <key>`` against the key table; ``load`` (when given)
    reads the table again for :meth:`reload`."""

    def __init__(
        self,
        keys: KeyTable | Iterable[str],
        *,
        load: Callable[[], KeyTable] | None = None,
        required: bool = False,
    ):
        self._table = keys if isinstance(keys, KeyTable) else KeyTable.of_flat_keys(keys)
        self._load = load
        self._required = required or self._table.enabled
        """Auth on for good: a server that started with keys (or a keys file) never opens,
        even when a reload leaves no key (then every request is refused)."""

    @property
    def enabled(self) -> bool:
        return self._required

    @property
    def table(self) -> KeyTable:
        return self._table

    def reload(self) -> bool:
        """Read the keys again and swap the table whole; on an error keep the old one
        (logged, naming the entry, never a key). Whether the table was swapped."""
        if self._load is None:
            return False
        try:
            table = self._load()
        except (OSError, ValueError) as exc:
            log.error("keys not reloaded, the old keys stay: %s", exc)
            return False
        self._table = table  # one assignment: a request sees the old table or the new
        log.info("keys reloaded: %d keys", len(table.entries), extra={"keys": len(table.entries)})
        return True

    def check(self, authorization: str | None) -> ClientKey:
        """The key the header carries; :class:`AuthenticationError` unless it is known.
        With auth off, :data:`~server.keys.ANONYMOUS`."""
        table = self._table
        if not self._required:
            return ANONYMOUS
        if not authorization:
            raise AuthenticationError(
                "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("the Authorization header must be 'Bearer <key>'")
        found = table.lookup(token.strip())  # every digest compared: timing tells nothing
        if found is None:
            raise AuthenticationError("invalid API key")
        return found


async def require_api_key(request: Request) -> None:
    """The same check as a FastAPI dependency (for routes mounted outside ``/v1``)."""
    auth: APIKeyAuth = request.app.state.auth
    request.state.client_key = auth.check(request.headers.get("authorization"))


GUARDED_PREFIXES = ("/v1", "/playground/", "/tokenize", "/detokenize")
OPEN_PREFIXES = ("/playground/static/",)


def guarded(path: str) -> bool:
    """Whether ``path`` needs a key: the API (vLLM's tokenizer routes too) and the
    playground's API, not its page files.

    >>> [guarded(p) for p in ("/v1/models", "/playground/spec", "/playground/static/app.js")]
    [True, True, False]
    >>> [guarded(p) for p in ("/", "/health", "/v1", "/v10", "/tokenize", "/version")]
    [False, False, True, False, True, False]
    """
    if path.startswith(OPEN_PREFIXES):
        return False
    return any(
        path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in GUARDED_PREFIXES
    )


class RequireAPIKey:
    """ASGI middleware: Bearer auth on every :func:`guarded` path, before the body is read.

    Runs before body parsing, so a client without a valid key gets 401 whatever it sends.
    """

    def __init__(self, app: ASGIApp, auth: APIKeyAuth, metrics: Metrics | None = None):
        self.app = app
        self.auth = auth
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.auth.enabled or not guarded(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
            elif name == b"x-api-key" and header is None:  # Anthropic's clients send this
                header = "Bearer " + value.decode("latin-1")
        try:
            key = self.auth.check(header)
        except AuthenticationError as exc:
            error = api_error(exc)
            if self.metrics is not None:
                self.metrics.rejected.labels(reason=error.code or "401").inc()
            response = error.response()
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["client_key"] = key
        token = key_name_var.set(key.name)
        try:
            await self.app(scope, receive, send)
        finally:
            key_name_var.reset(token)
