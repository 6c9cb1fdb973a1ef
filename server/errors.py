"""Every error the server returns, in the OpenAI shape, mapped in one place.

The scaffold library raises :class:`~scaffolds.errors.PonderError` subclasses and never
mentions HTTP; this module turns them (and FastAPI's own errors) into a status code and
the JSON body every OpenAI client understands::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "n", "code": "..."}}

>>> from scaffolds.errors import SpecError
>>> api_error(SpecError("unknown strategy 'x'", param="scaffold")).status
400
>>> api_error(NotFoundError("no model 'm'", param="model")).body()["error"]["type"]
'invalid_request_error'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from scaffolds.errors import (
    BudgetExhaustedError,
    DeadlineExceededError,
    EngineError,
    EngineRejectedError,
    EngineTimeoutError,
    EngineUnavailableError,
    InvalidRequestError,
    NotFoundError,
    PonderError,
)

log = logging.getLogger("ponder.server")

__all__ = [
    "APIError",
    "AuthenticationError",
    "BodyTooLargeError",
    "ClientDisconnectedError",
    "ForbiddenError",
    "KeyLimitError",
    "OverloadedError",
    "StoreUnavailableError",
    "api_error",
    "error_response",
    "install_error_handlers",
]


class AuthenticationError(PonderError):
    """The request carried no API key, or a wrong one."""

    code = "invalid_api_key"


class OverloadedError(PonderError):
    """Every run slot and queue place is taken; retry after ``retry_after`` seconds."""

    code = "server_busy"

    def __init__(self, message: str, *, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class KeyLimitError(PonderError):
    """The client key passed one of its own limits (429 with ``Retry-After``), in OpenAI's
    words: ``code`` ``rate_limit_exceeded`` (runs at once, requests or tokens per minute;
    ``kind`` "requests" or "tokens") or ``insufficient_quota`` (the day's tokens are
    spent). ``reason`` names the limit (the refusal counter's label)."""

    def __init__(
        self, message: str, *, code: str, kind: str, reason: str, retry_after: int
    ) -> None:
        super().__init__(message, code=code)
        self.kind = kind
        self.reason = reason
        self.retry_after = retry_after


class ForbiddenError(PonderError):
    """The client key may not use what it asked for (403): a scaffold outside its
    allow-list (``code`` ``scaffold_not_allowed``). A model outside its allow-list is no
    403 but the :class:`~scaffolds.errors.NotFoundError` of a model not served (404
    ``model_not_found``, as OpenAI answers a model a project has no access to), so that a
    key cannot tell one from the other."""

    code = "forbidden"


class ClientDisconnectedError(PonderError):
    """The client went away before its answer was ready (nobody reads the 499)."""

    code = "client_disconnected"


class StoreUnavailableError(PonderError):
    """The database of stored responses could not be reached (503)."""

    code = "store_unavailable"


class BodyTooLargeError(StarletteHTTPException):
    """The request body passed the configured size limit (raised while it streams in).

    It is a Starlette ``HTTPException`` so that FastAPI's body reader passes it through.
    """

    def __init__(self, limit: int):
        super().__init__(413, f"request body is larger than the limit of {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class APIError:
    """A status code plus the OpenAI error fields; ``headers`` go on the HTTP response."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=dict(self.headers))


_HTTP_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", "invalid_request"),
    429: ("rate_limit_error", "server_busy"),
}

_ENGINE_CLIENT_STATUSES = frozenset({400, 413, 422})
"""Engine rejections that are the caller's doing (e.g. a prompt over the context length)."""


def api_error(exc: BaseException) -> APIError:
    """The one mapping from an exception to what the client sees."""
    if isinstance(exc, AuthenticationError):
        challenge = {"WWW-Authenticate": "Bearer"}  # a 401 must say how to authenticate
        return APIError(401, exc.message, "authentication_error", exc.param, exc.code, challenge)
    if isinstance(exc, OverloadedError):
        return APIError(
            429,
            exc.message,
            "rate_limit_error",
            None,
            exc.code,
            {"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, KeyLimitError):
        retry = {"Retry-After": str(exc.retry_after)}
        return APIError(429, exc.message, exc.kind, None, exc.code, retry)
    if isinstance(exc, ForbiddenError):
        return APIError(403, exc.message, "invalid_request_error", exc.param, exc.code)
    if isinstance(exc, StoreUnavailableError):
        return APIError(503, exc.message, "server_error", None, exc.code)
    if isinstance(exc, ClientDisconnectedError):
        return APIError(499, exc.message, "invalid_request_error", None, exc.code)
    if isinstance(exc, NotFoundError):
        code = "model_not_found" if exc.param == "model" else exc.code
        return APIError(404, exc.message, "invalid_request_error", exc.param, code)
    if isinstance(exc, InvalidRequestError):
        return APIError(400, exc.message, "invalid_request_error", exc.param, exc.code)
    if isinstance(exc, DeadlineExceededError):
        return APIError(504, exc.message, "timeout_error", exc.param, exc.code)
    if isinstance(exc, BudgetExhaustedError):
        return APIError(400, exc.message, "invalid_request_error", "budget", exc.code)
    if isinstance(exc, EngineRejectedError):
        status = 400 if exc.status in _ENGINE_CLIENT_STATUSES else 502
        kind = "invalid_request_error" if status == 400 else "engine_error"
        return APIError(status, f"engine rejected the request: {exc.message}", kind, None, exc.code)
    if isinstance(exc, EngineTimeoutError):
        return APIError(504, exc.message, "timeout_error", None, exc.code)
    if isinstance(exc, EngineUnavailableError):
        return APIError(503, exc.message, "engine_unavailable", None, exc.code)
    if isinstance(exc, EngineError):
        return APIError(502, exc.message, "engine_error", None, exc.code)
    if isinstance(exc, PonderError):
        return APIError(500, exc.message, "server_error", exc.param, exc.code)
    if isinstance(exc, TimeoutError):
        return APIError(504, "the request timed out", "timeout_error", None, "timeout")
    if isinstance(exc, StarletteHTTPException) and exc.status_code == 400 and exc.__cause__:
        message = _unreadable_body(exc.__cause__)
        return APIError(400, message, "invalid_request_error", None, "invalid_request")
    if isinstance(exc, StarletteHTTPException):
        kind, code = _HTTP_TYPES.get(exc.status_code, ("server_error", "http_error"))
        return APIError(exc.status_code, str(exc.detail), kind, None, code, exc.headers or {})
    return APIError(500, "internal server error", "server_error", None, "internal_error")


_UNION_TAG = re.compile(r"^(str|int|float|bool|none|bytes|(list|dict|tuple|set|literal)\[.*\])$")
"""How pydantic names the member of a union in an error's location (``scaffold.str``)."""
_JSON_TYPE = "Content-Type: application/json"
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})


def validation_error(errors: Sequence[Any], content_type: str | None = None) -> APIError:
    """A FastAPI/pydantic validation failure as a 400 whose ``param`` names the field.

    >>> validation_error([{"loc": ("body", "messages", 0, "role"), "msg": "Field required"}]).param
    'messages.0.role'
    >>> validation_error([{"loc": ("body",), "type": "model_attributes_type", "msg": "..."}],
    ...                  content_type="text/plain").message
    "the request body must be JSON sent with 'Content-Type: application/json' (got 'text/plain')"
    """
    if not errors:
        return APIError(400, "invalid request", "invalid_request_error", None, "invalid_request")
    first = errors[0]
    loc = _field_path(first)
    if loc == [] and first.get("type") in _NOT_AN_OBJECT | {"missing"}:
        problem = _body_problem(first, content_type)
        return APIError(400, problem, "invalid_request_error", None, "invalid_request")
    param = ".".join(loc) or None
    message = str(first.get("msg", "invalid value"))
    others = [e for e in errors[1:] if _field_path(e) != loc]
    prefix = "Input should be "
    alternatives = [
        str(e.get("msg")).removeprefix(prefix if message.startswith(prefix) else "")
        for e in errors[1:]
        if _field_path(e) == loc
    ]
    if first.get("type") == "json_invalid":
        param = None
        message = "the request body is not valid JSON"
    elif param:
        # The members of a union each fail: say what would have done, in one line.
        message = f"{param}: " + " or ".join(dict.fromkeys([message, *alternatives]))
    if others:
        message += f" (and {len(others)} more error{'s' if len(others) > 1 else ''})"
    return APIError(400, message, "invalid_request_error", param, "invalid_request")


def _field_path(error: Mapping[str, Any]) -> list[str]:
    """An error's location as request field names: no ``body`` root, no union tags."""
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:]
    while loc and _UNION_TAG.match(loc[-1]):
        loc = loc[:-1]
    return loc


def _body_problem(error: Mapping[str, Any], content_type: str | None) -> str:
    if error.get("type") == "missing":
        return "the request body is empty; expected a JSON object"
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        got = repr(content_type) if content_type else "no Content-Type"
        return (
            f"the request body must be JSON sent with 'Content-Type: application/json' (got {got})"
        )
    return "the request body must be a JSON object"


def _unreadable_body(cause: BaseException | None) -> str:
    """Why FastAPI could not parse a body (its own message says only that it could not)."""
    if isinstance(cause, UnicodeDecodeError):
        return "the request body is not valid UTF-8 (JSON must be UTF-8 encoded)"
    if isinstance(cause, RecursionError):
        return "the request body nests too deeply to parse"
    return "the request body could not be read as JSON"


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception the app can raise through :func:`api_error`."""

    async def on_ponder(request: Request, exc: Exception) -> JSONResponse:
        return _respond(request, api_error(exc), exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        error = validation_error(exc.errors(), request.headers.get("content-type"))
        return _respond(request, error, exc)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        return _respond(request, api_error(exc), exc)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _respond(request, api_error(exc), exc)

    app.add_exception_handler(PonderError, on_ponder)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


def _respond(request: Request, error: APIError, exc: BaseException) -> JSONResponse:
    return error_response(error, exc, getattr(request.app.state, "metrics", None))


def error_response(error: APIError, exc: BaseException, metrics: Any = None) -> JSONResponse:
    """``error``'s response, counted as a rejection in ``metrics`` and logged."""
    if metrics is not None and error.status in (400, 401, 404, 413, 429):
        metrics.rejected.labels(reason=error.code or str(error.status)).inc()
    if error.status >= 500:
        log.warning("request failed: %s (%s)", error.message, type(exc).__name__)
    else:
        log.info("request rejected: %s %s", error.status, error.message)
    return error.response()
