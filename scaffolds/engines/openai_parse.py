"""Reading OpenAI-compatible responses: JSON bodies and stream chunks to results.

:class:`ResponseParser` folds a response (or each chunk of a stream) into one
:class:`Choice` accumulator per sample and builds the
:class:`~scaffolds.engines.protocol.GenerateResult`; anything malformed is an
:class:`~scaffolds.errors.EngineError` that names the engine. It reads every server's
shapes (see :mod:`scaffolds.engines.dialects`), so it needs no dialect.

>>> parser = ResponseParser("http://e/v1")
>>> accs: dict[int, Choice] = {}
>>> parser.absorb({"choices": [{"index": 0, "text": "4", "finish_reason": "stop"}]}, accs, None)
[EngineDelta(index=0, text='4', reasoning='', extra=None)]
>>> parser.result(1, accs, parser.usage({"completion_tokens": 1}), None).completions[0].text
'4'
"""

from __future__ import annotations

import email.utils
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scaffolds import fastjson
from scaffolds.engines.dialects import reported_error
from scaffolds.engines.protocol import Completion, EngineDelta, GenerateResult, Usage
from scaffolds.errors import EngineError, EngineRejectedError

__all__ = [
    "Choice",
    "ResponseParser",
    "is_int",
    "own_fields",
    "parse_retry_after",
    "rejection",
    "retry_status",
    "stop_string_matched",
]

_SNIPPET = 500
_TOKEN_ID_PREFIX = "token_id:"


_CONTEXT_LENGTH = re.compile(
    r"maximum context length|maximum model length|context_length_exceeded", re.IGNORECASE
)
"""How servers say a prompt does not fit the model's context (vLLM: "This model's
maximum context length is 2048 tokens. However, your prompt contains ...")."""


def rejection(where: str, message: str, status: int) -> EngineRejectedError:
    """An engine's refusal of a request (``where``: which engine, how). One that says the
    prompt does not fit the model's context is the engine's own message with code
    ``context_length_exceeded``, which a run reads as a prompt with no room.

    >>> err = rejection("engine e (HTTP 400)", "This model's maximum context length is 8", 400)
    >>> err.code, err.message
    ('context_length_exceeded', "This model's maximum context length is 8")
    >>> rejection("engine e (HTTP 400)", "bad n", 400).message
    'engine e (HTTP 400): bad n'
    """
    if status == 400 and _CONTEXT_LENGTH.search(message):
        return EngineRejectedError(message, status=status, code="context_length_exceeded")
    return EngineRejectedError(f"{where}: {message}", status=status)


