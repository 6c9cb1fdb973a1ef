"""Forcing an answer when the budget cuts a sample short (the MRT "time is up" move):
the sample's text continues with a short cue, and the forced answer is joined back on.

A thinking model cut mid-thought gets its thinking closed instead (a cue inside the
thinking, then its end marker, in the same assistant message: :func:`closed_prompt`),
and its answer is what it writes after that (:func:`with_closed_thinking`); one cut
after its thinking continues the same message too (:func:`continued_prompt`).

>>> from scaffolds.engines.protocol import Completion
>>> cut = Completion("Adding 3 and 4 gives", finish_reason="length", completion_tokens=5)
>>> forced_prompt("3+4=", cut, " Time is up: ")
'3+4=Adding 3 and 4 gives Time is up: '
>>> answer = Completion("\\\\boxed{7}", completion_tokens=4)
>>> joined = with_forced_answer(cut, " Time is up: ", answer)
>>> joined.text, joined.completion_tokens, joined.finish_reason
('Adding 3 and 4 gives Time is up: \\\\boxed{7}', 9, 'length')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from scaffolds.core.thinking import Thinking
from scaffolds.engines.protocol import Completion, Message, Prompt
from scaffolds.evaluation.answers import extract_answer
from scaffolds.prompts import PromptSet

__all__ = [
    "ForcedPlan",
    "closed_prompt",
    "continued_prompt",
    "forced_answer_text",
    "forced_prompt",
    "plan_forced",
    "with_closed_thinking",
    "with_forced_answer",
]


def forced_prompt(
    prompt: Prompt, completion: Completion, cue: str, *, continued: bool = False
) -> Prompt:
    """``prompt`` continued by the cut ``completion`` and the ``cue``: the same text for
    a completions prompt, an assistant turn and a user turn for a chat. ``continued``:
    the chat's last (assistant) message was being continued, so the cut text joins it.

    >>> partial = (Message("user", "3+4="), Message("assistant", "Adding"))
    >>> forced = forced_prompt(partial, Completion(" 3 and 4"), "Now:", continued=True)
    >>> [(m.role, m.content) for m in forced[1:]]
    [('assistant', 'Adding 3 and 4'), ('user', 'Now:')]
    """
    if isinstance(prompt, str):
        return prompt + completion.text + cue
    if continued and prompt and prompt[-1].role == "assistant":
        joined = Message("assistant", prompt[-1].content + completion.text)
        return (*prompt[:-1], joined, Message("user", cue.strip()))
    return (*prompt, Message("assistant", completion.text), Message("user", cue.strip()))


def with_forced_answer(completion: Completion, cue: str, extra: Completion) -> Completion:
    """The cut ``completion`` with the cue and the forced answer ``extra`` appended
    (still finished by ``length``: the budget cut it)."""
    return _forced(completion, completion.text + cue + extra.text, extra)


def _forced(completion: Completion, text: str, extra: Completion) -> Completion:
    """``completion`` with its text now ``text``, charged ``extra``'s tokens; still
    finished by ``length`` (the budget cut it), its token ids and logprobs its own. The
    engine's wire fields go: they describe one generation, and this answer is two."""
    return dataclasses.replace(
        completion,
        text=text,
        finish_reason="length",
        completion_tokens=completion.completion_tokens + extra.completion_tokens,
        extra=None,
    )


def closed_prompt(
    prompt: Prompt,
    completion: Completion,
    cue: str,
    thinking: Thinking,
    *,
    continued: bool = False,
) -> Prompt:
    """``prompt`` continued by a sample cut mid-thought, its thinking closed: the cue
    inside the thinking, then the end marker, all in the same assistant message (a chat
    is sent with ``continue_final``), so what the model writes next is its answer.

    >>> cut = Completion("", "length", reasoning="16 1")
    >>> closed_prompt((Message("user", "347+589="),), cut, " ok", Thinking())[-1].content
    '<think>16 1 ok</think>'
    >>> closed_prompt("347+589=", Completion("<think>16 1", "length"), "", Thinking())
    '347+589=<think>16 1</think>'
    """
    if completion.reasoning:
        opened = "" if continued else thinking.markers.start
        body = opened + completion.reasoning + completion.text
    elif thinking.markers.start in completion.text or continued or isinstance(prompt, str):
        body = completion.text
    else:  # a declared thinking model whose template opened the block in the prompt
        body = thinking.markers.start + completion.text
    closed = body + cue + thinking.markers.end
    if isinstance(prompt, str):
        return prompt + closed
    if continued and prompt and prompt[-1].role == "assistant":
        return (*prompt[:-1], Message("assistant", prompt[-1].content + closed))
    return (*prompt, Message("assistant", closed))


