"""A MockEngine handler that thinks before it answers, the way vLLM with a reasoning
parser returns a thinking model: ``think`` words of reasoning, then the answer.

- ``max_tokens`` that ends inside the thinking: empty ``text``, the thinking so far in
  ``reasoning``, ``finish_reason`` "length";
- ``chat_template_kwargs.enable_thinking: false`` (Qwen3's switch) or
  ``reasoning_effort: "low"``: no thinking, the answer in ``text``;
- a continued assistant message whose thinking is already closed: the answer, which a
  parser that cannot see the prompt reports as ``reasoning`` (vLLM's deepseek_r1 does).
"""

from __future__ import annotations

from collections.abc import Callable

from scaffolds.engines.protocol import Completion, GenerateRequest

THOUGHT = "hmm"


class ThinkingModel:
    """``answer(request)`` is what the model says after its thinking."""

    def __init__(self, answer: Callable[[GenerateRequest], str], think: int = 300) -> None:
        self.answer = answer
        self.think = think
        self.requests: list[GenerateRequest] = []

    def __call__(self, request: GenerateRequest) -> list[Completion]:
        self.requests.append(request)
        params = request.params
        limit = params.max_tokens if params.max_tokens is not None else 10**9
        answer = self.answer(request).split()
        kwargs = params.extra.get("chat_template_kwargs") or {}
        low = params.extra.get("reasoning_effort") == "low"
        off = kwargs.get("enable_thinking") is False or low
        if isinstance(request.prompt, str):  # /v1/completions: no parser, the text as is
            closed = request.prompt.endswith("</think>")
        else:
            closed = request.continue_final and "</think>" in request.prompt[-1].content
        if off or closed:
            words = answer[:limit]
            finish = "length" if len(answer) > limit else "stop"
            text = " ".join(words)
            parsed = closed and not off  # the parser took the answer for reasoning
            content, reasoning = ("", text) if parsed else (text, None)
            sample = Completion(content, finish, reasoning, len(words))
            return [sample] * params.n
        thinking = [THOUGHT] * self.think
        if limit <= self.think:
            cut = Completion("", "length", " ".join(thinking[:limit]), limit)
            return [cut] * params.n
        words = answer[: limit - self.think]
        finish = "length" if len(answer) > len(words) else "stop"
        done = Completion(" ".join(words), finish, " ".join(thinking), self.think + len(words))
        return [done] * params.n
