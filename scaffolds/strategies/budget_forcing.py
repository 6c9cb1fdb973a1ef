"""``budget_forcing(min_tokens, waits)``: s1 budget forcing (arXiv 2501.19393).

The model answers the problem; a thinking model's calls stop at its end-of-thinking
marker (``thinking_end`` of the served model's config, ``</think>`` by default), so no
answer is written, and billed, only to be dropped. While the thinking may go on, the
cue ("Wait", or ``cue``) is appended and the model continues the SAME assistant
message, up to ``waits`` times: ``mode="min_tokens"`` reopens it only while fewer than
``min_tokens`` were generated; ``mode="ignore"`` reopens it ``waits`` times
unconditionally (s1's ``thinking_n_ignore``). ``max_thinking_tokens`` caps the
thinking (s1's ``max_tokens_thinking``): a thinking cut at the cap is not reopened.
Then the thinking is closed with the marker and one more continuation writes the
answer. On a chat engine a continuation is a request whose last message is the partial
assistant message (``continue_final``: vLLM's ``continue_final_message: true,
add_generation_prompt: false``); on a text engine, a completion of the prompt plus the
text so far. When the budget cuts a call, the existing forced-answer step asks for the
answer. Every call's tokens are in ``usage``.

s1's own way (simplescaling/s1 ``eval/lm-evaluation-harness/lm_eval/models/
vllm_causallms.py``) has three more options. ``stop_token_id``: the thinking calls stop
at that token id (vLLM's ``stop_token_ids``, with ``min_tokens: 1``) instead of at the
marker's text, as s1 stops at ``<|im_start|>`` (lines 246, 273-280): a stop string holding
a special token matches only where the engine's text shows special tokens.
``open_thinking``: the first call's prompt already opens the thinking (its start marker
as the assistant message the model continues), as s1 appends ``<|im_start|>think`` to
the prompt (line 283). ``cap_marker``: when ``max_thinking_tokens`` cut the thinking, it
is closed with a newline (unless it ends with one), the end marker and this text, as s1
writes ``thinking_end + "\nFinal Answer:"`` after a thinking that hit its cap (lines
254, 401-409). s1's setting: ``budget_forcing(mode="ignore", waits=1,
max_thinking_tokens=32000, cue="Wait", stop_token_id=151644, open_thinking=true,
cap_marker="\nFinal Answer:")`` with the s1 models' markers (151644 is ``<|im_start|>``
in their Qwen2.5 tokenizer).

With a reasoning parser (the thinking arrives separately), the message reopened is
``<think>`` + the thinking + the cue, and the continuation's thinking joins the first.
A sample that shows no thinking at all (a model that does not think) is reopened after
its whole text, and its last continuation is its answer.

It takes no ``solver``: what it continues is one call's message. As the solver of
another scaffold (``majority(k=4, solver=budget_forcing())``) its ``k`` samples
(``solve_many``) start as one ``n=k`` request, and each continues on its own,
concurrently.

>>> str(BudgetForcing(min_tokens=256))
'budget_forcing(min_tokens=256)'
>>> BudgetForcing(waits=2).max_calls(), BudgetForcing(waits=2).max_calls_many(4)
(4, 13)
>>> reopened("<think>I think 7.", None, " Wait", Thinking())
'<think>I think 7. Wait'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import Step, StepRole, StepSampling
from scaffolds.core.forcing import forced_answer_text
from scaffolds.core.solution import Solution
from scaffolds.core.thinking import Thinking
from scaffolds.engines.protocol import Message
from scaffolds.errors import BudgetExhaustedError
from scaffolds.fanout import gather
from scaffolds.problem import Problem, StepPrompt
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


def reopened(text: str, reasoning: str | None, cue: str, thinking: Thinking) -> str:
    """The assistant message so far (its end of thinking, and anything after it,
    dropped) with ``cue`` appended."""
    if reasoning:
        return f"{thinking.markers.start}\n{reasoning}{cue}"
    head, _, _ = text.partition(thinking.markers.end)
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


@dataclass
class _Message:
    """One sample's assistant message as it grows: its text (a reasoning parser's
    thinking aside, in ``reasoning``), tokens generated, how its last call finished,
    the (step id, sample) that wrote its tail, and whether the budget cut it."""

    text: str
    reasoning: str | None
    spent: int
    finish: str | None
    source: tuple[str, int]
    cut: bool

    def answered(self, thinking: Thinking) -> bool:
        """It has text after its thinking (an engine that did not stop at the marker)."""
        if self.reasoning:
            return bool(self.text.strip())
        return thinking.markers.end in self.text

    def grow(
        self, partial: str, step: Step, thinking: Thinking, *, answer: bool, cue: str = ""
    ) -> None:
        """Join the continuation ``step`` of ``partial`` (the message as sent, ending with
        ``cue``): more thinking, or (``answer``) what follows the closed thinking."""
        more = step.first
        if self.reasoning is None:
            self.text = partial + more.text
        else:  # the thinking so far with the cue, and what came back in either channel
            thought = partial.removeprefix(thinking.markers.start + "\n")
            if answer:
                self.reasoning = thought.removesuffix(cue or thinking.markers.end)
                self.text = forced_answer_text(more, thinking)
            elif more.reasoning:  # the parser split it: the text is an answer after it
                self.reasoning, self.text = thought + more.reasoning, more.text
            else:  # no end of thinking in it, so no split: it is all thinking
                self.reasoning, self.text = thought + more.text, ""
        self.spent += more.completion_tokens
        self.finish, self.source = more.finish_reason, (step.step_id, 0)
        self.cut = self.cut or step.cut_short


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
    """``mode="min_tokens"``: a message that ends before this many generated tokens is
    reopened."""
    waits: int = Field(default=2, ge=0, le=16)
    """At most this many cues per message (``mode="ignore"``: exactly this many)."""
    mode: Literal["min_tokens", "ignore"] = "min_tokens"
    """When the end of thinking is suppressed: while under ``min_tokens``, or always."""
    max_thinking_tokens: int | None = Field(default=None, ge=1)
    """Cap on the thinking's tokens (every continuation included): at the cap it is
    closed and the answer written (default: no cap of its own)."""
    cue: str | None = None
    """The text that reopens the thinking (default: the prompt set's, "\\n\\nWait")."""
    prompt: Literal["raw", "solve"] = "raw"
    """``raw`` sends the problem as given; ``solve`` wraps it in the solve template."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on the whole message's tokens, every continuation included (default: each
    call gets the request's ``max_tokens``)."""
    stop_token_id: int | None = Field(default=None, ge=0)
    """The thinking calls stop at this token id (vLLM's ``stop_token_ids``, with
    ``min_tokens: 1``) instead of at the end marker's text (s1: ``<|im_start|>``)."""
    open_thinking: bool = False
    """The first call's prompt opens the thinking: the model continues an assistant
    message holding the start marker (s1 writes ``<|im_start|>think`` into its prompt)."""
    cap_marker: str | None = None
    """Written after the end marker when ``max_thinking_tokens`` cut the thinking, a
    newline before the marker (s1: ``"\nFinal Answer:"``); default: the marker alone."""

    def _thinking_sampling(self, thinking: Thinking) -> StepSampling:
        """A thinking call's stop: the end marker's text, or (``stop_token_id``) the
        token id, with ``min_tokens: 1`` as s1 sends it."""
        if self.stop_token_id is None:
            return StepSampling(stop=(thinking.markers.end,))
        return StepSampling(extra={"stop_token_ids": [self.stop_token_id], "min_tokens": 1})

    def _close(self, message: _Message, thinking: Thinking, capped: bool) -> str:
        """What closes the thinking: the end marker, or after a capped thinking (with a
        ``cap_marker``) a newline unless the thinking ends with one, the marker and it."""
        end = thinking.markers.end
        if not capped or self.cap_marker is None:
            return end
        thought = message.reasoning if message.reasoning else message.text
        newline = "" if thought.endswith("\n") else "\n"
        return newline + end + self.cap_marker

    def _left(self, spent: int) -> int | None:
        """Tokens the message's thinking may still generate (None: no cap of ours)."""
        caps = [c - spent for c in (self.max_tokens, self.max_thinking_tokens) if c is not None]
        return min(caps) if caps else None

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        label = "answer" if k == 1 else label
        sampling = self._thinking_sampling(ctx.thinking)
        if self.open_thinking:  # the prompt opens the thinking; the model continues it
            first = await CONTINUE.generate(
                ctx,
                problem,
                {"prompt": self.prompt, "partial": ctx.thinking.markers.start},
                label=label,
                n=k,
                max_tokens=self._left(0),
                sampling=sampling,
                role=StepRole(force_answer=True, continue_final=True),
            )
        else:
            first = await DIRECT.generate(
                ctx,
                problem,
                {"prompt": self.prompt},
                label=label,
                n=k,
                max_tokens=self._left(0),
                sampling=sampling,
                role=StepRole(force_answer=True),
            )
        return await gather(
            *(self._force(problem, ctx, first, i) for i in range(len(first.completions)))
        )

    def _reopens(self, message: _Message, wait: int) -> bool:
        """Whether the message is reopened for its ``wait``-th cue."""
        left = self._left(message.spent)
        if message.finish == "length" or wait > self.waits or (left is not None and left < 1):
            return False
        return self.mode == "ignore" or message.spent < self.min_tokens

    async def _force(self, problem: Problem, ctx: Context, first: Step, index: int) -> Solution:
        """Reopen sample ``index`` of ``first`` with the cue while it may, then close its
        thinking and let it answer."""
        thinking, sample = ctx.thinking, first.completions[index]
        opened = self.open_thinking and not sample.reasoning
        message = _Message(
            thinking.markers.start + sample.text if opened else sample.text,
            sample.reasoning or None,
            sample.completion_tokens,
            sample.finish_reason,
            (first.step_id, index),
            first.cut_short,
        )
        cue = self.cue
        if cue is None:
            cue = ctx.templates(BudgetForcing).template("budget_forcing_wait").render()
        wait = 1
        while not message.cut and self._reopens(message, wait):
            try:
                await self._continue(problem, ctx, message, cue, f"wait {wait}", answer=False)
            except BudgetExhaustedError:
                message.cut = True
            wait += 1
        capped = self.max_thinking_tokens is not None and (
            message.spent >= self.max_thinking_tokens
        )
        ended = message.finish != "length" or capped
        thought = self.open_thinking or thinking.thinks(sample)
        if thought and ended and not message.cut and not message.answered(thinking):
            close = self._close(message, thinking, capped)
            try:  # close the thinking with its marker: what follows is the answer
                await self._continue(problem, ctx, message, close, "answer", answer=True)
            except BudgetExhaustedError:
                message.cut = True
        if message.source == (first.step_id, index) and not opened:
            solution = Solution.from_step(first, index)
            return solution.marked_cut_short() if message.cut else solution
        # The message is put together; its step is the last continuation (its tail).
        text, reasoning = message.text, message.reasoning
        return Solution(text, ctx.answer(text), message.source[0], reasoning, message.cut)

    async def _continue(
        self,
        problem: Problem,
        ctx: Context,
        message: _Message,
        cue: str,
        label: str,
        *,
        answer: bool,
    ) -> None:
        """One continuation of ``message`` after ``cue``: more thinking, up to the marker,
        or (``answer``: the cue is the marker) the answer."""
        thinking = ctx.thinking
        partial = reopened(message.text, message.reasoning, cue, thinking)
        state = {"prompt": self.prompt, "partial": partial}
        step = await CONTINUE.generate(
            ctx,
            problem,
            state,
            message.source,
            label=label,
            max_tokens=self._message_left(message.spent) if answer else self._left(message.spent),
            sampling=StepSampling() if answer else self._thinking_sampling(thinking),
            role=StepRole(force_answer=True, continue_final=True),
        )
        message.grow(partial, step, thinking, answer=answer, cue=cue)

    def _message_left(self, spent: int) -> int | None:
        """Tokens the whole message may still generate (None: the request's own cap)."""
        return None if self.max_tokens is None else max(1, self.max_tokens - spent)

    def max_calls(self) -> int:
        return 2 + self.waits

    def max_calls_many(self, k: int) -> int:
        return 1 + k * (1 + self.waits)

    def max_samples(self) -> int:
        return 2 + self.waits

    def max_samples_many(self, k: int) -> int:
        return k * (2 + self.waits)
