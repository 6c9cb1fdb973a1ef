"""OpenAIEngine: the Engine protocol over any OpenAI-compatible HTTP server.

Works against vLLM, SGLang and OpenAI itself. The n samples of one prompt travel in one
request (``n``), so the server can share the prompt's prefix cache across them. Failed
connections and the statuses 408, 429 and 5xx are retried with jittered exponential
backoff (honouring ``Retry-After``); other 4xx are never retried. Errors surface as the
``Engine*Error`` classes of :mod:`scaffolds.errors`, never as httpx exceptions.

>>> engine = OpenAIEngine("http://localhost:8000/v1/", "Qwen/Qwen3-8B")
>>> engine.base_url, engine.model
('http://localhost:8000/v1', 'Qwen/Qwen3-8B')

Typical use (needs a running server)::

    async with OpenAIEngine("http://localhost:8000/v1", "Qwen/Qwen3-8B") as engine:
        result = await engine.generate(GenerateRequest(chat("2+2?"), SamplingParams(n=4)))
        texts = [c.text for c in result.completions]
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from scaffolds.engine import (
    Completion,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
)
from scaffolds.engines.dialects import Dialect, error_message, get_dialect, reported_error
from scaffolds.errors import (
    EngineError,
    EngineRejectedError,
    EngineTimeoutError,
    EngineUnavailableError,
)

__all__ = ["Dialect", "OpenAIEngine"]

logger = logging.getLogger(__name__)

_SNIPPET = 500
_TOKEN_ID_PREFIX = "token_id:"
# Failures that happen before the server has answered: the request did no work, or its
# answer was lost before any byte of it reached us, so sending it again is safe.
_RETRY_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


def _retry_status(status: int) -> bool:
    return status in (408, 429) or status >= 500


class _RetryableStatus(Exception):
    """An attempt got a status worth retrying (internal; never escapes the engine)."""

    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_RetryableStatus, *_RETRY_TRANSPORT))


POOL_SHARDS = 8
"""HTTP connection pools per engine by default (1,024 connections in all, 256 kept alive):
httpcore walks every connection of a pool on each request, so smaller pools cost less at
high concurrency (benchmarks/pool_shards.py)."""


class OpenAIEngine:
    """An :class:`~scaffolds.engine.Engine` backed by an OpenAI-compatible server.

    ``base_url`` ends in ``/v1``. ``api_key`` is the engine's own key, sent as a bearer
    token only when set. ``max_retries`` counts retries after the first attempt. The
    ``dialect`` (a registered name or a :class:`~scaffolds.engines.dialects.Dialect`)
    decides every server-specific field and route: with ``"vllm"``, logprob requests
    also ask for token ids; with ``"sglang"``, each call carries a ``rid`` and a
    cancelled call is aborted with ``POST /abort_request`` (best effort); with
    ``"openai"``, chat requests send ``max_completion_tokens``. A client passed in is
    used as is and not closed by :meth:`aclose`; otherwise the engine creates and owns
    one on first use.

    Per-sample ``completion_tokens``: exact when token ids (or logprobs) came back;
    otherwise the call's total is split evenly over the samples whose count is unknown,
    so the samples always add up to the usage the server reported.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 600.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        dialect: str | Dialect = "vllm",
        pool_shards: int = POOL_SHARDS,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 (got {max_retries})")
        if pool_shards < 1:
            raise ValueError(f"pool_shards must be >= 1 (got {pool_shards})")
        self.pool_shards = pool_shards
        self.base_url = base_url.rstrip("/")
        self.root_url = self.base_url.removesuffix("/v1")
        self.model = model
        self.dialect: Dialect = get_dialect(dialect)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.read_timeout = read_timeout
        self._api_key = api_key
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._client = client
        self._pool: list[httpx.AsyncClient] = []
        self._turn = itertools.count()
        self._backoff = wait_random_exponential(multiplier=backoff_base, max=backoff_max)
        self._aborts: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        """An HTTP client for the next call: the one passed in, else one of this engine's
        ``pool_shards`` clients in turn (created on first use).

        httpcore's pool walks every connection it holds on each request, so one pool's
        cost grows with the concurrency; several smaller pools keep each walk short.
        """
        if self._client is not None:
            return self._client
        if not self._pool:
            limits = httpx.Limits(
                max_connections=max(1, 1024 // self.pool_shards),
                max_keepalive_connections=max(1, 256 // self.pool_shards),
            )
            self._pool = [
                httpx.AsyncClient(timeout=self._timeout, limits=limits)
                for _ in range(self.pool_shards)
            ]
        return self._pool[next(self._turn) % self.pool_shards]

    async def aclose(self) -> None:
        """Close the HTTP clients this engine created (after pending aborts)."""
        if self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)
        pool, self._pool = self._pool, []
        for client in pool:
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- Engine protocol -------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Sample ``request.params.n`` completions in one HTTP call."""
        path, body = self._build_body(request, stream=False)
        try:
            data = await self._request_json("POST", path, body)
        except (asyncio.CancelledError, EngineTimeoutError):
            self._abort_later(body)  # the server may still be generating it
            raise
        accs: dict[int, _Choice] = {}
        self._absorb(data, accs, "message" if request.is_chat else None)
        usage = self._parse_usage(data.get("usage"))
        return self._result(request, accs, usage, self._prompt_ids(data))

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        """Yield :class:`EngineDelta` pieces as they arrive, then one final result.

        Nothing is retried once the response has begun. Closing or cancelling the
        consumer closes the HTTP response, so the server sees the client go away; use
        ``contextlib.aclosing`` when breaking out of the loop early.
        """
        path, body = self._build_body(request, stream=True)
        part_key = "delta" if request.is_chat else None
        try:
            response = await self._open("POST", path, body)
        except (asyncio.CancelledError, EngineTimeoutError):
            self._abort_later(body)
            raise
        accs: dict[int, _Choice] = {}
        usage = Usage(calls=1)
        prompt_ids: tuple[int, ...] | None = None
        done = False
        finished = False
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    break
                chunk = self._decode(payload)
                for delta in self._absorb(chunk, accs, part_key):
                    yield delta
                if chunk.get("usage"):
                    usage = self._parse_usage(chunk["usage"])
                prompt_ids = self._prompt_ids(chunk) or prompt_ids
            finished = True
        except httpx.HTTPError as exc:
            raise self._map_error(exc, attempts=1, started=True) from exc
        finally:
            await response.aclose()
            if not finished:  # closed early, cancelled or failed mid-stream
                self._abort_later(body)
        if not done and not (accs and all(a.finish_reason for a in accs.values())):
            raise EngineUnavailableError(
                f"the stream from engine {self.base_url} ended before [DONE]"
            )
        yield self._result(request, accs, usage, prompt_ids)

    # -- other endpoints -------------------------------------------------------------

    async def health(self) -> bool:
        """True when the server's health route answers 2xx (no retries).

        vLLM and SGLang: ``GET {root}/health``; OpenAI: ``GET {base_url}/models``.
        """
        at_root, path = self.dialect.health_route()
        try:
            response = await self.client.get(
                (self.root_url if at_root else self.base_url) + path,
                headers=self._headers(),
                timeout=httpx.Timeout(self._timeout.connect or 5.0),
            )
        except httpx.HTTPError:
            return False
        return response.is_success

    async def list_models(self) -> list[str]:
        """The model ids the server serves (``GET {base_url}/models``)."""
        data = await self._request_json("GET", "/models", None)
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise self._malformed("'data' of /models is not a list")
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        if not all(isinstance(i, str) for i in ids):
            raise self._malformed("a model entry has no string 'id'")
        return [str(i) for i in ids]

    def _abort_later(self, body: dict[str, Any]) -> None:
        """Abort the call in the background where the dialect can (best effort, never raises)."""
        rids = self.dialect.abort_ids(body)
        if not rids:
            return
        timeout = httpx.Timeout(self._timeout.connect or 5.0)
        abort = self.dialect.abort(self.client, self.root_url, rids, self._headers(), timeout)
        try:
            task = asyncio.get_running_loop().create_task(abort)
        except RuntimeError:  # no running loop: nothing to abort with
            abort.close()
            return
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    # -- requests and retries --------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _build_body(self, request: GenerateRequest, *, stream: bool) -> tuple[str, dict[str, Any]]:
        params = request.params
        body: dict[str, Any] = {"model": self.model}
        if isinstance(request.prompt, str):
            path, chat = "/completions", False
            body["prompt"] = request.prompt
        else:
            path, chat = "/chat/completions", True
            body["messages"] = [m.to_openai() for m in request.prompt]
        body["n"] = params.n
        if params.max_tokens is not None:
            body[self.dialect.max_tokens_key(chat=chat)] = params.max_tokens
        for name in ("temperature", "top_p", "seed"):
            value = getattr(params, name)
            if value is not None:
                body[name] = value
        if params.stop:
            body["stop"] = list(params.stop)
        body |= self.dialect.request_fields(chat=chat, logprobs=params.logprobs)
        if (rid := self.dialect.request_id()) is not None:
            body["rid"] = rid
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(params.extra)
        return path, body

    async def _request_json(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        response = await self._open(method, path, body)
        try:
            raw = await response.aread()
        except httpx.HTTPError as exc:
            raise self._map_error(exc, attempts=1, started=True) from exc
        finally:
            await response.aclose()
        return self._decode(raw)

    async def _open(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        """Send a request, retrying as configured; return the (unread) 2xx response."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_is_retryable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    return await self._attempt(method, self.base_url + path, body)
        except (_RetryableStatus, httpx.HTTPError) as exc:
            raise self._map_error(exc, attempts=attempts, started=False) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(self, method: str, url: str, body: dict[str, Any] | None) -> httpx.Response:
        client = self.client
        request = client.build_request(
            method, url, json=body, headers=self._headers(), timeout=self._timeout
        )
        response = await client.send(request, stream=True)
        if response.is_success:
            return response
        try:
            raw = await response.aread()
        except httpx.HTTPError:
            raw = b""
        finally:
            await response.aclose()
        status = response.status_code
        message = error_message(raw)
        if _retry_status(status):
            retry_after = _parse_retry_after(response.headers.get("retry-after"))
            raise _RetryableStatus(status, message, retry_after)
        raise EngineRejectedError(
            f"engine {self.base_url} rejected the request (HTTP {status}): {message}",
            status=status,
        )

    def _wait(self, state: RetryCallState) -> float:
        """Jittered exponential backoff, or the server's ``Retry-After`` (capped)."""
        exc = _failure(state)
        if isinstance(exc, _RetryableStatus) and exc.retry_after is not None:
            return min(exc.retry_after, self.backoff_max)
        return float(self._backoff(state))

    def _log_retry(self, state: RetryCallState) -> None:
        sleep = state.next_action.sleep if state.next_action is not None else 0.0
        msg = "engine %s: attempt %d failed (%r); retrying in %.2fs"
        logger.warning(msg, self.base_url, state.attempt_number, _failure(state), sleep)

    def _map_error(self, exc: BaseException, *, attempts: int, started: bool) -> EngineError:
        url = self.base_url
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, _RetryableStatus):
            return EngineUnavailableError(
                f"engine {url} answered HTTP {exc.status} {tries}: {exc.message}",
                status=exc.status,
            )
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return EngineUnavailableError(f"could not connect to engine {url} {tries} ({detail})")
        if isinstance(exc, httpx.TimeoutException):
            return EngineTimeoutError(
                f"engine {url} did not answer within the timeout "
                f"(read_timeout={self.read_timeout}s; {detail})"
            )
        if isinstance(exc, httpx.TransportError):
            when = "while streaming its response" if started else tries
            return EngineUnavailableError(f"lost the connection to engine {url} {when} ({detail})")
        return EngineError(f"request to engine {url} failed ({detail})")

    # -- parsing ---------------------------------------------------------------------

    def _malformed(self, what: str) -> EngineError:
        return EngineError(f"malformed response from engine {self.base_url}: {what}")

    def _decode(self, raw: bytes | str) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            raise self._malformed(f"invalid JSON ({exc}): {text[:_SNIPPET]!r}") from exc

    def _absorb(
        self, data: Any, accs: dict[int, _Choice], part_key: str | None
    ) -> list[EngineDelta]:
        """Fold a response (or one stream chunk) into ``accs``; return its new pieces."""
        if not isinstance(data, dict):
            raise self._malformed("expected a JSON object")
        if (report := reported_error(data)) is not None:
            message, code = report
            text = f"engine {self.base_url} reported an error: {message}"
            if code is not None and 400 <= code < 500 and not _retry_status(code):
                raise EngineRejectedError(text, status=code)  # the request's fault
            raise EngineError(text, status=code)
        choices = data.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise self._malformed("'choices' is not a list of objects")
        deltas = []
        for choice in choices:
            index = self._index(choice)
            text, reasoning = accs.setdefault(index, _Choice()).absorb(choice, part_key, self)
            if text or reasoning:
                deltas.append(EngineDelta(index, text=text, reasoning=reasoning))
        return deltas

    def _index(self, choice: dict[str, Any]) -> int:
        index = choice.get("index", 0)
        if not _is_int(index) or index < 0:
            raise self._malformed(f"bad choice index {index!r}")
        return int(index)

    def _parse_usage(self, raw: Any) -> Usage:
        if raw is None:
            return Usage(calls=1)
        if not isinstance(raw, dict):
            raise self._malformed("'usage' is not an object")
        details = raw.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return Usage(
            prompt_tokens=self._count(raw.get("prompt_tokens")),
            completion_tokens=self._count(raw.get("completion_tokens")),
            cached_tokens=self._count(cached),
            calls=1,
        )

    def _count(self, value: Any) -> int:
        if value is not None and (not _is_int(value) or value < 0):
            raise self._malformed(f"bad token count {value!r}")
        return int(value or 0)

    def _int_list(self, value: Any, what: str) -> list[int] | None:
        if value is not None and (not isinstance(value, list) or not all(map(_is_int, value))):
            raise self._malformed(f"'{what}' is not a list of integers")
        return value

    def _prompt_ids(self, data: dict[str, Any]) -> tuple[int, ...] | None:
        ids = self._int_list(data.get("prompt_token_ids"), "prompt_token_ids")
        choices = data.get("choices")
        if ids is None and choices and isinstance(choices[0], dict):
            ids = self._int_list(choices[0].get("prompt_token_ids"), "prompt_token_ids")
        return tuple(ids) if ids is not None else None

    def _result(
        self,
        request: GenerateRequest,
        accs: dict[int, _Choice],
        usage: Usage,
        prompt_ids: tuple[int, ...] | None,
    ) -> GenerateResult:
        n = request.params.n
        if sorted(accs) != list(range(n)):
            raise self._malformed(f"expected choices 0..{n - 1}, got indices {sorted(accs)}")
        ordered = [accs[i] for i in range(n)]
        known = [a.known_count() for a in ordered]
        unknown = [i for i, k in enumerate(known) if k is None]
        if unknown:
            rest = max(0, usage.completion_tokens - sum(k for k in known if k is not None))
            share, extra = divmod(rest, len(unknown))
            for rank, i in enumerate(unknown):
                known[i] = share + (1 if rank < extra else 0)
        completions = tuple(a.completion(k or 0) for a, k in zip(ordered, known, strict=True))
        return GenerateResult(completions, usage, prompt_ids)


