"""A client key's own limits, held between its requests: runs at once, requests per
minute, and its generated tokens per minute and per day.

:class:`KeyQuotas` keeps each key's state by its name (the keys file names each key;
a reloaded key keeps its state). :meth:`KeyQuotas.check` refuses a request at admission
with :class:`~server.errors.KeyLimitError` (429, ``Retry-After``);
:meth:`KeyQuotas.pool` is the key's :class:`~scaffolds.core.ledger.TokenPool`, which
every engine call of the key's runs draws its grant from before it starts (and gives
back what it did not generate when it ends), so the quota holds across every run and
every fan-out of the key at once: a call never gets more than what is left, and a run
the quota bounds is cut with ``cut_reason`` "quota".

* ``tokens_per_minute`` is a token bucket: it holds at most that many tokens and refills
  at that rate (a minute's worth after a minute idle).
* ``tokens_per_day`` counts the tokens of the current UTC day; it resets at midnight.
* ``requests_per_minute`` counts the admitted requests of the last 60 seconds.

>>> from server.keys import ClientKey, KeyLimits
>>> clock = FrozenClock(1_000.0)
>>> quotas = KeyQuotas(clock=clock)
>>> key = ClientKey("alice", "team", KeyLimits(requests_per_minute=1, tokens_per_minute=600))
>>> quotas.check(key, running=0); quotas.count_request(key)
>>> try:
...     quotas.check(key, running=0)
... except KeyLimitError as err:
...     err.code, err.retry_after
('rate_limit_exceeded', 60)
>>> pool = quotas.pool(key)
>>> pool.available(), pool.spend(600), pool.available()
(600, None, 0)
>>> clock.now += 30  # half a minute refills half the bucket
>>> pool.available()
300
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from server.errors import KeyLimitError
from server.keys import ClientKey, KeyLimits

__all__ = ["DayTokens", "FrozenClock", "KeyQuotas", "KeyTokens", "MinuteTokens"]

Clock = Callable[[], float]
"""Seconds since the epoch (``time.time``: the day's window is the UTC day)."""

DAY_S = 86_400.0
MINUTE_S = 60.0


@dataclass
class FrozenClock:
    """A clock that moves only when told (tests, and the doctests here)."""

    now: float

    def __call__(self) -> float:
        return self.now


class MinuteTokens:
    """A token bucket of ``capacity`` tokens refilled at ``capacity`` per minute; calls
    draw from it before they start and give back what they did not spend."""

    def __init__(self, capacity: int, clock: Clock) -> None:
        self.capacity = capacity
        self._clock = clock
        self._level = float(capacity)
        self._at = clock()
        self.drawn = 0

    def _refill(self) -> None:
        now = self._clock()
        rate = self.capacity / MINUTE_S
        self._level = min(float(self.capacity), self._level + (now - self._at) * rate)
        self._at = now

    def available(self) -> int:
        self._refill()
        return max(0, math.floor(self._level) - self.drawn)

    def draw(self, tokens: int) -> None:
        self.drawn += tokens

    def spend(self, tokens: int) -> None:
        self._refill()
        self._level -= tokens

    def retry_after(self) -> int:
        """Whole seconds until a token is free (at least 1)."""
        short = self.drawn + 1 - self._level
        return max(1, math.ceil(short * MINUTE_S / self.capacity))


class DayTokens:
    """The tokens of the current UTC day, at most ``limit``; the count resets at midnight."""

    def __init__(self, limit: int, clock: Clock) -> None:
        self.limit = limit
        self._clock = clock
        self._day = self._today()
        self.spent = 0
        self.drawn = 0

    def _today(self) -> int:
        return int(self._clock() // DAY_S)

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day, self.spent = today, 0

    def available(self) -> int:
        self._roll()
        return max(0, self.limit - self.spent - self.drawn)

    def draw(self, tokens: int) -> None:
        self.drawn += tokens

    def spend(self, tokens: int) -> None:
        self._roll()
        self.spent += tokens

    def retry_after(self) -> int:
        """Whole seconds until midnight UTC."""
        return max(1, math.ceil((self._day + 1) * DAY_S - self._clock()))


@dataclass
class KeyTokens:
    """A key's :class:`~scaffolds.core.ledger.TokenPool`: its minute bucket and its day,
    whichever has less left."""

    minute: MinuteTokens | None = None
    day: DayTokens | None = None

    def _parts(self) -> list[MinuteTokens | DayTokens]:
        return [part for part in (self.minute, self.day) if part is not None]

    def available(self) -> int:
        return min(part.available() for part in self._parts())

    def draw(self, tokens: int) -> None:
        for part in self._parts():
            part.draw(tokens)

    def spend(self, tokens: int) -> None:
        for part in self._parts():
            part.spend(tokens)


@dataclass
class _KeyState:
    requests: deque[float] = field(default_factory=deque)
    tokens: KeyTokens = field(default_factory=KeyTokens)


class KeyQuotas:
    """Every key's requests and tokens, by key name, on one clock."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._keys: dict[str, _KeyState] = {}

    def _state(self, key: ClientKey) -> _KeyState:
        state = self._keys.get(key.name)
        if state is None:
            state = self._keys[key.name] = _KeyState()
        limits, tokens = key.limits, state.tokens
        tpm, tpd = limits.tokens_per_minute, limits.tokens_per_day
        # A reloaded key's new limits apply to what it has drawn and spent so far.
        if tpm is None or tokens.minute is None:
            tokens.minute = None if tpm is None else MinuteTokens(tpm, self._clock)
        else:
            tokens.minute.capacity = tpm
        if tpd is None or tokens.day is None:
            tokens.day = None if tpd is None else DayTokens(tpd, self._clock)
        else:
            tokens.day.limit = tpd
        return state

    def pool(self, key: ClientKey) -> KeyTokens | None:
        """The key's token pool, which its runs draw from (None: no token limit)."""
        if not _limits_tokens(key.limits):
            return None
        return self._state(key).tokens

    def check(self, key: ClientKey, running: int) -> None:
        """Raise :class:`KeyLimitError` when a request of ``key``, which holds ``running``
        places already, may not be admitted now: runs at once, requests in the last
        minute, or a token quota with nothing left."""
        limits = key.limits
        most = limits.max_concurrent_runs
        if most is not None and running >= most:
            raise KeyLimitError(
                f"key {key.name!r} has {running} runs in progress, its limit; retry when "
                "one finishes",
                code="rate_limit_exceeded",
                kind="requests",
                reason="concurrent_runs",
                retry_after=1,
            )
        rpm = limits.requests_per_minute
        if rpm is not None:
            now, requests = self._clock(), self._state(key).requests
            while requests and requests[0] <= now - MINUTE_S:
                requests.popleft()
            if len(requests) >= rpm:
                wait = max(1, math.ceil(requests[0] + MINUTE_S - now))
                raise KeyLimitError(
                    f"rate limit reached for key {key.name!r} on requests per minute: "
                    f"limit {rpm}, used {len(requests)}; try again in {wait}s",
                    code="rate_limit_exceeded",
                    kind="requests",
                    reason="requests_per_minute",
                    retry_after=wait,
                )
        if _limits_tokens(limits):
            tokens = self._state(key).tokens
            if tokens.day is not None and tokens.day.available() < 1:
                wait = tokens.day.retry_after()
                raise KeyLimitError(
                    f"key {key.name!r} has used its {tokens.day.limit} tokens for the day; "
                    f"the quota resets at midnight UTC (in {wait}s)",
                    code="insufficient_quota",
                    kind="insufficient_quota",
                    reason="tokens_per_day",
                    retry_after=wait,
                )
            if tokens.minute is not None and tokens.minute.available() < 1:
                wait = tokens.minute.retry_after()
                raise KeyLimitError(
                    f"rate limit reached for key {key.name!r} on tokens per minute: "
                    f"limit {tokens.minute.capacity}; try again in {wait}s",
                    code="rate_limit_exceeded",
                    kind="tokens",
                    reason="tokens_per_minute",
                    retry_after=wait,
                )

    def count_request(self, key: ClientKey) -> None:
        """Count an admitted request against the key's requests per minute."""
        if key.limits.requests_per_minute is not None:
            self._state(key).requests.append(self._clock())


def _limits_tokens(limits: KeyLimits) -> bool:
    return limits.tokens_per_minute is not None or limits.tokens_per_day is not None
