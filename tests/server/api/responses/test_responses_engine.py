"""``single`` on ``/v1/responses`` through an engine's own Responses API (the fake engine
serving it, plain and streamed), and built on chat completions when the engine has none;
driven by the openai SDK through ``ponder serve`` on loopback."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator

import httpx
import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.fake_engine.config import Failure
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import STORE_IN_MEMORY, UNUSED, wait_until

MODEL = "fake-model"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(responses_api=True, cached_tokens=1)) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(fake.base_url,),
        aliases={"gsr2": "gsr(n=2)"},
        engine_max_retries=0,
        **STORE_IN_MEMORY,
    )
    with running_ponder(settings) as url:
        yield url


def metric(url: str, name: str, labels: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    found = re.search(rf"^{name}{{{re.escape(labels)}}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_single_passes_through_then_a_scaffold_then_single(
    ponder: str, fake: FakeEngineHandle
) -> None:
    client = openai_client(ponder)
    ok = f'model="{MODEL}",outcome="ok"'
    calls, tokens = (
        metric(ponder, "ponder_engine_calls_total", ok),
        metric(ponder, "ponder_completion_tokens_total", f'model="{MODEL}"'),
    )
    first = client.responses.create(model=MODEL, input="What is 2+3?", instructions="Be brief.")
    # Metered as every engine call: one call, its tokens.
    assert metric(ponder, "ponder_engine_calls_total", ok) == calls + 1
    assert first.usage is not None
    assert metric(ponder, "ponder_completion_tokens_total", f'model="{MODEL}"') == (
        tokens + first.usage.output_tokens
    )
    sent = fake.state.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.body["store"] is False and "previous_response_id" not in sent.body
    assert sent.body["input"] == [{"role": "user", "content": "What is 2+3?"}]
    assert sent.body["instructions"] == "Be brief."
    assert first.id.startswith("resp_") and "fake" not in first.id  # Ponder's own id
    assert first.model == MODEL and [i.type for i in first.output] == ["message"]
    assert first.model_extra and first.model_extra["ponder"]["engine_api"] == "responses"
    usage = fake.state.reported_usage[-1]
    assert first.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert first.usage.input_tokens_details.cached_tokens == 1

    # A scaffold turn after it: Ponder's run (chat completions) sees the engine's turn.
    second = client.responses.create(
        model=f"{MODEL}+gsr2", input="Times 2?", previous_response_id=first.id
    )
    chat = fake.state.requests[-1]
    assert chat.path == "/v1/chat/completions"
    assert [m["role"] for m in chat.body["messages"]] == ["user", "assistant", "user"]
    assert chat.body["messages"][1]["content"] == first.output_text
    assert [i.type for i in second.output] == ["reasoning", "message"]

    # And single again: the engine gets the whole conversation as input items.
    third = client.responses.create(model=MODEL, input="Minus 1?", previous_response_id=second.id)
    sent = fake.state.requests[-1]
    assert sent.path == "/v1/responses" and "previous_response_id" not in sent.body
    assert [(i["role"], i["content"]) for i in sent.body["input"]] == [
        ("user", "What is 2+3?"),
        ("assistant", first.output_text),
        ("user", "Times 2?"),
        ("assistant", second.output_text),
        ("user", "Minus 1?"),
    ]
    assert third.previous_response_id == second.id
    assert client.responses.retrieve(third.id).output_text == third.output_text


def test_single_streamed_through_the_engine(ponder: str, fake: FakeEngineHandle) -> None:
    client = openai_client(ponder)
    with client.responses.stream(model=MODEL, input="What is 4+4?") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    sent = fake.state.requests[-1]
    assert sent.path == "/v1/responses" and sent.body["stream"] is True
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert final.id.startswith("resp_") and "fake" not in final.id and final.model == MODEL
    usage = fake.state.reported_usage[-1]
    assert final.usage is not None and final.usage.output_tokens == usage["completion_tokens"]
    stored = client.responses.retrieve(final.id)
    assert stored.output_text == final.output_text and stored.id == final.id
    follow = client.responses.create(model=MODEL, input="Again?", previous_response_id=final.id)
    assert fake.state.requests[-1].body["input"][1] == {
        "role": "assistant",
        "content": final.output_text,
    }
    assert follow.previous_response_id == final.id


def test_engine_without_responses_falls_back_to_chat_and_remembers() -> None:
    with (
        running_fake_engine() as fake,
        running_ponder(Settings(model=MODEL, engines=(fake.base_url,), **STORE_IN_MEMORY)) as url,
    ):
        client = openai_client(url)
        with client.responses.stream(model=MODEL, input="And 3+4?") as stream:
            final = stream.get_final_response()
        first = client.responses.create(model=MODEL, input="What is 2+3?")
        assert fake.state.responses_refused == 1  # asked once, then remembered
        assert [r.path for r in fake.state.requests] == ["/v1/chat/completions"] * 2
        assert first.output_text and final.output_text
        assert first.model_extra and "engine_api" not in first.model_extra["ponder"]
        assert (
            first.usage is not None
            and first.usage.output_tokens == (fake.state.reported_usage[1]["completion_tokens"])
        )


def test_the_servers_token_cap_bounds_the_engine_call_and_is_its_cut(
    fake: FakeEngineHandle,
) -> None:
    def cut(response: object) -> object:
        extra = getattr(response, "model_extra", None) or {}
        return extra["ponder"]["cut_reason"]

    settings = Settings(
        model=MODEL, engines=(fake.base_url,), max_budget_tokens=8, **STORE_IN_MEMORY
    )
    cutoffs = "ponder_budget_cutoffs_total", f'model="{MODEL}",reason="tokens",scaffold="single"'
    with running_ponder(settings) as url:
        client = openai_client(url)
        response = client.responses.create(model=MODEL, input="hi", max_output_tokens=50)
        sent = fake.state.requests[-1].body["max_output_tokens"]
        with client.responses.stream(model=MODEL, input="hi") as stream:
            last = [event for event in stream][-1]
        # The request's own limit, under the cap, ends the call: not a cut of the budget.
        own = client.responses.create(model=MODEL, input="hi", max_output_tokens=5)
        # The same requests as scaffold runs (a budget of calls makes them runs).
        budget = {"budget": {"max_calls": 1}}
        runs = [
            client.responses.create(
                model=MODEL, input="hi", max_output_tokens=limit, extra_body=budget
            )
            for limit in (50, 5)
        ]
        counted = metric(url, *cutoffs)
    assert fake.state.requests[-1].path == "/v1/chat/completions"
    assert sent == 8 and response.usage is not None and response.usage.output_tokens == 8
    # The engine (as vLLM) ends with response.completed; Ponder names it by its status.
    assert last.type == "response.incomplete" and last.response.status == "incomplete"
    assert response.status == own.status == "incomplete"
    assert [cut(r) for r in (response, last.response, own, *runs)] == [
        "tokens",
        "tokens",
        None,
        "tokens",
        None,
    ]
    assert counted == 3


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_cancels_the_engine_call(
    ponder: str, fake: FakeEngineHandle, stream: bool
) -> None:
    cancelled, calls = fake.state.cancelled, fake.state.calls
    fake.config.hold = True
    host, port = ponder.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        body = {"model": MODEL, "input": "hi", "stream": stream}
        connection.request(
            "POST", "/v1/responses", json.dumps(body), {"Content-Type": "application/json"}
        )
        assert wait_until(lambda: fake.state.calls == calls + 1)
        assert fake.state.requests[-1].path == "/v1/responses"
        connection.close()  # the client leaves while the engine holds the call
        assert wait_until(lambda: fake.state.cancelled == cancelled + 1, within=60)
    finally:
        connection.close()
        fake.config.hold = False


def test_engine_errors_keep_their_status(ponder: str, fake: FakeEngineHandle) -> None:
    client = openai_client(ponder)
    for stream in (False, True):
        fake.config.failures.append(Failure(status=503, message="engine down"))
        with pytest.raises(openai.APIStatusError) as failed:
            if stream:
                with client.responses.stream(model=MODEL, input="hi"):
                    pass  # refused before the stream began: an HTTP error status
            else:
                client.responses.create(model=MODEL, input="hi")
        assert failed.value.status_code == 503, failed.value
        assert fake.state.requests[-1].path == "/v1/responses"
    fake.config.failures.append(Failure(status=400, message="prompt too long"))
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="hi")
    # A refusal is not a missing API: the next request still goes to the engine.
    client.responses.create(model=MODEL, input="hi")
    assert fake.state.requests[-1].path == "/v1/responses"


def test_a_dead_replica_fails_over_to_a_live_one(fake: FakeEngineHandle) -> None:
    settings = Settings(
        model=MODEL,
        engines=(UNUSED, fake.base_url),
        engine_max_retries=0,
        engine_health_interval_s=0,
        **STORE_IN_MEMORY,
    )
    calls = fake.state.calls
    with running_ponder(settings) as url:
        answers = [openai_client(url).responses.create(model=MODEL, input="hi") for _ in range(2)]
    assert all(a.model_extra and a.model_extra["ponder"]["engine_api"] for a in answers)
    assert fake.state.calls == calls + 2
