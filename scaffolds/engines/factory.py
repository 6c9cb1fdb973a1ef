"""One engine factory: an engine URL to an :class:`~scaffolds.engines.protocol.Engine`.

``ponder serve``, ``ponder train`` and anything else that takes an engine on its command
line name it by URL, and this module is the one place that reads one:

* ``http://HOST/v1`` or ``https://...``: an OpenAI-compatible server (vLLM, SGLang,
  OpenAI, Ponder itself), :class:`~scaffolds.engines.openai_http.OpenAIEngine`;
* ``local:DIR`` (or ``hf:DIR``, the same): a transformers model directory run in this
  process, :class:`~scaffolds.engines.local.LocalEngine`;
* ``vllm:DIR``: the model directory in vLLM's async engine in this process,
  :class:`~scaffolds.engines.vllm_inprocess.InProcessVLLMEngine` (needs vLLM here).

Each engine module is imported only when its scheme is used.

>>> engine = engine_from_url("http://localhost:8001/v1", EngineOptions(model="qwen3-4b"))
>>> type(engine).__name__, engine.base_url, engine.dialect.name
('OpenAIEngine', 'http://localhost:8001/v1', 'vllm')
>>> engine_scheme("hf:/models/tiny").name, engine_scheme("local:/models/tiny").name
('local', 'local')
>>> try:
...     engine_from_url("grpc://host:1")
... except ValueError as err:
...     print(err)
unknown engine URL 'grpc://host:1': use http(s)://HOST/v1, local:DIR (or hf:DIR), vllm:DIR
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scaffolds.dependencies import require
from scaffolds.engines.protocol import Engine

__all__ = [
    "SCHEMES",
    "EngineOptions",
    "EngineScheme",
    "check_engine_url",
    "engine_from_url",
    "engine_scheme",
]


@dataclass(frozen=True)
class EngineOptions:
    """How to build an engine; each scheme reads the options that apply to it.

    ``model`` is the name an HTTP server serves (required for HTTP); ``api_key`` the
    engine's own key; ``dialect`` a registered dialect name; the timeouts, retries and
    ``pool_shards`` configure HTTP; ``threads`` sets torch's threads of a local model, and
    ``load`` loads it now, so a bad directory fails here rather than at the first call.

    >>> EngineOptions(model="m").read_timeout is None
    True
    """

    model: str | None = None
    api_key: str | None = None
    dialect: str = "vllm"
    connect_timeout: float = 5.0
    read_timeout: float | None = None
    """Seconds an HTTP engine may send nothing (None: no limit; a non-streamed call of a
    long generation sends nothing until it ends)."""
    max_retries: int = 3
    pool_shards: int = 8
    max_model_len: int | None = None
    threads: int | None = None
    load: bool = False


def _http(url: str, options: EngineOptions) -> Engine:
    if not options.model:
        raise ValueError(f"the HTTP engine {url!r} needs a model name (--model)")
    from scaffolds.engines.openai_http import OpenAIEngine

    return OpenAIEngine(
        url,
        options.model,
        api_key=options.api_key,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        max_retries=options.max_retries,
        dialect=options.dialect,
        pool_shards=options.pool_shards,
        max_model_len=options.max_model_len,
    )


def _local(path: str, options: EngineOptions) -> Engine:
    require("local", "the local engine (local:DIR)", modules=("torch", "transformers"))
    from scaffolds.engines.local import LocalEngine

    engine = LocalEngine(path, threads=options.threads, max_model_len=options.max_model_len)
    if options.load:
        engine.load()
    return engine


def _vllm(path: str, options: EngineOptions) -> Engine:
    require("vllm", "the in-process vLLM engine (vllm:DIR)")
    from scaffolds.engines.vllm_inprocess import InProcessVLLMEngine

    return InProcessVLLMEngine(path)


@dataclass(frozen=True)
class EngineScheme:
    """One kind of engine URL: its prefixes, how it is built and how it behaves.

    ``keep_prefix``: the builder gets the whole URL (HTTP), else what follows the prefix
    (a directory). ``chat``: whether callers talk chat to it by default (an HTTP server
    applies its chat template; a raw checkpoint gets text). ``parallel``: whether calls
    may overlap usefully (a transformers model runs one call at a time).
    """

    name: str
    prefixes: tuple[str, ...]
    build: Callable[[str, EngineOptions], Engine]
    usage: str
    keep_prefix: bool = False
    chat: bool = False
    parallel: bool = True
    model_dir: bool = True


SCHEMES: tuple[EngineScheme, ...] = (
    EngineScheme(
        "http",
        ("http://", "https://"),
        _http,
        "http(s)://HOST/v1",
        keep_prefix=True,
        chat=True,
        model_dir=False,
    ),
    EngineScheme("local", ("local:", "hf:"), _local, "local:DIR (or hf:DIR)", parallel=False),
    EngineScheme("vllm", ("vllm:",), _vllm, "vllm:DIR"),
)
"""The engine URL schemes, in the order their prefixes are tried."""


def _split(url: str) -> tuple[EngineScheme, str]:
    for scheme in SCHEMES:
        for prefix in scheme.prefixes:
            if url.startswith(prefix):
                return scheme, url if scheme.keep_prefix else url.removeprefix(prefix)
    usages = ", ".join(s.usage for s in SCHEMES)
    raise ValueError(f"unknown engine URL {url!r}: use {usages}")


def engine_scheme(url: str) -> EngineScheme:
    """The scheme of ``url``; a ValueError naming the URL and the known schemes if none."""
    return _split(url.strip())[0]


def check_engine_url(url: str) -> str:
    """``url`` normalised (no trailing ``/``) and checked without connecting: an HTTP URL
    ends in ``/v1``, a model directory holds ``config.json``. Raises ValueError.

    >>> check_engine_url("http://e:8000/v1/")
    'http://e:8000/v1'
    >>> check_engine_url("http://e:8000")
    Traceback (most recent call last):
    ...
    ValueError: engine base URL must end in /v1 (got 'http://e:8000')
    """
    url = url.strip().rstrip("/")
    scheme, rest = _split(url)
    if scheme.model_dir and not (Path(rest) / "config.json").is_file():
        raise ValueError(
            f"{scheme.name} engine needs a model directory with config.json (got {url!r})"
        )
    if not scheme.model_dir and not url.endswith("/v1"):
        raise ValueError(f"engine base URL must end in /v1 (got {url!r})")
    return url


def engine_from_url(url: str, options: EngineOptions | None = None) -> Engine:
    """The engine ``url`` names, built with ``options`` (see the module docs)."""
    scheme, rest = _split(url.strip())
    return scheme.build(rest, options or EngineOptions())
