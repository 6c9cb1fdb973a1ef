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


def forced_prompt(prompt: Prompt, completion: Completion, cue: str) -> Prompt:
    """``prompt`` continued by the cut ``completion`` and the ``cue``: the same text for
    a completions prompt, an assistant turn and a user turn for a chat."""
    if isinstance(prompt, str):
        return prompt + completion.text + cue
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
    )
