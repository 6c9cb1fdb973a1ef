"""The playground draws a beam search as its tree with the verifier's scores (headless
Chromium; skips without a browser, see conftest), and ``population.js`` reads a search's
links and notes from its trace (with ``node`` on the PATH)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle
from tests.playground.conftest import MODEL, run_on_page, running_playground
from tests.playground.test_playground_population import READ_STDIN, run_node


def search(body: dict[str, Any]) -> list[str]:
    """First steps, then their endings; a verdict is yes for the path that ends in 42."""
    last = body["messages"][-1]
    n = int(body.get("n") or 1)
    if "### Proposed solution" in last["content"]:
        return ["yes" if "{42}" in last["content"] else "no"]
    if last["role"] == "assistant":
        return ["so \\boxed{42}", "so \\boxed{41}"][:n]
    return ["six sevens\n\nso", "seven sixes\n\nso"][:n]  # the separator: the path goes on


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeEngineHandle]]:
    with running_playground(FakeEngineConfig(respond=search), verifier=MODEL) as served:
        yield served


def test_a_beam_search_draws_as_a_tree_with_its_scores(served_page: Any) -> None:
    run_on_page(served_page, "beam(width=1, expand=2, max_steps=2)", "What is 6*7?")
    assert served_page.inner_text("#final-text").strip() == "six sevens\n\nso \\boxed{42}"
    nodes = served_page.eval_on_selector_all(
        ".node",
        "ns => ns.map(n => [n.dataset.kind, n.dataset.reads || '', "
        "n.querySelector('.note-chip').hidden ? '' : n.querySelector('.note-chip').textContent])",
    )
    kinds = [kind for kind, _, _ in nodes]
    assert kinds == ["search_step"] * 2 + ["verify"] * 2 + ["search_step"] * 2 + ["verify"] * 2
    # Level 1's paths carry their scores (the verifier said no to both: no 42 yet).
    assert [note for _, _, note in nodes[:2]] == ["score 0.00", "score 0.00"]
    # Level 2 continues the kept path: an arrow from it, and yes to the 42 path only.
    first_step = served_page.eval_on_selector(".node", "n => n.dataset.stepId")
    assert nodes[4][1] == f"{first_step}#0"
    assert [note for _, _, note in nodes[4:6]] == ["score 1.00", "score 0.00"]
    assert served_page.locator("svg.links path").count() >= 1


def test_population_js_reads_a_search_from_its_trace() -> None:
    started = {
        "type": "step_started",
        "kind": "search_step",
        "step_id": "run:4",
        "parent_step": "run:1",
        "sample": 1,
        "fields": {"steps": ["a"]},
    }
    verify = {"kind": "verify", "fields": {"paths": [["run:4", 0], ["run:4", 1]]}}
    scores = {"kind": "scores", "values": {"scores": [0.25, 0.875]}}
    beam = {"kind": "beam", "values": {"level": 2, "scores": [0.875, 0.5]}}
    vote = {"kind": "weighted_vote", "values": {"answers": ["41", "42"], "weights": [0.3, 1.8]}}
    out = run_node(
        READ_STDIN + "console.log(JSON.stringify([p.readsOf(data[0]), p.scoresOf(data[1], data[2]),"
        " p.noteText(data[3]), p.noteText(data[4])]));",
        [started, verify, scores, beam, vote],
    )
    assert out == [
        ["run:1#1"],
        {"run:4#0": "score 0.25", "run:4#1": "score 0.88"},
        "level 2: kept 2 paths, scores 0.88, 0.50",
        "verifier-weighted vote: 41 0.30 · 42 1.80",
    ]
