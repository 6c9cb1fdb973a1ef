"""The served models' tokenizers: vLLM's ``/tokenize`` and ``/detokenize``
(:mod:`server.api.tokenize.api_router`), the engines' versions
(:mod:`server.api.ops.api_router`), and Anthropic's ``count_tokens``
(:mod:`server.api.messages.api_router`).

A model whose engine is a vLLM server (an HTTP engine whose dialect has the routes, see
:meth:`~scaffolds.engines.dialects.Dialect.tokenize_route`) has each call passed to it
with the engine's model name in ``model``, and vLLM's answer comes back as it is (a
replica that cannot be reached gives way to the next). A model run in this process
(``local:DIR``, ``vllm:DIR``) is answered here, computed as vLLM computes it, with the
tokenizer of its model directory: loaded on first use, off the event loop, and apart
from the engine's own (which stays with its generations). Any other engine (SGLang,
OpenAI, a mock) has no tokenizer Ponder can reach: :class:`UnsupportedError` (a 400).

>>> from scaffolds.engines.openai_http import OpenAIEngine
>>> type(tokenizer_of(OpenAIEngine("http://e/v1", "m"))).__name__
'EngineTokenizer'
>>> tokenizer_of(OpenAIEngine("http://e/v1", "m", dialect="sglang")) is None
True
>>> from scaffolds.engines.local import LocalEngine
>>> tokenizer_of(LocalEngine("scaffolds/models/ponder-addition")).kind
'transformers'
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx

from scaffolds.engines.dialects import error_message
from scaffolds.engines.local import LocalEngine
from scaffolds.engines.local_generate import module
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import Engine
from scaffolds.engines.vllm_inprocess import InProcessVLLMEngine
from scaffolds.errors import (
    EngineError,
    EngineRejectedError,
    EngineTimeoutError,
    EngineUnavailableError,
    InvalidRequestError,
    UnsupportedError,
)
from server.keys import KeyLimits
from server.pool.metered import engine_leaves
from server.pool.served_models import ServedModels, model_not_found

__all__ = ["EngineTokenizer", "LocalTokenizer", "Tokenizer", "Tokenizers", "tokenizer_of"]

CALL_TIMEOUT_S = 30.0
"""How long a passed-on ``/tokenize`` or ``/detokenize`` may take."""
_NO_ROUTE = ("Not Found", "Method Not Allowed")
"""What a server's own 404 or 405 says of a route it does not have (not of a model)."""


class Tokenizer(Protocol):
    """One served model's tokenizer, wherever it is."""

    @property
    def kind(self) -> str:
        """The engine's kind (``vllm``, ``transformers``), as ``/version`` names it."""
        ...

    async def tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize`` of ``body`` (a ``prompt`` or ``messages``; no ``model``):
        ``count``, ``max_model_len``, ``tokens``, ``token_strs``."""
        ...

    async def detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """vLLM's ``/detokenize`` of ``body`` (``tokens``): ``{"prompt": text}``."""
        ...

    async def version(self) -> str | None:
        """The engine's version, None when it does not say."""
        ...


class EngineTokenizer:
    """A vLLM server's own routes, on each replica in turn until one answers."""

    kind = "vllm"

    def __init__(self, leaves: list[OpenAIEngine]):
        self.leaves = leaves

    async def tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call("tokenize", body)

    async def detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call("detokenize", body)

    async def _call(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        failure = ""
        for leaf in self.leaves:
            route = getattr(leaf.dialect, f"{name}_route")()
            assert route is not None  # tokenizer_of checked every leaf's dialect
            at_root, path = route
            url = (leaf.root_url if at_root else leaf.base_url) + path
            try:
                response = await leaf.client.post(
                    url,
                    json={**body, "model": leaf.model},
                    headers=leaf.auth_headers(),
                    timeout=httpx.Timeout(CALL_TIMEOUT_S, connect=leaf.connect_timeout),
                )
            except httpx.TimeoutException as exc:
                raise EngineTimeoutError(f"engine {url} did not answer in time ({exc!r})") from exc
            except httpx.HTTPError as exc:
                failure = f"{url}: {exc!r}"
                continue  # this replica is unreachable: the next may answer
            message = error_message(response.content)
            if response.status_code in (404, 405) and message in (
                "Not Found",
                "Method Not Allowed",
            ):
                raise UnsupportedError(
                    f"the engine at {leaf.root_url} has no {path}", param="model"
                )
            if not response.is_success:
                raise EngineRejectedError(message, status=response.status_code)
            try:
                data = response.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):
                raise EngineError(f"engine {url} answered something that is not a JSON object")
            return data
        raise EngineUnavailableError(f"no engine of the model could be reached ({failure})")

    async def version(self) -> str | None:
        for leaf in self.leaves:
            route = leaf.dialect.version_route()
            if route is None:
                return None
            try:
                response = await leaf.get_route(route)
                found = response.json().get("version") if response.is_success else None
            except (httpx.HTTPError, ValueError, AttributeError):
                continue
            return found if isinstance(found, str) else None
        return None


