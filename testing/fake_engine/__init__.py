"""A fake OpenAI-compatible engine server for tests and benchmarks.

It speaks enough of the vLLM/OpenAI API (``/health``, ``/v1/models``,
``/v1/completions`` (a list of prompts too, unstreamed, answered as vLLM does),
``/v1/chat/completions``; streaming, ``n``, usage with cached
tokens, logprobs with ``token_id:N`` tokens, ``reasoning_content``) for engine clients to
be tested over real HTTP. A mutable :class:`FakeEngineConfig` controls what it answers,
how slowly, and how it fails: a status for the next N calls (``fail_next``), fixed or
heavy-tailed latency per token, holding or hanging calls, a connection dropped or a
stream cut short mid-way, malformed JSON, an error inside a stream.
:class:`FakeEngineState` counts calls, open calls and calls the client abandoned, and
records every request body and header set.

With ``dialect="sglang"`` it answers the way SGLang's OpenAI-compatible server does
where that differs: reasoning in ``reasoning_content`` unless the request says
``separate_reasoning: false`` (then it stays inline in ``<think>`` tags),
``usage.prompt_tokens_details`` null unless some tokens were cached, a top-level
``reasoning_tokens``, flat error bodies (``{"object": "error", "message", "type",
"code"}``), and ``POST /abort_request`` (recorded in ``state.aborted``). These shapes come
from reading SGLang's public source, not from a running SGLang.

Tokens are whitespace-separated words (with their leading space), so counts are
predictable. ``latency_per_token`` is one decoding step: the n samples of a call advance
together, as in a batched engine.

>>> import httpx
>>> with running_fake_engine() as engine:
...     httpx.get(engine.base_url + "/models").json()["data"][0]["id"]
'fake-model'

From a shell: ``python -m testing.fake_engine --port 9000 --latency-per-token 0.01``.
"""

from testing.fake_engine.app import create_app, fake_engine, running_fake_engine
from testing.fake_engine.config import (
    Failure,
    FakeEngineConfig,
    FakeEngineHandle,
    FakeEngineState,
    RecordedRequest,
    Responder,
    default_responder,
)

__all__ = [
    "Failure",
    "FakeEngineConfig",
    "FakeEngineHandle",
    "FakeEngineState",
    "RecordedRequest",
    "Responder",
    "create_app",
    "default_responder",
    "fake_engine",
    "running_fake_engine",
]
