"""What differs between OpenAI-compatible servers: vLLM, SGLang and OpenAI itself.

:class:`~scaffolds.engines.openai_http.OpenAIEngine` speaks one protocol and asks its
:class:`Dialect` wherever servers disagree, so the engine has no branch on a server's
name. A dialect is one class: subclass :class:`Dialect` with a ``name`` and override
what differs; :func:`get_dialect` finds it by that name (settings validate against
:func:`dialect_names`), and a later class of the same name replaces an earlier one.

>>> class Quiet(OpenAIDialect, name="quiet"):
...     def health_route(self) -> tuple[bool, str]:
...         return (True, "/ping")
>>> get_dialect("quiet").health_route(), "quiet" in dialect_names()
((True, '/ping'), True)

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
    * vLLM refuses several samples at temperature 0: such a call goes out as one request
      per sample (:mod:`scaffolds.engines.greedy`).
    * Top logprobs (``SamplingParams.top_logprobs`` k), every dialect: ``logprobs: true,
      top_logprobs: k`` on chat, ``logprobs: k`` on completions. vLLM also takes
      ``return_tokens_as_token_ids`` there (unless the caller reads the tokens' text,
      ``SamplingParams.top_logprob_texts``), since completions key a position's top k by
      token text and tokens that decode alike would share one key. SGLang has no such
      option, so its completions positions can come back short of k.
    * Continuing an assistant message (``GenerateRequest.continue_final``): vLLM and
      SGLang take ``continue_final_message: true, add_generation_prompt: false``; OpenAI
      cannot, and says so (:class:`~scaffolds.errors.UnsupportedError`).

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
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import httpx

from scaffolds.errors import UnsupportedError

_SNIPPET = 500

logger = logging.getLogger("scaffolds.engines.openai_http")


class Dialect:
    """How one kind of server departs from OpenAI's API (this base: not at all).

    Subclasses register themselves by the ``name`` given in their class statement
    (``class Mine(Dialect, name="mine")``); a subclass without one is a helper, not a
    dialect. Dialects hold no state, so one instance serves every call.
    """

    __slots__ = ()
    name: ClassVar[str] = ""

    def __init_subclass__(cls, *, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            if not name or not name.isidentifier():
                raise ValueError(f"a dialect name must be an identifier (got {name!r})")
            cls.name = name
            cls._registered = True
        else:
            cls._registered = False

    _registered: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def request_fields(self, *, chat: bool, logprobs: bool) -> dict[str, Any]:
        """Fields added to every request body (before the caller's ``extra``, which wins)."""
        if not logprobs:
            return {}
        return {"logprobs": True, "top_logprobs": 0} if chat else {"logprobs": 1}

    def top_logprob_fields(
        self, *, chat: bool, top_logprobs: int, texts: bool = False
    ) -> dict[str, Any]:
        """Fields that ask for the ``top_logprobs`` most likely tokens' logprobs at each
        position (merged over :meth:`request_fields`); ``texts``: the caller reads the
        tokens' text too."""
        if chat:
            return {"logprobs": True, "top_logprobs": top_logprobs}
        return {"logprobs": top_logprobs}

    def continuation_fields(self) -> dict[str, Any]:
        """Chat fields that make the model continue the last (assistant) message instead of
        starting a new turn (``GenerateRequest.continue_final``): the chat-template options
        of vLLM and SGLang. A server that cannot do it raises
        :class:`~scaffolds.errors.UnsupportedError`."""
        return {"continue_final_message": True, "add_generation_prompt": False}

    def max_tokens_key(self, *, chat: bool) -> str:
        """The body field that carries ``max_tokens``."""
        return "max_tokens"

    def greedy_samples(self) -> bool:
        """Whether one call may ask for several samples at temperature 0 (vLLM refuses)."""
        return True

    def prompt_lists(self) -> bool:
        """Whether ``/v1/completions`` takes a list of prompts in one request (OpenAI's
        and vLLM's do), answering prompt ``p``'s samples at ``p * n + i``."""
        return True

    def health_route(self) -> tuple[bool, str]:
        """``(at_root, path)`` of the health check: ``/health`` at the root by default."""
        return (True, "/health")

    def capacity_route(self) -> tuple[bool, str] | None:
        """``(at_root, path)`` of a route whose JSON says how many sequences the server
        runs at once, or None. vLLM publishes its config at ``/server_info`` (only with
        ``VLLM_SERVER_DEV_MODE=1``; elsewhere a 404, and the capacity stays unknown)."""
        return (True, "/server_info?config_format=json")

    def capacity_from(self, data: Any) -> int | None:
        """The sequences at once in the capacity route's JSON (vLLM's ``max_num_seqs``).

        >>> Dialect().capacity_from({"vllm_config": {"scheduler_config": {"max_num_seqs": 256}}})
        256
        """
        config = data.get("vllm_config") if isinstance(data, dict) else None
        scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
        return _positive(scheduler.get("max_num_seqs") if isinstance(scheduler, dict) else None)

    def request_id(self) -> str | None:
        """A fresh id to send as ``rid`` with each call (None: send none)."""
        return None

    def tokenize_route(self) -> tuple[bool, str] | None:
        """``(at_root, path)`` of a route that counts a request's prompt tokens (vLLM's
        ``/tokenize``), or None when the server has none."""
        return None

    def detokenize_route(self) -> tuple[bool, str] | None:
        """``(at_root, path)`` of a route that turns token ids back into text (vLLM's
        ``/detokenize``), or None when the server has none."""
        return None

    def version_route(self) -> tuple[bool, str] | None:
        """``(at_root, path)`` of a route whose JSON ``version`` is the server's own
        (vLLM's ``/version``), or None when the server has none."""
        return None

    def abort_ids(self, body: Mapping[str, Any]) -> list[str]:
        """The ids to abort when the call of ``body`` is cancelled (none: no abort)."""
        return []

    async def abort(
        self,
        client: httpx.AsyncClient,
        root_url: str,
        rids: list[str],
        headers: dict[str, str],
        http_timeout: httpx.Timeout,
    ) -> None:
        """Tell the server to stop the calls ``rids`` (best effort, never raises)."""


class OpenAIDialect(Dialect, name="openai"):
    """OpenAI itself: ``max_completion_tokens`` on chat, health is ``GET /v1/models``.

    >>> OpenAIDialect().max_tokens_key(chat=True), OpenAIDialect().health_route()
    ('max_completion_tokens', (False, '/models'))
    """

    __slots__ = ()

    def max_tokens_key(self, *, chat: bool) -> str:
        return "max_completion_tokens" if chat else "max_tokens"

    def health_route(self) -> tuple[bool, str]:
        return (False, "/models")

    def capacity_route(self) -> tuple[bool, str] | None:
        return None

    def continuation_fields(self) -> dict[str, Any]:
        raise UnsupportedError(
            "the OpenAI API cannot continue an assistant message (continue_final_message); "
            "use a vLLM or SGLang engine, or a plain-text prompt",
            param="scaffold",
        )


class VLLMDialect(Dialect, name="vllm"):
    """vLLM: token ids with logprobs, and ``logprobs: 0`` (the sampled token) on text;
    prompt tokens counted by ``POST /tokenize`` (``/detokenize`` and ``/version`` beside it).

    >>> VLLMDialect().request_fields(chat=False, logprobs=True)
    {'logprobs': 0, 'return_tokens_as_token_ids': True}
    """

    __slots__ = ()

    def tokenize_route(self) -> tuple[bool, str] | None:
        return (True, "/tokenize")

    def detokenize_route(self) -> tuple[bool, str] | None:
        return (True, "/detokenize")

    def version_route(self) -> tuple[bool, str] | None:
        return (True, "/version")

    def greedy_samples(self) -> bool:
        return False

    def request_fields(self, *, chat: bool, logprobs: bool) -> dict[str, Any]:
        fields = super().request_fields(chat=chat, logprobs=logprobs)
        if logprobs:
            if not chat:
                fields["logprobs"] = 0
            fields["return_tokens_as_token_ids"] = True
        return fields

    def top_logprob_fields(
        self, *, chat: bool, top_logprobs: int, texts: bool = False
    ) -> dict[str, Any]:
        """Top logprobs keyed by token id, unless the caller reads their ``texts``: a
        completions position's top k is an object keyed by token text, where two tokens
        that decode alike (``""``, a partial UTF-8 byte) would be one key and the
        position would come back short of k.

        >>> VLLMDialect().top_logprob_fields(chat=False, top_logprobs=5)
        {'logprobs': 5, 'return_tokens_as_token_ids': True}
        >>> VLLMDialect().top_logprob_fields(chat=False, top_logprobs=5, texts=True)
        {'logprobs': 5}
        """
        fields = super().top_logprob_fields(chat=chat, top_logprobs=top_logprobs)
        return fields if texts else fields | {"return_tokens_as_token_ids": True}


class SGLangDialect(Dialect, name="sglang"):
    """SGLang: a ``rid`` per call, aborted with ``POST /abort_request`` on cancel.

    >>> SGLangDialect().request_fields(chat=True, logprobs=False)
    {'separate_reasoning': True}
    >>> SGLangDialect().abort_ids({"rid": "r", "n": 2})
    ['r', 'r_0', 'r_1']
    """

    __slots__ = ()

    def request_fields(self, *, chat: bool, logprobs: bool) -> dict[str, Any]:
        fields = super().request_fields(chat=chat, logprobs=logprobs)
        return fields | {"separate_reasoning": True} if chat else fields

    def request_id(self) -> str | None:
        return f"ponder-{uuid.uuid4().hex}"

    def capacity_route(self) -> tuple[bool, str] | None:
        return (True, "/get_server_info")

    def capacity_from(self, data: Any) -> int | None:
        """``max_running_requests`` of ``/get_server_info`` (its server arguments), else
        of its first scheduler's ``internal_states``.

        >>> SGLangDialect().capacity_from({"max_running_requests": None,
        ...                                "internal_states": [{"max_running_requests": 48}]})
        48
        """
        if not isinstance(data, dict):
            return None
        found = _positive(data.get("max_running_requests"))
        states = data.get("internal_states")
        if found is None and isinstance(states, list) and states and isinstance(states[0], dict):
            found = _positive(states[0].get("max_running_requests"))
        return found

    def prompt_lists(self) -> bool:
        # Not tried against a running SGLang (it cannot run here), and a list's calls
        # would need one rid each to abort: one request per prompt, as before.
        return False

    def abort_ids(self, body: Mapping[str, Any]) -> list[str]:
        rid = body.get("rid")
        return abort_rids(rid, int(body.get("n") or 1)) if isinstance(rid, str) else []

    async def abort(
        self,
        client: httpx.AsyncClient,
        root_url: str,
        rids: list[str],
        headers: dict[str, str],
        http_timeout: httpx.Timeout,
    ) -> None:
        """``POST {root_url}/abort_request`` for each id; gives up at the first failure."""
        for rid in rids:
            try:
                url = f"{root_url}/abort_request"
                await client.post(url, json={"rid": rid}, headers=headers, timeout=http_timeout)
            except httpx.HTTPError as exc:
                logger.info("engine %s: could not abort %s (%r)", root_url, rid, exc)
                return


def _dialect_classes() -> Iterator[type[Dialect]]:
    """Every registered dialect class, in definition order (subclasses walked depth first)."""
    stack = list(reversed(Dialect.__subclasses__()))
    while stack:
        cls = stack.pop()
        if cls._registered:
            yield cls
        stack.extend(reversed(cls.__subclasses__()))


def _dialects() -> dict[str, type[Dialect]]:
    return {cls.name: cls for cls in _dialect_classes()}


def dialect_names() -> tuple[str, ...]:
    """The registered dialect names, sorted.

    >>> {"openai", "sglang", "vllm"} <= set(dialect_names())
    True
    """
    return tuple(sorted(_dialects()))


def get_dialect(dialect: str | Dialect) -> Dialect:
    """The dialect registered as ``dialect`` (a :class:`Dialect` passes through).

    >>> get_dialect("sglang")
    SGLangDialect()
    >>> get_dialect("tgi")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown dialect 'tgi' (known: ...)
    """
    if isinstance(dialect, Dialect):
        return dialect
    found = _dialects().get(dialect)
    if found is None:
        raise ValueError(f"unknown dialect {dialect!r} (known: {', '.join(dialect_names())})")
    return found()


def check_dialect_name(name: str) -> str:
    """``name`` if a dialect is registered under it, else a ValueError naming the known ones
    (what settings use as a validator)."""
    get_dialect(name)
    return name


def abort_rids(rid: str, n: int) -> list[str]:
    """The ids an aborted SGLang call may run under.

    SGLang expands one string ``rid`` of an ``n``-sample call to ``rid_0 .. rid_{n-1}``
    and matches ``/abort_request`` ids exactly, so every form is sent.

    >>> abort_rids("r", 1), abort_rids("r", 2)
    (['r'], ['r', 'r_0', 'r_1'])
    """
    return [rid] if n <= 1 else [rid, *(f"{rid}_{i}" for i in range(n))]


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
    "OpenAIDialect",
    "SGLangDialect",
    "VLLMDialect",
    "abort_rids",
    "check_dialect_name",
    "dialect_names",
    "error_message",
    "get_dialect",
    "reported_error",
]


def _positive(value: Any) -> int | None:
    """``value`` when it is a positive integer, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
