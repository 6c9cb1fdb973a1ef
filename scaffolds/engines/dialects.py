"""What differs between OpenAI-compatible servers: vLLM, SGLang and OpenAI itself.

:class:`~scaffolds.engines.openai_http.OpenAIEngine` speaks one protocol; this module
holds the few places where the servers disagree, so the engine stays dialect-neutral.

Request fields
    * vLLM: logprob requests also ask for ``return_tokens_as_token_ids`` (so the tokens
      come back as ``token_id:N`` and the ids are exact), and a completions request asks
      for ``logprobs: 0`` (the sampled token only).
    * SGLang: every call carries a request id ``rid`` (its OpenAI server accepts one), so
      a cancelled call can be aborted explicitly with ``POST /abort_request``; chat calls
      ask for ``separate_reasoning: true`` (SGLang's default, stated so a request-level
      ``extra`` can turn it off). SGLang has no token-id logprob option: logprobs come
      back as token texts, and ``Completion.token_ids`` stays None.
    * OpenAI: chat calls send ``max_completion_tokens`` instead of ``max_tokens``.

Responses (handled for every dialect, since servers change shape across versions)
    * Reasoning arrives in ``reasoning_content`` (SGLang with ``--reasoning-parser``, older
      vLLM) or ``reasoning`` (newer vLLM); both are read.
    * ``usage.prompt_tokens_details`` may be missing or null (SGLang reports it only with
      ``--enable-cache-report`` and a non-zero hit); cached tokens then count as 0.
    * Errors come nested (``{"error": {"message", "type", "code"}}``, OpenAI and vLLM) or
      flat (``{"object": "error", "message", "type", "code"}``, SGLang and older vLLM),
      as an HTTP error body or as one chunk of a 200 stream.

Health
    vLLM and SGLang answer ``GET /health`` at the server root; OpenAI has no such route,
    so its health is ``GET /v1/models``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import httpx

Dialect = Literal["vllm", "sglang", "openai"]

_SNIPPET = 500

logger = logging.getLogger("scaffolds.engines.openai_http")


def request_fields(dialect: Dialect, *, chat: bool, logprobs: bool) -> dict[str, Any]:
    """Dialect-specific request fields (before the caller's ``extra``, which wins).

    >>> request_fields("vllm", chat=False, logprobs=True)
    {'logprobs': 0, 'return_tokens_as_token_ids': True}
    >>> request_fields("sglang", chat=True, logprobs=False)
    {'separate_reasoning': True}
    """
    fields: dict[str, Any] = {}
    if logprobs:
        if chat:
            fields |= {"logprobs": True, "top_logprobs": 0}
        else:
            fields["logprobs"] = 0 if dialect == "vllm" else 1
        if dialect == "vllm":
            fields["return_tokens_as_token_ids"] = True
    if dialect == "sglang" and chat:
        fields["separate_reasoning"] = True
    return fields


def max_tokens_key(dialect: Dialect, *, chat: bool) -> str:
    return "max_completion_tokens" if chat and dialect == "openai" else "max_tokens"


def health_route(dialect: Dialect) -> tuple[bool, str]:
    """``(at_root, path)`` of the health check: ``/health`` at the root, or ``/v1/models``."""
    return (False, "/models") if dialect == "openai" else (True, "/health")


def abort_rids(rid: str, n: int) -> list[str]:
    """The ids an aborted SGLang call may run under.

    SGLang expands one string ``rid`` of an ``n``-sample call to ``rid_0 .. rid_{n-1}``
    and matches ``/abort_request`` ids exactly, so every form is sent.

    >>> abort_rids("r", 1), abort_rids("r", 2)
    (['r'], ['r', 'r_0', 'r_1'])
    """
    return [rid] if n <= 1 else [rid, *(f"{rid}_{i}" for i in range(n))]


async def sglang_abort(
    client: httpx.AsyncClient,
    root_url: str,
    rids: list[str],
    headers: dict[str, str],
    http_timeout: httpx.Timeout,
) -> None:
    """``POST {root_url}/abort_request`` for each id; gives up quietly at the first failure."""
    for rid in rids:
        try:
            url = f"{root_url}/abort_request"
            await client.post(url, json={"rid": rid}, headers=headers, timeout=http_timeout)
        except httpx.HTTPError as exc:
            logger.info("engine %s: could not abort %s (%r)", root_url, rid, exc)
            return


def reported_error(data: dict[str, Any]) -> tuple[str, int | None] | None:
    """``(message, code)`` when a JSON object is an error report in either shape.

    >>> reported_error({"object": "error", "message": "too long", "code": 400})
    ('too long', 400)
    >>> reported_error({"error": {"message": "boom", "code": 500}})
    ('boom', 500)
    >>> reported_error({"choices": []}) is None
    True
    """
    if "choices" in data:
        return None
    error = data.get("error")
    if error:
        if isinstance(error, dict):
            return str(error.get("message", error)), _code(error.get("code"))
        return str(error), _code(data.get("code"))
    if data.get("object") == "error":
        return str(data.get("message", "unknown error")), _code(data.get("code"))
    return None


def error_message(raw: bytes) -> str:
    """The engine's own message from an HTTP error body (OpenAI, vLLM, SGLang or FastAPI).

    >>> error_message(b'{"object": "error", "message": "bad n", "code": 400}')
    'bad n'
    >>> error_message(b'{"detail": "Not Found"}'), error_message(b"")
    ('Not Found', '(empty body)')
    """
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    message: Any = text or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        nested = error.get("message") if isinstance(error, dict) else error
        found = (nested, data.get("message"), data.get("detail"))
        message = next((m for m in found if isinstance(m, str)), message)
    return str(message)[:_SNIPPET]


def _code(value: Any) -> int | None:
    """An error code as an HTTP status, when it is one (SGLang: int; others: str)."""
    try:
        code = int(value)
    except (TypeError, ValueError):
        return None
    return code if 100 <= code <= 599 else None


__all__ = [
    "Dialect",
    "abort_rids",
    "error_message",
    "health_route",
    "max_tokens_key",
    "reported_error",
    "request_fields",
    "sglang_abort",
]
