"""Reasoning effort end to end: a real ``ponder serve`` (uvicorn on loopback) in front of
the fake engine server, driven by the openai and anthropic SDKs. The engine's recorded
requests say what ran: ``majority(k=16)`` is one request of ``n=16``, ``single`` one of
one sample."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.fake_engine.config import RecordedRequest
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import STORE_IN_MEMORY

KEY = "sk-effort"
MODEL = "fake-model"
OTHER = "thinker"  # the same engine, configured to pass efforts through
MESSAGES: list[Any] = [{"role": "user", "content": "What is 2+2?"}]
POLICY = {
    "minimal": {"spec": "single", "budget": 2000},
    "low": {"spec": "majority(k=4)", "budget": 8000},
    "medium": {"spec": "majority(k=8)", "budget": 16000},
    "high": {"spec": "majority(k=16)", "budget": 32000},
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig()) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    models = [
        {
            "name": MODEL,
            "engines": [fake.base_url],
            "effort_policy": POLICY,
            "aliases": {"two": "majority(k=2)"},
        },
        {"name": OTHER, "engines": [fake.base_url], "engine_model": MODEL, "effort": "passthrough"},
    ]
    settings = Settings(
        models=models,  # type: ignore[arg-type]
        api_keys=(KEY,),
        engine_max_retries=0,
        **STORE_IN_MEMORY,  # type: ignore[arg-type]
    )
    with running_ponder(settings) as url:
        yield url


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=300)


def new_requests(fake: FakeEngineHandle, since: int) -> list[RecordedRequest]:
    return list(fake.state.requests)[since:]


def samples(requests: list[RecordedRequest]) -> list[int]:
    return [r.body.get("n", 1) for r in requests]


def effort_of(body: Any) -> dict[str, Any]:
    assert body.model_extra is not None
    return dict(body.model_extra["ponder"]["effort"])


def from_policy(level: str, field: str = "reasoning_effort", **more: Any) -> dict[str, Any]:
    """The ``ponder.effort`` of an answer whose ``field`` asked for ``level`` of
    :data:`POLICY` (``more`` adds to it or overrides it)."""
    return {"field": field, "level": level, **POLICY[level], "source": "policy", **more}


def test_chat_reasoning_effort_high_and_minimal_run_different_specs(
    ponder: str, fake: FakeEngineHandle
) -> None:
    before = len(fake.state.requests)
    high = openai_client(ponder, KEY).chat.completions.create(
        model=MODEL, messages=MESSAGES, reasoning_effort="high", extra_body={"return_trace": True}
    )
    sent = new_requests(fake, before)
    assert samples(sent) == [16] and "reasoning_effort" not in sent[0].body
    assert effort_of(high) == from_policy("high")
    assert high.model_extra is not None and high.model_extra["ponder"]["scaffold"] == (
        "majority(k=16)"
    )
    note = high.model_extra["trace"][0]  # the trace opens with what the effort ran
    assert (note["type"], note["kind"], note["values"]) == (
        "step_note",
        "effort",
        effort_of(high),
    )
    before = len(fake.state.requests)
    minimal = openai_client(ponder, KEY).chat.completions.create(
        model=MODEL, messages=MESSAGES, reasoning_effort="minimal"
    )
    assert samples(new_requests(fake, before)) == [1]
    assert effort_of(minimal)["spec"] == "single"
    assert "\\boxed{" in (minimal.choices[0].message.content or "")


def test_a_streamed_run_says_its_effort_too(ponder: str, fake: FakeEngineHandle) -> None:
    before = len(fake.state.requests)
    chunks = list(
        openai_client(ponder, KEY).chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            reasoning_effort="low",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert samples(new_requests(fake, before)) == [4]
    last = chunks[-1]
    assert effort_of(last)["spec"] == "majority(k=4)"


def test_a_named_scaffold_wins_over_the_effort(ponder: str, fake: FakeEngineHandle) -> None:
    before = len(fake.state.requests)
    out = openai_client(ponder, KEY).chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        reasoning_effort="high",
        extra_body={"scaffold": "majority(k=2)"},
    )
    assert samples(new_requests(fake, before)) == [2]
    assert effort_of(out) | {"budget": None} == {
        "field": "reasoning_effort",
        "level": "high",
        "spec": "majority(k=2)",
        "source": "scaffold",
        "budget": None,
    }


def test_an_unknown_level_is_a_400_in_openais_shape(ponder: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        openai_client(ponder, KEY).chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            reasoning_effort="extreme",  # type: ignore[arg-type]
        )
    assert err.value.status_code == 400
    assert err.value.param == "reasoning_effort" and err.value.code == "invalid_value"
    assert err.value.body is not None and err.value.body["message"].startswith(  # type: ignore[index]
        "Invalid value: 'extreme'. Supported values are: 'minimal', 'low'"
    )
    with pytest.raises(openai.BadRequestError) as err:
        openai_client(ponder, KEY).responses.create(
            model=MODEL,
            input="2+2?",
            reasoning={"effort": "max"},  # type: ignore[typeddict-item]
        )
    assert err.value.param == "reasoning.effort"


def test_responses_reasoning_effort_selects_the_spec(ponder: str, fake: FakeEngineHandle) -> None:
    before = len(fake.state.requests)
    high = openai_client(ponder, KEY).responses.create(
        model=MODEL, input="2+2?", reasoning={"effort": "high"}
    )
    assert samples(new_requests(fake, before)) == [16]
    assert effort_of(high) == from_policy("high", "reasoning.effort")
    before = len(fake.state.requests)
    minimal = openai_client(ponder, KEY).responses.create(
        model=MODEL, input="2+2?", reasoning={"effort": "minimal"}
    )
    sent = new_requests(fake, before)
    assert samples(sent) == [1] and "effort" not in sent[0].body.get("reasoning", {})
    assert "reasoning_effort" not in sent[0].body
    assert effort_of(minimal)["spec"] == "single"


def test_anthropic_thinking_budget_selects_the_spec(ponder: str, fake: FakeEngineHandle) -> None:
    def ask(budget: int) -> tuple[list[int], Any]:
        before = len(fake.state.requests)
        message = claude(ponder).messages.create(
            model=MODEL,
            max_tokens=64_000,
            messages=MESSAGES,
            thinking={"type": "enabled", "budget_tokens": budget},
        )
        sent = new_requests(fake, before)
        assert all("thinking" not in r.body for r in sent)
        return samples(sent), message

    sent, big = ask(20_000)  # above medium's 16,000: high, capped at 20,000
    assert sent == [16]
    assert effort_of(big) == from_policy(
        "high", "thinking.budget_tokens", budget=20_000, budget_tokens=20_000
    )
    sent, small = ask(1024)
    assert sent == [1] and effort_of(small)["spec"] == "single"


def test_a_passthrough_model_forwards_the_effort(ponder: str, fake: FakeEngineHandle) -> None:
    before = len(fake.state.requests)
    out = openai_client(ponder, KEY).chat.completions.create(
        model=OTHER, messages=MESSAGES, reasoning_effort="high"
    )
    sent = new_requests(fake, before)
    assert samples(sent) == [1] and sent[0].body["reasoning_effort"] == "high"
    assert effort_of(out) == {
        "field": "reasoning_effort",
        "level": "high",
        "spec": "single",
        "source": "passthrough",
        "budget": None,
    }
    before = len(fake.state.requests)
    openai_client(ponder, KEY).responses.create(
        model=OTHER, input="2+2?", reasoning={"effort": "low"}
    )
    (sent_one,) = new_requests(fake, before)
    forwarded = sent_one.body.get("reasoning_effort") or sent_one.body["reasoning"]["effort"]
    assert forwarded == "low"


def test_on_the_engines_own_responses_api_the_policy_keeps_the_effort_from_it() -> None:
    """``single`` on Responses goes to the engine's own ``/v1/responses``: under a policy
    its ``reasoning`` goes without the effort the policy answered; passed through, whole."""
    with running_fake_engine(FakeEngineConfig(responses_api=True)) as fake:
        models = [
            {"name": MODEL, "engines": [fake.base_url], "effort_policy": POLICY},
            {"name": OTHER, "engines": [fake.base_url], "engine_model": MODEL},
        ]
        settings = Settings(models=models, api_keys=(KEY,), **STORE_IN_MEMORY)  # type: ignore[arg-type]
        with running_ponder(settings) as url:
            reasoning: Any = {"effort": "minimal", "summary": "auto"}
            out = openai_client(url, KEY).responses.create(
                model=MODEL, input="2+2?", reasoning=reasoning
            )
            passed = openai_client(url, KEY).responses.create(
                model=OTHER, input="2+2?", reasoning=reasoning
            )
        first, second = list(fake.state.requests)
    assert (first.path, first.body["reasoning"]) == ("/v1/responses", {"summary": "auto"})
    assert effort_of(out)["spec"] == "single" and effort_of(out)["source"] == "policy"
    assert (second.path, second.body["reasoning"]) == ("/v1/responses", reasoning)
    assert effort_of(passed)["source"] == "passthrough"


def test_text_completions_reasoning_effort_selects_the_spec_as_chat_does(
    ponder: str, fake: FakeEngineHandle
) -> None:
    before = len(fake.state.requests)
    high = openai_client(ponder, KEY).completions.create(
        model=MODEL, prompt="2+2=", extra_body={"reasoning_effort": "high", "return_trace": True}
    )
    sent = new_requests(fake, before)
    assert samples(sent) == [16] and "reasoning_effort" not in sent[0].body
    assert effort_of(high) == from_policy("high")
    assert high.model_extra is not None and high.model_extra["trace"][0]["values"] == (
        effort_of(high)
    )
    before = len(fake.state.requests)
    chunks = list(
        openai_client(ponder, KEY).completions.create(
            model=MODEL,
            prompt="2+2=",
            stream=True,
            stream_options={"include_usage": True},  # the usage chunk carries ponder
            extra_body={"reasoning_effort": "minimal"},
        )
    )
    assert samples(new_requests(fake, before)) == [1]
    assert effort_of(chunks[-1])["spec"] == "single"
    before = len(fake.state.requests)
    passed = openai_client(ponder, KEY).completions.create(
        model=OTHER, prompt="2+2=", extra_body={"reasoning_effort": "low"}
    )
    (sent_one,) = new_requests(fake, before)
    assert sent_one.body["reasoning_effort"] == "low" and effort_of(passed)["source"] == (
        "passthrough"
    )
    with pytest.raises(openai.BadRequestError) as err:
        openai_client(ponder, KEY).completions.create(
            model=MODEL, prompt="2+2=", extra_body={"reasoning_effort": "extreme"}
        )
    assert err.value.param == "reasoning_effort" and err.value.code == "invalid_value"


def test_the_model_card_shows_the_effort_policy(ponder: str) -> None:
    card = openai_client(ponder, KEY).models.retrieve(MODEL)
    assert card.model_extra is not None
    levels = {name: {"spec": lv["spec"], "budget": lv["budget"]} for name, lv in POLICY.items()}
    assert card.model_extra["ponder"]["effort"] == {
        "source": "policy",
        "levels": levels | {"auto": levels["high"]},  # no auto entry: high's
    }
    cards = {
        m.id: (m.model_extra or {})["ponder"]["effort"]
        for m in openai_client(ponder, KEY).models.list()
    }
    assert cards[f"{MODEL}+two"] == {"source": "scaffold"}
    assert cards[OTHER] == {"source": "passthrough"}


@pytest.mark.parametrize("model", [MODEL, f"{MODEL}+two", OTHER])
def test_a_cards_effort_source_is_what_an_answer_says(ponder: str, model: str) -> None:
    source = (openai_client(ponder, KEY).models.retrieve(model).model_extra or {})["ponder"][
        "effort"
    ]["source"]
    out = openai_client(ponder, KEY).chat.completions.create(
        model=model, messages=MESSAGES, reasoning_effort="low"
    )
    assert effort_of(out)["source"] == source
