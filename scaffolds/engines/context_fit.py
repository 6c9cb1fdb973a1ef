"""Fitting a call into the model's context: ``max_tokens`` never exceeds what the context
has left after the prompt.

A scaffold's step limits (``rc``'s 16k-token reasoning chunks, say) are written for big
models; a short-context engine rejects a call whose prompt plus ``max_tokens`` exceed
its ``max_model_len`` (vLLM answers 400). Engines clamp each call instead; a prompt
that leaves no room at all gets :func:`no_room`: every sample empty and cut short
(``finish_reason="length"``), without calling the engine, so the step ends cut short
rather than failing the run.

>>> prompt_token_bound("347+589=")
16
>>> fitted_max_tokens(16384, prompt_tokens=300, max_model_len=2048)
1748
>>> fitted_max_tokens(100, prompt_tokens=300, max_model_len=2048)
100
>>> fitted_max_tokens(None, prompt_tokens=2048, max_model_len=2048) is None
True
"""

from __future__ import annotations

from collections.abc import Sequence

from scaffolds.engines.protocol import Completion, GenerateResult, Message, Usage

__all__ = ["fitted_max_tokens", "no_room", "prompt_token_bound"]

_PER_MESSAGE = 16
"""Tokens a chat template may add around one message (role markers, separators)."""


def prompt_token_bound(prompt: str | Sequence[Message]) -> int:
    """An upper bound on the prompt's tokens: no token of a byte-level vocabulary is
    shorter than one byte, plus room for a chat template's markers."""
    if isinstance(prompt, str):
        return len(prompt.encode()) + 8
    text = sum(len((m.content or "").encode()) for m in prompt)
    return text + _PER_MESSAGE * (len(prompt) + 1)


def fitted_max_tokens(
    max_tokens: int | None, *, prompt_tokens: int, max_model_len: int
) -> int | None:
    """``max_tokens`` lowered to the room the prompt leaves (the room itself when None);
    None when no token fits."""
    room = max_model_len - prompt_tokens
    if room < 1:
        return None
    return room if max_tokens is None else min(max_tokens, room)


def no_room(n: int) -> GenerateResult:
    """The result of a call that cannot fit: ``n`` empty samples, cut short, no engine call."""
    empty = tuple(Completion("", "length") for _ in range(n))
    return GenerateResult(empty, Usage(calls=0), no_room=True)
