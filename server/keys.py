"""Who is asking: the client key a request was authenticated with, and that key's limits.

The auth middleware (:mod:`server.app.auth`) resolves the request's key to a
:class:`ClientKey` and leaves it on the request's state; everything below reads it from
there (:func:`server.routing.client_key_of`). With no keys configured, every request is
:data:`ANONYMOUS`: one tenant, no limits, as a server with auth off always behaved.

>>> ANONYMOUS.name, ANONYMOUS.tenant, ANONYMOUS.limits.max_concurrent_runs
('anonymous', 'anonymous', None)
>>> ClientKey(name="alice", tenant="team-a", limits=KeyLimits(requests_per_minute=60)).owner
'team-a'
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ANONYMOUS", "ClientKey", "KeyLimits"]


@dataclass(frozen=True)
class KeyLimits:
    """What one key may use; ``None`` is no limit.

    ``models`` and ``scaffolds`` are allow-lists (``None``: all). A token limit counts the
    tokens the key's runs generate, across each run's whole fan-out.
    """

    max_concurrent_runs: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    models: tuple[str, ...] | None = None
    scaffolds: tuple[str, ...] | None = None
    max_fanout: int | None = None


@dataclass(frozen=True)
class ClientKey:
    """An authenticated client: its key's ``name`` (logs and metric labels: never the key),
    the ``tenant`` that owns what it stores, and its :class:`KeyLimits`."""

    name: str
    tenant: str
    limits: KeyLimits = field(default_factory=KeyLimits)

    @property
    def owner(self) -> str:
        """Whom a stored object belongs to: the tenant (keys of one tenant share them)."""
        return self.tenant


ANONYMOUS = ClientKey(name="anonymous", tenant="anonymous")
"""Every request's key when auth is off."""
