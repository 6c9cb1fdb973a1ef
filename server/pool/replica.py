"""One engine replica as the router sees it: its breaker, load and calls in flight.

:class:`Replica` is what :class:`~server.pool.replica_engine.ReplicaEngine` routes over; a
:class:`Lease` is one call on one replica, which frees its slot and reports its outcome
to the replica's :class:`~server.pool.breaker.CircuitBreaker` exactly once.

>>> from scaffolds.engines.mock import MockEngine
>>> replica = Replica(0, "a", MockEngine(lambda r: "a"), CircuitBreaker("a", threshold=1))
>>> lease = replica.lease()
>>> replica.outstanding, lease.finish("fail", "boom"), replica.outstanding, replica.up
(1, None, 0, False)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from scaffolds.engines.protocol import Engine
from scaffolds.errors import EngineError, EngineRejectedError
from server.pool.breaker import CircuitBreaker

__all__ = ["Lease", "Replica", "is_replica_fault"]


def is_replica_fault(exc: BaseException) -> bool:
    """Whether an error says something about the replica's health (not the request's).

    >>> from scaffolds.errors import EngineUnavailableError
    >>> is_replica_fault(EngineUnavailableError("down")), is_replica_fault(
    ...     EngineRejectedError("bad request", status=400))
    (True, False)
    """
    return isinstance(exc, EngineError) and not isinstance(exc, EngineRejectedError)


@dataclass
class Replica:
    """One replica and what the router knows about it."""

    index: int
    name: str
    engine: Engine
    breaker: CircuitBreaker
    outstanding: int = 0
    healthy: bool = True
    """In rotation as far as the active health check goes (True until enough checks in a
    row fail)."""
    failed_checks: int = 0
    """Active health checks failed in a row."""
    calls: int = 0
    leases: set[Lease] = field(default_factory=set, repr=False)
    """The calls in flight on this replica."""

    @property
    def up(self) -> bool:
        return self.healthy and self.breaker.closed

    def up_value(self) -> float:
        return float(self.up)

    def outstanding_value(self) -> float:
        return float(self.outstanding)

    def breaker_value(self) -> float:
        return self.breaker.code()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replica": self.name,
            "up": self.up,
            "healthy": self.healthy,
            "failed_health_checks": self.failed_checks,
            "breaker": self.breaker.state,
            "outstanding": self.outstanding,
            "consecutive_failures": self.breaker.failures,
            "calls": self.calls,
        }
        if self.breaker.state == "open":
            out["retry_in_s"] = round(self.breaker.retry_in_s(), 2)
        if self.breaker.last_error:
            out["last_error"] = self.breaker.last_error
        return out

    def lease(self) -> Lease:
        """Start a call on this replica (the half-open probe, if the breaker is half-open)."""
        lease = Lease(self, self.breaker.begin())
        self.outstanding += 1
        self.calls += 1
        self.leases.add(lease)
        return lease


@dataclass(eq=False)
class Lease:
    """One call on one replica: releases its slot (and probe) exactly once.

    ``silent`` is the task awaiting the call's first output; while it runs, the health
    poll may cancel it (``evicted``) to move the call to another replica.
    """

    replica: Replica
    probe: bool
    done: bool = False
    silent: asyncio.Future[Any] | None = None
    evicted: bool = False

    def evict(self) -> None:
        if self.silent is not None and not self.silent.done():
            self.evicted = True
            self.silent.cancel()

    def finish(self, outcome: Literal["ok", "fail", "neutral"], error: str = "") -> None:
        if self.done:
            return
        self.done = True
        self.replica.leases.discard(self)
        self.replica.outstanding -= 1
        self.replica.breaker.end(probe=self.probe)
        if outcome == "ok":
            self.replica.breaker.succeeded()
        elif outcome == "fail":
            self.replica.breaker.failed(error)
