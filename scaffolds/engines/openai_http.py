"""OpenAIEngine: the Engine protocol over any OpenAI-compatible HTTP server.

Works against vLLM, SGLang and OpenAI itself. The n samples of one prompt travel in one
request (``n``), so the server can share the prompt's prefix cache across them. Failed
connections and the statuses 408, 429 and 5xx are retried with jittered exponential
backoff (honouring ``Retry-After``); other 4xx are never retried
(:mod:`~scaffolds.engines.openai_retry`). Errors surface as the ``Engine*Error`` classes
of :mod:`scaffolds.errors`, never as httpx exceptions.

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
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Self

import httpx

from scaffolds.engines.context_fit import no_room
from scaffolds.engines.dialects import Dialect, error_message, get_dialect
from scaffolds.engines.greedy import greedy_samples, one_by_one
from scaffolds.engines.http_transport import (
    POOL_SHARDS,
    AiohttpTransport,
    EngineTransport,
    HttpxTransport,
    TransportResponse,
    aiohttp_available,
)
from scaffolds.engines.openai_context import ContextWindow
from scaffolds.engines.openai_parse import (
    Choice,
    ResponseParser,
    parse_retry_after,
    rejection,
    retry_status,
)
from scaffolds.engines.openai_retry import RetryableStatus, RetryPolicy
from scaffolds.engines.prompt_lists import split_result
from scaffolds.engines.protocol import (
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
    batchable,
    stream_from_generate,
)
from scaffolds.errors import EngineTimeoutError, EngineUnavailableError
from scaffolds.fanout import gather

__all__ = ["AFFINITY_HEADER", "OpenAIEngine", "affinity_headers"]

AFFINITY_HEADER = "x-session-id"
"""The header each engine call carries its run's affinity key in (every call of one
scaffold run on one problem has the same key, ``scaffolds.core.run.problem_key``), so a
router in front of the engines can keep a run on one replica: vllm-router's
``consistent_hash`` policy reads it first (``SESSION_HEADER_NAMES`` in its
``src/policies/hash_key.rs``). Engines themselves ignore it."""


def affinity_headers(request: GenerateRequest) -> dict[str, str]:
    """The headers that name ``request``'s affinity key (none without one).

    >>> from scaffolds.engines.protocol import GenerateRequest
    >>> affinity_headers(GenerateRequest("hi", affinity_key="3f2a")), affinity_headers(
    ...     GenerateRequest("hi"))
    ({'x-session-id': '3f2a'}, {})
    """
    key = request.affinity_key
    return {AFFINITY_HEADER: key} if key else {}


class OpenAIEngine:
    """An :class:`~scaffolds.engines.protocol.Engine` backed by an OpenAI-compatible server.

    ``base_url`` ends in ``/v1``. ``api_key`` is the engine's own key, sent as a bearer
    token only when set. ``max_retries`` counts retries after the first attempt. The
    ``dialect`` (a registered name or a :class:`~scaffolds.engines.dialects.Dialect`)
    decides every server-specific field and route: with ``"vllm"``, logprob requests
    also ask for token ids; with ``"sglang"``, each call carries a ``rid`` and a
    cancelled call is aborted with ``POST /abort_request`` (best effort); with
    ``"openai"``, chat requests send ``max_completion_tokens``. Each call's
    ``max_tokens`` is lowered to what the model's context leaves after the prompt
    (:class:`~scaffolds.engines.openai_context.ContextWindow`: ``max_model_len``, else what
    the server reports). A client passed in is
    used as is and not closed by :meth:`aclose`; otherwise the engine creates and owns
    ``pool_shards`` httpx clients on first use. Its calls go through one
    :class:`~scaffolds.engines.http_transport.EngineTransport`, chosen here: httpx over a
    client passed in; otherwise aiohttp with ``transport="aiohttp"``, or with ``"auto"``
    (the default) when aiohttp is installed, and httpx with ``"httpx"``.

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
        read_timeout: float | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        dialect: str | Dialect = "vllm",
        pool_shards: int = POOL_SHARDS,
        max_model_len: int | None = None,
        transport: str = "auto",
    ) -> None:
        if pool_shards < 1:
            raise ValueError(f"pool_shards must be >= 1 (got {pool_shards})")
        self.pool_shards = pool_shards
        self.base_url = base_url.rstrip("/")
        self.root_url = self.base_url.removesuffix("/v1")
        self.parser = ResponseParser(self.base_url)
        self.model = model
        self.dialect: Dialect = get_dialect(dialect)
        self.read_timeout = read_timeout
        self._api_key = api_key
        self.connect_timeout = connect_timeout
        self._httpx = HttpxTransport(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            shards=pool_shards,
            client=client,
        )
        self._retry = RetryPolicy(
            self.base_url, max_retries, backoff_base, backoff_max, read_timeout
        )  # raises on a negative max_retries
        self._aborts: set[asyncio.Task[None]] = set()
        self._context = ContextWindow(self, max_model_len)
        # Calls go over aiohttp when it is installed ("auto") and no client was passed in.
        over_aiohttp = transport == "aiohttp" or (transport == "auto" and aiohttp_available())
        self._transport: EngineTransport = (
            AiohttpTransport(connect_timeout=connect_timeout, read_timeout=read_timeout)
            if over_aiohttp and client is None
            else self._httpx
        )

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt (see ``RetryPolicy``)."""
        return self._retry.max_retries

    # -- lifecycle -------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        """An httpx client for the next call outside the transport (health, capacity,
        aborts, tokenizers): the one passed in, else one of this engine's ``pool_shards``
        clients in turn (created on first use;
        :class:`~scaffolds.engines.http_transport.HttpxTransport`)."""
        return self._httpx.client

    async def aclose(self) -> None:
        """Close the HTTP clients this engine created (after pending aborts)."""
        if self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)
        await self._transport.aclose()
        await self._httpx.aclose()  # its clients also serve health, capacity and aborts

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
        """Sample ``request.params.n`` completions in one HTTP call (greedy samples where
        the server refuses them: one call each, see :mod:`scaffolds.engines.greedy`)."""
        if greedy_samples(request) and not self.dialect.greedy_samples():
            return await one_by_one(self.generate, request)
        fitted = await self._context.fit(request)
        if fitted is None:
            return no_room(request.params.n)
        path, body = self._build_body(fitted, stream=False)
        data = await self._post_json(path, body, affinity_headers(request))
        accs: dict[int, Choice] = {}
        self.parser.absorb(data, accs, "message" if request.is_chat else None)
        usage = self.parser.usage(data.get("usage"))
        return self.parser.result(request.params.n, accs, usage, self.parser.prompt_ids(data))

    @property
    def takes_prompt_lists(self) -> bool:
        """Whether :meth:`generate_batch` sends a list of prompts as one request (the
        dialect says whether the server takes one)."""
        return self.dialect.prompt_lists()

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """Text prompts with the same params as ONE request (``prompt: [...]``), split
        back per prompt (:func:`~scaffolds.engines.prompt_lists.split_result`). Greedy
        samples the server refuses in one call go as each prompt ``n`` times with
        ``n: 1`` (the same choice order). Where one request cannot carry them (a prompt
        whose ``max_tokens`` the context lowers), each goes as its own request."""
        if not batchable(requests):
            raise ValueError("generate_batch takes text prompts with the same params")
        first, n = requests[0], requests[0].params.n
        if len(requests) == 1 or not self.takes_prompt_lists:
            return await gather(*(self.generate(r) for r in requests))
        fitted = await gather(*(self._context.fit(r) for r in requests))
        if any(f is None or f.params != first.params for f in fitted):
            return await gather(*(self.generate(r) for r in requests))
        repeat = n if greedy_samples(first) and not self.dialect.greedy_samples() else 1
        one = dataclasses.replace(first, params=first.params.replace(n=n // repeat))
        path, body = self._build_body(one, stream=False)
        body["prompt"] = [r.prompt for r in requests for _ in range(repeat)]
        data = await self._post_json(path, body, affinity_headers(first))
        accs: dict[int, Choice] = {}
        self.parser.absorb(data, accs, None)
        usage = self.parser.usage(data.get("usage"))
        whole = self.parser.result(len(requests) * n, accs, usage, None)
        ids = [self.parser.prompt_ids({"choices": [c]}) for c in self._choices_at(data, n)]
        sizes = [len(i) if i else len(str(r.prompt)) for i, r in zip(ids, requests, strict=True)]
        return split_result(whole, n=n, sizes=sizes, prompt_ids=ids)

    async def _post_json(self, path: str, body: dict[str, Any], headers: Mapping[str, str]) -> Any:
        """POST a generation (with ``headers`` beside the auth header) and read its JSON;
        cancelled or timed out, the server may still be generating it, so it is aborted."""
        try:
            return await self._request_json("POST", path, body, headers)
        except (asyncio.CancelledError, EngineTimeoutError):
            self._abort_later(body)
            raise

    def _choices_at(self, data: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """The first choice of each prompt (index ``p * n``), in prompt order."""
        by_index = {self.parser.index(c): c for c in data["choices"]}
        return [by_index[i] for i in range(0, len(by_index), n)]

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        """Yield :class:`EngineDelta` pieces as they arrive, then one final result.

        Nothing is retried once the response has begun. Closing or cancelling the
        consumer closes the HTTP response, so the server sees the client go away; use
        ``contextlib.aclosing`` when breaking out of the loop early.
        """
        if greedy_samples(request) and not self.dialect.greedy_samples():
            async for item in stream_from_generate(self, request):
                yield item
            return
        fitted = await self._context.fit(request)
        if fitted is None:
            yield no_room(request.params.n)
            return
        path, body = self._build_body(fitted, stream=True)
        part_key = "delta" if request.is_chat else None
        try:
            response = await self._open("POST", path, body, affinity_headers(request))
        except (asyncio.CancelledError, EngineTimeoutError):
            self._abort_later(body)
            raise
        accs: dict[int, Choice] = {}
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
                chunk = self.parser.decode(payload)
                for delta in self.parser.absorb(chunk, accs, part_key):
                    yield delta
                if chunk.get("usage"):
                    usage = self.parser.usage(chunk["usage"])
                prompt_ids = self.parser.prompt_ids(chunk) or prompt_ids
            finished = True
        except httpx.HTTPError as exc:
            raise self._retry.error(exc, attempts=1, started=True) from exc
        finally:
            await response.aclose()
            if not finished:  # closed early, cancelled or failed mid-stream
                self._abort_later(body)
        if not done and not (accs and all(a.finish_reason for a in accs.values())):
            raise EngineUnavailableError(
                f"the stream from engine {self.base_url} ended before [DONE]"
            )
        yield self.parser.result(request.params.n, accs, usage, prompt_ids)

    # -- other endpoints -------------------------------------------------------------

    async def health(self) -> bool:
        """True when the server's health route answers 2xx (no retries).

        vLLM and SGLang: ``GET {root}/health``; OpenAI: ``GET {base_url}/models``.
        """
        try:
            response = await self.get_route(self.dialect.health_route())
        except httpx.HTTPError:
            return False
        return response.is_success

    async def get_route(self, route: tuple[bool, str]) -> httpx.Response:
        """``GET`` a dialect's ``(at_root, path)`` route (at the server's root, else under
        ``base_url``) with this engine's key, within its connect timeout, no retries;
        raises what httpx raises.

        >>> import asyncio
        >>> answer = httpx.MockTransport(lambda r: httpx.Response(200, text=str(r.url)))
        >>> client = httpx.AsyncClient(transport=answer)
        >>> engine = OpenAIEngine("http://engine/v1", "m", client=client)
        >>> asyncio.run(engine.get_route((True, "/version"))).text
        'http://engine/version'
        """
        at_root, path = route
        return await self.client.get(
            (self.root_url if at_root else self.base_url) + path,
            headers=self.auth_headers(),
            timeout=httpx.Timeout(self.connect_timeout),
        )

    async def sequence_capacity(self) -> int | None:
        """How many sequences the server runs at once, where its dialect's capacity route
        says (SGLang's ``max_running_requests``, vLLM's ``max_num_seqs``); else None."""
        route = self.dialect.capacity_route()
        if route is None:
            return None
        try:
            response = await self.get_route(route)
            data = response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError):
            return None
        return self.dialect.capacity_from(data)

    async def list_models(self) -> list[str]:
        """The model ids the server serves (``GET {base_url}/models``)."""
        data = await self._request_json("GET", "/models", None)
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise self.parser.malformed("'data' of /models is not a list")
        ids = [e.get("id") for e in entries if isinstance(e, dict)]
        if not all(isinstance(i, str) for i in ids):
            raise self.parser.malformed("a model entry has no string 'id'")
        return [str(i) for i in ids]

    def _abort_later(self, body: dict[str, Any]) -> None:
        """Abort the call in the background where the dialect can (best effort, never raises)."""
        rids = self.dialect.abort_ids(body)
        if not rids:
            return
        timeout = httpx.Timeout(self._httpx.timeout.connect or 5.0)
        abort = self.dialect.abort(self.client, self.root_url, rids, self.auth_headers(), timeout)
        try:
            task = asyncio.get_running_loop().create_task(abort)
        except RuntimeError:  # no running loop: nothing to abort with
            abort.close()
            return
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    # -- requests and retries --------------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
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
        if params.top_logprobs is not None:
            body |= self.dialect.top_logprob_fields(
                chat=chat, top_logprobs=params.top_logprobs, texts=params.top_logprob_texts
            )
        if chat and request.continue_final:
            body |= self.dialect.continuation_fields()
        if (rid := self.dialect.request_id()) is not None:
            body["rid"] = rid
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(params.extra)
        return path, body

    async def _request_json(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        headers: Mapping[str, str] = MappingProxyType({}),
    ) -> Any:
        response = await self._open(method, path, body, headers)
        try:
            raw = await response.aread()
        except httpx.HTTPError as exc:
            raise self._retry.error(exc, attempts=1, started=True) from exc
        finally:
            await response.aclose()
        return self.parser.decode(raw)

    async def _open(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        headers: Mapping[str, str] = MappingProxyType({}),
    ) -> TransportResponse:
        """Send a request (``headers`` beside the auth header), retrying as configured;
        return the (unread) 2xx response."""
        url = self.base_url + path
        sent = {**headers, **self.auth_headers()}
        return await self._retry.run(lambda: self._attempt(method, url, body, sent))

    async def _attempt(
        self, method: str, url: str, body: dict[str, Any] | None, headers: Mapping[str, str]
    ) -> TransportResponse:
        response = await self._transport.send(method, url, body, headers)
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
        if retry_status(status):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise RetryableStatus(status, message, retry_after)
        raise rejection(
            f"engine {self.base_url} rejected the request (HTTP {status})", message, status
        )
