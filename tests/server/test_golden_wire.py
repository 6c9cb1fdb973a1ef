"""The wire, byte for byte: a fixed set of requests against the app, each answer compared
with the one recorded under ``tests/server/golden/`` (one file per case).

Issue 50 restructures ``server/`` with no change of behaviour; this test is what says no
byte changed. Each case builds a fresh app in process (two models on scripted
:class:`~scaffolds.engines.mock.MockEngine` s, aliases, API keys on, responses stored in
memory), sends its requests in order through ``httpx.ASGITransport``, and renders each
exchange: the request as the case wrote it, then the status line, every response header
in the order sent, and the body's bytes (an SSE stream whole).

Only what differs from run to run is normalised, by regex, before the comparison:

- **Generated ids** in bodies and headers (``chatcmpl-``, ``cmpl-``, ``resp_``, ``msg_``,
  ``rs_``, ``toolu_`` and the like: an optional prefix and 24 or 32 random hex digits):
  the hex part becomes ``<id-1>``, ``<id-2>``, ... in the order first seen in the case,
  so one id keeps one placeholder within it (a stored response's id is sent back in a
  later step's path or body as its placeholder; ``msg_<id-1>_0`` is an input item of
  ``resp_<id-1>``). The prefix and the digit count stay checked: an id of another shape
  is not normalised, and differs.
- **A generated ``x-request-id``** (32 random hex digits; one the client sent is echoed
  and kept): ``<request id>``, so the numbering of ids above counts body ids only.
- **Epoch timestamps** (``created``, ``created_at``, a trace event's ``time``, in any
  field): a number within a day of now, in plain or exponent notation, becomes
  ``<time>``; they come from the clock.
- **Durations** in ``/metrics``: the values of the ``*_seconds`` histograms' buckets and
  sums (they measure this machine; their counts stay) and of the ``*_created`` samples
  (timestamps) become ``<value>``.
- **Content-Length**, when it is the length of the body as received, is recorded as
  ``<length of body>``: the body is compared itself, and a normalised timestamp may be
  shorter or longer than another. A length that does not match its body stays as sent.

``PONDER_UPDATE_GOLDEN=1`` rewrites the recorded files from the current code; without it
any difference fails with a unified diff of that case, and a missing file fails (nothing
is recorded silently). Nothing is timed, and no process is started.

>>> normalise("chatcmpl-" + "ab" * 16 + " again chatcmpl-" + "ab" * 16, {})
'chatcmpl-<id-1> again chatcmpl-<id-1>'
"""

from __future__ import annotations

import difflib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest
from server.app.app import create_app
from server.model_settings import ModelConfig
from server.settings import Settings
from tests.server.conftest import STORE_IN_MEMORY, UNUSED, boxed

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("PONDER_UPDATE_GOLDEN") == "1"
KEY = "sk-golden"
AUTH = (("authorization", f"Bearer {KEY}"),)
SETTINGS = Settings.model_validate(
    {
        "model": "m",
        "engines": (UNUSED,),
        "aliases": {"g2": "gsr(n=2)", "maj3": "majority(k=3)"},
        "models": (ModelConfig(name="r", engines=(UNUSED,), aliases={"r+g2": "gsr(n=2)"}),),
        "api_keys": (KEY,),
        **STORE_IN_MEMORY,
    }
)
"""Two models with aliases: ``m`` (the conftest's ``boxed`` answer) and ``r`` (a
reasoning model: :func:`thinker`)."""

_ID = re.compile(
    r"(?<![0-9A-Za-z])(?P<prefix>[A-Za-z]+[-_])?(?P<hex>[0-9a-f]{32}|[0-9a-f]{24})(?![0-9A-Za-z])"
)
_NUMBER = re.compile(r"(?<![0-9A-Za-z.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![0-9A-Za-z])")
_METRIC_SAMPLE = re.compile(
    r"^(?P<name>\w+?_(?:seconds_bucket|seconds_sum|created))(?P<labels>\{[^}]*\})? (?P<value>\S+)$"
)
_REQUEST_ID = re.compile(r"[0-9a-f]{32}")
_DAY = 86_400.0


def thinker(request: GenerateRequest) -> list[Completion]:
    """Model ``r``'s answer: reasoning apart from the text, as a reasoning parser gives."""
    answer = Completion("So \\boxed{4}", "stop", "Two and two make four.", completion_tokens=2)
    return [answer] * request.params.n


def build_app() -> FastAPI:
    engines = {"m": MockEngine(boxed), "r": MockEngine(thinker)}
    return create_app(SETTINGS, engines=engines)


