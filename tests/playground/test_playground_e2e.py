"""The playground in headless Chromium against ``ponder serve`` and a fake engine.

Skips without a browser (see conftest), unless ``PONDER_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testing.fake_engine import FakeEngineHandle
from tests.playground.conftest import KEY, KEY_STORAGE, MODEL, WAIT_MS, open_page, run_on_page

PROBLEM = "What is 17 * 23?"
SEE_STREAMING = """() => {
    window.sawStreamingText = false;
    new MutationObserver(() => {
        const live = document.querySelector('.node[data-state="running"] .node-text');
        if (live && live.textContent) window.sawStreamingText = true;
    }).observe(document.getElementById("tree"),
               {subtree: true, childList: true, characterData: true, attributes: true});
}"""


@pytest.fixture
def page(browser: Any, playground: tuple[str, FakeEngineHandle]) -> Iterator[Any]:
    """A fresh tab (own session storage) whose key is already set, on the page."""
    url, _ = playground
    with open_page(browser, url) as tab:
        yield tab


def api_answer(url: str, scaffold: str, problem: str = PROBLEM) -> dict[str, Any]:
    """The same request as the page's, not streamed, with its trace."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": problem}],
        "scaffold": scaffold,
        "return_trace": True,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    reply.raise_for_status()
    data: dict[str, Any] = reply.json()
    return data


def labels(tab: Any, selector: str) -> list[str]:
    found: list[str] = tab.eval_on_selector_all(selector, "ns => ns.map(n => n.dataset.label)")
    return found


