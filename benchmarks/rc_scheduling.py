"""Reasoning Cache scheduling: Ponder's per-sample pipeline against a lock-step loop.

The paper's loop waits for every sample of every problem at each turn before the next
turn starts; Ponder advances each sample on its own. Both schedules make exactly the
same engine calls with the same prompts here (same strategy object, same prompts); only
the waiting differs. The engine is simulated: a call takes ``tokens x per-token latency``
with heavy-tailed (Pareto) lengths, and at most ``--slots`` sequences decode at once
(an engine's batch capacity).

    python -m benchmarks.rc_scheduling --problems 64 --samples 4 --steps 4

Prints both wall times and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import zlib
from collections.abc import AsyncIterator

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.run import run_scaffold
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import (
    Completion,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
    stream_from_generate,
)
from scaffolds.fanout import gather
from scaffolds.problem import Problem
from scaffolds.strategies.majority import Majority
from scaffolds.strategies.rc import RC


class SimulatedEngine:
    """Sleeps ``length x per_token`` per call, lengths Pareto-distributed per (prompt, i)."""

    def __init__(self, per_token: float, slots: int, alpha: float, seed: int) -> None:
        self.per_token = per_token
        self.slots = asyncio.Semaphore(slots)
        self.alpha = alpha
        self.seed = seed
        self.calls = 0

    def _length(self, request: GenerateRequest, index: int) -> int:
        key = zlib.crc32(f"{self.seed}:{index}:{request.prompt_text()}".encode())
        rng = random.Random(key)
        cap = request.params.max_tokens or 4096
        return min(cap, int(40 * rng.paretovariate(self.alpha)))

    async def _one(self, request: GenerateRequest, index: int) -> Completion:
        length = self._length(request, index)
        async with self.slots:
            await asyncio.sleep(length * self.per_token)
        truncated = length >= (request.params.max_tokens or 4096)
        text = f"chunk {index} of {length} tokens \\boxed{{{length % 10}}}"
        return Completion(text, "length" if truncated else "stop", None, length)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        completions = await gather(*(self._one(request, i) for i in range(request.params.n)))
        usage = Usage(10, sum(c.completion_tokens for c in completions), 0, 1)
        return GenerateResult(tuple(completions), usage)

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return stream_from_generate(self, request)


async def pipelined(engine: SimulatedEngine, rc: RC, problems: list[Problem], k: int) -> None:
    """Ponder: every sample of every problem advances on its own."""
    await gather(*(run_scaffold(Majority(k=k, solver=rc), p, engine) for p in problems))


async def lock_step(engine: SimulatedEngine, rc: RC, problems: list[Problem], k: int) -> None:
    """The paper's schedule: each turn waits for all samples of all problems."""
    contexts = [Context.root(engine) for _ in problems]
    prompts = contexts[0].templates(RC)
    first = await gather(
        *(
            ctx.generate(
                ctx.prompt(prompts.template("rc_reasoning_start"), p),
                kind="reasoning",
                label="reasoning 1",
                n=k,
                max_tokens=rc.reasoning_tokens,
            )
            for ctx, p in zip(contexts, problems, strict=True)
        )
    )
    attempts = [
        [Solution(c.text, None, reasoning=c.reasoning) for c in step.completions] for step in first
    ]
    summaries = [[prompts.text("rc_no_summary")] * k for _ in problems]
    for _turn in range(2, rc.steps + 1):
        summary_steps = await gather(
            *(
                ctx.generate(
                    ctx.prompt(
                        prompts.template("rc_summary"),
                        p,
                        summary=summaries[i][j],
                        attempt=ctx.thought(attempts[i][j].text, attempts[i][j].reasoning),
                    ),
                    kind="summary",
                    label="summary",
                    max_tokens=rc.summary_tokens,
                    role=StepRole(helper=True),
                )
                for i, (ctx, p) in enumerate(zip(contexts, problems, strict=True))
                for j in range(k)
            )
        )
        for flat, step in enumerate(summary_steps):
            summaries[flat // k][flat % k] = step.first.text
        reasoning_steps = await gather(
            *(
                ctx.generate(
                    ctx.prompt(
                        prompts.template("rc_reasoning_continue"), p, summary=summaries[i][j]
                    ),
                    kind="reasoning",
                    label="reasoning",
                    max_tokens=rc.reasoning_tokens,
                )
                for i, (ctx, p) in enumerate(zip(contexts, problems, strict=True))
                for j in range(k)
            )
        )
        for flat, step in enumerate(reasoning_steps):
            attempts[flat // k][flat % k] = Solution(
                step.first.text, None, reasoning=step.first.reasoning
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--per-token-ms", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=256, help="sequences decoding at once")
    parser.add_argument("--alpha", type=float, default=1.5, help="Pareto tail (smaller: heavier)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rc = RC(steps=args.steps, reasoning_tokens=2048, summary_tokens=256)
    problems = [Problem.from_text(f"problem {i}: what is {i} * 7?") for i in range(args.problems)]
    results = {}
    for name, schedule in (("lock-step (paper)", lock_step), ("pipelined (Ponder)", pipelined)):
        engine = SimulatedEngine(args.per_token_ms / 1000, args.slots, args.alpha, args.seed)
        started = time.perf_counter()
        await schedule(engine, rc, problems, args.samples)
        results[name] = (time.perf_counter() - started, engine.calls)
    print(
        f"{args.problems} problems x {args.samples} samples x {args.steps} steps, "
        f"Pareto alpha {args.alpha}, {args.per_token_ms} ms/token, {args.slots} slots"
    )
    for name, (seconds, calls) in results.items():
        print(f"  {name:<20} {seconds:7.2f} s  ({calls} engine calls)")
    lock, pipe = results["lock-step (paper)"][0], results["pipelined (Ponder)"][0]
    print(f"  speed-up: {lock / pipe:.2f}x (lock-step wall / pipelined wall)")


if __name__ == "__main__":
    asyncio.run(main())
