"""Admission's reserve, worked by hand: once a second key has asked, no key executes
more than ``max_running - reserved`` runs at once, so the last free slots wait for another
key.

Each run holds its slot until the test ends it, so the order in which slots are granted
is all that is asserted (never a time): a lone key (:data:`~server.keys.ANONYMOUS` with
no keys configured, or one configured key) still takes every slot; once another key has
asked, its run takes the reserved slot at once while one key floods; a flooding key's
queued runs go on as its own runs end (the reserve never deadlocks); a key's own limits
are held as before.
"""

from __future__ import annotations

import asyncio

import pytest

from server.errors import KeyLimitError, OverloadedError
from server.keys import ANONYMOUS, ClientKey, KeyLimits
from server.runs.admission import RunLimiter, RunSlot
from server.runs.handler import Serving
from server.settings import Settings

A, B, C = ClientKey("a", "team-a"), ClientKey("b", "team-b"), ClientKey("c", "team-c")


def asked(limiter: RunLimiter, *keys: ClientKey) -> None:
    """A request of each of ``keys`` comes and goes (as B's would before A's flood)."""
    for key in keys:
        limiter.admit(key).release()


class Runs:
    """Runs at one limiter, each named, each holding its slot until :meth:`end`."""

    def __init__(self, limiter: RunLimiter) -> None:
        self.limiter = limiter
        self.granted: list[str] = []
        self.slots: dict[str, RunSlot] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ends: dict[str, asyncio.Event] = {}

    async def start(self, name: str, key: ClientKey) -> bool:
        """Admit run ``name`` of ``key``; return once it holds a slot or waits for one,
        with whether it took its slot at once."""
        slot = self.slots[name] = self.limiter.admit(key)
        at_once = slot.free
        end = self._ends[name] = asyncio.Event()

        async def run() -> None:
            try:
                await slot.acquire()
                self.granted.append(name)
                await end.wait()
            finally:
                slot.release()  # as the server does, whether it ran, waits or left

        self._tasks[name] = asyncio.create_task(run())
        await asyncio.sleep(0)
        assert (name in self.granted) == at_once, (name, self.granted)
        return at_once

    async def end(self, name: str) -> None:
        """Run ``name`` ends; return once its slot has been handed on."""
        self._ends[name].set()
        await self._tasks[name]
        await asyncio.sleep(0)  # a run handed the slot records its grant

    async def cancel(self, name: str) -> None:
        """Run ``name``'s client leaves (it waits or runs): its place is given back."""
        self._tasks[name].cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._tasks[name]
        await asyncio.sleep(0)


@pytest.mark.parametrize("key", [ANONYMOUS, A], ids=["no keys configured", "one key"])
async def test_a_lone_key_takes_every_slot(key: ClientKey) -> None:
    limiter = RunLimiter(max_running=4, queue_size=10, reserved=1)
    runs = Runs(limiter)
    asked(limiter, key)
    for i in range(4):
        assert await runs.start(f"r{i}", key)  # all four at once: no reserve held
    assert not await runs.start("r4", key)
    assert (limiter.running, limiter.waiting, limiter.shared) == (4, 1, False)
    await runs.end("r0")
    assert runs.granted == ["r0", "r1", "r2", "r3", "r4"]


async def test_once_two_keys_have_asked_one_alone_runs_all_but_the_reserve() -> None:
    limiter = RunLimiter(max_running=4, queue_size=10, reserved=1)
    runs = Runs(limiter)
    asked(limiter, B)
    assert [await runs.start(f"a{i}", A) for i in range(5)] == [True] * 3 + [False] * 2
    assert (limiter.running, limiter.waiting) == (3, 2)  # one slot free, kept for others
    await runs.end("a0")  # one of A's own ends: the next of A's goes, and only that one
    assert runs.granted == ["a0", "a1", "a2", "a3"]
    assert (limiter.running, limiter.waiting) == (3, 1)


