"""Admission's reserve over real HTTP: Ponder on loopback with two client keys and three
run slots, in front of the fake engine. Key B asks once (answered), then the engine holds
every call: key A sends five `single` runs, two reach the engine and three wait, the
third slot kept for another key; B's run, sent last, reaches the engine at once while
A's three still wait. With no reserve (``--reserved-runs 0``) A takes all three slots and
B's run waits for one of A's to end. Only the order of calls is asserted, never a time.
"""

from __future__ import annotations

import asyncio

import httpx

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.reliability.conftest import (
    KEY,
    assert_answered,
    auth,
    chat,
    client,
    eventually,
    ponder_settings,
    serving_ponder,
)

KEY_B = "sk-second-tenant-key-5c1d"
WITHIN = 60.0  # seconds any count may take to show, on a machine 10x slower


def contents(fake: FakeEngineHandle, since: int) -> list[str]:
    """The user message of each engine call since call number ``since``, in arrival order."""
    recorded = list(fake.state.requests)[-(fake.state.calls - since) :]
    return [r.body["messages"][-1]["content"] for r in recorded]


async def flood_then_probe(reserved: int) -> tuple[list[str], list[str], tuple[int, int]]:
    """A's five runs, then B's one, on three slots with ``reserved`` kept: the calls the
    engine got before any ended, the order of all its calls, and (running, waiting) once
    B's run was in."""
    with running_fake_engine(FakeEngineConfig()) as fake:
        settings = ponder_settings(
            fake, api_keys=(KEY, KEY_B), max_concurrent_runs=3, reserved_runs=reserved
        )
        with serving_ponder(settings) as (url, app):
            limiter = app.state.serving.limiter
            async with client(url) as c:

                def send(content: str, key: str = KEY) -> asyncio.Task[httpx.Response]:
                    body = chat(content, scaffold="single")
                    call = c.post("/v1/chat/completions", json=body, headers=auth(key))
                    return asyncio.create_task(call)

                assert_answered(await send("b-first", KEY_B), stream=False)  # B has asked
                fake.config.hold = True
                before = fake.state.calls
                share = 3 - reserved
                a = [send(f"a-{i}") for i in range(5)]
                assert await fake.wait_for(lambda s: s.open_calls == share, within=WITHIN)
                assert await eventually(lambda: limiter.waiting == 5 - share, within=WITHIN)
                b = send("b", KEY_B)
                assert await eventually(lambda: limiter.admitted == 6, within=WITHIN)
                if reserved:  # B's call reaches the engine while A's three still wait
                    assert await fake.wait_for(lambda s: s.open_calls == 3, within=WITHIN)
                else:  # B waits in its own queue behind no one of A's
                    assert await eventually(lambda: limiter.waiting == 3, within=WITHIN)
                held = (limiter.running, limiter.waiting)
                held_calls = contents(fake, before)
                fake.config.hold = False
                responses = await asyncio.gather(*a, b)
            order = contents(fake, before)
    for response in responses:
        assert_answered(response, stream=False)
    assert sorted(order) == sorted([*(f"a-{i}" for i in range(5)), "b"])
    return held_calls, order, held


async def test_another_keys_run_takes_the_reserved_slot_while_one_key_floods() -> None:
    held_calls, order, held = await flood_then_probe(reserved=1)
    assert held == (3, 3)  # A: two running, three waiting; B: the third slot
    assert held_calls[-1] == "b" and len(held_calls) == 3, held_calls
    assert all(c.startswith("a-") for c in order[3:]), order


async def test_with_no_reserve_the_flood_takes_every_slot_and_the_other_key_waits() -> None:
    held_calls, order, held = await flood_then_probe(reserved=0)
    assert held == (3, 3)  # A: three running, two waiting; B: waiting
    assert "b" not in held_calls and len(held_calls) == 3, held_calls
    assert order[3] == "b", order  # the first slot to free goes to B, before A's queued
