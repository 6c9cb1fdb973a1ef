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

Semantics follow vLLM's OpenAI server where they can:

- chat prompts are rendered with the tokenizer's chat template (with the generation
  prompt); plain prompts are tokenized as they are, with the tokenizer's special tokens
  when ``add_special_tokens`` (the default for a directory, like vLLM; not for
  ``from_model``, like TRL) -- see :func:`encode_prompt`;
- ``temperature`` 0 is greedy (one row generated, copied n times); otherwise sampling
  with ``top_p`` (default 1.0) and no top-k; ``temperature`` None means 1.0;
- ``finish_reason`` is ``"stop"`` at an end-of-sequence token or a stop string (the
  text is cut before the stop string, the token that completed it is counted), and
  ``"length"`` at ``max_tokens`` (unset: ``default_max_tokens``, capped by the context);
- ``logprobs=True`` returns the prompt's and the sampled token ids and the sampled
  tokens' log-probabilities: under the model's raw distribution with ``logprobs="raw"``
  (before temperature and top-p, vLLM's default), under the distribution actually
  sampled from with ``logprobs="sampling"`` (after temperature, top-p/top-k and the
  ``generation_kwargs`` processors: what a policy-gradient loss needs);
  ``top_logprobs=k`` returns each position's k most likely tokens' logprobs, under the
  same distribution;
- ``continue_final`` continues a chat's last (assistant) message, rendered with the
  chat template's ``continue_final_message`` and no generation prompt;
- ``seed`` makes sampling reproducible (torch's global RNG is forked for the call, so
  a seeded call leaves it as it was); unseeded calls draw from torch's global RNG;
- ``extra`` understands ``ignore_eos``, ``top_k`` and ``min_tokens``; other keys are
  ignored. ``generation_kwargs`` (e.g. ``top_k``, ``min_p``, ``repetition_penalty``) go
  to every ``generate``; the request's own settings win over them.

``stream`` is :func:`~scaffolds.engine.stream_from_generate`: one delta per sample once
the whole call is done, not token by token.

torch and transformers are imported lazily, on the worker thread, when the model is
first needed (``pip install torch transformers``).

>>> engine = LocalEngine("scaffolds/models/ponder-addition", max_batch=16)
>>> engine.model_dir.name, engine.max_batch, engine.logprobs, engine.loaded
('ponder-addition', 16, 'raw', False)

Typical use::

    engine = LocalEngine("scaffolds/models/ponder-addition")
    result = await engine.generate(
        GenerateRequest(chat("347+589="), SamplingParams(n=8, temperature=1.0, max_tokens=8))
    )
    answers = [c.text for c in result.completions]
    await engine.aclose()

    # in training, on the policy being trained (still owned by the trainer):
    engine = LocalEngine.from_model(model, tokenizer, generation_kwargs={"top_k": 0})
    result = asyncio.run(engine.generate(GenerateRequest("12+34=", SamplingParams(
        n=4, max_tokens=8, logprobs=True))))
    result.prompt_token_ids, result.completions[0].token_ids, result.completions[0].logprobs
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scaffolds.engine import (
    Completion,
    GenerateRequest,
    GenerateResult,
    Prompt,
    StreamItem,
    Usage,
    stream_from_generate,
)
from scaffolds.errors import EngineError, InvalidRequestError, PonderError

__all__ = ["LocalEngine", "LogprobMode", "encode_prompt"]

LogprobMode = Literal["raw", "sampling"]

_DEFAULT_MAX_TOKENS = 512
"""``max_tokens`` when a request leaves it unset (capped by the model's context)."""
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "typical_p")
"""Sampler settings dropped from ``generation_kwargs`` for greedy calls."""


def _module(name: str) -> Any:
    """Import an optional heavy dependency lazily (typed ``Any``: no stubs needed)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineError(
            f"LocalEngine needs {name!r}: pip install torch transformers", code="engine_error"
        ) from exc


def encode_prompt(
    tokenizer: Any,
    prompt: Prompt,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    add_special_tokens: bool = False,
    continue_final: bool = False,
) -> list[int]:
    """Token ids of an engine prompt.

    Messages go through the tokenizer's chat template with the generation prompt (the
    template supplies any special tokens), or, with ``continue_final``, ending inside
    the last message (``continue_final_message``); text is encoded as it is, with the
    tokenizer's special tokens (e.g. BOS) only if ``add_special_tokens``.
    """
    if isinstance(prompt, str):
        ids = tokenizer(prompt, add_special_tokens=add_special_tokens)["input_ids"]
        return [int(i) for i in ids]
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequestError(
            "the model's tokenizer has no chat template; send a plain prompt", param="messages"
        )
    options = {"continue_final_message": True} if continue_final else {}
    encoded = tokenizer.apply_chat_template(
        [m.to_openai() for m in prompt],
        add_generation_prompt=not continue_final,
        tokenize=True,
        **options,
        **dict(chat_template_kwargs or {}),
    )
    if isinstance(encoded, Mapping) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    return [int(i) for i in encoded]


class _Cancelled(Exception):
    """Raised on the worker when a call's cancel flag stopped it."""