def normalise(text: str, ids: dict[str, str]) -> str:
    """``text`` with each generated id's hex replaced by its placeholder in ``ids`` (new
    ones numbered on), and each epoch timestamp by ``<time>``."""

    def one_id(match: re.Match[str]) -> str:
        hexpart = match["hex"]
        placeholder = ids.setdefault(hexpart, f"<id-{len(ids) + 1}>")
        return (match["prefix"] or "") + placeholder

    return _timestamps(_ID.sub(one_id, text))


def _timestamps(text: str) -> str:
    now = time.time()

    def one(match: re.Match[str]) -> str:
        return "<time>" if abs(float(match[0]) - now) < _DAY else match[0]

    return _NUMBER.sub(one, text)


def _metrics(text: str) -> str:
    """A Prometheus text body with its duration and creation samples' values hidden."""
    lines = []
    for line in text.split("\n"):
        match = _METRIC_SAMPLE.match(line)
        if match:
            line = f"{match['name']}{match['labels'] or ''} <value>"
        lines.append(line)
    return "\n".join(lines)


@dataclass(frozen=True)
class Step:
    """One request: ``json`` is sent as JSON, else ``content`` as is; ``auth`` adds the key.

    A path may name an id seen earlier in the case by its placeholder (``<id-1>``).
    """

    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    auth: bool = True


@dataclass(frozen=True)
class Case:
    name: str
    steps: tuple[Step, ...]


def get(path: str, **kw: Any) -> Step:
    return Step("GET", path, **kw)


def post(path: str, body: Any = None, **kw: Any) -> Step:
    return Step("POST", path, json=body, **kw)


