"""``single`` through an engine's own ``/v1/responses`` keeps the limits and accounting of
a run: the server's ``--max-budget-timeout`` (a 504, or a stream's ``response.failed``,
as a run of ``single`` past its deadline ends, and the engine call cancelled), the run
metrics on ``/metrics``, and a stream's replica lease and sequence held to its last
event. Fake engines serving ``/v1/responses`` (paced as vLLM: ``response.created`` at
once, then held), Ponder on loopback, the openai SDK."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import STORE_IN_MEMORY, wait_until

MODEL = "fake-model"
DEADLINE_S = 2.0
"""The server's cap in the deadline tests: the engine holds every call far past it."""


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeEngineHandle, FakeEngineHandle]]:
    config = FakeEngineConfig(responses_api=True, cached_tokens=1)
    with running_fake_engine(config) as a, running_fake_engine(config) as b:
        yield a, b


@pytest.fixture()
def held(fakes: tuple[FakeEngineHandle, ...]) -> Iterator[None]:
    """Both fakes hold every call (after a stream's ``response.created``) until the test
    ends; every call is over after it."""
    fakes[0].config.hold = True  # one config, shared by both
    try:
        yield
    finally:
        fakes[0].config.hold = False
        assert wait_until(lambda: all(f.state.open_calls == 0 for f in fakes), within=60)


@pytest.fixture(scope="module")
def replicated(fakes: tuple[FakeEngineHandle, ...]) -> Iterator[str]:
    """Ponder over both fakes as two replicas of one model."""
    engines = tuple(f.base_url for f in fakes)
    with running_ponder(
        Settings(model=MODEL, engines=engines, engine_max_retries=0, **STORE_IN_MEMORY)
    ) as url:
        yield url


@pytest.fixture(scope="module")
def capped(fakes: tuple[FakeEngineHandle, ...]) -> Iterator[str]:
    """Ponder over the first fake with a short --max-budget-timeout."""
    settings = Settings(
        model=MODEL,
        engines=(fakes[0].base_url,),
        engine_max_retries=0,
        max_budget_timeout_s=DEADLINE_S,
        **STORE_IN_MEMORY,
    )
    with running_ponder(settings) as url:
        yield url


def metrics(url: str, name: str) -> dict[frozenset[str], float]:
    """Each series of ``name`` on ``/metrics``: its labels (``'model="m"'``...) to its value."""
    text = httpx.get(f"{url}/metrics").text
    found = re.finditer(rf"^{name}{{(.*)}} (\S+)$", text, re.M)
    return {frozenset(m[1].split(",")): float(m[2]) for m in found}