@dataclass
class _Sample:
    token_ids: list[int]
    logprobs: list[float] | None
    finished: bool
    top: list[list[float]] | None = None
    """Per position, the top ``top_logprobs`` logprobs, best first (when asked)."""
    """Ended by the end-of-sequence token or a stop string (else by max_tokens)."""


class _Watcher:
    """A stopping criterion: per row, stop at EOS or a stop string; all rows on cancel.

    It records how many tokens each row had produced when it finished, because
    ``generate`` pads finished rows (and the pad may equal EOS).
    """

    def __init__(
        self,
        tokenizer: Any,
        prompt_len: int,
        rows: int,
        eos_ids: frozenset[int],
        stop: Sequence[str],
        cancel: threading.Event,
    ) -> None:
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.eos_ids = eos_ids
        self.stop = tuple(s for s in stop if s)
        # Only the tail is decoded each step: enough tokens to span the longest stop.
        self.window = max((len(s) for s in self.stop), default=0) + 8
        self.cancel = cancel
        self.finished_at: list[int | None] = [None] * rows

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        torch = _module("torch")
        rows = input_ids.shape[0]
        generated = input_ids.shape[1] - self.prompt_len
        if self.cancel.is_set():
            return torch.ones(rows, dtype=torch.bool, device=input_ids.device)
        last = input_ids[:, -1].tolist()
        for row in range(rows):
            if self.finished_at[row] is not None:
                continue
            if last[row] in self.eos_ids:
                self.finished_at[row] = generated
            elif self.stop:
                start = max(self.prompt_len, input_ids.shape[1] - self.window)
                tail = self.tokenizer.decode(input_ids[row, start:], skip_special_tokens=True)
                if any(s in tail for s in self.stop):
                    self.finished_at[row] = generated
        done = [at is not None for at in self.finished_at]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class LocalEngine:
    """An in-process engine over a transformers causal LM: a directory (or hub id,
    offline) loaded on first use, or a live model (:meth:`from_model`).

    ``threads`` sets torch's intra-op threads on the worker thread (None keeps torch's
    setting). ``max_batch`` caps the rows of one ``generate``: n above it runs in
    several sequential batches. ``logprobs`` picks the distribution of the returned
    logprobs (``"raw"`` or ``"sampling"``, see the module docs); ``default_max_tokens``
    bounds a request without ``max_tokens``; ``generation_kwargs`` go to every
    ``generate`` (an ``eos_token_id`` there replaces the model's); ``chat_template_kwargs``
    to the chat template; ``add_special_tokens`` applies to plain-text prompts.
    """

    model_dir: Path | None
    """The directory loaded from (None for :meth:`from_model`)."""

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
        engine.device = str(_device_of(model))
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
    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if self._closed:
            raise EngineError("LocalEngine is closed")
        cancel = threading.Event()
        self._active.add(cancel)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, request, cancel)
        except asyncio.CancelledError:
            cancel.set()  # the worker notices at its next token and gives the thread back
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # aclose() dropped the queued call; the caller did not cancel anything.
                raise EngineError("LocalEngine was closed before the call ran") from None
            raise
        except _Cancelled:
            raise EngineError("LocalEngine was closed during the call") from None
        except PonderError:
            raise
        except Exception as exc:  # a torch/transformers failure: not the caller's fault
            raise EngineError(f"local generation failed: {exc}") from exc
        finally:
            self._active.discard(cancel)

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        """Not token-level: the whole call runs, then one delta per sample, then the result."""
        return stream_from_generate(self, request)

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
            _module("torch").set_num_threads(self.threads)
            self._threads_set = True
        if self._model is not None:
            return
        if self.model_dir is None or self._closed:
            raise EngineError("LocalEngine is closed")
        if self._load_error is not None:
            raise EngineError(f"cannot load {self.model_dir}: {self._load_error}")
        transformers = _module("transformers")
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

    def _run(self, request: GenerateRequest, cancel: threading.Event) -> GenerateResult:
        if cancel.is_set():  # cancelled while it waited in the queue
            raise _Cancelled()
        self.calls_started += 1
        self._ensure_loaded()
        torch = _module("torch")
        params, model = request.params, self._model
        prompt_ids = encode_prompt(
            self._tokenizer,
            request.prompt,
            self.chat_template_kwargs,
            add_special_tokens=self.add_special_tokens,
            continue_final=request.continue_final,
        )
        if not prompt_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        context = getattr(model.config, "max_position_embeddings", None)
        max_tokens = params.max_tokens or self.default_max_tokens
        if context is not None:
            room = int(context) - len(prompt_ids)
            if room < 1:
                raise InvalidRequestError(
                    f"the prompt has {len(prompt_ids)} tokens; the model's context is {context}",
                    param="prompt",
                )
            if params.max_tokens is None:
                max_tokens = min(max_tokens, room)
            elif max_tokens > room:
                raise InvalidRequestError(
                    f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds "
                    f"the model's context ({context})",
                    param="max_tokens",
                )
        samples: list[_Sample] = []
        was_training = bool(model.training)
        with contextlib.ExitStack() as scope:
            if params.seed is not None:  # seed a fork: the global RNG is left as it was
                device = _device_of(model)
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
                samples = self._generate(request, prompt_ids, 1, max_tokens, cancel) * params.n
            else:
                remaining = params.n
                while remaining:
                    rows = min(remaining, self.max_batch)
                    samples += self._generate(request, prompt_ids, rows, max_tokens, cancel)
                    remaining -= rows
        if cancel.is_set():
            raise _Cancelled()
        completions = tuple(self._completion(s, params.stop, params.logprobs) for s in samples)
        usage = Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=sum(c.completion_tokens for c in completions),
            calls=1,
        )
        return GenerateResult(completions, usage, prompt_token_ids=tuple(prompt_ids))

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
    ) -> list[_Sample]:
        torch = _module("torch")
        transformers = _module("transformers")
        params, extra = request.params, request.params.extra
        model, tokenizer = self._model, self._tokenizer
        eos_ids = self._eos_ids(bool(extra.get("ignore_eos")))
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = min(eos_ids) if eos_ids else 0
        watcher = _Watcher(tokenizer, len(prompt_ids), rows, eos_ids, params.stop, cancel)
        raw = self.logprobs == "raw"
        top_n = params.top_logprobs or 0
        wants = params.logprobs or top_n > 0
        kwargs: dict[str, Any] = dict(self.generation_kwargs)
        kwargs.update(
            max_new_tokens=max_tokens,
            num_return_sequences=rows,
            pad_token_id=pad,
            eos_token_id=sorted(eos_ids) if eos_ids else None,
            stopping_criteria=transformers.StoppingCriteriaList([watcher]),
            return_dict_in_generate=True,
            output_logits=wants and raw,
            output_scores=wants and not raw,
        )
        if extra.get("min_tokens"):
            kwargs["min_new_tokens"] = int(extra["min_tokens"])
        if params.temperature == 0.0:
            for key in _SAMPLING_KEYS:
                kwargs.pop(key, None)
            kwargs["do_sample"] = False
        else:
            top_p = params.top_p if params.top_p is not None else kwargs.get("top_p")
            top_k = extra["top_k"] if extra.get("top_k") is not None else kwargs.get("top_k")
            kwargs.update(
                do_sample=True,
                temperature=1.0 if params.temperature is None else params.temperature,
                top_p=1.0 if top_p is None else float(top_p),
                top_k=int(top_k or 0),
            )
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=_device_of(model))
        with torch.no_grad():
            output = model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs
            )
        generated = output.sequences[:, len(prompt_ids) :]
        steps = generated.shape[1]
        self.generated_tokens += sum(
            steps if at is None else at for at in watcher.finished_at[:rows]
        )
        per_step = (output.logits if raw else output.scores) if wants else None
        logprobs: Any = None
        tops: Any = None
        if per_step:
            normed = [torch.log_softmax(step.float(), dim=-1) for step in per_step]
            picked = [
                lp.gather(1, generated[:, i : i + 1]).squeeze(1) for i, lp in enumerate(normed)
            ]
            logprobs = torch.stack(picked, dim=1).tolist()
            if top_n:
                best = [lp.topk(min(top_n, lp.shape[-1]), dim=-1).values for lp in normed]
                tops = torch.stack(best, dim=1).tolist()  # rows x steps x k
        samples = []
        for row in range(rows):
            at = watcher.finished_at[row]
            length = steps if at is None else at
            ids = generated[row, :length].tolist()
            samples.append(
                _Sample(
                    ids,
                    None if logprobs is None else logprobs[row][:length],
                    at is not None,
                    None if tops is None else tops[row][:length],
                )
            )
        return samples

    def _completion(self, sample: _Sample, stop: Sequence[str], logprobs: bool) -> Completion:
        text = self._tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        finished = sample.finished
        cuts = [index for s in stop if s and (index := text.find(s)) >= 0]
        if cuts:
            text, finished = text[: min(cuts)], True
        return Completion(
            text=text,
            finish_reason="stop" if finished else "length",
            completion_tokens=len(sample.token_ids),
            token_ids=tuple(sample.token_ids) if logprobs else None,
            logprobs=tuple(sample.logprobs) if logprobs and sample.logprobs is not None else None,
            top_logprobs=None if sample.top is None else tuple(tuple(t) for t in sample.top),
        )


def _device_of(model: Any) -> Any:
    """The torch device of ``model``'s first parameter (``model.device`` without any)."""
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return model.device
