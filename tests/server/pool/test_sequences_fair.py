"""The sequence gate's turns across client keys, worked by hand.

Each call holds its sequences until the test ends it, so the order in which the gate
grants them is all that is asserted: the waiting key with the fewest sequences in flight
goes next (among equals, the key whose head came first), calls of one key go in arrival
order, the call considered next blocks all others until it fits (a wide call is never
overtaken forever), and calls with no key are one first-in first-out queue, as before
keys. Nothing here waits on a clock.
"""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from server.pool.metered import MeteredEngine
from server.pool.sequences import SequenceGate, run_key
from server.telemetry.metrics import Metrics


class Calls:
    """Calls at one gate, each named, each holding until :meth:`end` (or cancelled)."""

    def __init__(self, gate: SequenceGate) -> None:
        self.gate = gate
        self.granted: list[str] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ends: dict[str, asyncio.Event] = {}

    async def start(self, name: str, sequences: int, key: str | None) -> None:
        """Send call ``name``; return once it holds its sequences or waits for them."""
        end = self._ends[name] = asyncio.Event()

        async def call() -> None:
            async with self.gate.hold(sequences, key=key):
                self.granted.append(name)
                await end.wait()

        self._tasks[name] = asyncio.create_task(call())
        await settle()

    async def end(self, *names: str) -> None:
        for name in names:
            self._ends[name].set()
        await settle()

    async def cancel(self, *names: str) -> None:
        """Cancel the calls ``names`` at once (none runs its cleanup before all are)."""
        for name in names:
            self._tasks[name].cancel()
        await settle()

    def end_soon(self, name: str) -> None:
        """Let call ``name`` end on a later turn of the loop, without waiting for it."""
        self._ends[name].set()

    async def end_all(self) -> None:
        """End every call, those still waiting as they are granted."""
        for end in self._ends.values():
            end.set()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)


