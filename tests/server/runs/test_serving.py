"""The serving layer over MockEngine, through httpx.ASGITransport (no sockets)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from scaffolds.engines.protocol import Completion, GenerateRequest
from scaffolds.errors import EngineRejectedError, EngineUnavailableError
from tests.server.conftest import chat_body, collect, parse_sse


def _sum_trace_usage(trace: list[dict[str, Any]]) -> dict[str, int]:
    total = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
    for event in trace:
        if event["type"] == "step_finished":
            for key in total:
                total[key] += event["usage"][key]
    return total


async def test_single_pass_through(make_client: Any) -> None:
    async with make_client() as (client, engine):
        r = await client.post("/v1/chat/completions", json=chat_body())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "m"
    assert body["choices"][0]["message"]["content"] == "I think it through and get \\boxed{4}"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["engine_calls"] == 1
    assert body["usage"]["completion_tokens"] == 7
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 7
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert r.headers["x-request-id"]
    # The caller's messages go to the engine unchanged.
    [request] = engine.requests
    assert request.prompt[-1].content == "2+2?"


async def test_n_with_single_is_one_engine_request(make_client: Any) -> None:
    async with make_client(lambda r: [f"answer {i}" for i in range(r.params.n)]) as (client, eng):
        r = await client.post("/v1/chat/completions", json=chat_body(n=3))
    body = r.json()
    assert [c["message"]["content"] for c in body["choices"]] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert len(eng.requests) == 1 and eng.requests[0].params.n == 3


@pytest.mark.parametrize(
    "spec",
    [
        "gsr(n=2)",
        "majority(k=3)",
        "best_of_n(n=2)",
        "self_refine(max_rounds=1)",
        "rc(steps=2, reasoning_tokens=64, summary_tokens=32)",
        "abstraction(m=2, n=1)",
        {"name": "gsr", "n": 2, "solver": {"name": "single"}},
    ],
)
async def test_each_scaffold_usage_sums_every_call(make_client: Any, spec: Any) -> None:
    async with make_client() as (client, engine):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold=spec, n=2, return_trace=True)
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["choices"]) == 2
    assert all(c["message"]["content"] for c in body["choices"])
    usage = body["usage"]
    assert usage["engine_calls"] == len(engine.requests) > 1
    traced = _sum_trace_usage(body["trace"])
    assert traced["calls"] == usage["engine_calls"]
    assert traced["prompt_tokens"] == usage["prompt_tokens"]
    assert traced["completion_tokens"] == usage["completion_tokens"]
    assert body["trace"][-1]["type"] == "run_finished"


async def test_intermediate_steps_come_back_as_reasoning(make_client: Any) -> None:
    async with make_client() as (client, _):
        r = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)"))
    message = r.json()["choices"][0]["message"]
    assert "### candidates" in message["reasoning_content"]
    assert message["reasoning"] == message["reasoning_content"]
    assert "### refine" not in message["reasoning_content"]  # the refine step is the answer


async def test_alias_as_model_and_in_model_list(make_client: Any) -> None:
    async with make_client(aliases={"gsr2": "gsr(n=2)"}) as (client, engine):
        models = (await client.get("/v1/models")).json()
        r = await client.post("/v1/chat/completions", json=chat_body(model="m+gsr2"))
        one = await client.get("/v1/models/m+gsr2")
    ids = [m["id"] for m in models["data"]]
    assert ids == ["m", "m+gsr2"]
    assert models["data"][1]["ponder"] == {
        "base_model": "m",
        "answer_format": "boxed",
        "thinking_markers": {"start": "<think>", "end": "</think>"},
        "scaffold": "gsr(n=2)",
        "effort": {"source": "passthrough"},  # no effort policy
        "max_concurrent_runs": 1024,
    }
    assert r.status_code == 200 and r.json()["model"] == "m+gsr2"
    assert len(engine.requests) == 2  # candidates in one request, then the refine
    assert one.json()["id"] == "m+gsr2"


async def test_model_list_shows_each_alias_as_configured(make_client: Any) -> None:
    """k=8 is majority's default and steps=2 is not: both stay as written, normalised."""
    aliases = {"maj8": "majority(k=8)", "rc2": "rc( steps = 2 )", "g": '{"name": "gsr", "n": 4}'}
    async with make_client(aliases=aliases) as (client, _):
        models = (await client.get("/v1/models")).json()
    shown = {m["id"]: m["ponder"]["scaffold"] for m in models["data"]}
    assert shown == {
        "m": "single",
        "m+maj8": "majority(k=8)",
        "m+rc2": "rc(steps=2)",
        "m+g": "gsr(n=4)",
    }


