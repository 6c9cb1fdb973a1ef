"""Several greedy samples in one call, for servers that refuse them.

vLLM answers ``n > 1`` at temperature 0 with a 400 ("n must be 1 when using greedy
sampling"), yet harnesses ask for greedy decoding by default, and a scaffold that draws
several samples (``majority(k=4)``) then sends exactly that. Such a call goes out as
``n`` one-sample requests at once, and their results come back as one call's: the
samples in order, the usage summed (still one call of the scaffold's plan).

>>> import asyncio
>>> from scaffolds.engines.protocol import GenerateRequest, SamplingParams
>>> from scaffolds.engines.mock import MockEngine
>>> engine = MockEngine(lambda r: "4")
>>> request = GenerateRequest("2+2=", SamplingParams(n=3, temperature=0.0))
>>> result = asyncio.run(one_by_one(engine.generate, request))
>>> [c.text for c in result.completions], result.usage.calls, len(engine.requests)
(['4', '4', '4'], 1, 3)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from scaffolds.engines.protocol import GenerateRequest, GenerateResult, Usage
from scaffolds.fanout import gather

__all__ = ["greedy_samples", "one_by_one"]


def greedy_samples(request: GenerateRequest) -> bool:
    """Whether ``request`` asks for several samples at temperature 0."""
    return request.params.n > 1 and request.params.temperature == 0


async def one_by_one(
    generate: Callable[[GenerateRequest], Awaitable[GenerateResult]], request: GenerateRequest
) -> GenerateResult:
    """``request``'s samples as that many one-sample calls at once, merged into one result.

    The first failure is raised as is and cancels the other calls.
    """
    single = dataclasses.replace(request, params=request.params.replace(n=1))
    results = await gather(*(generate(single) for _ in range(request.params.n)))
    usage = sum((r.usage for r in results), Usage())
    return GenerateResult(
        tuple(c for r in results for c in r.completions),
        dataclasses.replace(usage, calls=1),
        results[0].prompt_token_ids,
        no_room=any(r.no_room for r in results),
    )
