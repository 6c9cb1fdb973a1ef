"""Bad input: whatever a client sends, the answer is a 4xx with a clear OpenAI error.

Three layers: schemathesis generates requests from the server's own OpenAPI schema and
finds no 5xx; a hypothesis fuzz drives the request models and the request planner (spec
parsing included) with arbitrary JSON and finds nothing but the two expected errors; and
a table of known-bad requests checks each status, ``param`` and message. (The spec
parser's own fuzz tests live in ``tests/scaffolds/test_spec.py``.)

The example counts are kept small for CI; for a deeper search set ``PONDER_FUZZ_SCALE``
(e.g. ``PONDER_FUZZ_SCALE=20 pytest tests/reliability/test_bad_input.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from scaffolds.errors import PonderError
from server.errors import api_error, validation_error
from server.runs.request import ChatCompletionRequest, CompletionRequest
from tests.reliability.conftest import assert_openai_error
from tests.server.conftest import build_app

BODY_LIMIT = 64 * 1024
APP, ENGINE = build_app(max_body_bytes=BODY_LIMIT, aliases={"g2": "gsr(n=2)"})
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
JSON_TYPE = {"content-type": "application/json"}
SCALE = int(os.environ.get("PONDER_FUZZ_SCALE", "1"))


# -- schemathesis ------------------------------------------------------------------------
@SCHEMA.parametrize()
@settings(
    max_examples=25 * SCALE,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_request_the_schema_allows_gets_a_5xx(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, case.body, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"], error


# -- hypothesis: request models and planning ---------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
SPEC_TEXT = st.sampled_from(
    ["gsr(n=2)", "rc(steps=2)", "majority(k=3, solver=gsr(n=2))", "single", "gsr(", "x(y=)"]
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | st.text()},
    optional={"content": st.text(max_size=30) | st.none() | JSON, "name": JSON},
)
REQUEST = st.fixed_dictionaries(
    {"model": st.sampled_from(["m", "m+g2", "m+gsr(n=3)", "m+", "nope"]) | st.text()},
    optional={
        "messages": st.lists(MESSAGE, max_size=3) | JSON,
        "prompt": st.text(max_size=20) | st.lists(st.text(max_size=5), max_size=3) | JSON,
        "n": st.integers(-3, 300) | JSON,
        "max_tokens": st.integers(-5, 10**30) | JSON,
        "max_completion_tokens": st.integers(-5, 10**6) | JSON,
        "temperature": st.floats() | JSON,
        "top_p": st.floats() | JSON,
        "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=3) | JSON,
        "seed": st.integers() | JSON,
        "stream": st.booleans() | JSON,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": JSON}) | JSON,
        "scaffold": SPEC_TEXT | st.text(max_size=40) | JSON,
        "budget": st.fixed_dictionaries(
            {}, optional={"max_tokens": JSON, "max_calls": JSON, "timeout_s": JSON}
        )
        | JSON,
        "return_trace": JSON,
        "top_k": JSON,
        "anything_else": JSON,
    },
)


@given(REQUEST, st.sampled_from(["chat", "completions"]))
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_request_models_and_planning_raise_only_request_errors(
    body: dict[str, Any], endpoint: str
) -> None:
    model = ChatCompletionRequest if endpoint == "chat" else CompletionRequest
    try:
        request = model.model_validate(body)
    except ValidationError as err:
        error = validation_error(err.errors(include_url=False))
        assert error.status == 400 and error.message
        return
    try:
        APP.state.serving.plan(endpoint, request)
    except PonderError as err:
        status = api_error(err).status
        assert 400 <= status < 500 and err.message, (status, err.message)


# -- known-bad requests over HTTP --------------------------------------------------------
def _nested_spec(depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "single"}
    for _ in range(depth):
        spec = {"name": "gsr", "n": 2, "solver": spec}
    return spec


def _chat(**extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], **extra}
    return json.dumps(body).encode()


BAD_REQUESTS: list[tuple[str, bytes, dict[str, str], int, str | None, str]] = [
    # (case, body, headers, status, param, a piece of the message)
    ("not UTF-8", b'{"model": "m\xff\xfe", "messages": []}', JSON_TYPE, 400, None, "UTF-8"),
    ("not JSON", b"{model: m}", JSON_TYPE, 400, None, "not valid JSON"),
    ("empty body", b"", JSON_TYPE, 400, None, "empty"),
    ("a JSON array", b"[1, 2]", JSON_TYPE, 400, None, "must be a JSON object"),
    ("text/plain", _chat(), {"content-type": "text/plain"}, 400, None, "application/json"),
    (
        "form-encoded",
        _chat(),
        {"content-type": "application/x-www-form-urlencoded"},
        400,
        None,
        "application/json",
    ),  # curl -d without -H
    ("no content type", _chat(), {}, 400, None, "application/json"),
    ("huge n", _chat(n=10**12), JSON_TYPE, 400, "n", "less than or equal to 128"),
    ("n zero", _chat(n=0), JSON_TYPE, 400, "n", "greater than or equal to 1"),
    (
        "negative max_tokens",
        _chat(max_tokens=-1),
        JSON_TYPE,
        400,
        "max_tokens",
        "greater than or equal to 1",
    ),
    (
        "negative max_completion_tokens",
        _chat(max_completion_tokens=-7),
        JSON_TYPE,
        400,
        "max_completion_tokens",
        "greater than or equal to 1",
    ),
    (
        "negative budget",
        _chat(budget={"max_tokens": -1}),
        JSON_TYPE,
        400,
        "budget.max_tokens",
        "greater than or equal to 1",
    ),
    (
        "infinite deadline",
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], '
        b'"budget": {"timeout_s": Infinity}}',
        JSON_TYPE,
        400,
        "budget.timeout_s",
        "finite number > 0",
    ),
    (
        "NaN temperature",
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
        JSON_TYPE,
        400,
        "temperature",
        "temperature",
    ),
    ("no messages", _chat(messages=[]), JSON_TYPE, 400, "messages", "at least 1"),
    (
        "unknown role",
        _chat(messages=[{"role": "wizard", "content": "x"}]),
        JSON_TYPE,
        400,
        "messages.0.role",
        "wizard",
    ),
    (
        "scaffold of a wrong type",
        _chat(scaffold=5),
        JSON_TYPE,
        400,
        "scaffold",
        "valid string or a valid dictionary",
    ),
    ("scaffold syntax", _chat(scaffold="gsr(n=2"), JSON_TYPE, 400, "scaffold", "column"),
    ("bad scaffold field", _chat(scaffold="gsr(n=0)"), JSON_TYPE, 400, "scaffold.n", ">= 1"),
    (
        "fan-out over the cap",
        _chat(scaffold="abstraction(m=64, n=2)", n=4),
        JSON_TYPE,
        400,
        "n",
        "over the cap of 256",
    ),
    (
        "fan-out in one spec",
        _chat(scaffold="gsr(n=8, solver=rc(steps=64))"),
        JSON_TYPE,
        400,
        "scaffold",
        "over the cap",
    ),
    (
        "deeply nested JSON spec",
        _chat(scaffold=_nested_spec(60)),
        JSON_TYPE,
        400,
        "scaffold",
        "deep",
    ),
    (
        "deeply nested compact spec",
        _chat(scaffold="gsr(solver=" * 40 + "single" + ")" * 40),
        JSON_TYPE,
        400,
        "scaffold",
        "nest more than",
    ),
    (
        "deeply nested body",
        b'{"model": "m", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        JSON_TYPE,
        400,
        None,
        "nests too deeply",
    ),
    (
        "oversized body",
        _chat(messages=[{"role": "user", "content": "x" * BODY_LIMIT}]),
        JSON_TYPE,
        413,
        None,
        f"limit of {BODY_LIMIT} bytes",
    ),
    ("unknown model", _chat(model="gpt-17"), JSON_TYPE, 404, "model", "does not exist"),
]


@pytest.mark.parametrize(
    ("body", "headers", "status", "param", "says"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
async def test_bad_requests_get_a_clear_4xx(
    body: bytes, headers: dict[str, str], status: int, param: str | None, says: str
) -> None:
    transport = httpx.ASGITransport(app=APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as c:
        response = await c.post("/v1/chat/completions", content=body, headers=headers)
    error = assert_openai_error(response, status)
    assert error["param"] == param, error
    assert says in error["message"], error
    assert error["type"] in ("invalid_request_error",), error


async def test_bad_requests_never_reach_the_engine() -> None:
    before = len(ENGINE.requests)
    transport = httpx.ASGITransport(app=APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as c:
        await asyncio.gather(
            *(
                c.post("/v1/chat/completions", content=body, headers=headers)
                for _, body, headers, *_ in BAD_REQUESTS
            )
        )
    assert len(ENGINE.requests) == before
