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
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from scaffolds.engines.protocol import Usage
from scaffolds.errors import BudgetExhaustedError, DeadlineExceededError
from scaffolds.problem import Budget

__all__ = ["FORCE_ANSWER_TOKENS", "Grant", "Ledger"]

FORCE_ANSWER_TOKENS = 48
"""Tokens held back when the budget cuts a step, so a forced final answer still fits."""


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

    @property
    def tokens(self) -> int:
        return (self.call_tokens or 0) + self.held


@dataclass
class Ledger:
    """Spent and reserved tokens and calls of one run, against its :class:`Budget`."""

    budget: Budget
    deadline: float | None
    """``time.monotonic()`` at which the run's time is up (None: no time limit)."""
    usage: Usage = field(default_factory=Usage)
    reserved_tokens: int = 0
    reserved_calls: int = 0
    cut_reason: str | None = None
    """Why the run was first cut short: "time" (the budget's ``timeout_s``), "calls",
    "tokens", or "context" (a step's prompt left no room in the model's context)."""
    choice_spent: dict[int, int] = field(default_factory=dict)
    """Generated tokens per response choice (for :attr:`Budget.max_choice_tokens`)."""
    choice_reserved: dict[int, int] = field(default_factory=dict)

    @classmethod
    def start(cls, budget: Budget) -> Ledger:
        """A ledger whose deadline starts counting now."""
        timeout = budget.timeout_s
        return cls(budget, None if timeout is None else time.monotonic() + timeout)

    def cut(self, reason: str) -> None:
        """Record that the budget cut the run short (the first reason sticks)."""
        self.cut_reason = self.cut_reason or reason

    def charge(self, usage: Usage, choice: int | None = None) -> None:
        """Account a finished call's usage (to ``choice`` too, when it serves one)."""
        self.usage = self.usage + usage
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
                held = min(FORCE_ANSWER_TOKENS, share // 4)
                if share - held < 1:
                    self.cut("tokens")
                    raise BudgetExhaustedError("the run's token budget is spent", limit="tokens")
                grant = Grant(share - held, held, bound=True, choice=choice)
            self._hold(n * grant.tokens, choice)
        self.reserved_calls += calls
        return grant

    def release(self, n: int, grant: Grant, calls: int = 1) -> None:
        """Return a finished call's reservation (its usage is charged separately)."""
        self.reserved_calls -= calls
        if self._tokens_left(grant.choice) is not None:
            self._hold(-n * grant.tokens, grant.choice)

    def _tokens_left(self, choice: int | None) -> int | None:
        """The tokens a call for ``choice`` may still reserve (None: no token limit)."""
        budget, lefts = self.budget, []
        if budget.max_tokens is not None:
            lefts.append(budget.max_tokens - self.usage.completion_tokens - self.reserved_tokens)
        if budget.max_choice_tokens is not None and choice is not None:
            spent = self.choice_spent.get(choice, 0) + self.choice_reserved.get(choice, 0)
            lefts.append(budget.max_choice_tokens - spent)
        return min(lefts) if lefts else None

    def _hold(self, tokens: int, choice: int | None) -> None:
        self.reserved_tokens += tokens
        if choice is not None:
            self.choice_reserved[choice] = self.choice_reserved.get(choice, 0) + tokens
