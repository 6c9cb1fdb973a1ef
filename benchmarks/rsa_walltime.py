"""RSA's wall time against the ideal: ``rsa(n=8, k=4, rounds=2)`` vs three generations.

RSA's schedule is ``rounds + 1`` generations deep: the population (one request of
``n``), then each round's ``n`` aggregations at once. On a fake OpenAI engine with a
fixed per-token latency (parallel sequences do not slow each other, like a batching
engine under light load) and every call ``--tokens`` long, the ideal is three
generations one after another. Ponder runs behind a real uvicorn server and is called
with the openai SDK, so HTTP, parsing and the answer vote are all included. The goal is
at most 1.2x; a scaffold that ran its calls one by one would take ``1 + n * rounds``
generations (17 here).

    python -m benchmarks.rsa_walltime --tokens 200 --per-token-ms 2
"""

from __future__ import annotations

import argparse

import httpx

from benchmarks.fanout import MESSAGES, chat_timer, respond_with, timed
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder

SPEC = "rsa(n=8, k=4, rounds=2)"
DEPTH = 3  # the population, then two rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200, help="tokens per generation")
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    # cached_tokens=0: no simulated prefix cache. The fake engine finds cached prefixes by
    # comparing each prompt with the last 256 it saw, token by token; RSA's aggregation
    # prompts share ~4 generations of prefix, so that test-double bookkeeping (in this
    # process, under the GIL) would be timed as if it were the scaffold's.
    config = FakeEngineConfig(
        respond=respond_with(args.tokens),
        latency_per_token=args.per_token_ms / 1000,
        cached_tokens=0,
    )
    with running_fake_engine(config) as fake:
        direct = httpx.Client(base_url=fake.base_url, timeout=60)

        def generation() -> None:
            body = {"model": fake.config.model, "messages": MESSAGES, "n": 1}
            direct.post("/chat/completions", json=body).raise_for_status()

        def three_in_a_row() -> None:
            for _ in range(DEPTH):
                generation()

        one = timed(generation, args.repeats)
        sequential = timed(three_in_a_row, args.repeats)
        settings = Settings(model="m", engines=(fake.base_url,), engine_model=fake.config.model)
        with running_ponder(settings) as url:
            run = chat_timer(f"{url}/v1", "x", args.repeats)
            calls_before = fake.state.calls
            rsa = run("m", {"scaffold": SPEC})
            calls = (fake.state.calls - calls_before) // args.repeats
    print(
        f"{args.tokens} tokens per generation at {args.per_token_ms} ms/token; "
        f"median of {args.repeats}"
    )
    print(f"one direct generation          {one * 1000:8.0f} ms")
    print(f"three sequential generations   {sequential * 1000:8.0f} ms")
    print(f"{SPEC:<30} {rsa * 1000:8.0f} ms  ({calls} engine calls per run)")
    print(f"ratio rsa / three sequential   {rsa / sequential:8.2f}x  (goal <= 1.2x)")
    print(f"one call after another would be {(1 + 8 * 2) * one * 1000:7.0f} ms")


if __name__ == "__main__":
    main()
