"""An :class:`~scaffolds.engine.Engine` over an in-process transformers model.

This is how a scaffold runs on the very policy being trained: the GRPO rollout drives
the trainer's model through it, and ``ponder train data --engine hf:PATH`` collects
traces from a local checkpoint without a server. It returns what training needs: the
prompt's token ids, each sample's sampled token ids and their log-probabilities under
the sampling distribution (after temperature and top-p/top-k), never re-encoded text.

Chat prompts go through the tokenizer's chat template (with the generation prompt);
text prompts are tokenized as they are, without special tokens.

Example (``model`` and ``tokenizer`` from ``from_pretrained``)::

    engine = TransformersEngine(model, tokenizer)
    result = await engine.generate(GenerateRequest("12+34=", SamplingParams(n=4, max_tokens=8)))
    result.completions[0].token_ids, result.completions[0].logprobs
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from scaffolds.engine import (
    Completion,
    GenerateRequest,
    GenerateResult,
    Prompt,
    StreamItem,
    Usage,
    stream_from_generate,
)

__all__ = ["TransformersEngine", "encode_prompt"]


def encode_prompt(
    tokenizer: Any, prompt: Prompt, chat_template_kwargs: Mapping[str, Any] | None = None
) -> list[int]:
    """Token ids of an engine prompt: the chat template for messages, plain encoding
    (no special tokens added) for text."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    messages = [m.to_openai() for m in prompt]
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, **dict(chat_template_kwargs or {})
    )
    if isinstance(encoded, Mapping) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    return [int(i) for i in encoded]


class TransformersEngine:
    """Samples from ``model`` (a transformers causal LM) with ``generate``.

    ``generation_kwargs`` are passed to every ``generate`` call (e.g. ``top_k``); the
    request's own ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``stop`` and
    ``seed`` win over them. ``default_max_tokens`` bounds a request without
    ``max_tokens``. The model is put in eval mode for the call and restored after.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        default_max_tokens: int = 256,
        generation_kwargs: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.default_max_tokens = default_max_tokens
        self.generation_kwargs = dict(generation_kwargs or {})
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        eos = self.generation_kwargs.pop("eos_token_id", None) or tokenizer.eos_token_id
        self.eos_ids: set[int] = set(eos if isinstance(eos, Sequence) else [eos]) - {None}
        self.pad_id = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else min(self.eos_ids, default=0)
        )

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return self.generate_sync(request)

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        async for item in stream_from_generate(self, request):
            yield item

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tokenizer, prompt, self.chat_template_kwargs)

    def generate_sync(self, request: GenerateRequest) -> GenerateResult:
        """One ``generate`` call for all ``n`` samples (shared prompt)."""
        import torch

        params = request.params
        prompt_ids = self.encode(request.prompt)
        kwargs: dict[str, Any] = {"top_k": 0, **self.generation_kwargs}
        temperature = 1.0 if params.temperature is None else params.temperature
        sampling = temperature > 0
        if sampling:
            kwargs.update(do_sample=True, temperature=temperature)
            if params.top_p is not None:
                kwargs["top_p"] = params.top_p
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        model = self.model
        device = next(model.parameters()).device
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=params.max_tokens or self.default_max_tokens,
                    num_return_sequences=params.n if sampling else 1,
                    pad_token_id=self.pad_id,
                    eos_token_id=sorted(self.eos_ids),
                    output_scores=True,
                    return_dict_in_generate=True,
                    **kwargs,
                )
        finally:
            model.train(was_training)
        generated = out.sequences[:, len(prompt_ids) :]
        steps = torch.stack(out.scores, dim=1).float() if out.scores else None
        completions = [
            self._completion(
                generated[i].tolist(), None if steps is None else steps[i], params.stop
            )
            for i in range(generated.size(0))
        ]
        if not sampling:  # greedy samples are all the same: decode once, repeat
            completions = completions * params.n
        usage = Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=sum(c.completion_tokens for c in completions),
            calls=1,
        )
        return GenerateResult(tuple(completions), usage, prompt_token_ids=tuple(prompt_ids))

    def _completion(self, ids: list[int], scores: Any, stop: Sequence[str]) -> Completion:
        import torch

        end = next((i + 1 for i, t in enumerate(ids) if t in self.eos_ids), None)
        finish = "stop" if end is not None else "length"
        ids = ids[:end] if end is not None else ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if stop and end is None and any(s in text for s in stop):
            finish = "stop"
        logprobs: tuple[float, ...] | None = None
        if scores is not None:
            rows = torch.log_softmax(scores[: len(ids)], dim=-1)
            index = torch.tensor(ids, dtype=torch.long, device=rows.device).unsqueeze(1)
            picked = rows.gather(1, index).squeeze(1)
            logprobs = tuple(float(x) for x in picked.tolist())
        return Completion(
            text=text,
            finish_reason=finish,
            completion_tokens=len(ids),
            token_ids=tuple(ids),
            logprobs=logprobs,
        )