def test_gsr_run_streams_a_tree_of_candidates_and_a_refine(
    page: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    url, _ = playground
    page.fill("#problem", PROBLEM)
    page.fill("#spec", "gsr(n=3)")
    # Live: nodes appear while their step still streams, with text, before the run ends.
    page.evaluate(SEE_STREAMING)
    page.click("#run-button")
    page.wait_for_selector('#final[data-state="done"]', timeout=WAIT_MS)
    assert page.evaluate("window.sawStreamingText") is True

    assert labels(page, ".node") == ["candidate 1", "candidate 2", "candidate 3", "refine"]
    assert page.locator('.node[data-kind="refine"]').count() == 1
    assert page.locator('.node[data-state="done"]').count() == 4
    # The candidates sit side by side in one row, the refine below them.
    boxes = [page.locator(".node").nth(i).bounding_box() for i in range(4)]
    assert boxes[0]["y"] == boxes[1]["y"] == boxes[2]["y"]
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    assert boxes[3]["y"] > boxes[0]["y"] + boxes[0]["height"]

    expected = api_answer(url, "gsr(n=3)")
    assert page.inner_text("#final-text") == expected["choices"][0]["message"]["content"]
    finished = [e for e in expected["trace"] if e["type"] == "step_finished"]
    candidate_answers = [f"answer {a}" for a in finished[0]["answers"]]
    node_answers = page.eval_on_selector_all(
        ".node .answer-chip", "ns => ns.map(n => n.textContent)"
    )
    assert node_answers == [*candidate_answers, f"answer {finished[1]['answers'][0]}"]
    assert page.inner_text("#usage-calls") == "2 engine calls"
    completion = expected["usage"]["completion_tokens"]
    assert page.inner_text("#usage-completion") == f"{completion} completion tokens"
    assert page.locator(".node.is-final").get_attribute("data-kind") == "refine"
    assert page.locator(".node").nth(3).locator(".time").inner_text().endswith(" s")


def test_rc_is_a_chain_and_gsr_over_rc_draws_columns(page: Any) -> None:
    run_on_page(page, "rc(steps=2, reasoning_tokens=40, summary_tokens=20)", PROBLEM)
    assert labels(page, ".node") == ["reasoning 1", "summary 1", "reasoning 2"]
    tops = [page.locator(".node").nth(i).bounding_box()["y"] for i in range(3)]
    assert tops == sorted(tops) and len(set(tops)) == 3

    run_on_page(
        page, "gsr(n=2, solver=rc(steps=2, reasoning_tokens=40, summary_tokens=20))", PROBLEM
    )
    columns = page.locator(".column")
    assert columns.count() == 2
    assert labels(page, ".column >> nth=0 >> .node") == [
        "reasoning 1 (1)",
        "summary 1",
        "reasoning 2",
    ]
    assert page.locator('.node[data-kind="refine"]').count() == 1


def test_spec_errors_are_shown_inline_with_their_field(page: Any) -> None:
    page.fill("#spec", "gsr(n=3, solver=rc(steps=0))")
    page.wait_for_selector('#spec-status[data-state="error"]')
    assert page.inner_text("#spec-status .param") == "scaffold.solver.steps"
    assert "must be >= 1" in page.inner_text("#spec-status")
    assert page.get_attribute("#spec", "aria-invalid") == "true"

    page.fill("#spec", "gsr(n=3")
    page.wait_for_selector('#spec-status[data-state="error"] >> text=column 8')

    page.fill("#spec", "gsr(n=3)")
    page.wait_for_selector('#spec-status[data-state="ok"]')
    assert "gsr(n=3)" in page.inner_text("#spec-status")

    # Running a bad spec anyway shows the server's 400, naming the field.
    page.fill("#spec", "majority(k=0)")
    page.click("#run-button")
    page.wait_for_selector("#run-error:not([hidden])")
    assert page.inner_text("#run-error").startswith("scaffold.k:")


def test_saved_trace_opens_in_the_same_view(page: Any, tmp_path: Path) -> None:
    run_on_page(page, "gsr(n=3)", PROBLEM)
    live_answer = page.inner_text("#final-text")
    with page.expect_download() as download:
        page.click("#save-button")
    saved = tmp_path / "trace.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["trace"][0]["type"] == "step_started"

    page.reload()
    page.wait_for_selector("#model option", state="attached")
    page.click("#open-trace-button")
    page.set_input_files("#trace-file", str(saved))
    page.click("#trace-open")
    page.wait_for_selector("#source:not([hidden])")
    assert labels(page, ".node") == ["candidate 1", "candidate 2", "candidate 3", "refine"]
    assert page.inner_text("#final-text") == live_answer
    assert page.inner_text("#usage-calls") == "2 engine calls"
    assert page.input_value("#problem") == PROBLEM


def test_eval_results_lines_open_one_by_one(
    page: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    url, _ = playground
    reply = api_answer(url, "gsr(n=3)")
    traced = {
        "scaffold": "gsr(n=3)",
        "id": "p1",
        "sample": 0,
        "model": MODEL,
        "reference": "391",
        "response": reply["choices"][0]["message"]["content"],
        "extracted": "12",
        "correct": False,
        "usage": {"total_tokens": 10, "engine_calls": 2},
        "trace": reply["trace"],
    }
    untraced = {
        "scaffold": "gsr(n=3)",
        "id": "p2",
        "sample": 0,
        "response": "It is \\boxed{391}",
        "reasoning": "\n### candidates > candidate 1\nfirst try\n### refine\nbetter",
        "extracted": "391",
        "correct": True,
    }
    lines = "\n".join(json.dumps(r) for r in (untraced, traced)) + "\n{torn line"
    page.click("#open-trace-button")
    page.fill("#trace-text", lines)
    page.click("#trace-open")
    page.wait_for_selector("#source:not([hidden])")
    assert page.inner_text("#trace-position") == "1 / 2"
    assert "1 unreadable lines skipped" in page.inner_text("#source")
    assert "no trace" in page.inner_text("#tree")
    assert page.inner_text("#final-text") == "It is \\boxed{391}"

    page.check("#failures-only")
    assert page.inner_text("#trace-position") == "1 / 1"
    assert "wrong ✗" in page.inner_text("#source")
    assert page.locator(".node").count() == 4
    assert page.inner_text("#final-text") == reply["choices"][0]["message"]["content"]

    page.click("#open-trace-button")
    page.fill("#trace-text", '{"not": "a trace"}')
    page.click("#trace-open")
    assert "holds no trace" in page.inner_text("#trace-error")

    # The API's own response (return_trace) opens as it is.
    page.fill("#trace-text", json.dumps(reply))
    page.click("#trace-open")
    page.wait_for_selector("#trace-dialog", state="hidden")
    assert labels(page, ".node") == ["candidate 1", "candidate 2", "candidate 3", "refine"]
    assert page.inner_text("#final-text") == reply["choices"][0]["message"]["content"]
    assert page.input_value("#spec") == "gsr(n=3)"


def test_api_key_is_asked_once_kept_in_the_session_and_sent_as_a_header(
    browser: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    url, _ = playground
    context = browser.new_context()
    tab = context.new_page()
    sent: list[tuple[str, str | None]] = []
    tab.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
    tab.goto(f"{url}/")
    tab.wait_for_selector("#key-dialog[open]")  # /v1/models said 401
    tab.fill("#key-input", "sk-wrong")
    tab.click("#key-save")
    tab.wait_for_selector("#key-dialog[open]")  # asked again: the key was refused
    assert "invalid API key" in tab.inner_text("#key-reason")
    tab.fill("#key-input", KEY)
    tab.click("#key-save")
    tab.wait_for_selector("#model option", state="attached")
    assert tab.evaluate(f"sessionStorage.getItem({KEY_STORAGE!r})") == KEY
    assert tab.evaluate(f"localStorage.getItem({KEY_STORAGE!r})") is None
    assert tab.inner_text("#key-button") == "API key ✓"

    run_on_page(tab, "gsr(n=2)", PROBLEM)
    tab.reload()  # same tab session: the key is still there, nothing is asked
    tab.wait_for_selector("#model option", state="attached")
    assert not tab.is_visible("#key-dialog")

    api_calls = [(u, h) for u, h in sent if "/v1/" in u or "/playground/spec" in u]
    assert any(u.endswith("/v1/chat/completions") and h == f"Bearer {KEY}" for u, h in api_calls)
    assert all(KEY not in u and "sk-wrong" not in u for u, _ in sent)

    tab.click("#key-button")
    tab.click("#key-forget")
    assert tab.evaluate(f"sessionStorage.getItem({KEY_STORAGE!r})") is None
    tab.wait_for_selector("#key-dialog[open]")  # the models reload asks again
    context.close()


def test_stop_cancels_the_run_on_the_server(
    page: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    _, fake = playground
    fake.config.hold = True  # the run's calls wait until stopped, however slow the page is
    try:
        page.fill("#spec", "gsr(n=3)")
        page.click("#run-button")
        page.wait_for_selector('.node[data-state="running"]', timeout=WAIT_MS)
        page.click("#stop-button")
        page.wait_for_selector('#final[data-state="error"]')
        assert page.inner_text("#run-error").startswith("Stopped")
        assert page.is_enabled("#run-button") and not page.is_enabled("#stop-button")
        deadline = time.monotonic() + 60
        while fake.state.open_calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.state.open_calls == 0 and fake.state.cancelled >= 1
    finally:
        fake.config.hold = False


def test_model_output_is_shown_as_text_never_as_html(
    page: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    _, fake = playground
    markup = '<img id="injected" src="x"> <b>bold</b> \\boxed{4}'
    kept, fake.config.respond = fake.config.respond, lambda body: [markup] * (body.get("n") or 1)
    try:
        run_on_page(page, "gsr(n=2)", "<script>alert(1)</script>")
    finally:
        fake.config.respond = kept
    assert page.locator("#injected").count() == 0 and page.locator(".node b").count() == 0
    assert page.inner_text("#final-text") == markup
    assert markup in page.locator('.node[data-kind="refine"] .node-text').inner_text()


def test_rsa_is_a_grid_of_rounds_with_an_arrow_from_each_member_read(page: Any) -> None:
    run_on_page(page, "rsa(n=3, k=2, rounds=2)", PROBLEM)
    assert labels(page, ".node") == ["member 1", "member 2", "member 3"] + ["aggregate"] * 6
    tops = page.eval_on_selector_all(".node", "ns => ns.map(n => n.getBoundingClientRect().top)")
    assert tops[0] == tops[1] == tops[2] < tops[3] == tops[4] == tops[5] < tops[6] == tops[8]
    reads = page.eval_on_selector_all(
        '.node[data-kind="aggregate"]', "ns => ns.map(n => n.dataset.reads.split(' '))"
    )
    assert all(len(keys) == 2 and len(set(keys)) == 2 for keys in reads)
    node_keys = page.eval_on_selector_all(
        ".node", "ns => ns.map(n => `${n.dataset.stepId}#${n.dataset.index}`)"
    )
    assert all(
        k in node_keys[:3] for keys in reads[:3] for k in keys
    )  # round 1 read the population
    assert all(k in node_keys[3:6] for keys in reads[3:] for k in keys)  # round 2, round 1
    arrows = page.eval_on_selector_all(
        "#tree svg.links path[data-to]", "ps => ps.map(p => [p.dataset.from, p.dataset.to])"
    )
    assert len(arrows) == 12
    assert {to for _, to in arrows} == set(node_keys[3:])
    assert "read population > member" in page.locator(".node-reads").first.inner_text()
    # Hovering an aggregation marks the members it read.
    page.locator('.node[data-kind="aggregate"]').first.hover()
    assert page.locator(".node.is-read").count() == 2


def test_adaptive_shows_the_stopping_probability_after_each_wave(
    page: Any, playground: tuple[str, FakeEngineHandle]
) -> None:
    _, fake = playground
    kept = fake.config.respond
    split = ["\\boxed{1}", "\\boxed{2}"]
    fake.config.respond = lambda body: [split[i % 2] for i in range(body.get("n") or 1)]
    try:
        run_on_page(page, "adaptive(max_k=8, wave=4)", PROBLEM)
    finally:
        fake.config.respond = kept
    notes = page.locator(".scope-note")
    assert notes.count() == 2
    assert [notes.nth(i).get_attribute("data-probability") for i in range(2)] == ["0.5", "0.5"]
    assert "P(leader is the majority) 0.500 < 0.95: draw another wave" in notes.nth(0).inner_text()
    assert notes.nth(1).inner_text().endswith("stop at max_k")
    # The second wave ran after the first: it is drawn below it, not beside it.
    waves = page.locator(".scope[data-scope]")
    first, second = waves.nth(0).bounding_box(), waves.nth(1).bounding_box()
    assert second["y"] >= first["y"] + first["height"]