def retry_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying (408, 429, 5xx)."""
    return status in (408, 429) or status >= 500


class ResponseParser:
    """Parses the responses of the engine at ``base_url`` (named in its errors)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def malformed(self, what: str) -> EngineError:
        return EngineError(f"malformed response from engine {self.base_url}: {what}")

    def decode(self, raw: bytes | str) -> Any:
        try:
            return fastjson.loads(raw)
        except ValueError as exc:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            raise self.malformed(f"invalid JSON ({exc}): {text[:_SNIPPET]!r}") from exc

    def absorb(self, data: Any, accs: dict[int, Choice], part_key: str | None) -> list[EngineDelta]:
        """Fold a response (or one stream chunk) into ``accs``; return its new pieces."""
        if not isinstance(data, dict):
            raise self.malformed("expected a JSON object")
        if "choices" not in data and (report := reported_error(data)) is not None:
            message, code = report
            where = f"engine {self.base_url} reported an error"
            if code is not None and 400 <= code < 500 and not retry_status(code):
                raise rejection(where, message, code)  # the request's fault
            raise EngineError(f"{where}: {message}", status=code)
        choices = data.get("choices") or []
        if not isinstance(choices, list):
            raise self.malformed("'choices' is not a list of objects")
        for choice in choices:
            if not isinstance(choice, dict):
                raise self.malformed("'choices' is not a list of objects")
        deltas = []
        for choice in choices:  # once per streamed token: no call or object it can skip
            index = choice.get("index", 0)
            if type(index) is not int or index < 0:
                index = self.index(choice)
            acc = accs.get(index)
            if acc is None:
                acc = accs[index] = Choice()
            text, reasoning = acc.absorb(choice, part_key, self)
            extra = own_fields(choice, part_key)
            acc.extras.append(extra)
            if text or reasoning or extra:
                deltas.append(EngineDelta(index, text=text, reasoning=reasoning, extra=extra))
        return deltas

    def index(self, choice: dict[str, Any]) -> int:
        index = choice.get("index", 0)
        if not is_int(index) or index < 0:
            raise self.malformed(f"bad choice index {index!r}")
        return int(index)

    def usage(self, raw: Any) -> Usage:
        if raw is None:
            return Usage(calls=1)
        if not isinstance(raw, dict):
            raise self.malformed("'usage' is not an object")
        details = raw.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        done = raw.get("completion_tokens_details")
        reasoning = done.get("reasoning_tokens") if isinstance(done, dict) else None
        return Usage(
            prompt_tokens=self.count(raw.get("prompt_tokens")),
            completion_tokens=self.count(raw.get("completion_tokens")),
            cached_tokens=self.count(cached),
            calls=1,
            reasoning_tokens=self.count(reasoning),
        )

    def count(self, value: Any) -> int:
        if value is not None and (not is_int(value) or value < 0):
            raise self.malformed(f"bad token count {value!r}")
        return int(value or 0)

    def int_list(self, value: Any, what: str) -> list[int] | None:
        if value is not None and (not isinstance(value, list) or not all(map(is_int, value))):
            raise self.malformed(f"'{what}' is not a list of integers")
        return value

    def prompt_ids(self, data: dict[str, Any]) -> tuple[int, ...] | None:
        raw = data.get("prompt_token_ids")
        if raw is None:
            choices = data.get("choices")
            if not choices or not isinstance(choices[0], dict):
                return None
            raw = choices[0].get("prompt_token_ids")
            if raw is None:
                return None
        ids = self.int_list(raw, "prompt_token_ids")
        return tuple(ids) if ids is not None else None

    def result(
        self,
        n: int,
        accs: dict[int, Choice],
        usage: Usage,
        prompt_ids: tuple[int, ...] | None,
    ) -> GenerateResult:
        """The call's result from its gathered choices: exactly ``0..n-1``, and per-sample
        token counts that add up to the reported usage."""
        if sorted(accs) != list(range(n)):
            raise self.malformed(f"expected choices 0..{n - 1}, got indices {sorted(accs)}")
        ordered = [accs[i] for i in range(n)]
        known = [a.known_count() for a in ordered]
        if usage.completion_tokens and sum(k or 0 for k in known) > usage.completion_tokens:
            # Logprobs that cover more than the generation (an echoed prompt's): not a count.
            known = [None] * n
        unknown = [i for i, k in enumerate(known) if k is None]
        if unknown:
            rest = max(0, usage.completion_tokens - sum(k for k in known if k is not None))
            share, extra = divmod(rest, len(unknown))
            for rank, i in enumerate(unknown):
                known[i] = share + (1 if rank < extra else 0)
        completions = tuple(a.completion(k or 0) for a, k in zip(ordered, known, strict=True))
        return GenerateResult(completions, usage, prompt_ids)


@dataclass
class Choice:
    """One sample's pieces, gathered from a response or from stream chunks."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    stop_matched: bool | None = None
    """Whether a stop string ended the sample (:func:`stop_string_matched`)."""
    tokens: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    saw_logprobs: bool = False
    token_ids: list[int] | None = None
    top: list[tuple[float, ...]] = field(default_factory=list)
    """Per position, the most likely tokens' logprobs, best first (when any came back)."""
    saw_top: bool = False
    extras: list[dict[str, Any] | None] = field(default_factory=list)
    """Each absorbed part's own fields (:func:`own_fields`)."""

    def absorb(
        self, choice: dict[str, Any], part_key: str | None, parser: ResponseParser
    ) -> tuple[str, str]:
        """Add one choice object (chat: its ``message``/``delta``); return the new text."""
        part = choice.get(part_key) if part_key else choice
        if part is None:
            part = {}
        if not isinstance(part, dict):
            raise parser.malformed(f"'{part_key}' is not an object")
        text = part.get("content") if part_key else part.get("text")
        reasoning = part.get("reasoning_content") or part.get("reasoning")
        if text is not None and not isinstance(text, str):
            raise parser.malformed("choice content is not a string")
        if reasoning is not None and not isinstance(reasoning, str):
            raise parser.malformed("choice reasoning is not a string")
        text, reasoning = text or "", reasoning or ""
        self.text.append(text)
        self.reasoning.append(reasoning)
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish_reason = finish
            self.stop_matched = stop_string_matched(choice)
        ids = parser.int_list(choice["token_ids"], "token_ids") if "token_ids" in choice else None
        if ids is not None:
            self.token_ids = (self.token_ids or []) + ids
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            self._absorb_logprobs(lp, parser)
        return text, reasoning

    def _absorb_logprobs(self, lp: dict[str, Any], parser: ResponseParser) -> None:
        self.saw_logprobs = True
        if "content" in lp:  # chat: a list of {token, logprob, ...}
            entries = lp.get("content") or []
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise parser.malformed("'logprobs.content' is not a list of objects")
            pairs = [(e.get("token"), e.get("logprob")) for e in entries]
            tops = [_top_values(e.get("top_logprobs"), parser) for e in entries]
        else:  # completions: parallel lists
            tokens, values = lp.get("tokens") or [], lp.get("token_logprobs") or []
            if not isinstance(tokens, list) or not isinstance(values, list):
                raise parser.malformed("'logprobs.tokens' is not a list")
            pairs = list(zip(tokens, values, strict=False))
            raw_tops = lp.get("top_logprobs")
            if raw_tops is not None and not isinstance(raw_tops, list):
                raise parser.malformed("'logprobs.top_logprobs' is not a list")
            tops = [_top_values(t, parser) for t in raw_tops or []]
            tops += [()] * (len(pairs) - len(tops))
        if any(tops):
            self.saw_top = True
        self.top.extend(tops[: len(pairs)])
        for token, value in pairs:
            if not isinstance(token, str) or not (value is None or isinstance(value, int | float)):
                raise parser.malformed("a logprob entry has a bad token or value")
            self.tokens.append(token)
            # None (no logprob for this position) becomes NaN rather than a made-up number.
            self.logprobs.append(float("nan") if value is None else float(value))

    def _ids(self) -> list[int] | None:
        if self.token_ids is not None:
            return self.token_ids
        if self.saw_logprobs and all(t.startswith(_TOKEN_ID_PREFIX) for t in self.tokens):
            try:
                return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in self.tokens]
            except ValueError:
                return None
        return None

    def known_count(self) -> int | None:
        ids = self._ids()
        if ids is not None:
            return len(ids)
        return len(self.logprobs) if self.saw_logprobs else None

    def completion(self, completion_tokens: int) -> Completion:
        ids = self._ids()
        reasoning = "".join(self.reasoning)
        return Completion(
            text="".join(self.text),
            finish_reason=self.finish_reason,
            reasoning=reasoning or None,
            completion_tokens=completion_tokens,
            token_ids=tuple(ids) if ids is not None else None,
            logprobs=tuple(self.logprobs) if self.saw_logprobs else None,
            top_logprobs=tuple(self.top) if self.saw_top else None,
            stop_matched=self.stop_matched,
            # A whole response's fields; a stream's pieces went out with its deltas.
            extra=self.extras[0] if len(self.extras) == 1 else None,
        )


