"""What a run is asked: the problem, a step's prompt with its provenance, the budget.

>>> Problem.from_text("2+2=").raw_prompt
'2+2='
>>> StepPrompt("2+2=", "solve", {"problem": "2+2="}).template
'solve'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffolds.engines.protocol import Message, Prompt
from scaffolds.errors import InvalidRequestError

__all__ = ["Budget", "Problem", "StepPrompt"]


@dataclass(frozen=True, slots=True)
class StepPrompt:
    """A step's prompt and where it came from: what :class:`StepStarted` records.

    ``template`` names the template rendered (None: the problem as asked); ``fields``
    holds the values it was filled with (a list where the template numbers and joins
    several, e.g. candidates); ``parent_step`` and ``sample`` name the step, and which of
    its samples, this step continues (an RC summary, a refinement, a note's solutions).
    """

    prompt: Prompt
    template: str | None = None
    fields: Mapping[str, Any] | None = None
    parent_step: str | None = None
    sample: int | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits of one run; ``None`` means unlimited.

    ``max_tokens`` caps the *generated* tokens of all engine calls together (prompt
    tokens are bounded by ``max_calls``). A call never gets more ``max_tokens`` than
    what is left; parallel calls reserve their share before they start.
    ``max_choice_tokens`` caps those of each response choice (a request's
    ``max_completion_tokens``, reasoning included, as OpenAI bounds each choice of a
    reasoning model), where a run's choices are solved apart.

    >>> Budget(max_calls=0)
    Traceback (most recent call last):
    ...
    scaffolds.errors.InvalidRequestError: budget.max_calls must be >= 1 (got 0)
    """

    max_tokens: int | None = None
    max_calls: int | None = None
    timeout_s: float | None = None
    max_choice_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_calls", "max_choice_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidRequestError(
                    f"budget.{name} must be >= 1 (got {value})", param=f"budget.{name}"
                )
        if self.timeout_s is not None and not (
            math.isfinite(self.timeout_s) and self.timeout_s > 0
        ):
            raise InvalidRequestError(
                f"budget.timeout_s must be a finite number > 0 (got {self.timeout_s})",
                param="budget.timeout_s",
            )

    def capped_by(self, cap: Budget) -> Budget:
        """The tighter of this budget and a server-side cap, limit by limit."""

        def tighter(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return Budget(
            tighter(self.max_tokens, cap.max_tokens),
            tighter(self.max_calls, cap.max_calls),
            tighter(self.timeout_s, cap.timeout_s),
            tighter(self.max_choice_tokens, cap.max_choice_tokens),
        )


@dataclass(frozen=True, slots=True)
class Problem:
    """What a scaffold solves: the problem text, the conversation before it, and an
    optional hint (e.g. an abstraction) the solver should read first.

    >>> Problem.from_messages((Message("system", "Be brief."), Message("user", "2+2?"))).text
    '2+2?'
    """

    text: str
    history: tuple[Message, ...] = ()
    hint: str | None = None
    raw_prompt: Prompt | None = None
    """The caller's prompt exactly as sent, for pass-through solving."""
    origin: StepPrompt | None = None
    """When this problem was rendered from a template (a note's conditioned problem),
    that template's provenance: a pass-through step of it records this."""
    reference: str | None = None
    """The known right answer, when the caller has one (an evaluation): never shown to
    the model; a scaffold may report how its intermediate answers score against it
    (RSA's per-round population accuracy)."""

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> Problem:
        """The last user turn as the problem; a conversation may also end with tool
        results (the turn after the assistant's tool calls), whose last one is then the
        text and the whole conversation the prompt as asked.

        >>> call = Message("assistant", "", ({"id": "c1"},))
        >>> turns = (Message("user", "Weather?"), call, Message("tool", "19C", tool_call_id="c1"))
        >>> Problem.from_messages(turns).ends_with_tool_result
        True
        """
        if not messages or messages[-1].role not in ("user", "tool"):
            raise InvalidRequestError(
                "the last message must be from the user (or a tool's result)", param="messages"
            )
        return cls(messages[-1].content, tuple(messages[:-1]), raw_prompt=tuple(messages))

    @property
    def ends_with_tool_result(self) -> bool:
        """Whether the conversation asks the model to go on after tool results: only a
        strategy that sends the conversation as asked can answer it."""
        raw = self.raw_prompt
        return isinstance(raw, tuple) and bool(raw) and raw[-1].role == "tool"

    @classmethod
    def from_text(cls, text: str) -> Problem:
        return cls(text, raw_prompt=text)

    def with_hint(self, hint: str) -> Problem:
        return Problem(self.text, self.history, hint, raw_prompt=None, reference=self.reference)
