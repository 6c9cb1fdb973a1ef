"""The saturation benchmark's fair-share mode: Ponder's row and the floor's, side by side.

The floor sends key A's flood and key B's single request straight to the fake engine,
with the engine calls Ponder makes for them, so that dividing Ponder's ratios by the
floor's leaves what Ponder in the path adds. These tests check the behaviour (both rows,
every request answered, the same engine calls), never a speed.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from typing import Any

import httpx
import pytest

from benchmarks.harness import MODEL, ROOT, Target
from benchmarks.saturation import Floor, chat_body
from scaffolds.processes.children import owned_process
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder

FLOOD = 20


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.mark.timeout(600)
def test_fair_share_prints_ponder_and_the_floor_with_every_request_answered() -> None:
    cmd = [sys.executable, "-m", "benchmarks.saturation", "--fair-share", "--latency=0.2"]
    cmd.append(f"--flood={FLOOD}")
    with owned_process(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, grace_s=10
    ) as proc:
        output, _ = proc.communicate(timeout=540)
    assert proc.returncode == 0, output
    table = [cells(line) for line in output.splitlines() if line.startswith("|")]
    rows = {row[0]: row for row in table if len(row) == 10 and row[0] in ("ponder", "floor")}
    assert set(rows) == {"ponder", "floor"}, output
    for row in rows.values():
        assert row[3] == f"{FLOOD} x `gsr(n=4)`"
        assert int(row[5]) >= 1  # B's requests under the flood (each one a 200, or no row)
        assert row[9] == f"{FLOOD} / 0"  # every one of A's runs answered
    ratios = {row[0]: row[1:] for row in table if len(row) == 3 and not row[1].startswith("-")}
    del ratios["B under the flood / B idle"]
    assert set(ratios) == {"Ponder", "floor", "Ponder / floor"}, output
    for values in ratios.values():
        numbers = [float(v.removesuffix("x")) for v in values]
        assert len(numbers) == 2 and all(math.isfinite(n) and n > 0 for n in numbers), output


def engine_calls(requests: Any) -> list[dict[str, Any]]:
    """Each recorded engine call, its prompt as its size."""
    calls = []
    for request in requests:
        body = dict(request.body)
        body["messages"] = [len(m["content"]) for m in body["messages"]]
        calls.append(body)
    return calls


def test_the_floor_makes_the_engine_calls_ponder_makes_for_gsr() -> None:
    reply = FakeEngineConfig(
        model=MODEL, respond=lambda body: ["\\boxed{42}"] * int(body.get("n") or 1)
    )
    with running_fake_engine(reply) as engine:
        settings = Settings(model="m", engines=(engine.base_url,), engine_model=MODEL)
        with running_ponder(settings) as url:
            body = {**chat_body("m", 7), "scaffold": "gsr(n=4)"}
            answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
        ponder = engine_calls(engine.state.requests)
        engine.state.requests.clear()

        async def floor_run() -> int:
            floor = Floor(Target("engine", engine.base_url))
            try:
                return await floor.run("gsr(n=4)", 7)
            finally:
                await floor.close()

        assert asyncio.run(floor_run()) == 200
        floor = engine_calls(engine.state.requests)
    assert [call["n"] for call in ponder] == [4, 1]
    assert floor == ponder
