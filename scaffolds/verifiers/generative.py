"""A generative verifier: a served chat model asked whether a solution is right.

Each candidate becomes the prompt :data:`VERIFY_TEMPLATE` (the problem, the solution,
"is it correct? yes or no"), sampled greedily for ONE token with its top logprobs. The
score is the probability mass on "yes" among the yes/no tokens at that position
(any case, with or without a leading space): ``p(yes) / (p(yes) + p(no))``. An engine
that sends no top tokens (an in-process one) is read from the sampled token and its
logprob instead. With text prompts on an engine that takes prompt lists (vLLM's
``/v1/completions``), a batch of candidates is ONE request; chat prompts go as one
request per candidate, all at once.

>>> chat_top = {"logprobs": {"content": [{"token": "Yes", "logprob": -0.2, "top_logprobs": [
...     {"token": "Yes", "logprob": -0.2231}, {"token": " no", "logprob": -1.6094}]}]}}
>>> round(yes_probability(Completion("Yes", extra=chat_top)), 4)
0.8
>>> round(yes_probability(Completion("no", logprobs=(-0.5,))), 4)
0.3935
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scaffolds.engines.protocol import (
    Completion,
    Engine,
    GenerateRequest,
    GenerateResult,
    Message,
    SamplingParams,
    Usage,
    Verdicts,
    batch_engine,
)
from scaffolds.fanout import gather
from scaffolds.prompts import Template

__all__ = [
    "VERIFY_TEMPLATE",
    "GenerativeVerifier",
    "step_prefixes",
    "top_tokens",
    "verify_prompt",
    "yes_probability",
]

VERIFY_TEMPLATE = Template(
    "verify",
    "### Problem\n$problem\n\n"
    "### Proposed solution\n$solution\n\n"
    "### Question\n"
    "Is the proposed solution correct, with the right final answer? Answer yes or no.",
)
"""The question a generative verifier answers (``ponder train verifier`` trains on it)."""

TOP_LOGPROBS = 20
"""Top tokens asked for at the verdict's position (vLLM's cap)."""


def verify_prompt(problem: str, solution: str, *, chat: bool = True) -> str | tuple[Message, ...]:
    """The verifier's prompt for one candidate, as chat messages or text.

    >>> verify_prompt("1+1?", "2", chat=False).splitlines()[1]
    '1+1?'
    """
    text = VERIFY_TEMPLATE.render(problem=problem, solution=solution)
    return (Message("user", text),) if chat else text


def step_prefixes(text: str, sep: str) -> list[str]:
    r"""A partial solution's step prefixes: its steps (split at ``sep``, empty ones
    dropped) up to and including each one, joined by ``sep``; the last is the whole text.
    A process verifier answers its question about each prefix.

    >>> step_prefixes("x\n\ny\n\n", "\n\n")
    ['x', 'x\n\ny']
    """
    steps = [s for s in text.split(sep) if s.strip()] if sep else [text]
    return [sep.join(steps[: i + 1]) for i in range(len(steps))] or [text]


class GenerativeVerifier:
    """``engine``'s yes/no verdict on each candidate. ``extra``: request fields every
    verdict sends (a thinking model's fields that turn its thinking off). It asks for
    top logprobs by their tokens' text (``top_logprob_texts``), which it reads: a vLLM
    engine would otherwise key them by token id."""

    generated_tokens = 1

    def __init__(
        self,
        engine: Engine,
        name: str,
        *,
        chat: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.name = name
        self.chat = chat
        self.params = SamplingParams(
            n=1,
            max_tokens=1,
            temperature=0.0,
            top_logprobs=TOP_LOGPROBS,
            top_logprob_texts=True,
            extra=dict(extra or {}),
        )

    def _batched(self) -> bool:
        return not self.chat and batch_engine(self.engine) is not None

    def requests(self, count: int) -> int:
        return 1 if self._batched() else count

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        requests = [
            GenerateRequest(verify_prompt(problem, c, chat=self.chat), self.params)
            for c in candidates
        ]
        results: list[GenerateResult]
        batch = batch_engine(self.engine) if self._batched() else None
        if batch is not None and requests:
            results = await batch.generate_batch(requests)
        else:
            results = list(await gather(*(self.engine.generate(r) for r in requests)))
        scores = tuple(yes_probability(r.completions[0]) for r in results)
        return Verdicts(scores, usage=sum((r.usage for r in results), Usage()))


def yes_probability(completion: Completion) -> float:
    """P(yes) among yes and no at the verdict's first token; 0.5 when neither shows."""
    tops = top_tokens(completion)
    if not tops:
        word = _verdict(completion.text)
        if word is None:
            return 0.5
        p = math.exp(completion.logprobs[0]) if completion.logprobs else 1.0
        return p if word == "yes" else 1.0 - p
    yes = sum(math.exp(lp) for token, lp in tops.items() if _verdict(token) == "yes")
    no = sum(math.exp(lp) for token, lp in tops.items() if _verdict(token) == "no")
    return yes / (yes + no) if yes + no > 0 else 0.5


def _verdict(token: str) -> str | None:
    word = token.strip().lower().rstrip(".,!")
    return word if word in ("yes", "no") else None


def top_tokens(completion: Completion) -> dict[str, float]:
    """Token -> logprob at the first position: the sampled token and the top ones, from
    the engine's own ``logprobs`` field (chat: ``content[0]``; completions: ``tokens``,
    ``token_logprobs`` and ``top_logprobs``); empty when the engine sent none.

    >>> top_tokens(Completion("a", extra={"logprobs": {"top_logprobs": [{"b": -2.0}],
    ...     "tokens": ["a"], "token_logprobs": [-0.1]}}))
    {'b': -2.0, 'a': -0.1}
    """
    raw = (completion.extra or {}).get("logprobs")
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, float] = {}
    content = raw.get("content")
    if isinstance(content, list) and content and isinstance(content[0], Mapping):
        first = content[0]
        for entry in [*(first.get("top_logprobs") or []), first]:
            if isinstance(entry, Mapping) and entry.get("logprob") is not None:
                out.setdefault(str(entry.get("token")), float(entry["logprob"]))
        return out
    tops, tokens, values = raw.get("top_logprobs"), raw.get("tokens"), raw.get("token_logprobs")
    if isinstance(tops, list) and tops and isinstance(tops[0], Mapping):
        out = {str(k): float(v) for k, v in tops[0].items() if v is not None}
    sampled = values[0] if isinstance(values, list) and values else None
    if isinstance(tokens, list) and tokens and sampled is not None:
        out.setdefault(str(tokens[0]), float(sampled))
    return out
