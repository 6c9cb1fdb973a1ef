"""A scaffold installed from another distribution is solved, served and trained on.

The distribution (``ponder-recheck``, :mod:`tests.scaffolds.plugin_dist`) is written to a
temporary folder as pip would install it: its module and a ``*.dist-info`` whose
``entry_points.txt`` names the strategy class in the group ``ponder.scaffolds``. No file
of Ponder changes: the default registry finds it through ``importlib.metadata``, a real
``ponder serve`` process (the folder on its ``PYTHONPATH``) serves it by a request's
``scaffold`` field, and training builds SFT rows from the trace it returned.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scaffolds import solve
from scaffolds.engines.mock import MockEngine
from scaffolds.processes.children import stop_group
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.fake_engine.tokens import prompt_text
from tests.scaffolds.plugin_dist import installed, reply, write_distribution
from tests.server.conftest import start_ponder_serve
from training.data import build_rows
from training.traces import TraceRecord, event_from_dict

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-plugin-test-key"
ASKED = "Problem: 2+2?\nDraft: draft: \\boxed{5}\nCheck it, then answer."


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    root = write_distribution(tmp_path / "site")
    with installed(root):
        yield root


def test_it_solves_and_its_trace_makes_sft_rows(site: Path) -> None:
    engine = MockEngine(lambda request: reply(request.prompt_text()))
    result = asyncio.run(solve("recheck(rounds=1)", "2+2?", engine))
    assert result.solutions[0].text == "checked: \\boxed{4}"
    record = TraceRecord("p1", "2+2?", "4", tuple(result.events), chat=True, scaffold="recheck")
    [row] = build_rows(record)
    assert row["kind"] == "recheck_check" and row["correct"] is True
    assert row["prompt"] == [{"role": "user", "content": ASKED}]
    assert row["completion"] == [{"role": "assistant", "content": "checked: \\boxed{4}"}]


def _serve(site: Path, engine_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return start_ponder_serve(engine_url, KEY, env=env)


def _respond(body: dict[str, Any]) -> list[str]:
    return [reply(prompt_text(body))] * int(body.get("n") or 1)


def test_a_ponder_serve_process_serves_it(site: Path) -> None:
    config = FakeEngineConfig(respond=_respond)
    with running_fake_engine(config) as engine:
        proc, url = _serve(site, engine.base_url)
        try:
            headers = {"Authorization": f"Bearer {KEY}"}
            body: dict[str, Any] = {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "2+2?"}],
                "scaffold": "recheck",
                "return_trace": True,
            }
            r = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120)
            listed = httpx.get(f"{url}/playground/strategies", headers=headers, timeout=30)
        finally:
            stop_group(proc, grace_s=0)
    assert r.status_code == 200, r.text
    reply_body = r.json()
    assert reply_body["choices"][0]["message"]["content"] == "checked: \\boxed{4}"
    assert listed.status_code == 200, listed.text
    [info] = [s for s in listed.json()["data"] if s["name"] == "recheck"]
    assert info["summary"] == "Draft an answer, then check the draft."
    assert info["params"] == {"rounds": 1, "solver": {"name": "single"}}

    events = tuple(event_from_dict(e) for e in reply_body["trace"])
    record = TraceRecord("p1", "2+2?", "4", events, chat=True, scaffold="recheck")
    [row] = build_rows(record)
    assert row["kind"] == "recheck_check"
    assert row["prompt"] == [{"role": "user", "content": ASKED}]
    assert row["completion"] == [{"role": "assistant", "content": "checked: \\boxed{4}"}]
