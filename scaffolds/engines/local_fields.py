"""What :class:`~scaffolds.engines.local.LocalEngine` does with each request field.

A request's pass-through fields (everything beyond the modeled ``n``, ``max_tokens``,
``temperature``, ``top_p``, ``stop`` and ``seed``) reach an engine call as
``SamplingParams.extra``. An HTTP engine sends them on, and vLLM honours or refuses
them; the in-process engine must do the same itself, never ignore one silently. Each
field is one of:

- honoured (:data:`HONOURED`): sampler settings and logit processors as vLLM defines
  them (``top_k``, ``min_p``, ``repetition_penalty``, ``presence_penalty``,
  ``frequency_penalty``, ``logit_bias``, ``min_tokens``, ``ignore_eos``), and what the
  chat template reads (``chat_template_kwargs``, ``reasoning_effort``);
- inert (:data:`INERT`): bookkeeping that changes nothing generated (``user``,
  ``metadata``...), accepted as OpenAI and vLLM accept it;
- refused (:data:`REFUSED`, and any field this module does not know) with an
  :class:`~scaffolds.errors.InvalidRequestError` whose ``param`` is the field and
  whose message names the engine and why: no tool calling, no constrained decoding, no
  logprobs in the OpenAI answer, no prompt echo...

A field at its off value (``None``, ``false``, ``0``, ``[]``, ``{}``, or its documented
default such as ``tool_choice: "none"`` or ``response_format: {"type": "text"}``) is
never refused: it asks for nothing.

>>> check_fields({"top_k": 5, "user": "u1", "tool_choice": "none"})
>>> try:
...     check_fields({"response_format": {"type": "json_object"}})
... except InvalidRequestError as err:
...     print(err.param, "|", err.message)  # doctest: +ELLIPSIS
response_format | response_format is not supported by the in-process transformers engine: ...
>>> generation_options({"presence_penalty": 0.5, "logit_bias": {"7": 3}}, 4, 64)["sequence_bias"]
{(7,): 3.0}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from scaffolds.errors import InvalidRequestError

__all__ = [
    "ENGINE",
    "HONOURED",
    "INERT",
    "REFUSED",
    "UNSUPPORTED",
    "OpenAIPenalties",
    "check_fields",
    "generation_options",
    "template_options",
]

ENGINE = "the in-process transformers engine"
"""How a refusal names the engine."""

UNSUPPORTED = "unsupported_parameter"
"""The error code of a refusal (OpenAI's, for a parameter a model does not support)."""

HONOURED = frozenset(
    {
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "min_tokens",
        "ignore_eos",
        "chat_template_kwargs",
        "reasoning_effort",
        "seed",
    }
)
"""Fields the in-process engine honours, as vLLM defines them (``seed`` is read from the
call's params: a pass-through call's extra holds it too)."""

INERT = frozenset(
    {
        "user",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
        "parallel_tool_calls",
    }
)
"""Fields that change nothing generated here (who asks, what to keep, how to bill; how
many tool calls, where tools are refused): accepted."""

_NO_TOOLS = (
    "it does no tool calling: it neither renders tools into the prompt nor parses tool calls "
    "back (and the chat templates of the shipped models, ponder-addition and SmolLM2, have no "
    "tool support); for tools, serve a model whose chat template renders them through vLLM "
    "with a tool-call parser"
)
_NO_CONSTRAINTS = (
    "it has no constrained decoding, so it cannot guarantee the format; serve the model "
    "with vLLM for structured output"
)
_NO_LOGPROBS = (
    "it does not return logprobs in the OpenAI answer; serve the model with vLLM for logprobs"
)

REFUSED: Mapping[str, str] = {
    "tools": _NO_TOOLS,
    "functions": _NO_TOOLS,
    "tool_choice": "it cannot force a tool call, and " + _NO_TOOLS,
    "function_call": "it cannot force a function call, and " + _NO_TOOLS,
    "response_format": _NO_CONSTRAINTS,
    "structured_outputs": _NO_CONSTRAINTS,
    "guided_json": _NO_CONSTRAINTS,
    "guided_regex": _NO_CONSTRAINTS,
    "guided_choice": _NO_CONSTRAINTS,
    "guided_grammar": _NO_CONSTRAINTS,
    "guided_decoding_backend": _NO_CONSTRAINTS,
    "guided_whitespace_pattern": _NO_CONSTRAINTS,
    "logprobs": _NO_LOGPROBS,
    "top_logprobs": _NO_LOGPROBS,
    "prompt_logprobs": _NO_LOGPROBS,
    "echo": "it does not echo the prompt",
    "suffix": "it does not insert text (suffix)",
    "best_of": 'it draws n samples, never best_of: use "scaffold": "best_of_n(n=...)"',
    "use_beam_search": "it does not search beams",
    "length_penalty": "it does not search beams",
    "stop_token_ids": "it stops at the model's end of sequence and at stop strings only",
    "include_stop_str_in_output": "it cuts the text before the stop string",
    "skip_special_tokens": "it always leaves special tokens out of the text",
    "spaces_between_special_tokens": "it always leaves special tokens out of the text",
    "continue_final_message": "it always starts a new assistant turn of a chat",
    "add_generation_prompt": "it always starts a new assistant turn of a chat",
    "modalities": "it writes text only",
    "audio": "it writes text only",
}
"""Fields the in-process engine cannot honour, and why."""

_OFF: tuple[Any, ...] = (False, 0, "", [], {})
"""The values that ask for nothing, for a field without :data:`_DEFAULTS`."""

_DEFAULTS: Mapping[str, tuple[Any, ...]] = {
    "tool_choice": ("none", "auto"),
    "best_of": (1,),
    "length_penalty": (1,),
    "skip_special_tokens": (True,),
    "spaces_between_special_tokens": (True,),
    "add_generation_prompt": (True,),
    "modalities": (["text"], []),
    "repetition_penalty": (1,),
    "logprobs": (False,),  # a completions request's logprobs: 0 asks for them
    "echo": (False,),
}
"""The values that ask for nothing, for a field whose default is not a generic off
value (or where one of those asks for something)."""


def _is_off(name: str, value: Any) -> bool:
    """Whether ``value`` of field ``name`` asks for nothing (``None`` never does).

    >>> _is_off("tool_choice", "auto"), _is_off("tool_choice", "required"), _is_off("n", 0.0)
    (True, False, True)
    >>> _is_off("response_format", {"type": "text"}), _is_off("logprobs", 0)
    (True, False)
    >>> _is_off("skip_special_tokens", False), _is_off("length_penalty", 1.0)
    (False, True)
    """
    if value is None:
        return True
    if name == "response_format" and isinstance(value, Mapping):
        return value.get("type") == "text"
    return any(_same(value, off) for off in _DEFAULTS.get(name, _OFF))


def _same(value: Any, off: Any) -> bool:
    """``value`` is ``off``: equal and of one kind (``0`` is not ``false``; ``1.0`` is ``1``)."""
    if _number(value) and _number(off):
        return bool(value == off)
    return bool(value == off) and type(value) is type(off)


def check_fields(fields: Mapping[str, Any]) -> None:
    """Refuse the first field of ``fields`` the in-process engine cannot honour (a
    ``tool_choice`` first, so that a forced call is the one named): an
    :class:`InvalidRequestError` (code ``unsupported_parameter``) naming the engine and
    the field, ``param`` the field; an honoured field's bad value is a 400 too."""
    names = sorted(fields, key=lambda name: name not in ("tool_choice", "function_call"))
    for name in names:
        value = fields[name]
        if name in INERT or _is_off(name, value):
            continue
        if name in HONOURED:
            _check_value(name, value)
            continue
        why = REFUSED.get(name, f"it does not know the field {name!r}, so it would ignore it")
        message = f"{name} is not supported by {ENGINE}: {why}"
        raise InvalidRequestError(message, param=name, code=UNSUPPORTED)


def _check_value(name: str, value: Any) -> None:
    """An honoured field's value is one the engine can use; else a 400 naming it."""
    expected = _EXPECTED.get(name)
    if expected is not None and not expected[0](value):
        raise InvalidRequestError(f"{name} must be {expected[1]} (got {value!r})", param=name)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bias(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        str(k).isdigit() and _number(v) and -100 <= v <= 100 for k, v in value.items()
    )


_RENDERING = frozenset(
    {
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "tools",
        "documents",
        "conversation",
        "chat_template",
        "return_dict",
    }
)
"""Arguments of ``apply_chat_template`` that the engine sets itself (or refuses): a
request's ``chat_template_kwargs`` may not set them."""

_EXPECTED: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "presence_penalty": (lambda v: _number(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "frequency_penalty": (lambda v: _number(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "repetition_penalty": (lambda v: _number(v) and v > 0, "a number > 0"),
    "min_p": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "top_k": (lambda v: _integer(v) and v >= -1, "an integer >= -1 (-1 or 0: no limit)"),
    "min_tokens": (lambda v: _integer(v) and v >= 0, "an integer >= 0"),
    "seed": (_integer, "an integer"),
    "logit_bias": (_bias, "an object of token ids to numbers in [-100, 100]"),
    "chat_template_kwargs": (
        lambda v: isinstance(v, Mapping) and not set(v) & _RENDERING,
        "an object of the template's own variables (not " + ", ".join(sorted(_RENDERING)) + ")",
    ),
}
"""How an honoured field's value is checked, and what it must be."""


def template_options(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The chat template's keyword arguments a call's ``extra`` asks for: its
    ``chat_template_kwargs``, and ``reasoning_effort`` (as vLLM hands it to the template).

    >>> template_options({"chat_template_kwargs": {"enable_thinking": False}, "top_k": 2})
    {'enable_thinking': False}
    """
    options = dict(extra.get("chat_template_kwargs") or {})
    if extra.get("reasoning_effort") is not None:
        options.setdefault("reasoning_effort", extra["reasoning_effort"])
    return options


def generation_options(extra: Mapping[str, Any], prompt_len: int, vocab: int) -> dict[str, Any]:
    """``generate`` keyword arguments for a call's honoured sampler fields:
    ``repetition_penalty`` (over the prompt and the output, as vLLM), ``min_p`` (a
    sampler setting, which a greedy call drops), ``logit_bias`` (``sequence_bias``; a
    token id outside the ``vocab`` is a 400) and the OpenAI penalties
    (``logits_processor``: :class:`OpenAIPenalties`, over the output only). ``top_k``,
    ``min_tokens`` and ``ignore_eos`` are read by the caller.

    >>> generation_options({"repetition_penalty": 1.1, "min_p": 0.1}, 3, 64)
    {'repetition_penalty': 1.1, 'min_p': 0.1}
    """
    options: dict[str, Any] = {}
    if extra.get("repetition_penalty") is not None:
        options["repetition_penalty"] = float(extra["repetition_penalty"])
    if extra.get("min_p"):
        options["min_p"] = float(extra["min_p"])
    if bias := extra.get("logit_bias"):
        if outside := [k for k in bias if int(k) >= vocab]:
            raise InvalidRequestError(
                f"logit_bias: token id {outside[0]} is not in the model's vocabulary "
                f"(ids 0..{vocab - 1})",
                param="logit_bias",
            )
        options["sequence_bias"] = {(int(k),): float(v) for k, v in bias.items()}
    presence = float(extra.get("presence_penalty") or 0.0)
    frequency = float(extra.get("frequency_penalty") or 0.0)
    if presence or frequency:
        options["logits_processor"] = [OpenAIPenalties(prompt_len, presence, frequency)]
    return options


class OpenAIPenalties:
    """A logits processor for OpenAI's ``presence_penalty`` and ``frequency_penalty``,
    as vLLM applies them: each token's logit loses ``presence`` once it has appeared in
    the output, and ``frequency`` for each time it has (the prompt does not count).

    >>> import torch
    >>> ids = torch.tensor([[9, 9, 4, 4, 2]])  # a prompt of 2 tokens, then 4, 4, 2
    >>> OpenAIPenalties(2, 0.5, 1.0)(ids, torch.zeros(1, 6))[0].tolist()
    [0.0, 0.0, -1.5, 0.0, -2.5, 0.0]
    """

    def __init__(self, prompt_len: int, presence: float, frequency: float) -> None:
        self.prompt_len = prompt_len
        self.presence = presence
        self.frequency = frequency

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        output = input_ids[:, self.prompt_len :]
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, output, torch.ones_like(output, dtype=scores.dtype))
        penalty = self.frequency * counts + self.presence * (counts > 0).to(scores.dtype)
        return scores - penalty