def outcome(url: str, body: dict[str, object]) -> tuple[int, str, str, str]:
    """A request's status, and the type and code of its error (for a stream: of its last
    event, and its error's code)."""
    if not body.get("stream"):
        r = httpx.post(f"{url}/v1/responses", json=body, timeout=120)
        error = r.json()["error"]
        return r.status_code, "error", error["type"], error["code"]
    with httpx.stream("POST", f"{url}/v1/responses", json=body, timeout=120) as r:
        data = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    last, response = data[-1]["type"], data[-1]["response"]
    return r.status_code, last, response["status"], response["error"]["code"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_deadline_ends_an_engine_call_as_it_ends_a_run(
    capped: str, fakes: tuple[FakeEngineHandle, ...], held: None, stream: bool
) -> None:
    fake = fakes[0]
    cancelled, calls = fake.state.cancelled, fake.state.calls
    direct = outcome(capped, {"model": MODEL, "input": "hi", "stream": stream})
    assert [r.path for r in list(fake.state.requests)[calls:]] == ["/v1/responses"]
    # The engine call was cancelled at the deadline, not left to the engine's read timeout.
    assert wait_until(lambda: fake.state.cancelled == cancelled + 1, within=60)
    # The same request run as a scaffold run (a budget of calls makes it one) ends the same.
    budget = {"timeout_s": DEADLINE_S, "max_calls": 1}
    run = outcome(capped, {"model": MODEL, "input": "hi", "stream": stream, "budget": budget})
    assert fake.state.requests[-1].path == "/v1/chat/completions"
    if stream:
        assert direct == run == (200, "response.failed", "failed", "deadline_exceeded")
    else:
        assert direct == run == (504, "error", "timeout_error", "deadline_exceeded")


def test_a_requests_own_timeout_bounds_the_engine_call(
    replicated: str, fakes: tuple[FakeEngineHandle, ...], held: None
) -> None:
    seen = [len(f.state.requests) for f in fakes]
    body = {"model": MODEL, "input": "hi", "budget": {"timeout_s": DEADLINE_S}}
    assert outcome(replicated, body) == (504, "error", "timeout_error", "deadline_exceeded")
    sent = [r.path for f, n in zip(fakes, seen, strict=True) for r in list(f.state.requests)[n:]]
    assert sent == ["/v1/responses"]  # the engine's own API, not a run on chat completions


def test_engine_calls_are_counted_as_runs(replicated: str) -> None:
    client = openai_client(replicated)
    labels = frozenset({f'model="{MODEL}"', 'scaffold="single"'})
    tokens, calls = "ponder_run_tokens_total", "ponder_run_engine_calls_total"
    before = metrics(replicated, tokens), metrics(replicated, calls)
    plain = client.responses.create(model=MODEL, input="What is 2+3?")
    with client.responses.stream(model=MODEL, input="What is 4+4?") as stream:
        streamed = stream.get_final_response()
    assert plain.model_extra and plain.model_extra["ponder"]["engine_api"] == "responses"
    assert streamed.model_extra and streamed.model_extra["ponder"]["engine_api"] == "responses"
    assert plain.usage is not None and streamed.usage is not None
    after = metrics(replicated, tokens), metrics(replicated, calls)
    for kind, used in (
        ("prompt", plain.usage.input_tokens + streamed.usage.input_tokens),
        ("completion", plain.usage.output_tokens + streamed.usage.output_tokens),
    ):
        series = labels | {f'kind="{kind}"'}
        assert after[0][series] == before[0].get(series, 0) + used, kind
    assert after[1][labels] == before[1].get(labels, 0) + 2


def test_a_stream_holds_its_replica_until_its_last_event(
    replicated: str, fakes: tuple[FakeEngineHandle, ...], held: None
) -> None:
    def in_flight() -> tuple[float, float]:
        """Calls on the replicas, and sequences in the model's gate."""
        out = metrics(replicated, "ponder_engine_replica_outstanding")
        seqs = metrics(replicated, "ponder_engine_sequences_in_flight")
        return sum(out.values()), seqs[frozenset({f'model="{MODEL}"'})]

    body = {"model": MODEL, "input": "hi", "stream": True}
    with httpx.stream("POST", f"{replicated}/v1/responses", json=body, timeout=120) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))  # response.created
        assert sum(f.state.open_calls for f in fakes) == 1  # the engine holds the rest
        assert in_flight() == (1, 1)
        fakes[0].config.hold = False
        events = [json.loads(line[5:])["type"] for line in lines if line.startswith("data:")]
    assert events[-1] == "response.completed"
    assert wait_until(lambda: in_flight() == (0, 0), within=60)
    # A client that leaves mid-stream gives the replica back too.
    fakes[0].config.hold = True
    with httpx.stream("POST", f"{replicated}/v1/responses", json=body, timeout=120) as r:
        lines = r.iter_lines()  # (the stream is open while its lines are read)
        assert next(line for line in lines if line.startswith("data:"))
        assert in_flight() == (1, 1)
    assert wait_until(lambda: in_flight() == (0, 0), within=60)
    assert wait_until(lambda: sum(f.state.open_calls for f in fakes) == 0, within=60)
