"""The playground draws deepconf's traces with their confidence and kept flag (headless
Chromium; skips without a browser, see conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle
from tests.playground.conftest import run_on_page, running_playground

SURE = "\\boxed{2}"


def traces(body: dict[str, Any]) -> list[str]:
    n = int(body.get("n") or 1)
    return [f"so it is {SURE}"] + ["maybe it is \\boxed{1}"] * (n - 1)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeEngineHandle]]:
    config = FakeEngineConfig(respond=traces, latency_per_token=0.01)
    config.token_confidence = lambda token: 5.0 if token == SURE else 1.0
    with running_playground(config) as served:
        yield served


def test_deepconf_nodes_show_confidence_and_kept(served_page: Any) -> None:
    run_on_page(served_page, "deepconf(n=3, keep=0.3, top_k=4)", "What is 1+1?")
    notes = served_page.eval_on_selector_all(".node .note-chip", "ns => ns.map(n => n.textContent)")
    kept = served_page.eval_on_selector_all(".node", "ns => ns.map(n => n.dataset.kept)")
    assert kept == ["true", "false", "false"]
    assert notes[0].startswith("conf 2.00") and notes[0].endswith("kept")
    assert all(n.startswith("conf 1.00") and n.endswith("dropped") for n in notes[1:])
    assert served_page.inner_text("#final-text").strip() == f"so it is {SURE}"
