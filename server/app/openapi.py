"""The served OpenAPI document, made true: the statuses each route really returns, every
error in the OpenAI error shape, the real response bodies, ``/metrics`` as text.

FastAPI's generated document says every route may answer 422 (Ponder answers a bad body
with a 400) and that most answer an empty object. :func:`install_openapi` rewrites it
once, from rules that follow the code: every ``/v1`` and ``/playground`` route may
answer 401 (:mod:`server.app.auth`), every route with a body 400 and 413
(:mod:`server.errors`, :class:`~server.app.limits.BodySizeLimit`), a route that runs a
scaffold 403 (a scaffold outside the client key's allow-list), 404 (a model not served,
or one outside the key's allow-list: the same answer), 429 (admission, the key's
limits), 502, 503 and 504 (the engine); and from what :data:`server.app.routes.ROUTES`
says of each route: its other errors (the stored-response routes 404 and 503, the store;
the tokenizer routes 404, an unknown model or one the key may not use, and the engine's
502, 503 and 504) and its 200 body, one of the schemas below (a run's 200 is JSON or,
streamed, ``text/event-stream``).

>>> from scaffolds.engines.mock import MockEngine
>>> from server.app.app import create_app
>>> from server.settings import Settings
>>> app = create_app(Settings(model="m", engines=("http://unused/v1",)),
...                  engines={"m": MockEngine(lambda r: "ok")})
>>> ops = app.openapi()["paths"]
>>> sorted(ops["/v1/chat/completions"]["post"]["responses"])
['200', '400', '401', '403', '404', '413', '429', '502', '503', '504']
>>> list(ops["/metrics"]["get"]["responses"]["200"]["content"])
['text/plain']
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from server.app.auth import guarded
from server.app.routes import route
from server.routing import Route

__all__ = ["SCHEMAS", "install_openapi", "statuses"]

_NULLABLE_STRING = {"type": ["string", "null"]}
_OBJECT = {"type": "object"}


def _completion(kind: str) -> dict[str, Any]:
    """A chat or text completion's schema, whose ``object`` is ``kind``.

    >>> _completion("text_completion")["properties"]["object"]
    {'const': 'text_completion'}
    """
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": kind},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array", "items": _OBJECT},
            "usage": _OBJECT,
            "ponder": _OBJECT,
            "trace": {"type": "array"},
        },
    }


SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": {
        "type": "object",
        "description": "Every error, in the OpenAI shape.",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": _NULLABLE_STRING,
                    "code": _NULLABLE_STRING,
                },
            }
        },
    },
    "ChatCompletion": _completion("chat.completion"),
    "TextCompletion": _completion("text_completion"),
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
            "ponder": {
                "type": "object",
                "description": "Ponder: the served model the id runs on, the scaffold it "
                "runs, how its answers are read, the runs served at once, and what a "
                "request's reasoning effort does on it (effort.source, as the answer's "
                "ponder.effort.source will say; under a policy, each level's spec and "
                "budget of generated tokens).",
                "properties": {
                    "base_model": {"type": "string"},
                    "scaffold": {"type": "string"},
                    "answer_format": {"type": "string"},
                    "thinking_markers": _OBJECT,
                    "max_concurrent_runs": {"type": "integer"},
                    "effort": {
                        "type": "object",
                        "required": ["source"],
                        "properties": {
                            "source": {"enum": ["policy", "passthrough", "scaffold"]},
                            "levels": {
                                "type": "object",
                                "additionalProperties": {
                                    "type": "object",
                                    "required": ["spec", "budget"],
                                    "properties": {
                                        "spec": {"type": "string"},
                                        "budget": {"type": ["integer", "null"]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}},
        },
    },
    "Response": {
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "number"},
            "status": {"enum": ["completed", "incomplete", "failed", "in_progress"]},
            "model": {"type": "string"},
            "output": {"type": "array", "items": _OBJECT},
            "usage": {"type": ["object", "null"]},
        },
    },
    "ResponseDeleted": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response.deleted"},
            "deleted": {"type": "boolean"},
        },
    },
    "Message": {
        "type": "object",
        "description": "An Anthropic Messages API message.",
        "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "model": {"type": "string"},
            "content": {"type": "array", "items": _OBJECT},
            "stop_reason": _NULLABLE_STRING,
            "usage": _OBJECT,
        },
    },
    "InputItemList": {
        "type": "object",
        "description": "A stored response's input items, one page.",
        "required": ["object", "data", "first_id", "last_id", "has_more"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _OBJECT},
            "first_id": _NULLABLE_STRING,
            "last_id": _NULLABLE_STRING,
            "has_more": {"type": "boolean"},
        },
    },
    "TokenCount": {
        "type": "object",
        "description": "Anthropic's count of a message's input tokens.",
        "required": ["input_tokens"],
        "properties": {"input_tokens": {"type": "integer"}},
    },
    "Tokenized": {
        "type": "object",
        "description": "vLLM's /tokenize answer.",
        "required": ["count", "tokens"],
        "properties": {
            "count": {"type": "integer"},
            "max_model_len": {"type": ["integer", "null"]},
            "tokens": {"type": "array", "items": {"type": "integer"}},
            "token_strs": {"type": ["array", "null"], "items": {"type": "string"}},
        },
    },
    "Detokenized": {
        "type": "object",
        "description": "vLLM's /detokenize answer.",
        "required": ["prompt"],
        "properties": {"prompt": {"type": "string"}},
    },
    "Version": {
        "type": "object",
        "description": "Ponder's version, and per base model its engine's kind and version.",
        "required": ["version", "engines"],
        "properties": {
            "version": {"type": "string"},
            "engines": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"engine": _NULLABLE_STRING, "version": _NULLABLE_STRING},
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    },
    "Readiness": {"type": "object", "description": "Per model: whether an engine answers."},
}

_WHY = {
    400: "The request is invalid (the error's param names the field; code "
    "context_length_exceeded: the prompt does not fit the model's context).",
    401: "No API key, or a wrong one (Authorization: Bearer, or x-api-key).",
    403: "The client key may not use this scaffold (code scaffold_not_allowed).",
    404: "No such model, or one the client key may not use: the same answer (code "
    "model_not_found); or no such stored response.",
    413: "The body is larger than the server's limit.",
    429: "Every run slot and queue place is taken (code server_busy), or the client key "
    "passed its own limit: runs at once, requests or tokens per minute (code "
    "rate_limit_exceeded), tokens per day (code insufficient_quota). See Retry-After.",
    502: "The engine failed or answered something unreadable.",
    503: "No engine (or response store) is reachable.",
    504: "The run passed its time limit, or the engine timed out.",
}


def statuses(method: str, path: str, has_body: bool) -> list[int]:
    """The error statuses a route really answers with (``path`` as the document writes it).

    >>> statuses("get", "/v1/models", False), statuses("get", "/health", False)
    ([401], [])
    """
    listed = route(method, path)
    out: set[int] = set(listed.errors if listed else ())
    if guarded(path):
        out.add(401)
    if has_body:
        out |= {400, 413}
    if listed and listed.runs:
        out |= {400, 403, 404, 429, 502, 503, 504}
    return sorted(out)


_RUN_400 = (
    "The request is invalid, or sets a field the model's engine cannot honour (code "
    "unsupported_parameter: the in-process transformers engine refuses tools, tool_choice, "
    "response_format, logprobs...; docs/request-fields.md); the error's param names the field. "
    "Code context_length_exceeded: the prompt does not fit the model's context."
)
"""A run route's 400: what :data:`_WHY` says, and the fields an engine refuses."""


