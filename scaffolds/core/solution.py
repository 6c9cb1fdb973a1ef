"""What a strategy returns: :class:`Solution`, one answer with where it came from.

>>> Solution("so it is \\\\boxed{7}", "7").source
(None, None)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scaffolds.core.engine_calls import Step
from scaffolds.core.thinking import Thinking
from scaffolds.core.tool_calls import call_key
from scaffolds.evaluation.answers import extract_answer

__all__ = ["Solution"]


@dataclass(frozen=True, slots=True)
class Solution:
    """What a strategy returns.

    ``step_id`` is the trace step whose text is ``text`` (None when the text was put
    together rather than generated in one step); ``cut_short`` says the budget stopped
    the strategy before it finished its plan.
    """

    text: str
    answer: str | None
    step_id: str | None = None
    reasoning: str | None = None
    cut_short: bool = False
    sample: int = 0
    """Which sample of step ``step_id`` this is."""
    tool_call: str | None = None
    """The generation's tool calls in canonical form (:func:`~scaffolds.core.tool_calls.call_key`),
    what it votes for; None when it calls none."""

    @classmethod
    def from_step(cls, step: Step, sample: int = 0) -> Solution:
        """Sample ``sample`` of an engine call as a solution, with its answer as the run
        read it (:attr:`Step.answers`; extracted leniently where the step has none)."""
        completion = step.completions[sample]
        return cls(
            completion.text,
            step.answers[sample] if step.answers else extract_answer(completion.text),
            step_id=step.step_id,
            reasoning=completion.reasoning,
            cut_short=step.cut_short,
            sample=sample,
            tool_call=call_key(completion.extra),
        )

    def marked_cut_short(self) -> Solution:
        return replace(self, cut_short=True)

    @property
    def thinking(self) -> str:
        """What the model thought (what an RC summary summarizes), read with the default
        ``<think>`` markers; ``ctx.thought(text, reasoning)`` reads it with the run's
        model's own.

        >>> Solution("<think>3+4</think>7", "7").thinking
        '3+4'
        """
        return Thinking().thought(self.text, self.reasoning)

    @property
    def source(self) -> tuple[str | None, int | None]:
        """(step id, sample) that produced this text, for a step that continues it."""
        return (self.step_id, self.sample if self.step_id is not None else None)
