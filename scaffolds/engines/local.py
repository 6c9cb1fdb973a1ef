"""LocalEngine: the Engine protocol over a transformers causal LM in this process.

One engine, two ways in:

- ``LocalEngine(model_dir)`` loads a model directory (or hub id, offline) lazily, on
  first use, and answers like vLLM's OpenAI server: for small models on CPU (tests, the
  synthetic addition model, notebooks, ``ponder train data --engine hf:PATH``);
- ``LocalEngine.from_model(model, tokenizer)`` samples from a live model that the caller
  keeps owning: the GRPO rollout drives the trainer's policy through it. The model is
  put in eval mode for each call and its mode restored after; logprobs are taken under
  the sampling distribution by default.

The n samples of one prompt are one batched ``model.generate`` call
(``num_return_sequences=n``, split above ``max_batch``), so they share the prompt's
prefill. Calls run one at a time on a single worker thread: concurrent calls queue
rather than oversubscribe the CPUs, and synchronous code can drive the engine with
``asyncio.run`` (the trainer does). Cancelling the awaiting task stops the generation
at its next token (a stopping criterion watches a per-call flag), so a cancelled call
frees the worker quickly and never corrupts later calls.

Semantics follow vLLM's OpenAI server where they can; the rules are listed in
:mod:`scaffolds.engines.local_generate`.

``stream`` is token by token: a :class:`~scaffolds.engines.local_stream.RowStreamer` in
``generate`` passes on each sample's settled text as it grows.

torch and transformers are imported lazily, on the worker thread, when the model is
first needed (the ``local`` extra: ``pip install -e '.[local]'``).

>>> engine = LocalEngine("scaffolds/models/ponder-addition", max_batch=16)
>>> engine.model_dir.name, engine.max_batch, engine.logprobs, engine.loaded
('ponder-addition', 16, 'raw', False)

Typical use (``from_model`` drives a live policy the trainer keeps owning)::

    engine = LocalEngine("scaffolds/models/ponder-addition")
    result = await engine.generate(
        GenerateRequest(chat("347+589="), SamplingParams(n=8, temperature=1.0, max_tokens=8))
    )
    engine = LocalEngine.from_model(model, tokenizer, generation_kwargs={"top_k": 0})
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from scaffolds.engines.context_fit import no_room
from scaffolds.engines.local_fields import check_fields, template_options
from scaffolds.engines.local_generate import (
    Cancelled,
    Sample,
    StreamerOf,
    completion_of,
    device_of,
    encode_prompt,
    generate_rows,
    module,
)
from scaffolds.engines.local_stream import Emit, RowStreamer, bridge
from scaffolds.engines.protocol import (
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
)
from scaffolds.errors import EngineError, InvalidRequestError, PonderError

__all__ = ["LocalEngine", "LogprobMode"]

LogprobMode = Literal["raw", "sampling"]

_DEFAULT_MAX_TOKENS = 512
"""``max_tokens`` when a request leaves it unset (capped by the model's context)."""


class LocalEngine:
    """An in-process engine over a transformers causal LM: a directory (or hub id,
    offline) loaded on first use, or a live model (:meth:`from_model`).

    ``threads`` sets torch's intra-op threads on the worker thread (None keeps torch's
    setting). ``max_batch`` caps the rows of one ``generate``: n above it runs in
    several sequential batches. ``logprobs`` picks the distribution of the returned
    logprobs (``"raw"`` or ``"sampling"``, see the module docs); ``default_max_tokens``
    bounds a request without ``max_tokens``; ``generation_kwargs`` go to every
    ``generate`` (an ``eos_token_id`` there replaces the model's); ``chat_template_kwargs``
    to the chat template; ``add_special_tokens`` applies to plain-text prompts;
    ``max_model_len`` narrows the model's context.
    """

    model_dir: Path | None
    """The directory loaded from (None for :meth:`from_model`)."""
    max_model_len: int | None = None
    """The context served, at most the model's own (None: the model's own)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "cpu",
        threads: int | None = None,
        max_batch: int = 64,
        logprobs: LogprobMode = "raw",
        default_max_tokens: int = _DEFAULT_MAX_TOKENS,
        generation_kwargs: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        add_special_tokens: bool = True,
        max_model_len: int | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.device = device
        self._configure(
            threads,
            max_batch,
            logprobs,
            default_max_tokens,
            generation_kwargs,
            chat_template_kwargs,
            add_special_tokens,
        )
        if max_model_len is not None and max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1 (got {max_model_len})")
        self.max_model_len = max_model_len

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        threads: int | None = None,
        max_batch: int = 64,
        logprobs: LogprobMode = "sampling",
        default_max_tokens: int = 256,
        generation_kwargs: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        add_special_tokens: bool = False,
    ) -> LocalEngine:
        """An engine over an already-loaded model and tokenizer, which stay the caller's:
        nothing is loaded or moved, the model's train/eval mode is restored after each
        call, and :meth:`aclose` only drops the engine's references."""
        engine = cls.__new__(cls)
        engine.model_dir = None
        engine.device = str(device_of(model))
        engine._configure(
            threads,
            max_batch,
            logprobs,
            default_max_tokens,
            generation_kwargs,
            chat_template_kwargs,
            add_special_tokens,
        )
        engine._model, engine._tokenizer = model, tokenizer
        return engine

    def _configure(
        self,
        threads: int | None,
        max_batch: int,
        logprobs: LogprobMode,
        default_max_tokens: int,
        generation_kwargs: Mapping[str, Any] | None,
        chat_template_kwargs: Mapping[str, Any] | None,
        add_special_tokens: bool,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 (got {max_batch})")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1 (got {threads})")
        if logprobs not in ("raw", "sampling"):
            raise ValueError(f"logprobs must be 'raw' or 'sampling' (got {logprobs!r})")
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1 (got {default_max_tokens})")
        self.threads = threads
        self.max_batch = max_batch
        self.logprobs: LogprobMode = logprobs
        self.default_max_tokens = default_max_tokens
        self.generation_kwargs = dict(generation_kwargs or {})
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.add_special_tokens = add_special_tokens
        self.generated_tokens = 0
        """Tokens generated so far, including those of cancelled calls (for monitoring)."""
        self.calls_started = 0
        """Calls the worker has started running (queued calls not yet counted)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-engine")
        self._model: Any = None
        self._tokenizer: Any = None
        self._threads_set = False
        self._load_error: BaseException | None = None
        self._active: set[threading.Event] = set()
        self._closed = False

    @property
    def loaded(self) -> bool:
        return self._model is not None

    # -- the Engine protocol ---------------------------------------------------------
    async def generate(self, request: GenerateRequest, emit: Emit | None = None) -> GenerateResult:
        """The call's result; ``emit(index, text)`` (on the worker thread) hears each
        sample's text as it grows."""
        if self._closed:
            raise EngineError("LocalEngine is closed")
        check_fields(request.params.extra)
        cancel = threading.Event()
        self._active.add(cancel)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, request, cancel, emit)
        except asyncio.CancelledError:
            cancel.set()  # the worker notices at its next token and gives the thread back
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # aclose() dropped the queued call; the caller did not cancel anything.
                raise EngineError("LocalEngine was closed before the call ran") from None
            raise
        except Cancelled:
            raise EngineError("LocalEngine was closed during the call") from None
        except PonderError:
            raise
        except Exception as exc:  # a torch/transformers failure: not the caller's fault
            raise EngineError(f"local generation failed: {exc}") from exc
        finally:
            self._active.discard(cancel)

    def check_fields(self, fields: Mapping[str, Any]) -> None:
        """Refuse, with a 400 naming this engine and the field, a request field that it
        cannot honour (:func:`~scaffolds.engines.local_fields.check_fields`): the server
        asks before a run starts, and :meth:`generate` asks again for each call."""
        check_fields(fields)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        """Each sample's text as it is generated, then the result; leaving the stream
        cancels the call."""
        queue: asyncio.Queue[EngineDelta] = asyncio.Queue()
        emit = bridge(asyncio.get_running_loop(), queue)
        call = asyncio.ensure_future(self.generate(request, emit))
        call.add_done_callback(lambda _: queue.put_nowait(EngineDelta(-1)))
        try:
            while (delta := await queue.get()).index >= 0:
                yield delta
            yield await call
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, PonderError):
                    await call

    async def health(self) -> bool:
        """True once the model is loaded (loading it now if needed)."""
        if self._closed:
            return False
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._ensure_loaded)
        except Exception:
            return False
        return True

    def load(self) -> None:
        """Load the model now, blocking (on the worker thread); EngineError if it cannot.
        For synchronous callers: inside an event loop, ``await health()`` instead."""
        if self._closed:
            raise EngineError("LocalEngine is closed")
        self._executor.submit(self._ensure_loaded).result()

    async def aclose(self) -> None:
        """Stop in-flight generations, wait for the worker and drop the model (a live
        model from :meth:`from_model` is only let go of, never changed)."""
        if self._closed:
            return
        self._closed = True
        for flag in list(self._active):
            flag.set()
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        self._model = None
        self._tokenizer = None

    # -- on the worker thread --------------------------------------------------------
    def _ensure_loaded(self) -> None:
        if self.threads is not None and not self._threads_set:
            module("torch").set_num_threads(self.threads)
            self._threads_set = True
        if self._model is not None:
            return
        if self.model_dir is None or self._closed:
            raise EngineError("LocalEngine is closed")
        if self._load_error is not None:
            raise EngineError(f"cannot load {self.model_dir}: {self._load_error}")
        transformers = module("transformers")
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.model_dir))
            model = transformers.AutoModelForCausalLM.from_pretrained(str(self.model_dir))
        except Exception as exc:
            self._load_error = exc
            raise EngineError(f"cannot load {self.model_dir}: {exc}") from exc
        model.to(self.device)
        model.eval()
        self._tokenizer = tokenizer
        self._model = model

    def _context(self) -> int | None:
        """The model's context in tokens: ``max_model_len``, at most the model's own."""
        own = getattr(self._model.config, "max_position_embeddings", None)
        sizes = [int(size) for size in (own, self.max_model_len) if size is not None]
        return min(sizes) if sizes else None

    def _run(
        self, request: GenerateRequest, cancel: threading.Event, emit: Emit | None
    ) -> GenerateResult:
        if cancel.is_set():  # cancelled while it waited in the queue
            raise Cancelled()
        self.calls_started += 1
        self._ensure_loaded()
        torch = module("torch")
        params, model = request.params, self._model
        prompt_ids = encode_prompt(
            self._tokenizer,
            request.prompt,
            self.chat_template_kwargs | template_options(params.extra),
            add_special_tokens=self.add_special_tokens,
            continue_final=request.continue_final,
        )
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        max_tokens = params.max_tokens or self.default_max_tokens
        if (context := self._context()) is not None:
            if (room := context - len(prompt_ids)) < 1:
                return no_room(params.n)
            max_tokens = min(max_tokens, room)
        samples: list[Sample] = []
        streamers: list[RowStreamer] = []
        was_training = bool(model.training)
        with contextlib.ExitStack() as scope:
            if params.seed is not None:  # seed a fork: the global RNG is left as it was
                device = device_of(model)
                on_cpu = device.type == "cpu"
                scope.enter_context(
                    torch.random.fork_rng(
                        devices=[] if on_cpu else [device.index or 0],
                        device_type="cuda" if on_cpu else device.type,
                    )
                )
                torch.manual_seed(params.seed)
            scope.callback(model.train, was_training)
            model.eval()
            if params.temperature == 0.0:  # greedy: one row, copied n times
                make = self._streamer(request, emit, streamers, 0, params.n)
                samples = self._generate(request, prompt_ids, 1, max_tokens, cancel, make)
                samples *= params.n
            else:
                while (rows := min(params.n - len(samples), self.max_batch)) > 0:
                    make = self._streamer(request, emit, streamers, len(samples), 1)
                    samples += self._generate(request, prompt_ids, rows, max_tokens, cancel, make)
        if cancel.is_set():
            raise Cancelled()
        completions = tuple(
            completion_of(self._tokenizer, s, params.stop, params.logprobs) for s in samples
        )
        for streamer in streamers:  # the rest of each sample's text, as the result has it
            for row in range(len(streamer.tokens)):
                streamer.flush(row, completions[streamer.offset + row * streamer.copies].text)
        usage = Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=sum(c.completion_tokens for c in completions),
            calls=1,
        )
        return GenerateResult(completions, usage, prompt_token_ids=tuple(prompt_ids))

    def _streamer(
        self,
        request: GenerateRequest,
        emit: Emit | None,
        streamers: list[RowStreamer],
        offset: int,
        copies: int,
    ) -> StreamerOf | None:
        """How one ``generate`` builds its streamer (kept in ``streamers``); None without
        ``emit``."""
        if emit is None:
            return None

        def build(rows: int, finished: Callable[[int], bool]) -> RowStreamer:
            streamer = RowStreamer(
                self._tokenizer,
                rows=rows,
                emit=emit,
                stop=request.params.stop,
                finished=finished,
                offset=offset,
                copies=copies,
            )
            streamers.append(streamer)
            return streamer

        return build

    def _eos_ids(self, ignore_eos: bool) -> frozenset[int]:
        if ignore_eos:
            return frozenset()
        eos = self.generation_kwargs.get("eos_token_id")
        if eos is None:
            eos = self._model.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        return frozenset([] if eos is None else [eos] if isinstance(eos, int) else eos)

    def _generate(
        self,
        request: GenerateRequest,
        prompt_ids: list[int],
        rows: int,
        max_tokens: int,
        cancel: threading.Event,
        streamer: StreamerOf | None,
    ) -> list[Sample]:
        eos_ids = self._eos_ids(bool(request.params.extra.get("ignore_eos")))
        samples, spent = generate_rows(
            self._model,
            self._tokenizer,
            request,
            prompt_ids,
            rows,
            max_tokens,
            cancel,
            eos_ids=eos_ids,
            generation_kwargs=self.generation_kwargs,
            raw_logprobs=self.logprobs == "raw",
            streamer=streamer,
        )
        self.generated_tokens += spent
        return samples