def _error(status: int, run: bool = False) -> dict[str, Any]:
    why = _RUN_400 if run and status == 400 else _WHY[status]
    return {"description": why, "content": {"application/json": {"schema": _ref("Error")}}}


def _ref(schema: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema}"}


def _ok_content(listed: Route) -> dict[str, Any] | None:
    """A listed route's 200 answer: its body's schema, and a run's server-sent events."""
    if listed.text:
        return {"text/plain": {"schema": {"type": "string"}}}
    if listed.ok is None:
        return None
    content: dict[str, Any] = {"application/json": {"schema": _ref(listed.ok)}}
    if listed.runs:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    return content


def _document(app: FastAPI) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(SCHEMAS)
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            listed = route(method, path)
            ok = responses.setdefault("200", {"description": "Successful Response"})
            if listed is not None and (content := _ok_content(listed)):
                ok["content"] = content
                if listed.runs:
                    ok["description"] = "The answer, or with stream: true its server-sent events."
            runs = listed is not None and listed.runs
            for status in statuses(method, path, "requestBody" in operation):
                responses[str(status)] = _error(status, runs)
            if listed is not None and listed.not_ready and listed.ok:
                responses["503"] = {  # the same per-model detail as the 200, not an error
                    "description": "Some model has no reachable engine.",
                    "content": {"application/json": {"schema": _ref(listed.ok)}},
                }
    return doc


def install_openapi(app: FastAPI) -> None:
    """Serve :func:`_document`'s document at ``/openapi.json`` (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
