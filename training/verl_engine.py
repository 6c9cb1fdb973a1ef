r"""The engine a verl agent loop samples through: verl's async server manager (token ids
in, a ``TokenOutput`` out) behind the :class:`~scaffolds.engines.protocol.Engine` protocol.

verl says little of how a sample ended: its ``stop_reason`` is ``"completed"`` both at a
stop and at the length cap (vLLM's ``stop`` and ``length``), ``"aborted"``, or None (its
SGLang server). :func:`token_output_completion` reads the rest from the tokens, as the
in-process engine does: token ids that end with an end-of-sequence id ended there
(``"stop"``, ``stop_matched`` False); a requested stop string in the decoded text ended it
(``"stop"``, ``stop_matched`` True, the text cut before it as vLLM's OpenAI server cuts
it; the token ids keep what was sampled); ``max_tokens`` ids with neither were cut
(``"length"``); fewer stopped at another stop token (``"stop"``, ``stop_matched`` False,
as vLLM's server says of a stop token id). Without ``max_tokens``, ``"completed"`` is a
stop and None a cut.

>>> from types import SimpleNamespace
>>> class Chars:  # token id i is chr(i); id 0 is the end of sequence
...     def decode(self, ids, skip_special_tokens=False):
...         return "".join(chr(i) for i in ids if i or not skip_special_tokens)
>>> ab, eos = [ord("a"), ord("b")], [0]
>>> def read(ids, **kw):
...     out = SimpleNamespace(token_ids=ids, log_probs=None, stop_reason="completed")
...     c = token_output_completion(out, Chars(), {0}, **kw)
...     return c.text, c.finish_reason, c.stop_matched, c.ended_at_eos
>>> read(ab + eos, max_tokens=8)
('ab', 'stop', False, True)
>>> read(ab + [ord("\n"), ord("\n"), ord("c")], stop=("\n\n",), max_tokens=8)
('ab', 'stop', True, False)
>>> read(ab, max_tokens=2)
('ab', 'length', False, False)
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.protocol import (
    Completion,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamItem,
    Usage,
    stream_from_generate,
)

__all__ = ["VerlServerEngine", "token_output_completion"]

logger = logging.getLogger(__name__)


class VerlServerEngine:
    """An :class:`~scaffolds.engines.protocol.Engine` over verl's async server manager.

    Chat prompts are tokenized with the tokenizer's chat template; each of the ``n``
    samples is one ``server_manager.generate`` call (verl's servers sample one at a
    time), concurrently. ``sampling_params`` are verl's for this rollout; a request's
    own temperature, top-p and max tokens override them, and its stop strings are sent.

    A prompt longer than ``max_prompt_tokens`` (verl's ``rollout.prompt_length``) is
    left-truncated before it is sent, as verl's own loops do: verl pads every prompt to
    that width, so a longer one would break the batch, and truncating before sampling
    keeps the returned prompt ids the ones the sample was drawn from.
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        sampling_params: Mapping[str, Any] | None = None,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        max_prompt_tokens: int | None = None,
    ) -> None:
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.sampling_params = dict(sampling_params or {})
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_prompt_tokens = max_prompt_tokens
        eos = tokenizer.eos_token_id
        self.eos_ids = {eos} if isinstance(eos, int) else set(eos or ())

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        prompt_ids = encode_prompt(self.tokenizer, request.prompt, self.chat_template_kwargs)
        if self.max_prompt_tokens is not None and len(prompt_ids) > self.max_prompt_tokens:
            logger.warning(
                "a prompt of %d tokens exceeds rollout.prompt_length=%d; left-truncating "
                "(raise prompt_length or lower context_max_tokens)",
                len(prompt_ids),
                self.max_prompt_tokens,
            )
            prompt_ids = prompt_ids[-self.max_prompt_tokens :]
        outs = await asyncio.gather(
            *(self._one(prompt_ids, request.params) for _ in range(request.params.n))
        )
        usage = Usage(
            prompt_tokens=len(prompt_ids),
            completion_tokens=sum(c.completion_tokens for c in outs),
            calls=1,
        )
        return GenerateResult(tuple(outs), usage, prompt_token_ids=tuple(prompt_ids))

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        async for item in stream_from_generate(self, request):
            yield item

    async def _one(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        sampling = dict(self.sampling_params)
        if params.temperature is not None:
            sampling["temperature"] = params.temperature
        if params.top_p is not None:
            sampling["top_p"] = params.top_p
        if params.max_tokens is not None:
            sampling["max_tokens"] = params.max_tokens
        if params.stop:
            sampling["stop"] = list(params.stop)
        sampling["logprobs"] = True
        out = await self.server_manager.generate(
            request_id=uuid.uuid4().hex, prompt_ids=list(prompt_ids), sampling_params=sampling
        )
        return token_output_completion(
            out,
            self.tokenizer,
            self.eos_ids,
            stop=params.stop,
            max_tokens=sampling.get("max_tokens"),
        )


def token_output_completion(
    out: Any,
    tokenizer: Any,
    eos_ids: Collection[int],
    *,
    stop: Sequence[str] = (),
    max_tokens: int | None = None,
) -> Completion:
    """verl's ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``) as a
    Completion, given the request's ``stop`` strings and ``max_tokens``."""
    ids = [int(t) for t in getattr(out, "token_ids", out)]
    logprobs = getattr(out, "log_probs", None)
    reason = getattr(out, "stop_reason", None)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cuts = [index for s in stop if s and (index := text.find(s)) >= 0]
    ended = bool(ids) and ids[-1] in eos_ids
    # short of its cap, it stopped; with no cap known, verl's word
    early = len(ids) < max_tokens if max_tokens is not None else reason == "completed"
    if reason == "aborted":
        finish = "abort"
    elif cuts or ended or early:
        finish = "stop"
    else:
        finish = "length"
    return Completion(
        text=text[: min(cuts)] if cuts else text,
        finish_reason=finish,
        stop_matched=None if finish == "abort" else bool(cuts),
        completion_tokens=len(ids),
        token_ids=tuple(ids),
        logprobs=None if logprobs is None else tuple(float(x) for x in logprobs),
    )