@dataclass
class _Choice:
    """One sample's pieces, gathered from a response or from stream chunks."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    saw_logprobs: bool = False
    token_ids: list[int] | None = None

    def absorb(
        self, choice: dict[str, Any], part_key: str | None, engine: OpenAIEngine
    ) -> tuple[str, str]:
        """Add one choice object (chat: its ``message``/``delta``); return the new text."""
        part = choice.get(part_key) if part_key else choice
        if part is None:
            part = {}
        if not isinstance(part, dict):
            raise engine._malformed(f"'{part_key}' is not an object")
        text = part.get("content") if part_key else part.get("text")
        reasoning = part.get("reasoning_content") or part.get("reasoning")
        for name, value in (("content", text), ("reasoning", reasoning)):
            if value is not None and not isinstance(value, str):
                raise engine._malformed(f"choice {name} is not a string")
        text, reasoning = text or "", reasoning or ""
        self.text.append(text)
        self.reasoning.append(reasoning)
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish_reason = finish
        ids = engine._int_list(choice.get("token_ids"), "token_ids")
        if ids is not None:
            self.token_ids = (self.token_ids or []) + ids
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            self._absorb_logprobs(lp, engine)
        return text, reasoning

    def _absorb_logprobs(self, lp: dict[str, Any], engine: OpenAIEngine) -> None:
        self.saw_logprobs = True
        if "content" in lp:  # chat: a list of {token, logprob, ...}
            entries = lp.get("content") or []
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise engine._malformed("'logprobs.content' is not a list of objects")
            pairs = [(e.get("token"), e.get("logprob")) for e in entries]
        else:  # completions: parallel lists
            tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
            if not isinstance(tokens, list) or not isinstance(values, list):
                raise engine._malformed("'logprobs.tokens' is not a list")
            pairs = list(zip(tokens, values, strict=False))
        for token, value in pairs:
            if not isinstance(token, str) or not (value is None or isinstance(value, int | float)):
                raise engine._malformed("a logprob entry has a bad token or value")
            self.tokens.append(token)
            # None (no logprob for this position) becomes NaN rather than a made-up number.
            self.logprobs.append(float("nan") if value is None else float(value))

    def _ids(self) -> list[int] | None:
        if self.token_ids is not None:
            return self.token_ids
        if self.saw_logprobs and all(t.startswith(_TOKEN_ID_PREFIX) for t in self.tokens):
            try:
                return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in self.tokens]
            except ValueError:
                return None
        return None

    def known_count(self) -> int | None:
        ids = self._ids()
        if ids is not None:
            return len(ids)
        return len(self.logprobs) if self.saw_logprobs else None

    def completion(self, completion_tokens: int) -> Completion:
        ids = self._ids()
        reasoning = "".join(self.reasoning)
        return Completion(
            text="".join(self.text),
            finish_reason=self.finish_reason,
            reasoning=reasoning or None,
            completion_tokens=completion_tokens,
            token_ids=tuple(ids) if ids is not None else None,
            logprobs=tuple(self.logprobs) if self.saw_logprobs else None,
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _failure(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