class LocalTokenizer:
    """The tokenizer of a model directory run in this process, answering as vLLM does.

    >>> tokenizer = LocalTokenizer("scaffolds/models/ponder-addition", "transformers")
    >>> asyncio.run(tokenizer.tokenize({"prompt": "12+34="}))["count"]
    6
    """

    def __init__(
        self,
        model_dir: str | Path,
        kind: str,
        *,
        max_model_len: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ):
        self.model_dir = str(model_dir)
        self.kind = kind
        self.max_model_len = max_model_len
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._tokenizer: Any = None
        self._context: int | None = None
        self._lock = asyncio.Lock()

    async def _run(
        self, work: Callable[[Mapping[str, Any]], dict[str, Any]], body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``work(body)`` on a thread, one call at a time (the tokenizer loaded first)."""
        async with self._lock:  # one thread at a time uses the tokenizer
            if self._tokenizer is None:
                await asyncio.to_thread(self._load)
            return await asyncio.to_thread(work, body)

    def _load(self) -> None:
        transformers = module("transformers")
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_dir)
            config = transformers.AutoConfig.from_pretrained(self.model_dir)
        except Exception as exc:
            raise EngineError(f"cannot load the tokenizer of {self.model_dir}: {exc}") from exc
        own = getattr(config, "max_position_embeddings", None)
        sizes = [int(size) for size in (own, self.max_model_len) if size is not None]
        self._context = min(sizes) if sizes else None
        self._tokenizer = tokenizer

    async def tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._run(self._tokenize, body)

    async def detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._run(self._detokenize, body)

    async def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.kind)
        except importlib.metadata.PackageNotFoundError:
            return None

    def _tokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        tokenizer = self._tokenizer
        chat = body.get("messages") is not None
        text = self._render(body) if chat else str(body.get("prompt", ""))
        special = body.get("add_special_tokens")
        special = not chat if special is None else bool(special)  # vLLM's defaults
        ids = [int(i) for i in tokenizer(text, add_special_tokens=special)["input_ids"]]
        strs = tokenizer.convert_ids_to_tokens(ids) if body.get("return_token_strs") else None
        return {
            "count": len(ids),
            "max_model_len": self._context,
            "tokens": ids,
            "token_strs": strs,
        }

    def _render(self, body: Mapping[str, Any]) -> str:
        """The chat template's text of ``body``'s messages (and tools), as vLLM renders it."""
        generation = body.get("add_generation_prompt", True)
        continuing = body.get("continue_final_message", False)
        if generation and continuing:
            raise InvalidRequestError(
                "cannot set both continue_final_message and add_generation_prompt to true",
                param="continue_final_message",
            )
        if body.get("chat_template") is not None:
            raise UnsupportedError(
                "chat_template: a request's own chat template is not accepted",
                param="chat_template",
            )
        tokenizer = self._tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidRequestError(
                "the model's tokenizer has no chat template; send a prompt", param="messages"
            )
        options = self.chat_template_kwargs | dict(body.get("chat_template_kwargs") or {})
        if body.get("tools"):
            options["tools"] = body["tools"]
        try:
            text = tokenizer.apply_chat_template(
                [_message(m, i) for i, m in enumerate(body["messages"])],
                add_generation_prompt=generation,
                continue_final_message=continuing,
                tokenize=False,
                **options,
            )
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise InvalidRequestError(f"the chat template failed: {exc}", param="messages") from exc
        except Exception as exc:  # jinja2's TemplateError, raised by the template itself
            if type(exc).__module__.startswith("jinja2"):
                raise InvalidRequestError(
                    f"the chat template failed: {exc}", param="messages"
                ) from exc
            raise
        return str(text)

    def _detokenize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        tokens = list(body.get("tokens") or ())
        size = len(self._tokenizer)
        for index, token in enumerate(tokens):
            if not 0 <= token < size:
                raise InvalidRequestError(
                    f"tokens.{index}: {token} is not a token id of the model (0 to {size - 1})",
                    param=f"tokens.{index}",
                )
        return {"prompt": self._tokenizer.decode(tokens)}


def _message(message: Any, index: int) -> dict[str, Any]:
    """A chat message for a template: text parts joined into its content."""
    if not isinstance(message, Mapping):
        raise InvalidRequestError(f"messages.{index}: must be an object", param=f"messages.{index}")
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise InvalidRequestError(
                    f"messages.{index}.content.{j}: only text parts are supported here",
                    param=f"messages.{index}.content.{j}",
                )
            texts.append(str(part.get("text", "")))
        out["content"] = "".join(texts)
    return out


def tokenizer_of(engine: Engine) -> Tokenizer | None:
    """The tokenizer behind ``engine`` (its metering and replicas looked through), or
    None when Ponder cannot reach one."""
    leaves = engine_leaves(engine)
    if all(isinstance(leaf, OpenAIEngine) for leaf in leaves):
        routes = [
            (leaf.dialect.tokenize_route(), leaf.dialect.detokenize_route()) for leaf in leaves
        ]
        if all(a is not None and b is not None for a, b in routes):
            return EngineTokenizer(leaves)
        return None
    leaf = leaves[0]
    if isinstance(leaf, LocalEngine) and leaf.model_dir is not None:
        return LocalTokenizer(
            leaf.model_dir,
            "transformers",
            max_model_len=leaf.max_model_len,
            chat_template_kwargs=leaf.chat_template_kwargs,
        )
    if isinstance(leaf, InProcessVLLMEngine):
        return LocalTokenizer(
            leaf.model, "vllm", max_model_len=leaf.engine_args.get("max_model_len")
        )
    return None


class Tokenizers:
    """Each served model's :class:`Tokenizer`, made on first use."""

    def __init__(self, served: ServedModels):
        self.served = served
        self._made: dict[str, Tokenizer | None] = {}

    def _base(self, name: str) -> Tokenizer | None:
        if name not in self._made:
            self._made[name] = tokenizer_of(self.served.models[name].engine)
        return self._made[name]

    def of(self, model: str | None, limits: KeyLimits | None = None) -> Tokenizer:
        """The tokenizer of ``model`` (a base model, alias or ``base+<spec>``; None: the
        first served model the client key's ``limits`` let it use, as vLLM takes its
        first); a 404 naming an unknown one (or one the key may not use: the same 404,
        :meth:`ServedModels.resolve <server.pool.served_models.ServedModels.resolve>`), a
        400 when its engine has none Ponder can reach.

        >>> from scaffolds.engines.mock import MockEngine
        >>> from scaffolds.errors import PonderError
        >>> from server.settings import Settings
        >>> settings = Settings(models=[{"name": k, "engines": ["http://unused/v1"]} for k in "mn"])
        >>> engines = {k: MockEngine(lambda r: "4") for k in "mn"}
        >>> tokenizers = Tokenizers(ServedModels.build(settings, engines=engines))
        >>> for model in (None, "m"):
        ...     try:
        ...         tokenizers.of(model, KeyLimits(models=("n",)))
        ...     except PonderError as err:
        ...         print(err.message[:60])
        the engine of model 'n' has no tokenizer Ponder can reach (a
        the model 'm' does not exist or you do not have access to it
        """
        if model is None:
            visible = self.served.visible_ids(limits)
            if not visible:
                raise model_not_found("", visible)
            model = visible[0]
        served, _ = self.served.resolve(model, limits)
        found = self._base(served.config.name)
        if found is None:
            raise UnsupportedError(
                f"the engine of model {served.config.name!r} has no tokenizer Ponder can "
                "reach (a vLLM engine, or one run in process, has)",
                param="model",
            )
        return found

    async def versions(self) -> dict[str, dict[str, Any]]:
        """Per base model: its engine's kind and version (None where none is known)."""
        names = list(self.served.models)
        found = [self._base(name) for name in names]
        versions = await asyncio.gather(*(_version_of(t) for t in found))
        return {
            name: {"engine": t.kind if t is not None else None, "version": version}
            for name, t, version in zip(names, found, versions, strict=True)
        }


async def _version_of(tokenizer: Tokenizer | None) -> str | None:
    return None if tokenizer is None else await tokenizer.version()