async def test_the_reserved_slot_goes_to_another_key_at_once_while_one_floods() -> None:
    """max 4, reserve 1: A's share is 3. By hand: A1-A3 run, A4-A6 wait; B1 takes the
    reserved slot at once, B2 waits. A1 ends: B2 (1 running) goes before A (2). B1 ends:
    A4. A2 ends: A5. B2 ends: A is at its share, so the slot stays free. A3 ends: A6."""
    limiter = RunLimiter(max_running=4, queue_size=10, reserved=1)
    runs = Runs(limiter)
    asked(limiter, B)
    for i in range(1, 7):
        await runs.start(f"A{i}", A)
    assert await runs.start("B1", B)  # at once, while A floods
    assert not await runs.start("B2", B)  # no slot left: waits its turn
    assert runs.granted == ["A1", "A2", "A3", "B1"]
    await runs.end("A1")
    assert runs.granted[-1] == "B2"
    await runs.end("B1")
    assert runs.granted[-1] == "A4"
    await runs.end("A2")
    assert runs.granted[-1] == "A5"
    await runs.end("B2")
    assert runs.granted[-1] == "A5" and (limiter.running, limiter.waiting) == (3, 1)
    await runs.end("A3")
    assert runs.granted == ["A1", "A2", "A3", "B1", "B2", "A4", "A5", "A6"]
    for name in ("A4", "A5", "A6"):
        await runs.end(name)
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_freed_slots_go_in_turn_to_the_keys_under_their_share() -> None:
    """max 3, reserve 1: each key's share is 2. By hand: A1, A2 run, A3 waits; B1 takes
    the reserved slot, B2 and B3 wait; C1 waits. A1 ends: C1 (none running). B1 ends:
    B2 (B none running, A one). C1 ends: A and B both wait with one running; A3, A being
    served longest ago (A2 before B2). A2 ends: B3, the only key waiting."""
    limiter = RunLimiter(max_running=3, queue_size=10, reserved=1)
    runs = Runs(limiter)
    asked(limiter, A, B)
    for name, key in (("A1", A), ("A2", A), ("A3", A), ("B1", B), ("B2", B), ("B3", B)):
        await runs.start(name, key)
    await runs.start("C1", C)
    assert runs.granted == ["A1", "A2", "B1"]
    for name in ("A1", "B1", "C1", "A2"):
        await runs.end(name)
    assert runs.granted == ["A1", "A2", "B1", "C1", "B2", "A3", "B3"]
    for name in ("A3", "B2", "B3"):
        await runs.end(name)
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_a_second_keys_first_request_waits_for_a_flood_then_the_reserve_holds() -> None:
    """max 2, reserve 1, A alone so far: A1, A2 take both slots, A3-A5 wait. B1, the
    first of B's, turns the reserve on but waits: both slots are A's. A1 ends: B1 (A,
    with A2 running, is at its share of one). B1 ends: the slot stays free, A being at
    its share. B2 takes it at once. A2 ends: A3."""
    limiter = RunLimiter(max_running=2, queue_size=10, reserved=1)
    runs = Runs(limiter)
    for name in ("A1", "A2", "A3", "A4", "A5"):
        await runs.start(name, A)
    assert runs.granted == ["A1", "A2"] and not limiter.shared
    assert not await runs.start("B1", B)
    assert limiter.shared
    await runs.end("A1")
    assert runs.granted[-1] == "B1"
    await runs.end("B1")
    assert (limiter.running, limiter.waiting) == (1, 3)  # the reserved slot is free
    assert await runs.start("B2", B)
    await runs.end("A2")
    assert runs.granted == ["A1", "A2", "B1", "B2", "A3"]
    for name in ("B2", "A3", "A4", "A5"):
        await runs.end(name)
    assert runs.granted[-2:] == ["A4", "A5"]
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_the_reserve_never_deadlocks_a_flood() -> None:
    """max 2, reserve 1: A runs one at a time, and each of its runs that ends lets the
    next go; the other slot stays free for B, who takes it at once."""
    limiter = RunLimiter(max_running=2, queue_size=100, reserved=1)
    runs = Runs(limiter)
    asked(limiter, B)
    names = [f"a{i}" for i in range(20)]
    for name in names:
        await runs.start(name, A)
    assert runs.granted == ["a0"] and limiter.waiting == 19
    assert await runs.start("b", B)
    await runs.end("b")
    for name in names:
        await runs.end(name)
    assert runs.granted == ["a0", "b", *names[1:]]
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_a_flood_waiter_that_leaves_hands_nothing_wrong() -> None:
    limiter = RunLimiter(max_running=3, queue_size=10, reserved=1)
    runs = Runs(limiter)
    asked(limiter, B)
    for name in ("a0", "a1", "a2", "a3"):
        await runs.start(name, A)
    await runs.cancel("a2")  # a waiting run leaves: a3 still waits, the reserve stays free
    assert runs.granted == ["a0", "a1"] and (limiter.running, limiter.waiting) == (2, 1)
    await runs.cancel("a0")  # a running one leaves: its slot goes to a3
    assert runs.granted == ["a0", "a1", "a3"] and limiter.running == 2
    assert await runs.start("b", B)
    for name in ("a1", "a3", "b"):
        await runs.end(name)
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


@pytest.mark.parametrize(("running", "reserved", "kept"), [(1, 1, 0), (2, 5, 1), (4, 0, 0)])
def test_the_reserve_is_never_every_slot(running: int, reserved: int, kept: int) -> None:
    limiter = RunLimiter(max_running=running, queue_size=0, reserved=reserved)
    asked(limiter, A)
    assert limiter.reserved == kept and limiter.share == running  # one key: every slot
    asked(limiter, B)
    assert limiter.shared and limiter.share == running - kept


async def test_a_keys_own_limits_and_the_queue_bound_are_as_before() -> None:
    small = ClientKey("small", "s", KeyLimits(max_concurrent_runs=3))
    limiter = RunLimiter(max_running=3, queue_size=1, reserved=1)
    runs = Runs(limiter)
    asked(limiter, B)
    for name in ("s0", "s1", "s2"):  # two run, the third waits: all three are its places
        await runs.start(name, small)
    with pytest.raises(KeyLimitError):
        limiter.admit(small)  # its own limit counts its waiting run, as before
    assert await runs.start("b", B)  # the reserved slot
    with pytest.raises(OverloadedError):
        limiter.admit(C)  # 3 running + 1 waiting: the server is full
    for name in ("s0", "s1", "s2", "b"):
        await runs.end(name)
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


def test_the_server_takes_its_reserve_from_the_settings() -> None:
    settings = Settings(model="m", engines=("http://127.0.0.1:9/v1",), max_concurrent_runs=8)
    assert Serving.build(settings).limiter.reserved == 1
    settings = settings.model_copy(update={"reserved_runs": 3})
    assert Serving.build(settings).limiter.reserved == 3
