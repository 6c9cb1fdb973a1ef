"""``stream_trace``: trace events as extra chunks on a stream, for the playground's tree."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import chat_body, collect, parse_sse


def _events(chunks: list[Any]) -> list[dict[str, Any]]:
    return [
        c["ponder"]["event"]
        for c in chunks
        if isinstance(c, dict) and "event" in (c.get("ponder") or {})
    ]


async def test_stream_trace_sends_every_step_event(make_client: Any) -> None:
    body = chat_body(
        scaffold="gsr(n=3)", stream=True, stream_trace=True, stream_options={"include_usage": True}
    )
    async with make_client() as (client, _):
        r = await client.post("/v1/chat/completions", json=body)
    chunks = parse_sse(r.text)
    events = _events(chunks)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "step_started" and kinds[-1] == "run_finished"
    started = [e for e in events if e["type"] == "step_started"]
    assert [(e["kind"], e["n"], e["parent_id"]) for e in started] == [
        ("generate", 3, "run.1"),
        ("refine", 1, "run"),
    ]
    finished = [e for e in events if e["type"] == "step_finished"]
    assert [len(e["answers"]) for e in finished] == [3, 1]
    assert all("token_ids" not in e and "logprobs" not in e for e in finished)
    deltas = "".join(e["text"] for e in events if e["type"] == "step_delta")
    assert "boxed{4}" in deltas
    # The event chunks carry no choices, so OpenAI clients see the same text as without.
    event_chunks = [c for c in chunks if isinstance(c, dict) and "event" in c.get("ponder", {})]
    assert all(c["choices"] == [] for c in event_chunks)
    final = events[-1]
    assert collect(chunks)[0]["content"] == final["text"]
    assert chunks[-2]["usage"]["engine_calls"] == final["usage"]["calls"] == 2


async def test_streams_without_the_option_carry_no_events(make_client: Any) -> None:
    async with make_client() as (client, _):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="gsr(n=2)", stream=True)
        )
    assert _events(parse_sse(r.text)) == []


async def test_stream_trace_on_the_completions_endpoint(make_client: Any) -> None:
    body = {"model": "m", "prompt": "2+2=", "stream": True, "stream_trace": True}
    async with make_client() as (client, _):
        r = await client.post("/v1/completions", json=body)
    events = _events(parse_sse(r.text))
    assert [e["type"] for e in events][-1] == "run_finished"
