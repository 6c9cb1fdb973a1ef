"""A circuit breaker for one engine replica: closed, open, half-open.

``threshold`` consecutive failures open it; after ``cooldown_s`` it is half-open and
lets one probe call through, whose outcome closes it or opens it again. The router asks
it :meth:`~CircuitBreaker.admits` before each call, brackets the call with
:meth:`~CircuitBreaker.begin` and :meth:`~CircuitBreaker.end`, and reports the outcome
with :meth:`~CircuitBreaker.succeeded` or :meth:`~CircuitBreaker.failed`.

>>> now = [0.0]
>>> breaker = CircuitBreaker("r1", threshold=2, cooldown_s=10.0, clock=lambda: now[0])
>>> breaker.failed("boom"); breaker.failed("boom"); breaker.state
'open'
>>> breaker.admits(), breaker.retry_in_s()
(False, 10.0)
>>> now[0] = 10.0
>>> breaker.admits(), breaker.state, breaker.begin()
(True, 'half_open', True)
>>> breaker.admits()  # one probe at a time
False
>>> breaker.end(probe=True); breaker.succeeded(); breaker.state
'closed'
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["BreakerState", "CircuitBreaker"]

log = logging.getLogger("ponder.replicas")

BreakerState = Literal["closed", "open", "half_open"]
_CODES: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}


class CircuitBreaker:
    """One replica's breaker (see the module docstring); ``name`` is for logs."""

    def __init__(
        self,
        name: str,
        *,
        threshold: int = 3,
        cooldown_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1 (got {threshold})")
        self.name = name
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._last_error: str | None = None

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def failures(self) -> int:
        """Consecutive failures so far."""
        return self._failures

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def probing(self) -> bool:
        """A half-open probe call is in flight."""
        return self._probing

    def code(self) -> float:
        """The state as a gauge value: 0 closed, 1 half-open, 2 open."""
        return float(_CODES[self._state])

    def retry_in_s(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when it would now)."""
        return max(0.0, self._opened_at + self.cooldown_s - self.clock())

    def cooled(self) -> bool:
        """Whether calls may come in now or at the next admit (read-only)."""
        return self._state != "open" or self.retry_in_s() == 0.0

    def admits(self) -> bool:
        """Whether a call may go now (an open breaker past its cooldown turns half-open)."""
        if self._state == "open" and self.retry_in_s() == 0.0:
            self._state = "half_open"
            log.info("replica %s: breaker half-open, letting one probe through", self.name)
        if self._state == "half_open":
            return not self._probing
        return self._state == "closed"

    def begin(self) -> bool:
        """A call starts; returns whether it is the half-open probe."""
        probe = self._state == "half_open"
        if probe:
            self._probing = True
        return probe

    def end(self, *, probe: bool) -> None:
        """A call that :meth:`begin` started is over (before its outcome is reported)."""
        if probe:
            self._probing = False

    def succeeded(self) -> None:
        """A call went through: the breaker closes and the failure count resets."""
        if self._state != "closed":
            log.info("replica %s: call succeeded, breaker closed", self.name)
        self._state = "closed"
        self._failures = 0

    def failed(self, error: str) -> None:
        """A call failed through the replica's fault; may open the breaker."""
        self._failures += 1
        self._last_error = error[:300]
        trips = self._state == "half_open" or (
            self._state == "closed" and self._failures >= self.threshold
        )
        if trips:
            self._state = "open"
            self._opened_at = self.clock()
            log.warning(
                "replica %s: breaker open after %d consecutive failures (%s)",
                self.name,
                self._failures,
                self._last_error,
            )

    def end_cooldown(self) -> None:
        """Let an open breaker probe at the next call (a health check just passed)."""
        if self._state == "open":
            self._opened_at = -math.inf
