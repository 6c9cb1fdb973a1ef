"""One engine request for several text prompts: its answer shared out per prompt.

OpenAI's ``/v1/completions`` (and vLLM's) takes ``prompt: [p0, p1, ...]`` and answers
``len(prompts) * n`` choices, prompt ``p``'s samples at indices ``p * n .. p * n + n - 1``,
with ONE usage for the whole request. :func:`split_result` cuts that answer into one
:class:`~scaffolds.engines.protocol.GenerateResult` per prompt, so each prompt's scaffold run gets
its own samples and accounts its own share:

* completion tokens: each prompt's own samples' counts (exact when the engine sent token
  ids or logprobs; otherwise the request's total split evenly over its samples);
* prompt and cached tokens: the engine reports only their sum, so they are shared out in
  proportion to each prompt's size (its token ids when the engine sent them, else its
  characters), largest remainders first;
* the engine's own reasoning tokens: in proportion to each prompt's completion tokens;
* the call itself: counted on the first prompt's result (``calls`` 1, the others 0).

The shares always add up to exactly what the engine reported.

>>> from scaffolds.engines.protocol import Completion, Usage
>>> whole = GenerateResult(
...     tuple(Completion(t, completion_tokens=1) for t in "abcd"),
...     Usage(prompt_tokens=9, completion_tokens=4, calls=1),
... )
>>> [([c.text for c in r.completions], r.usage.prompt_tokens, r.usage.calls)
...  for r in split_result(whole, n=2, sizes=[2, 1])]
[(['a', 'b'], 6, 1), (['c', 'd'], 3, 0)]
"""

from __future__ import annotations

from collections.abc import Sequence

from scaffolds.engines.protocol import GenerateResult, Usage

__all__ = ["apportion", "split_result"]


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (evenly when they are all 0); the
    parts add up to ``total``, the largest remainders (then the earliest) get the rest.

    >>> apportion(10, [1, 1, 1]), apportion(7, [0, 0]), apportion(5, [3, 0, 1])
    ([4, 3, 3], [4, 3], [4, 0, 1])
    """
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def split_result(
    whole: GenerateResult,
    *,
    n: int,
    sizes: Sequence[int],
    prompt_ids: Sequence[tuple[int, ...] | None] | None = None,
) -> list[GenerateResult]:
    """``whole`` (the ``len(sizes) * n`` samples of one request) as one result per prompt,
    its usage shared out as the module docstring says; ``sizes`` weigh the prompts."""
    k = len(sizes)
    if len(whole.completions) != k * n:
        raise ValueError(f"expected {k * n} samples for {k} prompts, got {len(whole.completions)}")
    usage = whole.usage
    groups = [whole.completions[p * n : (p + 1) * n] for p in range(k)]
    generated = [sum(c.completion_tokens for c in group) for group in groups]
    if sum(generated) != usage.completion_tokens:  # counts that do not add up: shares
        generated = apportion(usage.completion_tokens, generated)
    prompt = apportion(usage.prompt_tokens, sizes)
    cached = apportion(usage.cached_tokens, sizes)
    reasoning = apportion(usage.reasoning_tokens, generated)
    return [
        GenerateResult(
            groups[p],
            Usage(prompt[p], generated[p], cached[p], 1 if p == 0 else 0, reasoning[p]),
            prompt_ids[p] if prompt_ids is not None else None,
        )
        for p in range(k)
    ]
