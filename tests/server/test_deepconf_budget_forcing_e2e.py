"""deepconf and budget_forcing end to end: uvicorn on loopback, the fake engine server
(synthetic top logprobs, continuation requests), the official openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.test_e2e import MODEL, fake_reported_usage, messages, sdk, settings_for

SURE, UNSURE = "\\boxed{2}", "\\boxed{1}"


def traces(body: dict[str, Any]) -> list[str]:
    """One confident trace answering 2, the rest less sure answering 1."""
    n = int(body.get("n") or 1)
    return [f"so it is {SURE}"] + [f"maybe it is {UNSURE}"] * (n - 1)


def confidence(token: str) -> float:
    return 5.0 if token == SURE else 1.0


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    config = FakeEngineConfig(model=MODEL, cached_tokens=0, respond=traces)
    config.token_confidence = confidence
    with running_fake_engine(config) as handle:
        yield handle


@pytest.fixture
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    with running_ponder(settings_for(fake)) as url:
        yield url


def test_deepconf_keeps_the_confident_trace_and_accounts_its_tokens(
    fake: FakeEngineHandle, ponder: str
) -> None:
    out = sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        extra_body={"scaffold": "deepconf(n=4, keep=0.25, top_k=5)", "return_trace": True},
    )
    assert out.choices[0].message.content == f"so it is {SURE}"  # the vote would say 1
    [request] = fake.state.requests
    assert request.body["n"] == 4
    assert (request.body["logprobs"], request.body["top_logprobs"]) == (True, 5)
    reported = fake_reported_usage(fake)
    assert out.usage is not None and out.usage.completion_tokens == reported["completion_tokens"]
    assert out.model_extra is not None
    [note] = [e for e in out.model_extra["trace"] if e["type"] == "step_note"]
    assert note["kind"] == "confidence"
    assert note["values"]["kept"] == [True, False, False, False]
    first, *rest = note["values"]["confidence"]
    assert all(first > c for c in rest)


def test_deepconf_streams_its_answer(fake: FakeEngineHandle, ponder: str) -> None:
    content, reasoning = "", ""
    with sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        stream=True,
        extra_body={"scaffold": "deepconf(n=3, keep=0.34)"},
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
    assert content.strip() == f"so it is {SURE}"
    assert "maybe it is" in reasoning  # the traces stream as reasoning


def test_deepconf_on_an_engine_without_logprobs_is_a_400_naming_it(
    fake: FakeEngineHandle, ponder: str
) -> None:
    fake.config.logprobs = False
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": "deepconf(n=2)"}
        )
    assert info.value.status_code == 400
    assert info.value.code == "unsupported"
    assert "deepconf" in str(info.value.message)


def test_deepconf_online_is_refused_before_any_call(fake: FakeEngineHandle, ponder: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": 'deepconf(mode="online")'}
        )
    assert "not built yet" in str(info.value.message)
    assert fake.state.calls == 0


def test_budget_forcing_continues_the_message_and_counts_every_call(
    fake: FakeEngineHandle, ponder: str
) -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        again = body.get("continue_final_message")
        return ["checked it again \\boxed{4}" if again else "quick \\boxed{4}"]

    fake.config.respond = respond
    content = ""
    usage = None
    with sdk(ponder).chat.completions.create(
        model=MODEL,
        messages=messages(),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"scaffold": "budget_forcing(min_tokens=10, waits=2)"},
    ) as stream:
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
    wait = "\n\nWait"
    expected = "quick \\boxed{4}" + wait + "checked it again \\boxed{4}"
    assert content.strip() == (expected + wait + "checked it again \\boxed{4}").strip()
    first, second, third = (r.body for r in fake.state.requests)
    assert "continue_final_message" not in first
    for body in (second, third):
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
        assert body["messages"][:-1] == messages()
    assert second["messages"][-1] == {"role": "assistant", "content": "quick \\boxed{4}" + wait}
    assert third["messages"][-1]["content"] == expected + wait
    reported = fake_reported_usage(fake)
    assert usage is not None and usage.model_extra is not None
    assert usage.model_extra["engine_calls"] == reported["calls"] == 3
    assert usage.completion_tokens == reported["completion_tokens"]
    assert usage.prompt_tokens == reported["prompt_tokens"]


def test_budget_forcing_stops_at_the_configured_end_of_thinking(fake: FakeEngineHandle) -> None:
    marker = "<|im_start|>answer"  # s1's, from the served model's config

    def respond(body: dict[str, Any]) -> list[str]:
        if marker not in body.get("stop", []):
            return [" \\boxed{42}"]  # after the closed thinking: the answer
        return [" so 42" if body.get("continue_final_message") else "<|im_start|>think 6*7"]

    fake.config.respond = respond
    settings = settings_for(fake, thinking=True, thinking_end=marker)
    with running_ponder(settings) as url:
        out = sdk(url).chat.completions.create(
            model=MODEL,
            messages=messages(),
            extra_body={"scaffold": 'budget_forcing(mode="ignore", waits=1, cue=" Wait")'},
        )
    first, wait, answer = (r.body for r in fake.state.requests)
    assert [b.get("stop") for b in (first, wait)] == [[marker], [marker]]
    assert marker not in (answer.get("stop") or [])
    assert wait["messages"][-1]["content"] == "<|im_start|>think 6*7 Wait"
    assert answer["messages"][-1]["content"] == "<|im_start|>think 6*7 Wait so 42" + marker
    thought = "<|im_start|>think 6*7 Wait so 42"
    assert out.choices[0].message.content == thought + marker + " \\boxed{42}"
    reported = fake_reported_usage(fake)
    assert out.usage is not None and out.usage.completion_tokens == reported["completion_tokens"]


def test_budget_forcing_sends_s1s_stop_token_id_and_opens_the_thinking_in_the_prompt(
    fake: FakeEngineHandle,
) -> None:
    """s1's options on the wire (simplescaling/s1 eval/lm-evaluation-harness/lm_eval/
    models/vllm_causallms.py at 77272c6): the thinking calls stop at the token id with
    min_tokens 1 (lines 273-280), the thinking start is in the prompt (line 283), a
    thinking cut at its cap closes with the marker and "\\nFinal Answer:" (254, 401-409)."""
    start, end = "<|im_start|>think", "<|im_start|>answer"

    def respond(body: dict[str, Any]) -> list[str]:
        if "stop_token_ids" not in body:
            return [" 42"]  # after the closed thinking: the answer
        return ["six sevens are"] if len(body["messages"][-1]["content"]) < 20 else [" so"]

    fake.config.respond = respond
    settings = settings_for(fake, thinking=True, thinking_start=start, thinking_end=end)
    spec = (
        'budget_forcing(mode="ignore", waits=1, cue=" Wait", max_thinking_tokens=4, '
        'stop_token_id=151644, open_thinking=true, cap_marker="\\nFinal Answer:")'
    )
    with running_ponder(settings) as url:
        out = sdk(url).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": spec}
        )
    first, wait, answer = (r.body for r in fake.state.requests)
    for body in (first, wait):
        assert body["stop_token_ids"] == [151644] and body["min_tokens"] == 1
        assert end not in (body.get("stop") or [])
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert first["messages"] == [*messages(), {"role": "assistant", "content": start}]
    # 3 + 1 tokens reach the cap of 4: closed with a newline, the marker and the cap text.
    assert wait["messages"][-1]["content"] == start + "six sevens are Wait"
    closed = start + "six sevens are Wait so\n" + end + "\nFinal Answer:"
    assert answer["messages"][-1]["content"] == closed
    assert "stop_token_ids" not in answer and "min_tokens" not in answer
    assert out.choices[0].message.content is not None
    assert out.choices[0].message.content.endswith(" 42")


def test_self_refine_sends_each_steps_own_temperature(fake: FakeEngineHandle, ponder: str) -> None:
    """madaan/self-refine src/gsm/run.py (9a206d4): the first solution at 0.0 (lines 21,
    104), the feedback and its fix at 0.7 (line 27); with answer="refined" the fix written
    after the "correct" feedback is the answer (lines 44, 65)."""

    def respond(body: dict[str, Any]) -> list[str]:
        asked = str(body["messages"][-1]["content"])
        if "### Feedback on it" in asked:
            return ["fixed: \\boxed{4}"]
        if "### Proposed solution" in asked:
            return ["All steps hold.\nVERDICT: CORRECT"]
        return ["2+2 is \\boxed{4}"]

    fake.config.respond = respond
    spec = (
        "self_refine(solve_temperature=0, feedback_temperature=0.7, refine_temperature=0.7, "
        'answer="refined")'
    )
    out = sdk(ponder).chat.completions.create(
        model=MODEL, messages=messages(), temperature=1.0, extra_body={"scaffold": spec}
    )
    assert [r.body["temperature"] for r in fake.state.requests] == [0.0, 0.7, 0.7]
    assert out.choices[0].message.content == "fixed: \\boxed{4}"
