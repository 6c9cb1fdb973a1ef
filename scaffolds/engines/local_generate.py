"""One batched ``model.generate`` call of :class:`~scaffolds.engines.local.LocalEngine`,
run on its worker thread: the prompt's token ids, the stopping criterion, the sampler's
settings, and the samples with their logprobs.

The engine's semantics follow vLLM's OpenAI server where they can:

- chat prompts are rendered with the tokenizer's chat template (with the generation
  prompt); plain prompts are tokenized as they are, with the tokenizer's special tokens
  when ``add_special_tokens`` (the default for a directory, like vLLM; not for
  ``from_model``, like TRL) -- see :func:`encode_prompt`;
- ``temperature`` 0 is greedy (one row generated, copied n times); otherwise sampling
  with ``top_p`` (default 1.0) and no top-k; ``temperature`` None means 1.0;
- ``finish_reason`` is ``"stop"`` at an end-of-sequence token or a stop string (the
  text is cut before the stop string, the token that completed it is counted), and
  ``"length"`` at ``max_tokens`` (unset: ``default_max_tokens``); ``stop_matched`` says
  whether a stop string cut it (so a ``"stop"`` without one ended at end of sequence);
- ``max_tokens`` is lowered to what the context (``max_model_len``, else the model's
  ``max_position_embeddings``) leaves after the prompt, and a prompt that leaves no
  room is answered by :func:`~scaffolds.engines.context_fit.no_room`, as the HTTP engine
  does: a scaffold's step limits fit any context;
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
- ``extra`` (the request's other fields) is read as vLLM reads it where
  :mod:`scaffolds.engines.local_fields` says it is honoured (``top_k``, ``min_p``,
  ``min_tokens``, ``ignore_eos``, the penalties, ``logit_bias``, the chat template's
  ``chat_template_kwargs`` and ``reasoning_effort``); the engine refuses every other
  field that asks for something (:func:`~scaffolds.engines.local_fields.check_fields`).
  ``generation_kwargs`` (e.g. ``top_k``, ``min_p``, ``repetition_penalty``) go to every
  ``generate``; the request's own settings win over them.

>>> import threading
>>> watcher = StopWatcher(None, 3, 2, frozenset({0}), ["</s>", "\\n"], threading.Event())
>>> watcher.window, watcher.finished_at  # a row's last 4 + 8 tokens are decoded a step
(12, [None, None])
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffolds.dependencies import require
from scaffolds.engines.local_fields import generation_options
from scaffolds.engines.protocol import Completion, GenerateRequest, Prompt
from scaffolds.errors import InvalidRequestError

__all__ = [
    "SAMPLING_KEYS",
    "Cancelled",
    "Sample",
    "StopWatcher",
    "StreamerOf",
    "completion_of",
    "device_of",
    "encode_prompt",
    "generate_rows",
    "module",
]

StreamerOf = Callable[[int, Callable[[int], bool]], Any]
"""Builds a ``generate`` streamer from the rows and ``finished(row)`` (a row that
finished: its later tokens are padding)."""

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "typical_p")
"""Sampler settings dropped from ``generation_kwargs`` for greedy calls."""


def module(name: str) -> Any:
    """Import an optional heavy dependency lazily (typed ``Any``: no stubs needed)."""
    require("local", "the local engine (local:DIR)", modules=(name.partition(".")[0],))
    return importlib.import_module(name)


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


class Cancelled(Exception):
    """Raised on the worker when a call's cancel flag stopped it."""


@dataclass
class Sample:
    """One generated row, cut where it finished."""

    token_ids: list[int]
    logprobs: list[float] | None
    finished: bool
    """Ended by the end-of-sequence token or a stop string (else by max_tokens)."""
    top: list[list[float]] | None = None
    """Per position, the top ``top_logprobs`` logprobs, best first (when asked)."""


class StopWatcher:
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
        torch = module("torch")
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