async def settle() -> None:
    """Let every ready task run (a grant resumes its caller on the next loop turns)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_calls_without_a_key_are_one_queue_in_arrival_order() -> None:
    gate = SequenceGate(4)
    calls = Calls(gate)
    await calls.start("held", 3, None)
    await calls.start("wide", 4, None)  # does not fit beside "held"
    await calls.start("narrow-1", 1, None)  # would fit, but waits behind "wide"
    await calls.start("narrow-2", 1, None)
    assert calls.granted == ["held"] and gate.waiting == 6
    await calls.end("held")
    assert calls.granted == ["held", "wide"]
    await calls.end("wide")
    assert calls.granted == ["held", "wide", "narrow-1", "narrow-2"]
    assert gate.waiting_by_key() == {}
    await calls.end_all()
    assert (gate.in_flight, gate.waiting, gate.held_by(None)) == (0, 0, 0)


async def test_another_keys_call_goes_before_the_queued_calls_of_a_busier_key() -> None:
    gate = SequenceGate(4)
    calls = Calls(gate)
    for i in range(4):
        await calls.start(f"a-run-{i}", 1, "a")
    for i in range(3):
        await calls.start(f"a-queued-{i}", 1, "a")
    await calls.start("b", 1, "b")  # came last
    assert gate.waiting_by_key() == {"a": 3, "b": 1}
    await calls.end("a-run-0")  # a holds 3, b none: b's turn
    assert calls.granted[4:] == ["b"]
    await calls.end("a-run-1")  # a holds 2, b 1: a's, in a's own order
    await calls.end("a-run-2")
    assert calls.granted[4:] == ["b", "a-queued-0", "a-queued-1"]
    assert (gate.held_by("a"), gate.held_by("b")) == (3, 1)
    await calls.end_all()
    assert calls.granted[4:] == ["b", "a-queued-0", "a-queued-1", "a-queued-2"]
    assert (gate.held_by("a"), gate.held_by("b"), gate.in_flight) == (0, 0, 0)


async def test_the_fewest_in_flight_goes_first_and_ties_go_to_the_earliest() -> None:
    gate = SequenceGate(6)
    calls = Calls(gate)
    for name, sequences, key in [("a", 3, "a"), ("c", 2, "c"), ("b", 1, "b")]:
        await calls.start(f"{name}-held", sequences, key)
    # all six held; then one more call each, c's first, then a's, then b's
    for key in ("c", "a", "b"):
        await calls.start(f"{key}-next", 1, key)
    await calls.end("a-held")  # three free; held: a none, b 1, c 2
    # a (none) goes; a waits for nothing more, so b (1) before c (2), c's early call last
    assert calls.granted[3:] == ["a-next", "b-next", "c-next"]
    await calls.end_all()


async def test_a_tie_in_sequences_held_goes_to_the_key_whose_call_came_first() -> None:
    gate = SequenceGate(2)
    calls = Calls(gate)
    await calls.start("x-held", 1, "x")
    await calls.start("y-held", 1, "y")
    await calls.start("y-next", 1, "y")  # y's call came before x's
    await calls.start("x-next", 1, "x")
    await calls.end("x-held")  # x holds none, y one: x, though it came later
    assert calls.granted[2:] == ["x-next"]
    await calls.end("x-next")  # x none, y one: y's turn has come (x waits for nothing)
    assert calls.granted[2:] == ["x-next", "y-next"]
    await calls.end_all()

    gate = SequenceGate(2)
    calls = Calls(gate)
    await calls.start("x-held", 2, "x")
    await calls.start("y-first", 1, "y")
    await calls.start("x-second", 1, "x")
    await calls.start("y-third", 1, "y")
    await calls.end("x-held")  # both hold none: the earliest head (y's) goes first
    assert calls.granted[1:] == ["y-first", "x-second"]
    await calls.end_all()
    assert calls.granted[1:] == ["y-first", "x-second", "y-third"]


async def test_a_wide_call_blocks_the_narrow_calls_of_every_key_once_its_turn_comes() -> None:
    gate = SequenceGate(4)
    calls = Calls(gate)
    await calls.start("a-held", 2, "a")
    await calls.start("a-wide", 4, "a")
    await calls.start("b-1", 1, "b")  # b holds none, fewer than a's 2: goes
    await calls.start("b-2", 1, "b")  # b holds 1, fewer than a's 2: goes (gate full)
    await calls.start("b-3", 1, "b")
    assert calls.granted == ["a-held", "b-1", "b-2"]
    await calls.end("a-held")  # a holds none: its wide call is next and does not fit
    await calls.end("b-1")  # one free; b-3 would fit, but waits behind a's wide call
    assert calls.granted == ["a-held", "b-1", "b-2"]
    assert gate.waiting_by_key() == {"a": 4, "b": 1}
    await calls.end("b-2")
    assert calls.granted[-1] == "a-wide" and gate.in_flight == 4
    await calls.end("a-wide")
    assert calls.granted[-1] == "b-3"
    await calls.end_all()


async def test_a_call_wider_than_the_bound_goes_alone_in_its_turn() -> None:
    gate = SequenceGate(2)
    calls = Calls(gate)
    await calls.start("b-held", 1, "b")
    await calls.start("a-huge", 10, "a")  # clamped to the bound
    await calls.start("b-next", 1, "b")
    await calls.end("b-held")
    assert calls.granted == ["b-held", "a-huge"] and gate.in_flight == 2
    await calls.end_all()
    assert calls.granted == ["b-held", "a-huge", "b-next"]


async def test_a_cancelled_waiter_leaves_its_keys_queue_and_unblocks_the_rest() -> None:
    gate = SequenceGate(4)
    calls = Calls(gate)
    await calls.start("a-held", 2, "a")
    await calls.start("b-wide", 4, "b")  # b holds none: next, and does not fit
    await calls.start("a-next", 1, "a")
    assert gate.waiting_by_key() == {"b": 4, "a": 1}
    await calls.cancel("b-wide")
    assert calls.granted == ["a-held", "a-next"]
    assert gate.waiting_by_key() == {} and gate.waiting == 0
    await calls.end_all()
    assert (gate.in_flight, gate.held_by("a"), gate.held_by("b")) == (0, 0, 0)


async def test_a_call_granted_as_it_is_cancelled_gives_its_keys_sequences_back() -> None:
    gate = SequenceGate(1)
    calls = Calls(gate)
    await calls.start("a-held", 1, "a")
    waiter = asyncio.create_task(_hold(gate, "b"))
    await settle()
    calls.end_soon("a-held")
    await asyncio.sleep(0)  # a's call ends and grants b's, which has not resumed yet
    assert gate.held_by("b") == 1 and not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await calls.end_all()
    assert (gate.in_flight, gate.held_by("b"), gate.waiting) == (0, 0, 0)


async def _hold(gate: SequenceGate, key: str) -> None:
    async with gate.hold(1, key=key):
        await asyncio.Event().wait()


async def test_a_larger_bound_grants_the_waiters_in_the_keys_turns() -> None:
    gate = SequenceGate(2)
    calls = Calls(gate)
    await calls.start("a-1", 1, "a")
    await calls.start("a-2", 1, "a")
    await calls.start("a-3", 1, "a")
    await calls.start("a-4", 1, "a")
    await calls.start("b-1", 1, "b")
    await calls.start("b-2", 1, "b")
    gate.resize(5)  # three free: b (none held), b (1 < 2), then a (2 vs b's 2: a came first)
    await settle()
    assert calls.granted == ["a-1", "a-2", "b-1", "b-2", "a-3"]
    await calls.end_all()
    assert gate.in_flight == 0 and gate.peak == 5


async def test_the_metered_engine_waits_in_the_turn_of_the_runs_key() -> None:
    engine = MeteredEngine(MockEngine(lambda r: "x"), Metrics(), "m", max_sequences=2)
    gate = engine.gate
    order: list[str] = []

    async def run(key: str | None, tag: str) -> None:
        run_key.set(key)  # as the serving layer does for a run's task
        await engine.generate(GenerateRequest(tag, SamplingParams(n=1)))
        order.append(tag)

    calls = Calls(gate)
    await calls.start("held-1", 1, "a")  # a holds both sequences
    await calls.start("held-2", 1, "a")
    runs = [asyncio.create_task(run(k, t)) for k, t in [("a", "a-1"), ("a", "a-2"), ("b", "b")]]
    await settle()
    assert gate.waiting_by_key() == {"a": 2, "b": 1}
    await calls.end("held-1")  # a holds one, b none: b's call first
    await asyncio.gather(*runs)
    assert order == ["b", "a-1", "a-2"]
    await calls.end_all()
    assert run_key.get() is None  # each task set its own copy


async def test_waiters_that_leave_at_the_same_moment_leave_the_gate_consistent() -> None:
    gate = SequenceGate(2)
    calls = Calls(gate)
    await calls.start("a-held", 2, "a")
    for name, key in [("a-1", "a"), ("b-1", "b"), ("b-2", "b"), ("c-1", "c")]:
        await calls.start(name, 1, key)
    await calls.cancel("b-1", "a-1", "c-1")  # before any of them runs its cleanup
    assert gate.waiting_by_key() == {"b": 1} and gate.waiting == 1
    await calls.end("a-held")
    assert calls.granted == ["a-held", "b-2"]
    await calls.end_all()
    assert (gate.in_flight, gate.waiting, gate.waiting_by_key()) == (0, 0, {})
