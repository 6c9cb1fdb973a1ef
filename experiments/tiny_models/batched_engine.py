"""BatchedEngine: the Engine protocol over a small local model, batching across calls.

:class:`~scaffolds.engines.local.LocalEngine` runs one call at a time (one ``generate``
per prompt), which is right for serving but slow for evaluating a Reasoning Cache
scaffold on a thousand problems at once: ``rc(steps=12)`` is 23 engine calls per
problem, each a few tokens. This engine gathers the calls that are waiting (from many
concurrent scaffold runs), left-pads their prompts into one batch and decodes them
together with a KV cache: one forward pass per token for the whole batch.

Sampling is per call and reproducible: each call's rows draw from their own
``torch.Generator`` seeded by the call's ``seed`` (the scaffold context derives one per
step), so a call samples the same text whatever else shares its batch. Temperature 0 is
greedy. A row ends at the end-of-sequence token (counted, like LocalEngine counts it) or
at its call's ``max_tokens``. Only what the evaluation needs is supported: plain or chat
prompts, ``n``, ``temperature``, ``max_tokens``, ``seed``; ``stop``, ``top_p``,
``logprobs`` and ``extra`` are refused rather than ignored.

Greedy answers match LocalEngine's up to floating-point ties (the padded batch sums in
another order); ``experiments/tiny_models/tests/test_rc_listsum.py`` checks them on the tiny model.

>>> engine = BatchedEngine("scaffolds/models/ponder-addition", max_batch=256)
>>> engine.max_batch, engine.loaded
(256, False)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.protocol import (
    Completion,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
    stream_from_generate,
)
from scaffolds.errors import InvalidRequestError


@dataclass
class _Pending:
    request: GenerateRequest
    future: asyncio.Future[GenerateResult]


class BatchedEngine:
    """Batches concurrent calls into padded decoding passes on one worker thread."""

    def __init__(
        self, model_dir: str | Path, *, max_batch: int = 512, threads: int | None = 1
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 (got {max_batch})")
        self.model_dir = Path(model_dir)
        self.max_batch = max_batch
        self.threads = threads
        self.batches = 0
        """Decoding passes run so far."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batched-engine")
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task[None] | None = None
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        params = request.params
        if params.stop or params.logprobs or params.extra or params.top_p not in (None, 1.0):
            raise InvalidRequestError("BatchedEngine supports n, temperature, max_tokens, seed")
        future: asyncio.Future[GenerateResult] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(request, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return stream_from_generate(self, request)

    async def health(self) -> bool:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._ensure_loaded)
        return True

    async def aclose(self) -> None:
        if self._worker is not None:
            await self._worker
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._model = None

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            # Let every runnable scaffold reach its next engine call before batching.
            for _ in range(3):
                await asyncio.sleep(0)
            batch: list[_Pending] = []
            rows = 0
            while self._pending and (
                not batch or rows + self._pending[0].request.params.n <= self.max_batch
            ):
                item = self._pending.pop(0)
                batch.append(item)
                rows += item.request.params.n
            try:
                results = await loop.run_in_executor(
                    self._executor, self._run, [p.request for p in batch]
                )
            except Exception as exc:  # a torch failure fails the calls, not the worker
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            for item, result in zip(batch, results, strict=True):
                if not item.future.done():
                    item.future.set_result(result)

    # -- on the worker thread --------------------------------------------------------
    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.threads is not None:
            torch.set_num_threads(self.threads)
        self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        model: Any = AutoModelForCausalLM.from_pretrained(str(self.model_dir))
        model.eval()
        self._model = model

    def _run(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        import torch

        self._ensure_loaded()
        self.batches += 1
        tokenizer, model = self._tokenizer, self._model
        eos = tokenizer.eos_token_id
        prompts = [encode_prompt(tokenizer, r.prompt, add_special_tokens=True) for r in requests]
        # One row per sample; each call's rows share one generator.
        owners = [i for i, r in enumerate(requests) for _ in range(r.params.n)]
        generators = []
        for r in requests:
            g = torch.Generator()
            g.manual_seed(r.params.seed if r.params.seed is not None else int(torch.seed()))
            generators.append(g)
        limits = [requests[i].params.max_tokens or 16 for i in owners]
        width = max(len(p) for p in prompts)
        pad = tokenizer.pad_token_id
        ids = torch.full((len(owners), width), pad, dtype=torch.long)
        mask = torch.zeros((len(owners), width), dtype=torch.long)
        for row, owner in enumerate(owners):
            prompt = prompts[owner]
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        out: list[list[int]] = [[] for _ in owners]
        done = [False] * len(owners)
        cache = None
        step_ids, step_positions = ids, positions
        with torch.inference_mode():
            for _ in range(max(limits)):
                output = model(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_positions,
                    cache=cache,
                    use_cache=True,
                )
                cache = output.cache
                logits = output.logits[:, -1, :].float()
                chosen = logits.argmax(-1).tolist()
                for row, owner in enumerate(owners):
                    temperature = requests[owner].params.temperature
                    if temperature is None or temperature > 0:
                        probs = torch.softmax(logits[row] / (temperature or 1.0), dim=-1)
                        chosen[row] = int(torch.multinomial(probs, 1, generator=generators[owner]))
                    if not done[row]:
                        out[row].append(chosen[row])
                        done[row] = chosen[row] == eos or len(out[row]) >= limits[row]
                if all(done):
                    break
                step_ids = torch.tensor(chosen, dtype=torch.long).unsqueeze(1)
                step_positions = step_positions[:, -1:] + 1
                mask = torch.cat([mask, torch.ones((len(owners), 1), dtype=torch.long)], dim=1)
        results = []
        for index in range(len(requests)):
            rows = [out[row] for row, owner in enumerate(owners) if owner == index]
            completions = tuple(
                Completion(
                    text=tokenizer.decode(tokens, skip_special_tokens=True),
                    finish_reason="stop" if tokens and tokens[-1] == eos else "length",
                    completion_tokens=len(tokens),
                )
                for tokens in rows
            )
            usage = Usage(
                prompt_tokens=len(prompts[index]),
                completion_tokens=sum(c.completion_tokens for c in completions),
                calls=1,
            )
            results.append(GenerateResult(completions, usage, tuple(prompts[index])))
        return results
