"""A token pool shared by runs (a client key's quota): every call's grant is drawn from
it, so concurrent runs together never generate more than it holds, and a run it stops
is cut with ``cut_reason`` "quota", not "tokens"."""

from __future__ import annotations

import asyncio

from scaffolds.core.ledger import CountedPool, Ledger
from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import SamplingParams, Usage
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy

LONG = " ".join(["word"] * 500) + " \\boxed{4}"


def test_the_grant_is_the_smaller_of_budget_and_pool_worked_by_hand() -> None:
    """Budget 1,000 and pool 300, 4 samples of up to 200: the pool binds, 300 // 4 = 75
    each, of which min(48, 75 // 4) = 18 are held back for a forced answer: 57 + 18."""
    pool = CountedPool(300)
    ledger = Ledger.start(Budget(max_tokens=1000), pool)
    grant = ledger.reserve(4, 200)
    assert (grant.call_tokens, grant.held, grant.bound, grant.limit) == (57, 18, True, "quota")
    assert pool.available() == 0 and pool.drawn == 300
    ledger.charge(Usage(completion_tokens=4 * 57))
    ledger.release(4, grant)
    assert (pool.drawn, pool.spent, pool.available()) == (0, 228, 72)
    own = ledger.reserve(1, 50)  # 50 fits both: neither bounds it
    assert (own.call_tokens, own.bound) == (50, False)
    ledger.release(1, own)
    try:
        Ledger.start(Budget(), CountedPool(0)).reserve(1, 10)
    except BudgetExhaustedError as exc:
        assert exc.limit == "quota"
    else:
        raise AssertionError("an empty pool lets no call start")


def test_the_budget_not_the_pool_binding_is_still_a_tokens_cut() -> None:
    ledger = Ledger.start(Budget(max_tokens=40), CountedPool(10_000))
    grant = ledger.reserve(1, None)
    assert (grant.bound, grant.limit) == (True, "tokens")


def test_concurrent_runs_together_stay_within_the_pool() -> None:
    """20 runs of gsr(n=4) at once on one pool of 1,500 tokens (each call asks for 100):
    they generate at most 1,500 together, and the runs it stopped say "quota"."""
    pool = CountedPool(1500)
    engine = MockEngine(lambda request: LONG, delay=0.001)
    strategy = build_strategy("gsr(n=4)")

    async def runs() -> list[str | None]:
        made = RunSettings(params=SamplingParams(max_tokens=100), quota=pool)
        results = await asyncio.gather(
            *(run_scaffold(strategy, Problem.from_text(f"q{i}"), engine, made) for i in range(20))
        )
        return [r.cut_reason for r in results]

    reasons = asyncio.run(runs())
    assert pool.spent <= 1500 and pool.drawn == 0
    assert pool.spent > 1500 - 100  # the pool was used up, not refused early
    assert "quota" in reasons and "tokens" not in reasons