def continued_prompt(
    prompt: Prompt, completion: Completion, cue: str, thinking: Thinking, *, continued: bool
) -> Prompt:
    """``prompt`` continued by a thinking model's sample cut after its thinking (mid-answer)
    and ``cue``, in the same assistant message (its thinking block put back).

    >>> cut = Completion("The sum", "length", reasoning="16 13 9")
    >>> last = continued_prompt((Message("user", "q"),), cut, " Now:", Thinking(), continued=False)
    >>> last[-1].role, last[-1].content
    ('assistant', '<think>16 13 9</think>The sum Now:')
    """
    if isinstance(prompt, str):
        return prompt + completion.text + cue
    block = (
        ""
        if continued or not completion.reasoning
        else (thinking.markers.start + completion.reasoning + thinking.markers.end)
    )
    body = block + completion.text + cue
    if continued and prompt and prompt[-1].role == "assistant":
        return (*prompt[:-1], Message("assistant", prompt[-1].content + body))
    return (*prompt, Message("assistant", body))


def forced_answer_text(extra: Completion, thinking: Thinking) -> str:
    """What the model wrote after a cue that closed its thinking: the content, or what a
    reasoning parser took for reasoning (the block was closed in the prompt, which the
    parser does not see), past any block it opened again.

    >>> forced_answer_text(Completion("", reasoning="936"), Thinking())
    '936'
    >>> forced_answer_text(Completion("<think>9</think> 936"), Thinking())
    '936'
    """
    text = extra.text if extra.text.strip() else (extra.reasoning or "")
    if thinking.markers.end in text:
        text = text.partition(thinking.markers.end)[2]
    return text.strip()


def with_closed_thinking(
    completion: Completion, cue: str, thinking: Thinking, extra: Completion, *, closed: bool
) -> Completion:
    """The cut ``completion`` with the forced answer ``extra``. ``closed``: its thinking
    was open and the cue closed it; the answer is the text after the block (a reasoning
    parser's ``reasoning`` keeps the thinking; without one the text keeps the closed
    block before the answer). Otherwise the cue and the answer join the cut text. An
    empty answer leaves the text as it was: the cue is never the answer.

    >>> cut = Completion("", "length", reasoning="16 1", completion_tokens=3)
    >>> done = with_closed_thinking(cut, "", Thinking(), Completion("936", completion_tokens=4),
    ...                             closed=True)
    >>> done.text, done.reasoning, done.completion_tokens, done.finish_reason
    ('936', '16 1', 7, 'length')
    """
    answer = forced_answer_text(extra, thinking)
    if not answer:
        text = completion.text
    elif not closed:
        text = completion.text + cue + answer
    elif completion.reasoning:
        text = answer
    else:
        text = completion.text + cue + thinking.markers.end + answer
    return _forced(completion, text, extra)


@dataclass(frozen=True, slots=True)
class ForcedPlan:
    """How one cut sample is asked for its answer: the prompt, the cue in it (from
    template ``template``), whether the cue closes an open thinking block, and whether
    the chat's last assistant message is continued."""

    prompt: Prompt
    cue: str
    template: str
    closed: bool = False
    same_message: bool = False

    def joined(self, completion: Completion, extra: Completion, thinking: Thinking) -> Completion:
        """The cut ``completion`` with the forced answer ``extra`` put on."""
        if self.closed or self.same_message:
            return with_closed_thinking(completion, self.cue, thinking, extra, closed=self.closed)
        return with_forced_answer(completion, self.cue, extra)


def plan_forced(
    prompt: Prompt,
    completion: Completion,
    prompts: PromptSet,
    thinking: Thinking,
    *,
    continued: bool = False,
    answered: Callable[[str], bool] | None = None,
) -> ForcedPlan | None:
    """The forced-answer step for a budget-cut ``completion``, or None when it already
    has an answer after its thinking (``answered``: whether a text has one as the run
    reads answers; default: any answer :func:`extract_answer` finds). Mid-thought: close
    the thinking with the set's ``force_answer_think`` cue; otherwise the ``force_answer``
    cue, in the same message for a thinking model's chat, else in a user turn (or
    appended to a text prompt).

    >>> from scaffolds.prompts import common_prompts
    >>> plan = plan_forced("3+4=", Completion("<think>7", "length"), common_prompts("compact"),
    ...                    Thinking())
    >>> plan.prompt, plan.closed
    ('3+4=<think>7</think>', True)
    """
    if thinking.is_open(completion):
        cue = prompts.template("force_answer_think").render()
        closed = closed_prompt(prompt, completion, cue, thinking, continued=continued)
        chat = not isinstance(prompt, str)
        return ForcedPlan(closed, cue, "force_answer_think", closed=True, same_message=chat)
    has_answer = answered or (lambda text: extract_answer(text) is not None)
    if has_answer(thinking.after(completion.text)):
        return None
    cue = prompts.template("force_answer").render()
    if not isinstance(prompt, str) and thinking.thinks(completion):
        same = continued_prompt(prompt, completion, cue, thinking, continued=continued)
        return ForcedPlan(same, cue, "force_answer", same_message=True)
    user_turn = forced_prompt(prompt, completion, cue, continued=continued)
    return ForcedPlan(user_turn, cue, "force_answer")
