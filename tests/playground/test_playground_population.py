"""What the playground draws for rsa and adaptive, from the trace the server serves.

JS-free: the served trace carries, for every aggregation, the members it read (the
grid's arrows) and, after every wave, the stopping probability. With ``node`` on the
PATH, ``population.js`` (the page's own module, DOM-free) reads the same trace.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from server.app.playground import STATIC_DIR
from tests.server.conftest import chat_body


async def served_trace(make_client: Any, scaffold: str, handler: Any = None) -> list[Any]:
    args = () if handler is None else (handler,)
    async with make_client(*args) as (client, _):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold=scaffold, return_trace=True, seed=5)
        )
    assert r.status_code == 200, r.text
    trace: list[Any] = r.json()["trace"]
    return trace


def run_node(script: str, data: Any) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on the PATH")
    module = (STATIC_DIR / "population.js").as_uri()
    code = f"import * as p from {json.dumps(module)};\n" + script
    out = subprocess.run(
        [node, "--input-type=module", "-e", code],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


READ_STDIN = (
    "import { readFileSync } from 'node:fs';\nconst data = JSON.parse(readFileSync(0, 'utf8'));\n"
)


async def test_the_rsa_trace_names_the_members_each_aggregation_read(make_client: Any) -> None:
    trace = await served_trace(make_client, "rsa(n=4, k=2, rounds=2)")
    started = [e for e in trace if e["type"] == "step_started"]
    population, aggregations = started[0], started[1:]
    assert population["n"] == 4 and len(aggregations) == 8
    ids = {e["step_id"]: e for e in started}
    for step in aggregations:
        members = step["fields"]["members"]
        assert len(members) == 2
        for step_id, sample in members:  # each is a sample of an earlier step
            assert step_id in ids and 0 <= sample < ids[step_id]["n"]
            assert ids[step_id]["time"] <= step["time"]
        expected_round = 1 if members[0][0] == population["step_id"] else 2
        assert step["fields"]["round"] == expected_round

    grid = run_node(READ_STDIN + "console.log(JSON.stringify(p.populationGrid(data)));", trace)
    assert [len(row) for row in grid["rows"]] == [len(grid["rows"][0]), 4, 4]
    assert set(grid["rows"][0]) <= {f"{population['step_id']}#{i}" for i in range(4)}
    assert len(grid["links"]) == 8 * 2
    round_one = set(grid["rows"][1])
    assert all(link["from"] in round_one for link in grid["links"] if link["to"] in grid["rows"][2])


async def test_the_adaptive_trace_carries_the_probability_after_each_wave(
    make_client: Any,
) -> None:
    answers = iter(["\\boxed{1}", "\\boxed{2}"] * 8)

    def split(request: Any) -> list[str]:
        return [next(answers) for _ in range(request.params.n)]

    trace = await served_trace(make_client, "adaptive(max_k=8, wave=4)", split)
    notes = [e for e in trace if e["type"] == "step_note"]
    assert [n["values"]["probability"] for n in notes] == [0.5, 0.5]
    assert [n["values"]["reason"] for n in notes] == [None, "max_k"]
    scopes = [e["parent_id"] for e in trace if e["type"] == "step_started"]
    assert [n["scope_id"] for n in notes] == scopes  # each under its own wave

    lines = run_node(READ_STDIN + "console.log(JSON.stringify(data.map(p.noteText)));", notes)
    assert lines[0] == (
        "4 samples · leader 1 (2 vs 2) · P(leader is the majority) 0.500 < 0.95: draw another wave"
    )
    assert lines[1].endswith(": stop at max_k")
    esc = [
        {
            "kind": "stopping",
            "values": {
                "samples": 5,
                "leader": "3",
                "rule": "esc",
                "unanimous": True,
                "reason": "settled",
            },
        }
    ]
    [line] = run_node(READ_STDIN + "console.log(JSON.stringify(data.map(p.noteText)));", esc)
    assert line == "5 samples · leader 3 · window unanimous: stop"


def test_scopes_that_ran_one_after_another_are_stacked() -> None:
    spans = {"a": [0, 1], "b": [0.5, 2], "c": [2, 3], "d": [2.1, 2.5], "e": [None, None]}
    script = READ_STDIN + (
        "const span = (s) => ({ start: data[s][0], end: data[s][1] });\n"
        "console.log(JSON.stringify([p.rowsByTime(['a', 'b', 'c', 'd'], span),"
        " p.rowsByTime(['a', 'e', 'c'], span)]));"
    )
    by_time, unknown = run_node(script, spans)
    assert by_time == [["a", "b"], ["c", "d"]]
    assert unknown == [["a", "e", "c"]]  # no times: nothing is split