def generate_rows(
    model: Any,
    tokenizer: Any,
    request: GenerateRequest,
    prompt_ids: list[int],
    rows: int,
    max_tokens: int,
    cancel: threading.Event,
    *,
    eos_ids: frozenset[int],
    generation_kwargs: Mapping[str, Any],
    raw_logprobs: bool,
    streamer: StreamerOf | None = None,
) -> tuple[list[Sample], int]:
    """``rows`` samples of one prompt in one ``generate``, and the tokens generated
    (up to where each row finished). ``raw_logprobs``: logprobs before temperature
    and top-p/top-k (else under the distribution sampled from); ``streamer`` builds
    the streamer that hears each step's tokens."""
    torch = module("torch")
    transformers = module("transformers")
    params, extra = request.params, request.params.extra
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = min(eos_ids) if eos_ids else 0
    watcher = StopWatcher(tokenizer, len(prompt_ids), rows, eos_ids, params.stop, cancel)
    top_n = params.top_logprobs or 0
    wants = params.logprobs or top_n > 0
    kwargs: dict[str, Any] = dict(generation_kwargs)
    kwargs.update(
        max_new_tokens=max_tokens,
        num_return_sequences=rows,
        pad_token_id=pad,
        eos_token_id=sorted(eos_ids) if eos_ids else None,
        stopping_criteria=transformers.StoppingCriteriaList([watcher]),
        return_dict_in_generate=True,
        output_logits=wants and raw_logprobs,
        output_scores=wants and not raw_logprobs,
    )
    if streamer is not None:
        kwargs["streamer"] = streamer(rows, lambda row: watcher.finished_at[row] is not None)
    if extra.get("min_tokens"):
        kwargs["min_new_tokens"] = int(extra["min_tokens"])
    for key, value in generation_options(extra, len(prompt_ids), _vocab(model, tokenizer)).items():
        if key == "logits_processor":  # after any the engine's generation_kwargs give
            value = transformers.LogitsProcessorList([*kwargs.get(key, ()), *value])
        kwargs[key] = value
    if params.temperature == 0.0:
        for key in SAMPLING_KEYS:
            kwargs.pop(key, None)
        kwargs["do_sample"] = False
    else:
        top_p = params.top_p if params.top_p is not None else kwargs.get("top_p")
        top_k = extra["top_k"] if extra.get("top_k") is not None else kwargs.get("top_k")
        kwargs.update(
            do_sample=True,
            temperature=1.0 if params.temperature is None else params.temperature,
            top_p=1.0 if top_p is None else float(top_p),
            top_k=max(int(top_k or 0), 0),  # vLLM's -1: no limit
        )
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=device_of(model))
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs
        )
    generated = output.sequences[:, len(prompt_ids) :]
    steps = generated.shape[1]
    spent = sum(steps if at is None else at for at in watcher.finished_at[:rows])
    per_step = (output.logits if raw_logprobs else output.scores) if wants else None
    logprobs: Any = None
    tops: Any = None
    if per_step:
        normed = [torch.log_softmax(step.float(), dim=-1) for step in per_step]
        picked = [lp.gather(1, generated[:, i : i + 1]).squeeze(1) for i, lp in enumerate(normed)]
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
            Sample(
                ids,
                None if logprobs is None else logprobs[row][:length],
                at is not None,
                None if tops is None else tops[row][:length],
            )
        )
    return samples, spent


def completion_of(
    tokenizer: Any, sample: Sample, stop: Sequence[str], logprobs: bool
) -> Completion:
    """The sample as a Completion: decoded, cut at the first stop string."""
    text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
    finished = sample.finished
    cuts = [index for s in stop if s and (index := text.find(s)) >= 0]
    if cuts:
        text, finished = text[: min(cuts)], True
    return Completion(
        text=text,
        finish_reason="stop" if finished else "length",
        stop_matched=bool(cuts),
        completion_tokens=len(sample.token_ids),
        token_ids=tuple(sample.token_ids) if logprobs else None,
        logprobs=tuple(sample.logprobs) if logprobs and sample.logprobs is not None else None,
        top_logprobs=None if sample.top is None else tuple(tuple(t) for t in sample.top),
    )


def _vocab(model: Any, tokenizer: Any) -> int:
    """The number of token ids the model scores (its config's, else the tokenizer's)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if isinstance(size, int) else len(tokenizer)


def device_of(model: Any) -> Any:
    """The torch device of ``model``'s first parameter (``model.device`` without any)."""
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return model.device