_MODELED_CHOICE = frozenset({"index", "text", "message", "delta", "finish_reason"})
_MODELED_PART = frozenset({"role", "content", "reasoning_content", "reasoning"})


def own_fields(choice: dict[str, Any], part_key: str | None) -> dict[str, Any] | None:
    """A choice's fields beyond its index, text, reasoning and finish reason, as sent
    (a chat message's or delta's under its key); None when it has none.

    >>> own_fields({"index": 0, "text": "4", "logprobs": None, "stop_reason": None}, None)
    >>> own_fields({"index": 0, "message": {"content": None, "tool_calls": []}}, "message")
    {'message': {'tool_calls': []}}
    """
    out = _own(choice, _MODELED_CHOICE)
    part = choice.get(part_key) if part_key else None
    if isinstance(part, dict) and (mine := _own(part, _MODELED_PART)):
        out = out or {}
        out[part_key or ""] = mine
    return out


def stop_string_matched(choice: dict[str, Any]) -> bool | None:
    """Whether a finished choice says one of the request's stop strings ended it: vLLM's
    ``stop_reason`` or SGLang's ``matched_stop`` is that string (null, vLLM's word for
    end of sequence, or a stop token id such as SGLang's EOS id: no); None when the
    choice has neither field (a plain OpenAI server does not say).

    >>> stop_string_matched({"finish_reason": "stop", "stop_reason": "\\n\\n"})
    True
    >>> stop_string_matched({"finish_reason": "stop", "stop_reason": None})
    False
    >>> stop_string_matched({"finish_reason": "stop", "matched_stop": 2})
    False
    >>> stop_string_matched({"finish_reason": "stop"}) is None
    True
    """
    for key in ("stop_reason", "matched_stop"):
        if key in choice:
            return isinstance(choice[key], str)
    return None


def _own(fields: dict[str, Any], modeled: frozenset[str]) -> dict[str, Any] | None:
    """The fields not in ``modeled`` and not None; None when there are none (as for most
    stream chunks: a loop, not a comprehension, so that case builds nothing)."""
    out: dict[str, Any] | None = None
    for key, value in fields.items():
        if value is not None and key not in modeled:
            if out is None:
                out = {}
            out[key] = value
    return out


def _top_values(raw: Any, parser: ResponseParser) -> tuple[float, ...]:
    """One position's top logprobs, best first, from either shape: chat's list of
    ``{token, logprob}`` or completions' ``{token: logprob}`` (None or absent: none)."""
    if raw is None:
        return ()
    if isinstance(raw, dict):
        values: list[Any] = list(raw.values())
    elif isinstance(raw, list) and all(isinstance(e, dict) for e in raw):
        values = [e.get("logprob") for e in raw]
    else:
        raise parser.malformed("a 'top_logprobs' entry is neither a list of objects nor an object")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise parser.malformed("a top logprob is not a number")
    return tuple(sorted((float(v) for v in values), reverse=True))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
