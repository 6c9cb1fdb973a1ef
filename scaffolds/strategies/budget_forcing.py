"""``budget_forcing(min_tokens, waits)``: s1 budget forcing (arXiv 2501.19393).

The model answers the problem. If it ends (``finish_reason`` "stop") before it has
generated ``min_tokens``, its end of reasoning is dropped (``</think>`` and everything
after it, when the text has one), the cue "Wait" is appended, and the model continues
the SAME assistant message, up to ``waits`` times. On a chat engine that is a request
whose last message is the partial assistant message (``continue_final``: vLLM's
``continue_final_message: true, add_generation_prompt: false``); on a text engine, a
completion of the prompt plus the text so far. When the budget cuts a call, the
existing forced-answer step asks for the answer. Every call's tokens are in ``usage``.

With a reasoning parser (the thinking arrives separately), the message reopened is
``<think>`` + the thinking + "Wait", and the continuation's thinking joins the first.

It takes no ``solver``: what it continues is one call's message. As the solver of
another scaffold (``majority(k=4, solver=budget_forcing())``) its ``k`` samples
(``solve_many``) start as one ``n=k`` request, and each continues on its own,
concurrently.

>>> str(BudgetForcing(min_tokens=256))
'budget_forcing(min_tokens=256)'
>>> BudgetForcing(waits=2).max_calls(), BudgetForcing(waits=2).max_calls_many(4)
(3, 9)
>>> reopened("I think 7.</think>The answer is 7.", None, " Wait")
'I think 7. Wait'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context, Problem, Step, StepPrompt
from scaffolds.core.errors import BudgetExhaustedError
from scaffolds.core.fanout import gather
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import Completion, Message
from scaffolds.evaluation.answers import extract_answer
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import DIRECT, solve_prompt
from scaffolds.strategies.steps import Parent, StepBuilder

# This strategy's templates, one part per prompt set.
WAIT_TEMPLATE = Template("budget_forcing_wait", "\n\nWait")

COMPACT_WAIT_TEMPLATE = Template(
    "budget_forcing_wait", " wait"
)  # the compact vocabulary is lowercase

PROMPT_SETS = (
    PromptSet.of("default", WAIT_TEMPLATE),
    PromptSet.of("compact", COMPACT_WAIT_TEMPLATE),
)

END_OF_THINKING = "</think>"


def reopened(text: str, reasoning: str | None, cue: str) -> str:
    """The assistant message so far, its end of reasoning dropped, with ``cue`` appended."""
    if reasoning:
        return f"<think>\n{reasoning}{cue}"
    head, _, _ = text.partition(END_OF_THINKING)
    return head + cue


def continue_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """The problem's prompt continued by ``state["partial"]`` (the reopened message)."""
    base = solve_prompt(ctx, problem, state)
    partial = str(state["partial"])
    prompt = (
        base.prompt + partial
        if isinstance(base.prompt, str)
        else (*base.prompt, Message("assistant", partial))
    )
    fields = {"problem": problem.text, "partial": partial}
    return StepPrompt(prompt, "budget_forcing_wait", fields, *parent)


CONTINUE = StepBuilder(
    "budget_forcing_wait",
    "continue",
    ("budget_forcing_wait",),
    build=continue_prompt,
    state=("partial",),
    rows=None,
)
"""A reopened message continued after "Wait" (no training rows of its own yet)."""


def _joined(partial: str, had_reasoning: bool, more: Completion) -> tuple[str, str | None]:
    """(text, reasoning) of the message after a continuation ``more`` of ``partial``."""
    if not had_reasoning:
        return partial + more.text, None
    thinking, text = more.reasoning or "", more.text
    if not more.reasoning and END_OF_THINKING in text:
        thinking, _, text = text.partition(END_OF_THINKING)
    return text, partial.removeprefix("<think>\n") + thinking


class BudgetForcing(Strategy):
    name: ClassVar[str] = "budget_forcing"
    summary: ClassVar[str] = (
        "s1 budget forcing: an answer that ends too early gets 'Wait' and continues."
    )
    batches_samples: ClassVar[bool] = True
    answer_logprobs_refused: ClassVar[str | None] = (
        "budget_forcing's answer is several engine generations (continued)"
    )
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (CONTINUE,)

    min_tokens: int = Field(default=512, ge=1)
    """A message that ends before this many generated tokens is reopened."""
    waits: int = Field(default=2, ge=0, le=16)
    """At most this many "Wait"s per message."""
    prompt: Literal["raw", "solve"] = "raw"
    """``raw`` sends the problem as given; ``solve`` wraps it in the solve template."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on the whole message's tokens, every continuation included (default: each
    call gets the request's ``max_tokens``)."""

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        first = await DIRECT.generate(
            ctx,
            problem,
            {"prompt": self.prompt},
            label="answer" if k == 1 else label,
            n=k,
            max_tokens=self.max_tokens,
            force_answer=True,
        )
        return await gather(
            *(self._force(problem, ctx, first, i) for i in range(len(first.completions)))
        )

    async def _force(self, problem: Problem, ctx: Context, first: Step, index: int) -> Solution:
        """Reopen sample ``index`` of ``first`` with "Wait" while it ends too early."""
        sample = first.completions[index]
        text, reasoning, spent = sample.text, sample.reasoning, sample.completion_tokens
        finish, cut, source = sample.finish_reason, first.cut_short, (first.step_id, index)
        cue = ctx.templates(BudgetForcing).template("budget_forcing_wait").render()
        for wait in range(1, self.waits + 1):
            left = None if self.max_tokens is None else self.max_tokens - spent
            if finish == "length" or spent >= self.min_tokens or (left is not None and left < 1):
                break
            partial = reopened(text, reasoning, cue)
            state = {"prompt": self.prompt, "partial": partial}
            try:
                step = await CONTINUE.generate(
                    ctx,
                    problem,
                    state,
                    source,
                    label=f"wait {wait}",
                    max_tokens=left,
                    force_answer=True,
                    continue_final=True,
                )
            except BudgetExhaustedError:
                cut = True
                break
            more = step.first
            text, reasoning = _joined(partial, bool(reasoning), more)
            spent += more.completion_tokens
            finish, cut, source = more.finish_reason, cut or step.cut_short, (step.step_id, 0)
        if source == (first.step_id, index):
            solution = Solution.from_step(first, index)
            return solution.marked_cut_short() if cut else solution
        # The message is put together; its step is the last continuation (its tail).
        return Solution(text, extract_answer(text), source[0], reasoning, cut_short=cut)

    def max_calls(self) -> int:
        return 1 + self.waits

    def max_calls_many(self, k: int) -> int:
        return 1 + k * self.waits

    def max_samples(self) -> int:
        return 1 + self.waits

    def max_samples_many(self, k: int) -> int:
        return k * (1 + self.waits)
