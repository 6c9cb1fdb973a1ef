"""The playground shows what a helper step passed on when its answer came back empty
(a thinking model's summary that only reasoned): its thinking, marked as such (headless
Chromium; skips without a browser, see conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle
from testing.fake_engine.tokens import prompt_text
from tests.playground.conftest import open_page, run_on_page, running_playground

THOUGHT = "I add one and one."


def answers(body: dict[str, Any]) -> list[str]:
    """Summaries say nothing after their reasoning; every other step answers 2."""
    return [""] if "### Existing summary" in prompt_text(body) else ["so it is \\boxed{2}"]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeEngineHandle]]:
    with running_playground(FakeEngineConfig(respond=answers, reasoning=THOUGHT)) as served:
        yield served


def test_an_empty_summary_shows_the_thinking_it_passed_on(
    browser: Any, served: tuple[str, FakeEngineHandle]
) -> None:
    with open_page(browser, served[0]) as page:
        run_on_page(page, "rc(steps=2, reasoning_tokens=60)", "What is 1+1?")
        summary = '.node[data-kind="summary"]'
        assert page.inner_text(f"{summary} .node-text").strip() == THOUGHT
        note = page.inner_text(f"{summary} .note-chip")
        assert note == "empty answer: passed on its thinking"
        chunks = page.eval_on_selector_all(
            '.node[data-kind="reasoning"] .note-chip', "ns => ns.map(n => n.hidden)"
        )
        assert chunks == [True, True]
