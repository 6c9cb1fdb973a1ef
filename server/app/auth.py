"""Bearer API keys for ``/v1/*``, compared in constant time; Anthropic's clients' ``x-api-key``
header is read as the same key when no ``Authorization`` header is sent.

With no keys configured, auth is off (the server logs a warning at start). The client's
key is only checked, never forwarded: engines use their own configured key.

>>> auth = APIKeyAuth(["sk-one", "sk-two"])
>>> auth.check("Bearer sk-two")
>>> auth.check("Bearer nope")
Traceback (most recent call last):
...
server.errors.AuthenticationError: invalid API key
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import AuthenticationError, api_error

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics


class APIKeyAuth:
    """Checks ``Authorization: Bearer <key>`` against the configured keys."""

    def __init__(self, keys: Iterable[str]):
        self._keys = tuple(k.encode() for k in keys if k)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None) -> None:
        """Raise :class:`AuthenticationError` unless the header carries a known key."""
        if not self._keys:
            return
        if not authorization:
            raise AuthenticationError(
                "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("the Authorization header must be 'Bearer <key>'")
        given = token.strip().encode()
        matched = False
        for key in self._keys:  # check every key: timing does not reveal which one matched
            matched |= hmac.compare_digest(given, key)
        if not matched:
            raise AuthenticationError("invalid API key")


async def require_api_key(request: Request) -> None:
    """The same check as a FastAPI dependency (for routes mounted outside ``/v1``)."""
    auth: APIKeyAuth = request.app.state.auth
    auth.check(request.headers.get("authorization"))


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
            self.auth.check(header)
        except AuthenticationError as exc:
            error = api_error(exc)
            if self.metrics is not None:
                self.metrics.rejected.labels(reason=error.code or "401").inc()
            response = error.response()
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