def chat(content: str = "2+2?", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def messages(content: str = "2+2?", **extra: Any) -> dict[str, Any]:
    user = [{"role": "user", "content": content}]
    return {"model": "m", "max_tokens": 4096, "messages": user, **extra}


JSON = (("content-type", "application/json"),)
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"

CASES = (
    # -- documents, models and the small routes ------------------------------------------
    Case("openapi", (get("/openapi.json"),)),
    Case("models", (get("/v1/models"),)),
    Case("model_card", (get("/v1/models/m"), get("/v1/models/m+g2"))),
    Case("model_card_unknown", (get("/v1/models/nope"),)),
    Case("health", (get("/health"), get("/ready"), get("/version"))),
    Case("docs", (get("/docs"), get("/redoc"))),
    Case(
        "playground",
        (
            get("/playground/strategies"),
            post("/playground/spec", {"scaffold": "gsr(n=2)"}),
            post("/playground/spec", {"scaffold": "gsr(n="}),
            post("/playground/spec", {"spec": "gsr(n=2)"}),
        ),
    ),
    Case(
        "tokenize",
        (
            post("/tokenize", {"model": "m", "prompt": "2+2?"}),
            post("/tokenize", {"model": "nope", "prompt": "2+2?"}),
            post("/tokenize", {"model": "m"}),
            post("/detokenize", {"model": "m", "tokens": [1, 2]}),
            post(
                "/v1/messages/count_tokens",
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            ),
        ),
    ),
    Case("metrics", (post(CHAT, chat()), get("/metrics"))),
    # -- chat completions ----------------------------------------------------------------
    Case("chat_plain", (post(CHAT, chat()),)),
    Case("chat_alias", (post(CHAT, chat(model="m+g2")),)),
    Case("chat_spec_in_model", (post(CHAT, chat(model="m+gsr(n=2)")),)),
    Case("chat_scaffold_field", (post(CHAT, chat(scaffold="majority(k=3)")),)),
    Case("chat_return_trace", (post(CHAT, chat(model="m+g2", return_trace=True)),)),
    Case("chat_n2", (post(CHAT, chat(n=2)),)),
    Case("chat_logprobs", (post(CHAT, chat(logprobs=True, top_logprobs=2)),)),
    Case("chat_logprobs_scaffold", (post(CHAT, chat(model="m+g2", logprobs=True)),)),
    Case("chat_max_tokens", (post(CHAT, chat(max_tokens=3)),)),
    Case("chat_stream", (post(CHAT, chat(stream=True)),)),
    Case(
        "chat_stream_usage",
        (post(CHAT, chat(stream=True, stream_options={"include_usage": True})),),
    ),
    Case("chat_stream_scaffold", (post(CHAT, chat(model="m+g2", stream=True)),)),
    Case("chat_stream_trace", (post(CHAT, chat(model="m+g2", stream=True, return_trace=True)),)),
    Case("chat_request_id", (post(CHAT, chat(), headers=(("x-request-id", "golden-1"),)),)),
    Case("chat_reasoning_model", (post(CHAT, chat(model="r")),)),
    Case("chat_reasoning_stream", (post(CHAT, chat(model="r+g2", stream=True)),)),
    Case(
        "chat_content_type",
        (
            Step(
                "POST",
                CHAT,
                content=json.dumps(chat()).encode(),
                headers=(("content-type", "text/plain"),),
            ),
        ),
    ),
    # -- completions ---------------------------------------------------------------------
    Case("completions_plain", (post(COMPLETIONS, {"model": "m", "prompt": "2+2="}),)),
    Case("completions_prompts", (post(COMPLETIONS, {"model": "m", "prompt": ["2+2=", "3+3="]}),)),
    Case(
        "completions_stream", (post(COMPLETIONS, {"model": "m", "prompt": "2+2=", "stream": True}),)
    ),
    # -- Responses -----------------------------------------------------------------------
    Case("responses_plain", (post(RESPONSES, {"model": "m", "input": "2+2?"}),)),
    Case("responses_scaffold", (post(RESPONSES, {"model": "m+g2", "input": "2+2?"}),)),
    Case(
        "responses_stream", (post(RESPONSES, {"model": "m+g2", "input": "2+2?", "stream": True}),)
    ),
    Case(
        "responses_stored",
        (
            post(RESPONSES, {"model": "m", "input": "2+2?", "instructions": "Be brief."}),
            get(f"{RESPONSES}/resp_<id-1>"),
            get(f"{RESPONSES}/resp_<id-1>/input_items"),
            post(
                RESPONSES,
                {"model": "m", "input": "And 3+3?", "previous_response_id": "resp_<id-1>"},
            ),
            get(f"{RESPONSES}/resp_<id-3>/input_items"),
            Step("DELETE", f"{RESPONSES}/resp_<id-1>"),
            get(f"{RESPONSES}/resp_<id-1>"),
            Step("DELETE", f"{RESPONSES}/resp_<id-1>"),
        ),
    ),
    Case("responses_unstored", (post(RESPONSES, {"model": "m", "input": "hi", "store": False}),)),
    Case("responses_reasoning_model", (post(RESPONSES, {"model": "r", "input": "2+2?"}),)),
    # -- Messages ------------------------------------------------------------------------
    Case("messages_plain", (post(MESSAGES, messages()),)),
    Case("messages_scaffold", (post(MESSAGES, messages(model="m+g2", system="Be brief.")),)),
    Case("messages_stream", (post(MESSAGES, messages(model="m+g2", stream=True)),)),
    Case("messages_reasoning_model", (post(MESSAGES, messages(model="r")),)),
    Case("messages_reasoning_stream", (post(MESSAGES, messages(model="r", stream=True)),)),
    Case(
        "messages_x_api_key",
        (post(MESSAGES, messages(), auth=False, headers=(("x-api-key", KEY),)),),
    ),
    # -- errors --------------------------------------------------------------------------
    Case(
        "error_auth",
        (
            post(CHAT, chat(), auth=False),
            post(CHAT, chat(), auth=False, headers=(("authorization", "Bearer sk-wrong"),)),
            get("/v1/models", auth=False),
        ),
    ),
    Case(
        "error_unknown_model",
        (
            post(CHAT, chat(model="nope")),
            post(COMPLETIONS, {"model": "nope", "prompt": "x"}),
            post(RESPONSES, {"model": "nope", "input": "x"}),
            post(MESSAGES, messages(model="nope")),
        ),
    ),
    Case(
        "error_malformed_spec",
        (
            post(CHAT, chat(model="m+gsr(n=")),
            post(CHAT, chat(scaffold="gsr(n=0)")),
            post(CHAT, chat(model="m+nosuch")),
            post(COMPLETIONS, {"model": "m", "prompt": "x", "scaffold": "gsr(n="}),
            post(RESPONSES, {"model": "m", "input": "x", "scaffold": "gsr(n=0)"}),
            post(MESSAGES, messages(scaffold="gsr(n=")),
        ),
    ),
    Case(
        "error_invalid_json",
        tuple(
            Step("POST", path, content=b'{"model": "m", ', headers=JSON)
            for path in (CHAT, COMPLETIONS, RESPONSES, MESSAGES, "/tokenize")
        ),
    ),
    Case(
        "error_not_an_object",
        tuple(
            Step("POST", path, content=b"[1, 2]", headers=JSON)
            for path in (CHAT, COMPLETIONS, RESPONSES, MESSAGES)
        ),
    ),
    Case(
        "error_missing_field",
        (
            post(CHAT, {"model": "m"}),
            post(COMPLETIONS, {"model": "m"}),
            post(RESPONSES, {"model": "m"}),
            post(MESSAGES, {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        ),
    ),
    Case(
        "error_bad_type",
        (
            post(CHAT, chat(temperature="hot")),
            post(CHAT, chat(n="two")),
            post(COMPLETIONS, {"model": "m", "prompt": 7}),
            post(RESPONSES, {"model": "m", "input": "x", "max_output_tokens": "many"}),
            post(MESSAGES, messages(max_tokens="many")),
        ),
    ),
    Case(
        "error_unsupported",
        (
            post(CHAT, chat(model="m+g2", tools=[{"type": "function", "function": {"name": "f"}}])),
            post(RESPONSES, {"model": "m", "input": "x", "n": 2}),
            post(RESPONSES, {"model": "m", "input": "x", "previous_response_id": "resp_nope"}),
            get(f"{RESPONSES}/resp_nope"),
            get(f"{RESPONSES}/resp_nope/input_items"),
        ),
    ),
    Case("error_not_found", (get("/v1/nothing"), Step("PUT", CHAT, json=chat()))),
)


async def exchange(client: httpx.AsyncClient, step: Step, ids: dict[str, str]) -> bytes:
    """Send ``step`` (its placeholders replaced by the ids they stand for); its request
    and answer rendered, the answer normalised with ``ids``."""
    real = {placeholder: hexpart for hexpart, placeholder in ids.items()}

    def resolved(text: str) -> str:
        return re.sub(r"<id-\d+>", lambda m: real.get(m[0], m[0]), text)

    headers = [*(AUTH if step.auth else ()), *step.headers]
    shown = step.content
    if step.json is not None:
        shown = json.dumps(step.json).encode()
        headers.append(("content-type", "application/json"))
    content = None if shown is None else resolved(shown.decode()).encode()
    response = await client.request(
        step.method, resolved(step.path), content=content, headers=headers
    )
    body = response.content
    text = body.decode()
    text = normalise(_metrics(text) if step.path == "/metrics" else text, ids)
    lines = [f">>> {step.method} {step.path}"]
    lines += [f"> {name}: {value}" for name, value in step.headers]
    if shown is not None:
        lines.append(f"> {shown.decode()}")
    lines.append(f"<<< {response.status_code} {response.reason_phrase}")
    for raw_name, raw_value in response.headers.raw:
        name, value = raw_name.decode(), raw_value.decode()
        if name.lower() == "content-length" and value == str(len(body)):
            value = "<length of body>"
        elif name.lower() == "x-request-id" and _REQUEST_ID.fullmatch(value):
            value = "<request id>"
        lines.append(f"< {name}: {normalise(value, ids)}")
    return ("\n".join(lines) + "\n\n").encode() + text.encode() + b"\n\n"


async def record(case: Case) -> bytes:
    """Every step of ``case`` against a fresh app, rendered and normalised."""
    app = build_app()
    ids: dict[str, str] = {}
    out = b""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as client:
        for step in case.steps:
            out += await exchange(client, step, ids)
    return out


def compare(name: str, recorded: bytes | None, actual: bytes) -> str | None:
    """None when ``actual`` is ``recorded`` to the byte; else what differs, as a unified diff."""
    if recorded is None:
        return f"{name}: no recorded answer (PONDER_UPDATE_GOLDEN=1 records it)"
    if recorded == actual:
        return None
    diff = difflib.unified_diff(
        recorded.decode(errors="replace").splitlines(keepends=True),
        actual.decode(errors="replace").splitlines(keepends=True),
        fromfile=f"golden/{name}.txt (recorded)",
        tofile=f"golden/{name}.txt (now)",
    )
    return "".join(diff) or f"{name}: the bytes differ (line endings or encoding)"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_wire_is_as_recorded(case: Case) -> None:
    actual = await record(case)
    path = GOLDEN / f"{case.name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_bytes(actual)
    recorded = path.read_bytes() if path.is_file() else None
    failure = compare(case.name, recorded, actual)
    assert failure is None, failure


def test_every_recorded_file_has_its_case() -> None:
    names = {c.name for c in CASES}
    assert len(names) == len(CASES)
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(names)


def test_a_one_byte_change_is_reported() -> None:
    """A recorded body with one byte changed (``boxed`` to ``Boxed``) fails, naming the
    line; the same bytes pass; a missing recording fails."""
    recorded = (GOLDEN / "chat_plain.txt").read_bytes()
    at = recorded.rindex(b"boxed")
    changed = recorded[:at] + b"B" + recorded[at + 1 :]
    failure = compare("chat_plain", recorded, changed) or ""
    removed = [line for line in failure.splitlines() if line.startswith("-{")]
    added = [line for line in failure.splitlines() if line.startswith("+{")]
    assert len(removed) == len(added) == 1, failure
    assert "\\boxed{4}" in removed[0] and "\\Boxed{4}" in added[0], failure
    assert compare("chat_plain", recorded, recorded) is None
    assert "no recorded answer" in (compare("chat_plain", None, recorded) or "")
