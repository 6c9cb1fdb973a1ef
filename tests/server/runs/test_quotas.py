"""A client key's own limits: its token quota across every run and fan-out at once, its
requests per minute, its allow-lists and fan-out, and what each refusal looks like.

The quota tests run a real server (uvicorn on loopback) over the fake engine, whose
answers stop at each call's ``max_tokens``. The key's clock is frozen, so the minute's
bucket never refills during a test, however slow the machine: what the key's runs
generate is bounded by the quota itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.app.app import create_app
from server.errors import KeyLimitError, api_error
from server.keys import ClientKey, KeyLimits
from server.runs.quotas import DAY_S, DayTokens, FrozenClock, KeyQuotas, MinuteTokens
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.keyed import KeyedApp
from testing.ponder import wait_for_answer_pool
from testing.threaded import serving_in_thread

LONG = " ".join(["step"] * 400) + " \\boxed{4}"
"""Every sample: longer than any call's grant, so each call spends all it was granted."""
WITHIN = 120.0


def test_the_minute_bucket_refills_at_its_rate_and_holds_no_more_than_a_minute() -> None:
    clock = FrozenClock(0.0)
    bucket = MinuteTokens(600, clock)
    bucket.draw(500)
    assert bucket.available() == 100
    bucket.spend(450)
    bucket.draw(-500)  # the call ends: 450 spent, its draw given back
    assert bucket.available() == 150
    clock.now += 10  # 600 per minute: 100 in 10 s
    assert bucket.available() == 250
    clock.now += 3600
    assert bucket.available() == 600  # never more than a minute's worth


def test_the_day_resets_at_midnight_utc() -> None:
    clock = FrozenClock(3 * DAY_S + DAY_S - 30)  # 30 s before midnight
    day = DayTokens(1000, clock)
    day.spend(1000)
    assert day.available() == 0 and day.retry_after() == 30
    clock.now += 30
    assert day.available() == 1000


def test_requests_per_minute_is_a_sliding_minute() -> None:
    clock = FrozenClock(1000.0)
    quotas = KeyQuotas(clock=clock)
    key = ClientKey("k", "t", KeyLimits(requests_per_minute=2))
    for at in (1000.0, 1020.0):
        clock.now = at
        quotas.check(key, 0)
        quotas.count_request(key)
    clock.now = 1030.0
    with pytest.raises(KeyLimitError) as refused:
        quotas.check(key, 0)
    assert refused.value.retry_after == 30  # the first falls out of the minute at 1060
    error = api_error(refused.value)
    assert (error.status, error.type, error.code) == (429, "requests", "rate_limit_exceeded")
    clock.now = 1060.0
    quotas.check(key, 0)


def test_a_spent_day_is_insufficient_quota() -> None:
    clock = FrozenClock(DAY_S / 2)
    quotas = KeyQuotas(clock=clock)
    key = ClientKey("k", "t", KeyLimits(tokens_per_day=100))
    pool = quotas.pool(key)
    assert pool is not None
    pool.spend(100)
    with pytest.raises(KeyLimitError) as refused:
        quotas.check(key, 0)
    error = api_error(refused.value)
    assert (error.status, error.type, error.code) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    assert error.headers["Retry-After"] == str(int(DAY_S / 2))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(
        FakeEngineConfig(respond=lambda b: [LONG] * int(b.get("n") or 1))
    ) as handle:
        yield handle


@contextlib.contextmanager
def keyed_ponder(
    fake: FakeEngineHandle, keys: dict[str, ClientKey], clock: FrozenClock
) -> Iterator[tuple[str, Any]]:
    settings = Settings(model="m", engines=(fake.base_url,), engine_model="fake-model")
    app = create_app(settings)
    app.state.serving.limiter.quotas = KeyQuotas(clock=clock)
    with serving_in_thread(KeyedApp(app, keys)) as url:
        wait_for_answer_pool(app)
        yield url, app


def chat(token: str, **extra: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], **extra}
    return body, {"Authorization": f"Bearer {token}"}


