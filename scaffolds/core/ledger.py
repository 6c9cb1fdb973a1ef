"""The budget ledger of one run: what it has spent, what its calls in flight reserved,
and why the budget cut it short, if it did.

Parallel calls reserve their share before they start, so the budget holds however many
run at once. When the token budget (not the caller) bounds a call, a few tokens are held
back for a forced final answer in case the cut lands mid-solution.

>>> ledger = Ledger.start(Budget(max_tokens=100, max_calls=2))
>>> grant = ledger.reserve(2, None)
>>> grant.call_tokens, grant.held, ledger.reserved_tokens
(38, 12, 100)
>>> ledger.release(2, grant)
>>> ledger.reserved_tokens, ledger.cut_reason
(0, None)

A :class:`TokenPool` (a client key's token quota, shared by all of the key's runs) bounds
every call too: its grant is drawn from the pool and what the call did not generate goes
back when it finishes; a call the pool, not the run's budget, bounds cuts the run with
``cut_reason`` "quota".

>>> pool = CountedPool(60)
>>> ledger = Ledger.start(Budget(max_tokens=1000), pool)
>>> grant = ledger.reserve(2, 100)
>>> grant.call_tokens, grant.limit, pool.available()
(23, 'quota', 0)
>>> ledger.charge(Usage(completion_tokens=40)); ledger.release(2, grant)
>>> pool.available(), ledger.cut_reason
(20, None)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from scaffolds.engines.protocol import Usage
from scaffolds.errors import BudgetExhaustedError, DeadlineExceededError
from scaffolds.problem import Budget

__all__ = ["FORCE_ANSWER_TOKENS", "CountedPool", "Grant", "Ledger", "TokenPool"]

FORCE_ANSWER_TOKENS = 48
"""Tokens held back when the budget cuts a step, so a forced final answer still fits."""


class TokenPool(Protocol):
    """Generated tokens shared beyond one run (a client key's quota): what calls may still
    draw, drawn before a call starts and given back when it ends, and what they spent.

    All three are called on the event loop's thread, so a draw is atomic across runs."""

    def available(self) -> int:
        """Tokens a call may draw now (never below 0)."""
        ...

    def draw(self, tokens: int) -> None:
        """Hold ``tokens`` for a call about to start (negative: give them back)."""
        ...

    def spend(self, tokens: int) -> None:
        """Count ``tokens`` a finished call generated."""
        ...


@dataclass
class CountedPool:
    """A :class:`TokenPool` of ``limit`` tokens that never refills (tests, one-off jobs)."""

    limit: int
    drawn: int = 0
    spent: int = 0

    def available(self) -> int:
        return max(0, self.limit - self.spent - self.drawn)

    def draw(self, tokens: int) -> None:
        self.drawn += tokens

    def spend(self, tokens: int) -> None:
        self.spent += tokens


@dataclass(frozen=True, slots=True)
class Grant:
    """What :meth:`Ledger.reserve` granted one call, per sample."""

    call_tokens: int | None
    held: int
    """Tokens held back for a forced final answer (0 when the budget did not bind, or
    left too little to hold any back)."""
    bound: bool = False
    """Whether the budget, not the caller, bounds this call: a sample it ends is a cut."""
    choice: int | None = None
    """The response choice the call serves (its tokens count against that choice's own
    limit, :attr:`Budget.max_choice_tokens`); None: the run as a whole."""
    limit: Literal["tokens", "quota"] = "tokens"
    """What bounds the call when :attr:`bound`: the run's budget, or the key's quota."""

    @property
    def tokens(self) -> int:
        return (self.call_tokens or 0) + self.held


@dataclass
class Ledger:
    """Spent and reserved tokens and calls of one run, against its :class:`Budget`."""

    budget: Budget
    deadline: float | None
    """``time.monotonic()`` at which the run's time is up (None: no time limit)."""
    pool: TokenPool | None = None
    """The client key's token quota this run draws every call's grant from (None: none)."""
    usage: Usage = field(default_factory=Usage)
    reserved_tokens: int = 0
    reserved_calls: int = 0
    cut_reason: str | None = None
    """Why the run was first cut short: "time" (the budget's ``timeout_s``), "calls",
    "tokens", "quota" (the client key's token quota), or "context" (a step's prompt left no
    room in the model's context)."""
    choice_spent: dict[int, int] = field(default_factory=dict)
    """Generated tokens per response choice (for :attr:`Budget.max_choice_tokens`)."""
    choice_reserved: dict[int, int] = field(default_factory=dict)

    @classmethod
    def start(cls, budget: Budget, pool: TokenPool | None = None) -> Ledger:
        """A ledger whose deadline starts counting now, drawing from ``pool`` if given."""
        timeout = budget.timeout_s
        return cls(budget, None if timeout is None else time.monotonic() + timeout, pool)

    def cut(self, reason: str) -> None:
        """Record that the budget cut the run short (the first reason sticks)."""
        self.cut_reason = self.cut_reason or reason

    def charge(self, usage: Usage, choice: int | None = None) -> None:
        """Account a finished call's usage (to ``choice`` too, when it serves one)."""
        self.usage = self.usage + usage
        if self.pool is not None:
            self.pool.spend(usage.completion_tokens)
        if choice is not None:
            spent = self.choice_spent.get(choice, 0)
            self.choice_spent[choice] = spent + usage.completion_tokens

    def loop_deadline(self) -> float | None:
        """The deadline on the running event loop's clock (for ``asyncio.timeout_at``)."""
        if self.deadline is None:
            return None
        return asyncio.get_running_loop().time() + self.deadline - time.monotonic()

    def reserve(
        self, n: int, wanted: int | None, calls: int = 1, choice: int | None = None
    ) -> Grant:
        """Check the budget and reserve what a call of ``n`` samples may spend, each
        ``wanted`` tokens at most (None: as many as the budget allows), as ``calls``
        engine requests (a verifier's batch may take several), for response choice
        ``choice`` (None: the run as a whole; a choice also keeps within
        :attr:`Budget.max_choice_tokens`).

        Raises :class:`DeadlineExceededError` or :class:`BudgetExhaustedError` (and
        records the cut) when the call may not start.
        """
        budget = self.budget
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.cut("time")
            raise DeadlineExceededError()
        if budget.max_calls is not None and (
            self.usage.calls + self.reserved_calls + calls > budget.max_calls
        ):
            self.cut("calls")
            raise BudgetExhaustedError("the run's engine-call budget is spent", limit="calls")
        grant = Grant(wanted, 0, choice=choice)
        left = self._tokens_left(choice)
        if left is not None:
            share = left // n
            if wanted is None or share < wanted:
                # The budget, not the caller, bounds this call: hold back room for a
                # forced final answer in case the cut lands mid-solution.
                own = self._own_left(choice)
                by_pool = self.pool is not None and (own is None or left < own)
                limit: Literal["tokens", "quota"] = "quota" if by_pool else "tokens"
                held = min(FORCE_ANSWER_TOKENS, share // 4)
                if share - held < 1:
                    self.cut(limit)
                    raise BudgetExhaustedError(_SPENT[limit], limit=limit)
                grant = Grant(share - held, held, bound=True, choice=choice, limit=limit)
            self._hold(n * grant.tokens, choice)
        self.reserved_calls += calls
        return grant

    def release(self, n: int, grant: Grant, calls: int = 1) -> None:
        """Return a finished call's reservation (its usage is charged separately)."""
        self.reserved_calls -= calls
        if self._tokens_left(grant.choice) is not None:
            self._hold(-n * grant.tokens, grant.choice)

    def cut_by(self, grant: Grant) -> None:
        """Record that ``grant``'s bound ended a sample (the budget's or the quota's)."""
        self.cut(grant.limit)

    def _tokens_left(self, choice: int | None) -> int | None:
        """The tokens a call for ``choice`` may still reserve (None: no token limit)."""
        own = self._own_left(choice)
        if self.pool is None:
            return own
        pooled = self.pool.available()
        return pooled if own is None else min(own, pooled)

    def _own_left(self, choice: int | None) -> int | None:
        """What the run's own budget leaves a call for ``choice`` (None: no token limit)."""
        budget, lefts = self.budget, []
        if budget.max_tokens is not None:
            lefts.append(budget.max_tokens - self.usage.completion_tokens - self.reserved_tokens)
        if budget.max_choice_tokens is not None and choice is not None:
            spent = self.choice_spent.get(choice, 0) + self.choice_reserved.get(choice, 0)
            lefts.append(budget.max_choice_tokens - spent)
        return min(lefts) if lefts else None

    def _hold(self, tokens: int, choice: int | None) -> None:
        self.reserved_tokens += tokens
        if self.pool is not None:
            self.pool.draw(tokens)
        if choice is not None:
            self.choice_reserved[choice] = self.choice_reserved.get(choice, 0) + tokens


_SPENT = {
    "tokens": "the run's token budget is spent",
    "quota": "the client key's token quota is spent",
}
