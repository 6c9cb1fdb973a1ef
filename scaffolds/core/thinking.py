"""Thinking models: where a sample's thinking ends, and how a helper step turns it off.

A thinking model writes its reasoning first and its answer after an end marker
(``</think>`` for Qwen3 and R1 distills). Served by vLLM with a reasoning parser, the
thinking arrives as ``Completion.reasoning`` and ``text`` is the answer alone; without
one, both are in ``text``. :class:`Thinking` reads either form the same way, and says
what a helper step (summary, feedback, abstraction, judge) adds to its request to turn
thinking off (:data:`THINKING_OFF` presets). :class:`Routing` is what a run knows of the
served models: its own model's thinking, and the models helper steps may go to.

>>> qwen3 = Thinking.of("qwen3")
>>> qwen3.off
{'chat_template_kwargs': {'enable_thinking': False}}
>>> qwen3.thought("<think>7+9=16</think>The sum is 16."), qwen3.after("<think>7</think>16")
('7+9=16', '16')
>>> qwen3.is_open(Completion("", "length", reasoning="7+9="))
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scaffolds.engines.protocol import Completion, Engine
from scaffolds.errors import InvalidRequestError
from scaffolds.evaluation.answers import ThinkingMarkers

__all__ = ["THINKING_OFF", "HelperModel", "Routing", "Thinking", "helper_text", "thinking_off"]

THINKING_OFF: Mapping[str, Mapping[str, Any]] = {
    "none": {},
    "qwen3": {"chat_template_kwargs": {"enable_thinking": False}},
    "gpt-oss": {"reasoning_effort": "low"},
}
"""Request fields that turn a model family's thinking off (or down) for a helper step."""


def thinking_off(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A preset name of :data:`THINKING_OFF` or a JSON object of request fields.

    >>> thinking_off("gpt-oss"), thinking_off('{"top_k": 1}'), thinking_off(None)
    ({'reasoning_effort': 'low'}, {'top_k': 1}, {})
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    text = value.strip()
    if text.startswith("{"):
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError("thinking_off must be a preset name or a JSON object")
        return parsed
    if text not in THINKING_OFF:
        known = ", ".join(THINKING_OFF)
        raise ValueError(f"unknown thinking_off preset {text!r} (known: {known}, or a JSON object)")
    return dict(THINKING_OFF[text])


@dataclass(frozen=True, slots=True)
class Thinking:
    """How one served model thinks.

    ``declared``: the model always thinks first (text without an end marker is all
    thinking, even without a start marker, as when the chat template opens the block);
    otherwise a sample thinks when the engine separated reasoning or its text opens a
    block. ``off``: the request fields a helper step adds to turn thinking off.
    ``markers``: where its thinking starts and ends in a text (the same
    :class:`~scaffolds.evaluation.answers.ThinkingMarkers` that answer reading uses).

    >>> s1 = Thinking(declared=True, markers=ThinkingMarkers("<|think|>", "<|answer|>"))
    >>> s1.after("<|think|>7+9<|answer|> 16"), s1.markers.as_dict()["end"]
    ('16', '<|answer|>')
    """

    declared: bool = False
    off: Mapping[str, Any] = field(default_factory=dict)
    markers: ThinkingMarkers = field(default_factory=ThinkingMarkers)

    @property
    def start(self) -> str:
        """Its markers' start (``<think>`` unless told)."""
        return self.markers.start

    @property
    def end(self) -> str:
        """Its markers' end (``</think>`` unless told)."""
        return self.markers.end

    @classmethod
    def of(cls, preset: str, **changes: Any) -> Thinking:
        """A declared thinking model whose helper steps use ``preset``'s fields."""
        return cls(declared=True, off=thinking_off(preset), **changes)

    def thinks(self, completion: Completion) -> bool:
        """Whether this sample thought (reasoning separated, or a block in its text)."""
        text = completion.text
        start, end = self.markers.start, self.markers.end
        return self.declared or bool(completion.reasoning) or start in text or end in text

    def is_open(self, completion: Completion) -> bool:
        """The sample stopped inside its thinking (the budget cut it mid-thought).

        >>> Thinking().is_open(Completion("<think>16 1", "length"))
        True
        >>> Thinking().is_open(Completion("936", "length"))
        False
        """
        if not completion.truncated or not self.thinks(completion):
            return False
        if completion.reasoning:
            return not completion.text.strip() and self.markers.end not in completion.text
        return self.markers.end not in completion.text

    def thought(self, text: str, reasoning: str | None = None) -> str:
        """What the model thought: the reasoning channel, else the text before the end
        marker (its start marker dropped), else the whole text."""
        if reasoning:
            return reasoning
        head, sep, _ = text.partition(self.markers.end)
        if not sep:
            return text
        _, opened, inner = head.partition(self.markers.start)
        return inner if opened else head

    def after(self, text: str) -> str:
        """The part of ``text`` after the thinking (the whole text if it has no end
        marker and opens no block; the thinking itself if it never closed)."""
        _, sep, tail = text.partition(self.markers.end)
        if sep:
            return tail.lstrip()
        _, opened, inner = text.partition(self.markers.start)
        return inner if opened else text


def helper_text(completion: Completion, thinking: Thinking) -> tuple[str, str]:
    """A helper step's usable text and where it came from: ``text`` (the part after the
    thinking), ``reasoning`` (that part was empty: the thinking, markers dropped) or
    ``empty`` (nothing at all: the caller fills in a placeholder).

    >>> helper_text(Completion("", "length", reasoning="I add 7 and 9."), Thinking())
    ('I add 7 and 9.', 'reasoning')
    >>> helper_text(Completion("<think>7+9</think>I added."), Thinking())
    ('I added.', 'text')
    >>> helper_text(Completion("<think>", "length"), Thinking())
    ('', 'empty')
    """
    text, (start, end) = completion.text, (thinking.markers.start, thinking.markers.end)
    if end in text:
        after = text.partition(end)[2].strip()
    else:
        unfinished = start in text or (thinking.declared and completion.truncated)
        after = "" if unfinished else text
    if after.strip():
        return after, "text"
    thought = thinking.thought(text, completion.reasoning)
    thought = thought.replace(start, "").replace(end, "").strip()
    return (thought, "reasoning") if thought else ("", "empty")


@dataclass(frozen=True, slots=True)
class HelperModel:
    """A served model that helper steps may run on: its engine and how it thinks."""

    engine: Engine
    thinking: Thinking = Thinking()


@dataclass(frozen=True, slots=True)
class Routing:
    """What a run knows of the served models: how its own model thinks, the model its
    helper steps go to by default (None: its own), and every model they may name."""

    thinking: Thinking = Thinking()
    helper: str | None = None
    models: Mapping[str, HelperModel] = field(default_factory=dict)

    def target(self, name: str | None) -> HelperModel | None:
        """The served model ``name`` (None: the run's own model); an unknown name is an
        :class:`InvalidRequestError` (the server refuses such specs before a run)."""
        if name is None:
            return None
        if name not in self.models:
            known = ", ".join(self.models) or "none"
            raise InvalidRequestError(
                f"no served model {name!r} for this step (known: {known})", param="model"
            )
        return self.models[name]