async def test_ad_hoc_spec_in_model_and_default_scaffold(make_client: Any) -> None:
    async with make_client(default_scaffold="majority(k=2)") as (client, _):
        r1 = await client.post("/v1/chat/completions", json=chat_body())
        r2 = await client.post("/v1/chat/completions", json=chat_body(model="m+gsr(n=3)"))
    assert r1.json()["ponder"]["scaffold"] == "majority(k=2)"
    assert r2.json()["ponder"]["scaffold"] == "gsr(n=3)"


async def test_body_scaffold_overrides_alias(make_client: Any) -> None:
    async with make_client(aliases={"g": "gsr(n=2)"}) as (client, _):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(model="m+g", scaffold="single")
        )
    assert r.json()["ponder"]["scaffold"] == "single"


async def test_completions_endpoint(make_client: Any) -> None:
    async with make_client(lambda r: f"{r.prompt_text()} 4") as (client, engine):
        r = await client.post("/v1/completions", json={"model": "m", "prompt": "2+2=", "n": 2})
    body = r.json()
    assert body["object"] == "text_completion"
    assert [c["text"] for c in body["choices"]] == ["2+2= 4", "2+2= 4"]
    assert engine.requests[0].prompt == "2+2="


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (chat_body(model="nope"), 404, "model"),
        (chat_body(model="m+nothing"), 404, "model"),
        (chat_body(scaffold="gsr(n=0)"), 400, "scaffold.n"),
        (chat_body(scaffold="nope"), 400, "scaffold.name"),
        (
            chat_body(scaffold={"name": "gsr", "solver": {"name": "rc", "steps": "x"}}),
            400,
            "scaffold.solver.steps",
        ),
        (chat_body(n=0), 400, "n"),
        (chat_body(temperature=3), 400, "temperature"),
        (chat_body(budget={"max_calls": 0}), 400, "budget.max_calls"),
        (chat_body(budget={"max_call": 3}), 400, "budget.max_call"),
        ({"model": "m"}, 400, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "assistant", "content": "x"}]}, 400, "messages"),
    ],
)
async def test_errors_name_the_parameter(
    make_client: Any, body: dict[str, Any], status: int, param: str
) -> None:
    async with make_client() as (client, engine):
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"
    assert not engine.requests


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", {"type": "function", "function": {"name": "f"}}),
        ("continue_final_message", True),
        ("echo", True),
    ],
)
async def test_fields_a_scaffold_cannot_honour_are_refused_not_ignored(
    make_client: Any, field: str, value: Any
) -> None:
    async with make_client() as (client, engine):
        body = chat_body(scaffold="gsr(n=2)", **{field: value})
        refused = await client.post("/v1/chat/completions", json=body)
        off = await client.post(
            "/v1/chat/completions",
            json=chat_body(scaffold="gsr(n=2)", **{field: type(value)()}),  # false, [], {}
        )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == field and f"{field} is not supported" in error["message"]
    assert off.status_code == 200, off.text
    assert len(engine.requests) == 2  # only the request that left the field off ran (2 calls)


async def test_completions_refuse_echo_and_best_of_through_a_scaffold(make_client: Any) -> None:
    async with make_client() as (client, engine):
        body = {"model": "m+gsr(n=2)", "prompt": "x"}
        echo = await client.post("/v1/completions", json=body | {"echo": True})
        best = await client.post("/v1/completions", json=body | {"best_of": 4})
    assert echo.status_code == best.status_code == 400
    assert "scaffold" in best.json()["error"]["message"]
    assert not engine.requests


