"""End to end: uvicorn on loopback, the fake engine server, the official openai SDK."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from server.settings import Settings
from testing.fake_engine import (
    FakeEngineConfig,
    FakeEngineHandle,
    default_responder,
    running_fake_engine,
)
from testing.ponder import running_ponder
from tests.server.conftest import wait_until

KEY = "sk-ponder-test"
MODEL = "fake-model"


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(cached_tokens=2)) as handle:
        yield handle


def settings_for(fake: FakeEngineHandle, **extra: Any) -> Settings:
    fields: dict[str, Any] = {
        "model": MODEL,
        "engines": (fake.base_url,),
        "api_keys": (KEY,),
        "aliases": {"gsr2": "gsr(n=2)", "rc2": "rc(steps=2, reasoning_tokens=40)"},
        "engine_max_retries": 0,
        **extra,
    }
    return Settings(**fields)


@pytest.fixture
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    with running_ponder(settings_for(fake)) as url:
        yield url


def sdk(url: str, key: str = KEY) -> openai.OpenAI:
    # A generous timeout: a busy machine can be 10x slower than a quiet one.
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


def fake_reported_usage(fake: FakeEngineHandle) -> dict[str, int]:
    """What the fake engine reported, summed over every call it answered."""
    reported = fake.state.reported_usage
    return {
        "prompt_tokens": sum(u["prompt_tokens"] for u in reported),
        "completion_tokens": sum(u["completion_tokens"] for u in reported),
        "cached_tokens": sum(u["prompt_tokens_details"]["cached_tokens"] for u in reported),
        "calls": len(reported),
    }


def messages(text: str = "What is 2+2?") -> list[Any]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize(
    "scaffold",
    [
        "single",
        "gsr(n=2)",
        "majority(k=3)",
        "best_of_n(n=2)",
        "self_refine(max_rounds=1)",
        "rc(steps=2, reasoning_tokens=40, summary_tokens=20)",
        "abstraction(m=2, n=1)",
    ],
)
def test_sdk_sync_each_scaffold_usage_matches_engine(
    fake: FakeEngineHandle, ponder: str, scaffold: str
) -> None:
    client = sdk(ponder)
    out = client.chat.completions.create(
        model=MODEL, messages=messages(), n=2, extra_body={"scaffold": scaffold}
    )
    assert len(out.choices) == 2
    for choice in out.choices:
        assert "\\boxed{" in (choice.message.content or "")
        assert choice.finish_reason in ("stop", "length")
    reported = fake_reported_usage(fake)
    assert out.usage is not None
    assert out.usage.prompt_tokens == reported["prompt_tokens"]
    assert out.usage.completion_tokens == reported["completion_tokens"]
    assert out.usage.total_tokens == reported["prompt_tokens"] + reported["completion_tokens"]
    assert out.usage.prompt_tokens_details is not None
    assert out.usage.prompt_tokens_details.cached_tokens == reported["cached_tokens"]
    assert out.usage.model_extra is not None
    assert out.usage.model_extra["engine_calls"] == reported["calls"] == fake.state.calls
    # The client's key never reaches the engine.
    for recorded in fake.state.requests:
        assert KEY not in str(recorded.headers)


def test_sdk_single_n_is_one_engine_request(fake: FakeEngineHandle, ponder: str) -> None:
    out = sdk(ponder).chat.completions.create(model=MODEL, messages=messages(), n=3, seed=7)
    assert len(out.choices) == 3
    [recorded] = fake.state.requests
    assert recorded.body["n"] == 3
    assert recorded.body["messages"] == messages()


def test_sdk_models_lists_aliases_and_alias_runs_scaffold(
    fake: FakeEngineHandle, ponder: str
) -> None:
    client = sdk(ponder)
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL, f"{MODEL}+gsr2", f"{MODEL}+rc2"]
    out = client.chat.completions.create(model=f"{MODEL}+gsr2", messages=messages())
    assert out.model == f"{MODEL}+gsr2"
    assert fake.state.calls == 2  # two candidates in one request, then the refine


def test_sdk_legacy_completions(fake: FakeEngineHandle, ponder: str) -> None:
    out = sdk(ponder).completions.create(model=MODEL, prompt="2+2=", max_tokens=5, n=2)
    assert len(out.choices) == 2
    assert all(c.finish_reason == "length" for c in out.choices)  # cut at 5 tokens
    assert fake.state.requests[0].path.endswith("/completions")
    assert fake.state.requests[0].body["prompt"] == "2+2="


async def test_sdk_async_stream_with_usage_and_reasoning(
    fake: FakeEngineHandle, ponder: str
) -> None:
    client = openai.AsyncOpenAI(base_url=f"{ponder}/v1", api_key=KEY, max_retries=0)
    stream = await client.chat.completions.create(
        model=f"{MODEL}+gsr2",
        messages=messages(),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_trace": True},
    )
    content, reasoning, finish, usage, last = "", "", None, None, None
    async for chunk in stream:
        last = chunk
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            extra = choice.delta.model_extra or {}
            reasoning += extra.get("reasoning_content") or ""
            assert extra.get("reasoning_content") == extra.get("reasoning")
            finish = choice.finish_reason or finish
    await client.close()
    assert content == default_responder(fake.state.requests[-1].body)[0]
    assert "### candidates" in reasoning
    assert finish == "stop"
    assert usage is not None and usage.model_extra is not None
    assert usage.model_extra["engine_calls"] == 2
    assert usage.completion_tokens == fake_reported_usage(fake)["completion_tokens"]
    assert last is not None and last.model_extra is not None
    assert last.model_extra["trace"][-1]["type"] == "run_finished"


def test_sdk_sync_stream_single_token_by_token(fake: FakeEngineHandle, ponder: str) -> None:
    pieces = []
    with sdk(ponder).chat.completions.create(
        model=MODEL, messages=messages(), stream=True
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
    expected = default_responder(fake.state.requests[0].body)[0]
    assert "".join(pieces) == expected
    # one content delta per engine token
    assert len(pieces) == fake.state.reported_usage[0]["completion_tokens"]


def test_auth(fake: FakeEngineHandle, ponder: str) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        sdk(ponder, key="wrong").chat.completions.create(model=MODEL, messages=messages())
    assert info.value.status_code == 401
    body = httpx.post(f"{ponder}/v1/chat/completions", json={}).json()
    assert body["error"]["type"] == "authentication_error"
    assert httpx.get(f"{ponder}/health").status_code == 200
    assert httpx.get(f"{ponder}/ready").json()["status"] == "ready"
    assert httpx.get(f"{ponder}/metrics").status_code == 200
    assert fake.state.calls == 0


def test_error_statuses(fake: FakeEngineHandle, ponder: str) -> None:
    client = sdk(ponder)
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="nope", messages=messages())
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": "gsr(n=-1)"}
        )
    assert bad.value.param == "scaffold.n"
    for spec, field in [("rsa(n=4, k=5)", "k"), ('adaptive(rule="esc", wave=2)', "wave")]:
        with pytest.raises(openai.BadRequestError) as cross:  # a check across fields
            client.chat.completions.create(
                model=MODEL, messages=messages(), extra_body={"scaffold": spec}
            )
        assert cross.value.status_code == 400 and cross.value.param == f"scaffold.{field}"
    with pytest.raises(openai.BadRequestError) as bad_n:
        client.chat.completions.create(model=MODEL, messages=messages(), n=0)
    assert bad_n.value.param == "n"
    huge = "x" * (5 * 1024 * 1024)
    with pytest.raises(openai.APIStatusError) as too_big:
        client.chat.completions.create(model=MODEL, messages=messages(huge))
    assert too_big.value.status_code == 413
    # A chunked body (no Content-Length) is counted as it streams in.
    chunked = httpx.post(
        f"{ponder}/v1/chat/completions",
        content=iter([b"{" + b" " * 1024 * 1024] * 6),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert chunked.json()["error"]["code"] == "request_too_large"
    assert fake.state.calls == 0


def test_engine_failure_503_and_stream_error_chunk(fake: FakeEngineHandle, ponder: str) -> None:
    client = sdk(ponder)
    fake.config.fail_next(503)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=messages())
    assert info.value.status_code == 503
    fake.config.fail_next(503)
    with httpx.stream(
        "POST",
        f"{ponder}/v1/chat/completions",
        json={"model": MODEL, "messages": messages(), "stream": True},
        headers={"Authorization": f"Bearer {KEY}"},
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert '"error"' in lines[-2] and "engine_unavailable" in lines[-2]
    fake.config.fail_next(503)
    with pytest.raises(openai.APIError):  # the SDK raises on an error chunk
        for _ in client.chat.completions.create(model=MODEL, messages=messages(), stream=True):
            pass


def test_overload_is_429_with_retry_after(fake: FakeEngineHandle) -> None:
    # The first request holds the only run slot until released, however slowly the
    # second one arrives (a 1 s answer could end before it, and it would get a 200).
    fake.config.hold = True
    with running_ponder(settings_for(fake, max_concurrent_runs=1, queue_size=0)) as url:
        client = sdk(url)
        results: list[Any] = []
        worker = threading.Thread(
            target=lambda: results.append(
                client.chat.completions.create(model=MODEL, messages=messages(), max_tokens=5)
            )
        )
        worker.start()
        assert wait_until(lambda: fake.state.open_calls == 1, within=60)
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model=MODEL, messages=messages())
        assert info.value.response.headers["retry-after"] == "1"
        fake.config.hold = False
        worker.join(timeout=60)
        assert results and results[0].choices[0].message.content
        metrics = httpx.get(f"{url}/metrics").text
    assert 'ponder_rejected_requests_total{reason="server_busy"} 1.0' in metrics


async def test_disconnect_cancels_engine_calls_non_streaming(
    fake: FakeEngineHandle, ponder: str
) -> None:
    fake.config.hang = True
    body = {"model": MODEL, "messages": messages(), "scaffold": "gsr(n=3)"}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=ponder, headers=headers, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        # Hang up once the engine call is open, not after a fixed time: a client gone
        # before its call reached the engine would test nothing (and see no cancel).
        assert await fake.wait_for(lambda s: s.open_calls >= 1, within=60)
        request.cancel()  # closes the connection unanswered
        with pytest.raises(asyncio.CancelledError):
            await request
    assert await fake.wait_for(lambda s: s.cancelled >= 1 and s.open_calls == 0, within=60)
    async with httpx.AsyncClient(base_url=ponder, timeout=60) as probe:
        for _ in range(600):  # the run's slot is given back just after (bounded: 60 s)
            metrics = (await probe.get("/metrics")).text
            if "ponder_runs_in_flight 0.0" in metrics:
                break
            await asyncio.sleep(0.1)
    assert "ponder_client_disconnects_total 1.0" in metrics
    assert "ponder_runs_in_flight 0.0" in metrics


def test_disconnect_cancels_engine_calls_streaming(fake: FakeEngineHandle, ponder: str) -> None:
    fake.config.latency_per_token = 0.05
    fake.config.respond = lambda body: ["word " * 400] * int(body.get("n") or 1)
    with sdk(ponder).chat.completions.create(
        model=MODEL, messages=messages(), stream=True, extra_body={"scaffold": "gsr(n=2)"}
    ) as stream:
        for i, _ in enumerate(stream):
            if i >= 3:
                break
    assert wait_until(lambda: fake.state.cancelled >= 1 and fake.state.open_calls == 0, 60)
    assert fake.state.completed == 0


async def test_concurrent_async_requests(fake: FakeEngineHandle, ponder: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{ponder}/v1", api_key=KEY, max_retries=0)
    outs = await asyncio.gather(
        *(
            client.chat.completions.create(
                model=MODEL, messages=messages(f"q{i}"), extra_body={"scaffold": "gsr(n=2)"}
            )
            for i in range(6)
        )
    )
    await client.close()
    assert all(o.choices[0].message.content for o in outs)
    assert fake.state.calls == 12


def test_best_of_n_with_a_reward_model_verifier_through_the_server() -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        return [f"candidate {i} \\boxed{{{40 + i}}}" for i in range(int(body.get("n") or 1))]

    config = FakeEngineConfig(respond=respond, reward=lambda text: 10.0 if "{42}" in text else 0.0)
    with running_fake_engine(config) as fake:
        pooling = fake.base_url.removesuffix("/v1") + "/pooling"
        with running_ponder(settings_for(fake, reward_url=pooling, reward_model="rm")) as url:
            reply = sdk(url).chat.completions.create(
                model=MODEL,
                messages=messages(),
                extra_body={"scaffold": 'best_of_n(n=3, judge="verifier")'},
            )
        paths = [r.path for r in fake.state.requests]
    assert reply.choices[0].message.content == "candidate 2 \\boxed{42}"
    assert paths.count("/pooling") == 3 and paths.count("/v1/chat/completions") == 1
    # the candidates' request and the reward model's three
    assert reply.usage is not None and reply.usage.model_extra["engine_calls"] == 4  # type: ignore[index]


def test_verifier_judge_without_a_verifier_is_a_400_naming_the_field(
    fake: FakeEngineHandle, ponder: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": 'best_of_n(judge="verifier")'}
        )
    assert info.value.body["param"] == "scaffold.judge"  # type: ignore[index]
