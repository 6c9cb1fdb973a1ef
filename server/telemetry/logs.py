"""Structured JSON logs carrying the request id, and the request-id/access-log middleware.

Every log line written while a request is handled carries its ``request_id``; the same
id is returned as ``X-Request-Id`` (a sane incoming ``X-Request-Id`` is kept). Headers
are never logged, so API keys never reach the logs.

>>> import logging
>>> record = logging.LogRecord("ponder", logging.INFO, "f.py", 1, "hello %s", ("you",), None)
>>> import json; json.loads(JsonFormatter().format(record))["message"]
'hello you'
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import sys
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ponder_request_id", default=None
)

key_name_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "ponder_key_name", default="anonymous"
)
"""The name of the client key the request being handled was authenticated with (set by
the auth middleware; never the key itself): each log line carries it as ``key``."""

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}
_SKIP = {"color_message", "request_id", "taskName", "key"}

log = logging.getLogger("ponder.access")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id_var.get()
        in_request = bool(rid and rid != "-")
        if in_request:
            data["request_id"] = rid
        key = getattr(record, "key", None) or (key_name_var.get() if in_request else None)
        if key:
            data["key"] = key
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in _SKIP and key not in data and key[0] != "_":
                data[key] = value if isinstance(value, str | int | float | bool) else repr(value)
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id_var.get() or "-"
        return True


def configure_logging(level: str = "info", *, json_logs: bool = True) -> None:
    """Send ``ponder.*`` and uvicorn logs to stderr, as JSON lines or plain text."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    for name in ("ponder", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # our access log replaces it


class AccessSampler:
    """Which access-log lines to write: every error, and successful requests up to
    ``rate`` lines per second (a token bucket; 0 means every line). A written line
    carries ``sampled``, the requests it stands for (itself and those skipped since).

    >>> sampler = AccessSampler(rate=2.0)
    >>> [sampler.take(200, now=10.0) for _ in range(4)]
    [1, 1, 0, 0]
    >>> sampler.take(500, now=10.0), sampler.take(200, now=11.0)
    (1, 3)
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._tokens = rate
        self._last = 0.0
        self._skipped = 0

    def take(self, status: int, *, now: float) -> int:
        """0 to skip this request's line, else how many requests the line stands for."""
        if self.rate <= 0 or status >= 400:
            return 1
        self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < 1:
            self._skipped += 1
            return 0
        self._tokens -= 1
        sampled, self._skipped = self._skipped + 1, 0
        return sampled


def _key_name(scope: Scope) -> str:
    """The name of the key the auth middleware found for this request (``anonymous``)."""
    key = scope.get("state", {}).get("client_key")
    return str(getattr(key, "name", "anonymous"))


class RequestContext:
    """ASGI middleware: request id in, ``X-Request-Id`` out, one access-log line
    (sampled past ``access_log_rate`` successful requests a second)."""

    def __init__(self, app: ASGIApp, access_log_rate: float = 0.0):
        self.app = app
        self.sampler = AccessSampler(access_log_rate)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
        rid = incoming if incoming and _SAFE_ID.match(incoming) else secrets.token_hex(16)
        scope.setdefault("state", {})["request_id"] = rid
        token = request_id_var.set(rid)
        status = 0
        started = time.perf_counter()
        rid_header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), rid_header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            ended = time.perf_counter()
            sampled = self.sampler.take(status, now=ended) if log.isEnabledFor(logging.INFO) else 0
            if sampled:
                log.info(
                    "%s %s %s",
                    scope.get("method"),
                    scope.get("path"),
                    status,
                    extra={
                        "key": _key_name(scope),
                        "status": status,
                        "duration_ms": round((ended - started) * 1000, 1),
                        "sampled": sampled,
                    },
                )
            request_id_var.reset(token)