async def test_invalid_json_and_unknown_route(make_client: Any) -> None:
    async with make_client() as (client, _):
        bad = await client.post(
            "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        missing = await client.get("/v1/nothing")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert missing.status_code == 404 and "error" in missing.json()


async def test_unknown_fields_are_logged_and_passed_on(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ponder.server")
    async with make_client() as (client, engine):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(metadata={"a": "b"}, parallel_tool_calls=False, user="u1"),
        )
    assert r.status_code == 200
    assert "Ponder does not read: metadata, parallel_tool_calls" in caplog.text
    assert engine.requests[0].params.extra == {
        "metadata": {"a": "b"},
        "parallel_tool_calls": False,
        "user": "u1",
    }


async def test_a_models_default_sampling_fills_only_what_the_request_leaves_out(
    make_client: Any,
) -> None:
    async with make_client(default_temperature=0.2, default_top_p=0.9) as (client, engine):
        await client.post("/v1/chat/completions", json=chat_body())
        await client.post("/v1/chat/completions", json=chat_body(temperature=0.0, top_p=1.0))
    first, second = (r.params for r in engine.requests)
    assert (first.temperature, first.top_p) == (0.2, 0.9)
    assert (second.temperature, second.top_p) == (0.0, 1.0)  # the request's own, 0 included


async def test_sampling_params_reach_the_engine(make_client: Any) -> None:
    async with make_client(default_max_tokens=50) as (client, engine):
        await client.post("/v1/chat/completions", json=chat_body())
        await client.post(
            "/v1/chat/completions",
            json=chat_body(
                max_completion_tokens=9,
                temperature=0.5,
                top_p=0.9,
                stop="x",
                seed=3,
                top_k=5,
                presence_penalty=0.1,
                logit_bias={"7": -100},
            ),
        )
    first, second = (r.params for r in engine.requests)
    assert first.max_tokens == 50
    assert (second.max_tokens, second.temperature, second.top_p, second.stop) == (
        9,
        0.5,
        0.9,
        ("x",),
    )
    # single passes every field through as given, the seed too.
    assert second.extra == {
        "presence_penalty": 0.1,
        "top_k": 5,
        "logit_bias": {"7": -100},
        "seed": 3,
    }


async def test_budget_caps_and_cut_short_finish_reason(make_client: Any) -> None:
    async with make_client(max_budget_calls=1) as (client, engine):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)", budget={"max_calls": 5})
        )
        metrics = (await client.get("/metrics")).text
    body = r.json()
    assert len(engine.requests) == 1  # the server cap (1) beat the request's 5
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["ponder"]["cut_reason"] == "calls"
    assert 'ponder_budget_cutoffs_total{model="m",reason="calls",scaffold="gsr"} 1.0' in metrics
    assert 'ponder_run_engine_calls_total{model="m",scaffold="gsr"} 1.0' in metrics
    completion = body["usage"]["completion_tokens"]
    assert (
        f'ponder_run_tokens_total{{kind="completion",model="m",scaffold="gsr"}} {completion:.1f}'
        in metrics
    )


async def test_truncated_completion_is_length(make_client: Any) -> None:
    async with make_client(lambda r: [Completion("cut", "length", None, 3)]) as (client, _):
        r = await client.post("/v1/chat/completions", json=chat_body())
    assert r.json()["choices"][0]["finish_reason"] == "length"


async def test_fan_out_cap_counts_n(make_client: Any) -> None:
    async with make_client(spec_max_calls=4) as (client, _):
        ok = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(n=3)", n=2))
        over = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(n=3)", n=3))
        spec = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="majority(k=3, solver=gsr(n=2))")
        )
    assert ok.status_code == 200
    assert over.status_code == 400 and over.json()["error"]["param"] == "n"
    assert over.json()["error"]["code"] == "fan_out_exceeded"
    assert spec.status_code == 400 and spec.json()["error"]["code"] == "fan_out_exceeded"


async def test_sample_cap_counts_each_calls_n(make_client: Any) -> None:
    async with make_client(spec_max_samples=64) as (client, engine):
        ok = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="majority(k=16)", n=4)
        )
        over = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="majority(k=16)", n=5)
        )
        spec = await client.post("/v1/chat/completions", json=chat_body(scaffold="majority(k=65)"))
    assert ok.status_code == 200
    assert sum(r.params.n for r in engine.requests) == 64
    assert over.status_code == 400 and over.json()["error"]["param"] == "n"
    assert "80 sequences, over the cap of 64" in over.json()["error"]["message"]
    assert spec.status_code == 400 and spec.json()["error"]["code"] == "fan_out_exceeded"
    assert "65 sequences" in spec.json()["error"]["message"]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (EngineUnavailableError("down"), 503),
        (EngineRejectedError("too long", status=400), 400),
        (EngineRejectedError("bad key", status=401), 502),
    ],
)
async def test_engine_errors_map_to_statuses(
    make_client: Any, error: Exception, status: int
) -> None:
    def fail(request: GenerateRequest) -> str:
        raise error

    async with make_client(fail) as (client, _):
        r = await client.post("/v1/chat/completions", json=chat_body())
    assert r.status_code == status
    assert r.json()["error"]["code"] == error.code  # type: ignore[attr-defined]


