"""Forcing an answer when the budget cuts a sample short (the MRT "time is up" move):
the sample's text continues with a short cue, and the forced answer is joined back on.

>>> from scaffolds.engine import Completion
>>> cut = Completion("Adding 3 and 4 gives", finish_reason="length", completion_tokens=5)
>>> forced_prompt("3+4=", cut, " Time is up: ")
'3+4=Adding 3 and 4 gives Time is up: '
>>> answer = Completion("\\\\boxed{7}", completion_tokens=4)
>>> joined = with_forced_answer(cut, " Time is up: ", answer)
>>> joined.text, joined.completion_tokens, joined.finish_reason
('Adding 3 and 4 gives Time is up: \\\\boxed{7}', 9, 'length')
"""

from __future__ import annotations

from scaffolds.engine import Completion, Message, Prompt

__all__ = ["forced_prompt", "with_forced_answer"]


def forced_prompt(
    prompt: Prompt, completion: Completion, cue: str, *, continued: bool = False
) -> Prompt:
    """``prompt`` continued by the cut ``completion`` and the ``cue``: the same text for
    a completions prompt, an assistant turn and a user turn for a chat. ``continued``:
    the chat's last (assistant) message was being continued, so the cut text joins it.

    >>> partial = (Message("user", "3+4="), Message("assistant", "Adding"))
    >>> forced_prompt(partial, Completion(" 3 and 4"), "Now:", continued=True)[1:]
    (Message(role='assistant', content='Adding 3 and 4'), Message(role='user', content='Now:'))
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
    return Completion(
        text=completion.text + cue + extra.text,
        finish_reason="length",
        reasoning=completion.reasoning,
        completion_tokens=completion.completion_tokens + extra.completion_tokens,
        token_ids=completion.token_ids,
        logprobs=completion.logprobs,
        top_logprobs=completion.top_logprobs,
    )