async def test_a_token_quota_holds_across_fifty_concurrent_fanned_out_runs(
    fake: FakeEngineHandle,
) -> None:
    """50 runs of gsr(n=4) at once, each with a budget of 120 tokens (6,000 asked in all),
    under one key's 2,000 tokens a minute: every engine call draws its grant from the key's
    bucket before it starts, so what they all generate is at most the quota. The bound
    proven here: generated <= tokens_per_minute (the clock frozen: no refill), as every
    call ends within its grant (the fake engine stops at max_tokens); an engine that
    overran a call's max_tokens would overrun by that call's excess, at most one step's
    grant per run in flight."""
    quota = 2000
    key = ClientKey("heavy", "t", KeyLimits(tokens_per_minute=quota))
    clock = FrozenClock(1_000_000.0)
    usage_before = len(fake.state.reported_usage)
    with keyed_ponder(fake, {"sk-heavy": key}, clock) as (url, app):
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=url, timeout=WITHIN, limits=limits) as c:
            body, headers = chat("sk-heavy", scaffold="gsr(n=4)", budget={"max_tokens": 120})
            answers = await asyncio.gather(
                *(c.post("/v1/chat/completions", json=body, headers=headers) for _ in range(50))
            )
            metrics = (await c.get("/metrics")).text
        pool = app.state.serving.limiter.quotas.pool(key)
    engine_generated = sum(u["completion_tokens"] for u in fake.state.reported_usage[usage_before:])
    ok = [a.json() for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(ok) + len(refused) == 50, [
        a.text for a in answers if a.status_code not in (200, 429)
    ]
    answered = sum(a["usage"]["completion_tokens"] for a in ok)
    assert engine_generated <= quota, engine_generated
    assert answered == engine_generated  # every generated token is in some answer's usage
    assert engine_generated > quota - 200  # the quota was used, not refused early
    cut = [a for a in ok if a["ponder"]["cut_reason"] == "quota"]
    assert cut, [a["ponder"] for a in ok]  # some runs were cut at the limit ...
    assert all(a["choices"][0]["finish_reason"] == "length" for a in cut)
    for answer in refused:  # ... and the ones that came when nothing was left refused
        error = answer.json()["error"]
        assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
        assert int(answer.headers["retry-after"]) >= 1
    if refused:
        line = 'ponder_key_refusals_total{key="heavy",reason="tokens_per_minute"}'
        assert f"{line} {float(len(refused))}" in metrics
    assert pool is not None and pool.minute is not None and pool.minute.drawn == 0


async def test_each_refusal_over_http(fake: FakeEngineHandle) -> None:
    keys = {
        "sk-models": ClientKey("models", "t", KeyLimits(models=("other",))),
        "sk-scaffolds": ClientKey("scaffolds", "t", KeyLimits(scaffolds=("single", "majority"))),
        "sk-fanout": ClientKey("fanout", "t", KeyLimits(max_fanout=8)),
        "sk-rpm": ClientKey("rpm", "t", KeyLimits(requests_per_minute=1)),
        "sk-day": ClientKey("day", "t", KeyLimits(tokens_per_day=10)),
    }
    clock = FrozenClock(DAY_S * 100 + 60)
    with keyed_ponder(fake, keys, clock) as (url, _):
        async with httpx.AsyncClient(base_url=url, timeout=WITHIN) as c:

            async def post(token: str, **extra: Any) -> httpx.Response:
                body, headers = chat(token, **extra)
                return await c.post("/v1/chat/completions", json=body, headers=headers)

            model = await post("sk-models")
            scaffold = await post("sk-scaffolds", scaffold="majority(k=4, solver=gsr(n=2))")
            allowed = await post("sk-scaffolds", scaffold="majority(k=2)")
            fanout = await post("sk-fanout", scaffold="majority(k=16)")
            first, second = await post("sk-rpm"), await post("sk-rpm")
            day_first = await post("sk-day", max_completion_tokens=50)
            day_second = await post("sk-day")
    assert model.status_code == 404  # as a model not served: the key cannot tell
    assert model.json()["error"] == {
        "message": "the model 'm' does not exist or you do not have access to it (known: none)",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert scaffold.status_code == 403
    assert scaffold.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "scaffold",
        "code": "scaffold_not_allowed",
    }
    assert "gsr" in scaffold.json()["error"]["message"]
    assert allowed.status_code == 200
    assert fanout.status_code == 400 and fanout.json()["error"]["code"] == "fan_out_exceeded"
    assert first.status_code == 200 and second.status_code == 429
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert second.headers["retry-after"] == "60"
    assert day_first.status_code == 200  # cut at the day's 10 tokens ...
    assert day_first.json()["usage"]["completion_tokens"] <= 10
    assert day_first.json()["ponder"]["cut_reason"] == "quota"
    assert day_second.status_code == 429  # ... then refused until midnight UTC
    assert day_second.json()["error"]["code"] == "insufficient_quota"
    assert day_second.headers["retry-after"] == str(int(DAY_S - 60))