async def test_deadline_is_504(make_client: Any) -> None:
    async def hangs(request: GenerateRequest) -> str:
        await asyncio.Event().wait()  # never answers: only the deadline can end the call
        raise AssertionError("unreachable")

    async with make_client(hangs) as (client, _):
        r = await client.post("/v1/chat/completions", json=chat_body(budget={"timeout_s": 0.05}))
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "deadline_exceeded"


async def test_stream_error_chunk_then_done(make_client: Any) -> None:
    def fail(request: GenerateRequest) -> str:
        raise EngineUnavailableError("engine down")

    async with make_client(fail) as (client, _):
        r = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert r.status_code == 200
    chunks = parse_sse(r.text)
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["error"]["code"] == "engine_unavailable"
    assert chunks[-2]["error"]["message"] == "engine down"


async def test_health_ready_metrics(make_client: Any) -> None:
    async with make_client() as (client, _):
        await client.post("/v1/chat/completions", json=chat_body())
        health = await client.get("/health")
        ready = await client.get("/ready")
        metrics = await client.get("/metrics")
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200 and ready.json()["models"] == {"m": "ok"}
    text = metrics.text
    assert (
        'ponder_requests_total{endpoint="chat",model="m",scaffold="single",status="200"} 1.0'
        in text
    )
    assert 'ponder_engine_calls_total{model="m",outcome="ok"} 1.0' in text
    assert "ponder_prompt_tokens_total" in text and "ponder_runs_in_flight 0.0" in text


async def test_request_id_is_kept(make_client: Any) -> None:
    async with make_client() as (client, _):
        r = await client.get("/health", headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"


def _sse_chunks(text: str) -> list[Any]:
    chunks = parse_sse(text)
    assert chunks[-1] == "[DONE]"
    return chunks


async def test_streaming_single(make_client: Any) -> None:
    async with make_client() as (client, _):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(stream=True, stream_options={"include_usage": True}),
        )
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = _sse_chunks(r.text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks[:-1])
    # Token by token: several content deltas.
    content = [c for c in chunks[1:-1] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) > 3
    got = collect(chunks)
    assert got[0]["content"] == "I think it through and get \\boxed{4}"
    assert got[0]["finish"] == "stop" and got[0]["reasoning"] == ""
    usage_chunk = chunks[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["engine_calls"] == 1


async def test_streaming_scaffold_reasoning_then_content(make_client: Any) -> None:
    async with make_client() as (client, engine):
        r = await client.post(
            "/v1/chat/completions",
            json=chat_body(
                scaffold="gsr(n=3)",
                n=2,
                stream=True,
                return_trace=True,
                stream_options={"include_usage": True},
            ),
        )
    chunks = _sse_chunks(r.text)
    got = collect(chunks)
    assert set(got) == {0, 1}
    for choice in got.values():
        assert choice["content"] == "I think it through and get \\boxed{4}"
        assert "### choice" in choice["reasoning"] and "candidate" in choice["reasoning"]
        assert choice["finish"] == "stop"
    last = chunks[-2]
    assert last["usage"]["engine_calls"] == len(engine.requests) == 4
    assert last["trace"][-1]["type"] == "run_finished"
    assert (
        _sum_trace_usage(last["trace"])["completion_tokens"] == last["usage"]["completion_tokens"]
    )


async def test_streaming_completions_and_trace_without_usage(make_client: Any) -> None:
    async with make_client() as (client, _):
        r = await client.post(
            "/v1/completions",
            json={"model": "m", "prompt": "2+2=", "stream": True, "return_trace": True},
        )
    chunks = _sse_chunks(r.text)
    assert all(c["object"] == "text_completion" for c in chunks[:-1])
    assert collect(chunks)[0]["content"] == "I think it through and get \\boxed{4}"
    assert "trace" in chunks[-2] and "usage" not in chunks[-2]


async def test_streaming_non_final_answer_is_sent_at_run_end(make_client: Any) -> None:
    # majority picks an answer after the samples: nothing streams as content live.
    async with make_client() as (client, _):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="majority(k=2)", stream=True)
        )
    got = collect(_sse_chunks(r.text))
    assert got[0]["content"] == "I think it through and get \\boxed{4}"
    assert "### samples" in got[0]["reasoning"] or "sample" in got[0]["reasoning"]
