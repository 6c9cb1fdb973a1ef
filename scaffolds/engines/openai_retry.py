"""How :class:`~scaffolds.engines.openai_http.OpenAIEngine` retries a call, and what it
calls a failure.

Failed connections and the statuses 408, 429 and 5xx are retried with jittered
exponential backoff, or after the server's ``Retry-After`` (capped at ``backoff_max``);
other 4xx never are. Every failure leaves as an ``Engine*Error`` of
:mod:`scaffolds.errors` that names the engine, never as an httpx exception.

>>> policy = RetryPolicy("http://e/v1", max_retries=2)
>>> str(policy.error(RetryableStatus(503, "busy", None), attempts=3, started=False))
'engine http://e/v1 answered HTTP 503 after 3 attempts: busy'
>>> is_retryable(RetryableStatus(429, "slow down", 1.0)), is_retryable(ValueError())
(True, False)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from scaffolds.errors import EngineError, EngineTimeoutError, EngineUnavailableError

__all__ = ["RetryPolicy", "RetryableStatus", "is_retryable"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Failures that happen before the server has answered: the request did no work, or its
# answer was lost before any byte of it reached us, so sending it again is safe.
_RETRY_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


class RetryableStatus(Exception):
    """An attempt got a status worth retrying (never escapes the engine)."""

    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (RetryableStatus, *_RETRY_TRANSPORT))


@dataclass(frozen=True)
class RetryPolicy:
    """One engine's retries: ``max_retries`` after the first attempt."""

    url: str
    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    read_timeout: float | None = None
    _backoff: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 (got {self.max_retries})")
        backoff = wait_random_exponential(multiplier=self.backoff_base, max=self.backoff_max)
        object.__setattr__(self, "_backoff", backoff)

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until it succeeds, fails for good or the retries run out.

        The first attempt runs outside tenacity (whose machinery costs as much CPU as a
        fast engine call); a retryable failure then enters the retry loop as its first
        attempt, so waits, logs and the attempt count are the same."""
        try:
            return await attempt()
        except (RetryableStatus, httpx.HTTPError) as exc:
            if not is_retryable(exc):
                raise self.error(exc, attempts=1, started=False) from exc
            first: BaseException | None = exc
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(is_retryable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        attempts = 0
        try:
            async for tried in retrying:
                with tried:
                    attempts += 1
                    if first is not None:
                        failed, first = first, None
                        raise failed
                    return await attempt()
        except (RetryableStatus, httpx.HTTPError) as exc:
            raise self.error(exc, attempts=attempts, started=False) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    def error(self, exc: BaseException, *, attempts: int, started: bool) -> EngineError:
        """The ``Engine*Error`` for a failure (``started``: the response had begun)."""
        url = self.url
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, RetryableStatus):
            return EngineUnavailableError(
                f"engine {url} answered HTTP {exc.status} {tries}: {exc.message}",
                status=exc.status,
            )
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return EngineUnavailableError(f"could not connect to engine {url} {tries} ({detail})")
        if isinstance(exc, httpx.TimeoutException):
            return EngineTimeoutError(
                f"engine {url} did not answer within the timeout "
                f"(read_timeout={self.read_timeout}s; {detail})"
            )
        if isinstance(exc, httpx.TransportError):
            when = "while streaming its response" if started else tries
            return EngineUnavailableError(f"lost the connection to engine {url} {when} ({detail})")
        return EngineError(f"request to engine {url} failed ({detail})")

    def _wait(self, state: RetryCallState) -> float:
        """Jittered exponential backoff, or the server's ``Retry-After`` (capped)."""
        exc = _failure(state)
        if isinstance(exc, RetryableStatus) and exc.retry_after is not None:
            return min(exc.retry_after, self.backoff_max)
        return float(self._backoff(state))

    def _log_retry(self, state: RetryCallState) -> None:
        sleep = state.next_action.sleep if state.next_action is not None else 0.0
        msg = "engine %s: attempt %d failed (%r); retrying in %.2fs"
        logger.warning(msg, self.url, state.attempt_number, _failure(state), sleep)


def _failure(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None
