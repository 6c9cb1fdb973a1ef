"""``auto`` on a real Ponder (uvicorn, fake engine, openai SDK): named as the scaffold and
as the effort policy's ``auto`` level, its pilot places the prompt and the trace says how."""

from __future__ import annotations

from typing import Any

import openai

from scaffolds.spec.build import build_strategy
from scaffolds.strategies import Auto
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.evalkit import MODEL, serve_ponder

AUTO = "auto(pilot=2, mid_k=4, max_k=8)"
POLICY = {
    "minimal": {"spec": "single"},
    "low": {"spec": "majority(k=2)"},
    "medium": {"spec": "majority(k=4)"},
    "high": {"spec": "majority(k=8)"},
    "auto": {"spec": AUTO, "budget": 65536},
}
MESSAGES: Any = [{"role": "user", "content": "What is 6*7?"}]


def respond(body: dict[str, Any]) -> list[str]:
    """Every sample says 42, except for a prompt that says "split": sample i says i % 2."""
    text = str(body["messages"][-1]["content"])
    n = int(body.get("n") or 1)
    return [f"\\boxed{{{i % 2 if 'split' in text else 42}}}" for i in range(n)]


def allocation(body: Any) -> dict[str, Any]:
    [note] = [
        e
        for e in body.model_extra["trace"]
        if e["type"] == "step_note" and e["kind"] == "allocation"
    ]
    return dict(note["values"])


def test_auto_places_each_prompt_and_the_trace_says_so() -> None:
    strategy = build_strategy(AUTO)
    assert isinstance(strategy, Auto)
    with (
        running_fake_engine(FakeEngineConfig(respond=respond)) as fake,
        serve_ponder(fake, effort_policy=POLICY) as url,
    ):
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        expected = {"What is 6*7?": ("stop", [2]), "split: what is 6*7?": ("max", [2, 6])}
        for prompt, (tier, requests) in expected.items():
            before = len(fake.state.requests)
            body = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": prompt}],
                extra_body={"scaffold": AUTO, "return_trace": True},
            )
            sent = [int(r.body.get("n") or 1) for r in list(fake.state.requests)[before:]]
            note = allocation(body)
            assert (note["tier"], sent) == (tier, requests) and sum(sent) == note["samples"]
            assert note["tier"] == strategy.tier(note["agreement"])
            assert note["samples"] == note["planned"] == strategy.planned(note["tier"])
            assert body.model_extra is not None and body.model_extra["ponder"]["scaffold"] == AUTO
        # reasoning_effort="auto" runs the policy's auto level
        body = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            extra_body={
                "reasoning_effort": "auto",
                "return_trace": True,
            },  # not in the SDK's Literal
        )
        assert body.model_extra is not None
        effort = body.model_extra["ponder"]["effort"]
        assert (effort["level"], effort["spec"], effort["budget"]) == ("auto", AUTO, 65536)
        assert allocation(body)["pilot"] == 2
