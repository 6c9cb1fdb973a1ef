"""rsa and adaptive end to end: uvicorn on loopback, the fake engine, the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.fake_engine.tokens import prompt_text
from testing.ponder import running_ponder
from tests.server.conftest import wait_until

KEY = "sk-ponder-19"
MODEL = "fake-model"
MESSAGES: list[Any] = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(cached_tokens=2)) as handle:
        yield handle


@pytest.fixture
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        api_keys=(KEY,),
        aliases={"rsa3": "rsa(n=3, k=2, rounds=2)", "vote": "adaptive(max_k=8, wave=4)"},
        engine_max_retries=0,
    )
    with running_ponder(settings) as url:
        yield url


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.mark.parametrize("model", [f"{MODEL}+rsa3", f"{MODEL}+vote"])
def test_usage_is_every_engine_call_summed(fake: FakeEngineHandle, ponder: str, model: str) -> None:
    out = sdk(ponder).chat.completions.create(model=model, messages=MESSAGES, n=2)
    assert len(out.choices) == 2
    assert all("\\boxed{" in (c.message.content or "") for c in out.choices)
    reported = fake.state.reported_usage
    assert out.usage is not None and out.usage.model_extra is not None
    assert out.usage.prompt_tokens == sum(u["prompt_tokens"] for u in reported)
    assert out.usage.completion_tokens == sum(u["completion_tokens"] for u in reported)
    assert out.usage.model_extra["engine_calls"] == len(reported) == fake.state.calls
    if model.endswith("rsa3"):
        assert fake.state.calls == 2 * (1 + 3 * 2)  # two runs: population + 2 rounds of 3
        assert sorted(r.body.get("n", 1) for r in fake.state.requests)[-2:] == [3, 3]


def test_rsa_streams_its_rounds_as_reasoning_and_the_vote_as_content(
    fake: FakeEngineHandle, ponder: str
) -> None:
    content, reasoning, trace = "", "", None
    with sdk(ponder).chat.completions.create(
        model=f"{MODEL}+rsa3", messages=MESSAGES, stream=True, extra_body={"return_trace": True}
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                extra = choice.delta.model_extra or {}
                reasoning += extra.get("reasoning_content") or ""
            trace = (chunk.model_extra or {}).get("trace") or trace
    assert "### round 2 > member 3 > aggregate" in reasoning
    assert "### population > member" in reasoning
    assert "\\boxed{" in content
    assert trace is not None and trace[-1]["text"] == content


def test_adaptive_stream_trace_carries_the_stopping_probability(
    fake: FakeEngineHandle, ponder: str
) -> None:
    fake.config.respond = lambda body: ["\\boxed{4}"] * int(body.get("n") or 1)
    events = []
    with sdk(ponder).chat.completions.create(
        model=f"{MODEL}+vote", messages=MESSAGES, stream=True, extra_body={"stream_trace": True}
    ) as stream:
        for chunk in stream:
            event = ((chunk.model_extra or {}).get("ponder") or {}).get("event")
            if event:
                events.append(event)
    notes = [e for e in events if e["type"] == "step_note"]
    assert len(notes) == 1 and notes[0]["kind"] == "stopping"
    assert notes[0]["values"]["probability"] == pytest.approx(31 / 32)
    assert notes[0]["values"]["reason"] == "settled"
    assert fake.state.calls == 1  # unanimous first wave: no second one


@pytest.mark.parametrize(
    ("answer_format", "calls", "content"),
    [
        ("boxed", 3, "2 + 2 = 4. The answer is 4."),  # no window reads an answer: all three
        ("answer_is", 1, "2 + 2 = 4. The answer is 4."),  # the first window agrees on 4
    ],
)
def test_esc_on_few_shot_samples_stops_only_on_a_window_with_an_answer(
    fake: FakeEngineHandle, ponder: str, answer_format: str, calls: int, content: str
) -> None:
    """Issue 51, finding 3: five few-shot "The answer is 4." samples, read ``boxed``, have
    no answer; that window used to count as unanimous and stop the run."""
    fake.config.respond = lambda body: ["2 + 2 = 4. The answer is 4."] * int(body.get("n") or 1)
    out = sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        extra_body={
            "scaffold": 'adaptive(rule="esc", window=5, max_k=15)',
            "answer_format": answer_format,
            "return_trace": True,
        },
    )
    assert fake.state.calls == calls and out.choices[0].message.content == content
    trace = (out.model_extra or {})["trace"]
    notes = [e for e in trace if e.get("type") == "step_note" and e["kind"] == "stopping"]
    expected = [False] * 3 if calls == 3 else [True]
    assert [n["values"]["unanimous"] for n in notes] == expected


def test_closing_an_rsa_stream_mid_round_cancels_every_aggregation(
    fake: FakeEngineHandle, ponder: str
) -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        slow = "Attempts to combine" in prompt_text(body)
        return [("word " * 400 if slow else "\\boxed{4}")] * int(body.get("n") or 1)

    fake.config.respond = respond
    fake.config.latency_per_token = 0.05
    with sdk(ponder).chat.completions.create(
        model=f"{MODEL}+rsa3", messages=MESSAGES, stream=True
    ) as stream:
        for _ in stream:
            if fake.state.open_calls >= 3:
                break
    assert wait_until(lambda: fake.state.cancelled >= 3 and fake.state.open_calls == 0, 60)
    assert fake.state.completed == 1  # the population only


@pytest.mark.parametrize(
    ("scaffold", "calls"), [("rsa(n=4, k=2, rounds=2)", 3), ("adaptive(max_k=16, wave=4)", 2)]
)
def test_a_call_budget_cuts_the_run_short_with_an_answer(
    fake: FakeEngineHandle, ponder: str, scaffold: str, calls: int
) -> None:
    answers = ["\\boxed{4}", "\\boxed{5}"]  # split votes: adaptive never settles
    fake.config.respond = lambda body: [answers[i % 2] for i in range(int(body.get("n") or 1))]
    out = sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        extra_body={"scaffold": scaffold, "budget": {"max_calls": calls}},
    )
    assert fake.state.calls == calls
    [choice] = out.choices
    assert choice.finish_reason == "length"  # cut short
    assert "\\boxed{" in (choice.message.content or "")
    assert (out.model_extra or {})["ponder"]["cut_reason"] == "calls"
    assert out.usage is not None and out.usage.model_extra is not None
    assert out.usage.model_extra["engine_calls"] == calls
