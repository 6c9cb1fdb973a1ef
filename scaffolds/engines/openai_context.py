"""The context window of a model behind an OpenAI-compatible server, for clamping calls.

Its size comes from configuration, else from the server's model card (vLLM lists
``max_model_len`` in ``GET /v1/models``), looked up once. A call whose ``max_tokens``
surely fits (by :func:`~scaffolds.engines.context_fit.prompt_token_bound`) goes out
as it is; otherwise its prompt is counted exactly where the dialect has a route for it
(vLLM's ``POST /tokenize``), else bounded, and ``max_tokens`` is lowered to the room
left. Looking up never fails a call: what cannot be learned is not clamped.

>>> from scaffolds.engines.openai_http import OpenAIEngine
>>> ContextWindow(OpenAIEngine("http://e/v1", "m"), 2048).configured
2048
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

import httpx

from scaffolds.engines.context_fit import fitted_max_tokens, prompt_token_bound
from scaffolds.engines.dialects import Dialect
from scaffolds.engines.protocol import GenerateRequest

__all__ = ["ContextWindow"]

SURELY_FITS = 512
"""Prompt plus ``max_tokens`` below which a call is sent without learning the context
size (a model with a smaller context should have ``max_model_len`` configured)."""
_TEMPLATE_KEYS = ("add_generation_prompt", "continue_final_message", "chat_template_kwargs")


class ServerEndpoint(Protocol):
    """What a context window reads of its engine: where the server is and how to call it
    (:class:`~scaffolds.engines.openai_http.OpenAIEngine` is one)."""

    @property
    def base_url(self) -> str: ...
    @property
    def root_url(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def dialect(self) -> Dialect: ...
    @property
    def client(self) -> httpx.AsyncClient: ...
    @property
    def connect_timeout(self) -> float: ...
    def auth_headers(self) -> dict[str, str]: ...


class ContextWindow:
    """Fits each call of ``engine`` into its model's context (``configured`` tokens, or
    what the server reports)."""

    def __init__(self, engine: ServerEndpoint, configured: int | None = None) -> None:
        if configured is not None and configured < 1:
            raise ValueError(f"max_model_len must be >= 1 (got {configured})")
        self.engine = engine
        self.configured = configured
        self._reported: int | None = None
        self._looked = False
        self._lock: asyncio.Lock | None = None

    async def size(self) -> int | None:
        """The context length in tokens, or None when nothing says it."""
        if self.configured is not None:
            return self.configured
        if not self._looked:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if not self._looked:
                    await self._look_up()
        return self._reported

    async def _look_up(self) -> None:
        data = await self._call("GET", self.engine.base_url + "/models", None)
        if data is None:
            return  # unreachable now: ask again on a later call
        self._looked = True
        cards = (data.get("data") or []) if isinstance(data, dict) else []
        for card in cards:
            if isinstance(card, dict) and card.get("id") == self.engine.model:
                value = card.get("max_model_len")
                self._reported = value if isinstance(value, int) and value > 0 else None

    async def fit(self, request: GenerateRequest) -> GenerateRequest | None:
        """``request`` with ``max_tokens`` lowered to the room its prompt leaves; None
        when no token fits. A call that fits any context worth serving
        (:data:`SURELY_FITS` tokens, counting an unset ``max_tokens`` as 0: servers then
        take what the context leaves) goes out without a look-up."""
        asked = request.params.max_tokens
        bound = prompt_token_bound(request.prompt)
        if self.configured is None and (asked or 0) + bound <= SURELY_FITS:
            return request  # unset max_tokens: the server takes what the context leaves
        size = await self.size()
        if size is None or (asked is not None and asked + bound <= size):
            return request
        counted = await self._count(request)
        fitted = fitted_max_tokens(
            asked, prompt_tokens=bound if counted is None else counted, max_model_len=size
        )
        if fitted is None and counted is None:
            return request  # only a bound says it cannot fit: let the server decide
        if fitted is None or fitted == asked:
            return None if fitted is None else request
        return dataclasses.replace(request, params=request.params.replace(max_tokens=fitted))

    async def _count(self, request: GenerateRequest) -> int | None:
        route = self.engine.dialect.tokenize_route()
        if route is None:
            return None
        at_root, path = route
        body: dict[str, Any] = {"model": self.engine.model}
        if isinstance(request.prompt, str):
            body["prompt"] = request.prompt
        else:
            body["messages"] = [m.to_openai() for m in request.prompt]
            body.update({k: v for k, v in request.params.extra.items() if k in _TEMPLATE_KEYS})
            if request.continue_final:  # the message is continued, not a new turn
                body.update(self.engine.dialect.continuation_fields())
        url = (self.engine.root_url if at_root else self.engine.base_url) + path
        data = await self._call("POST", url, body)
        count = data.get("count") if isinstance(data, dict) else None
        return count if isinstance(count, int) and count >= 0 else None

    async def _call(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        """One request without retries; None on any failure."""
        try:
            response = await self.engine.client.request(
                method,
                url,
                json=body,
                headers=self.engine.auth_headers(),
                timeout=httpx.Timeout(30.0, connect=self.engine.connect_timeout),
            )
            return response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError):
            return None
