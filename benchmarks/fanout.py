"""Fan-out wall time: ``gsr(n=8)`` and ``majority(k=8)`` through Ponder against the ideal.

A fake OpenAI engine on loopback answers with a fixed per-token latency (parallel
sequences do not slow each other, like a batching engine under light load). The ideal
wall time of ``majority(k=8)`` is one generation; of ``gsr(n=8)``, one generation plus
one refine generation. Ponder runs behind a real uvicorn server and is called with the
openai SDK, so HTTP, parsing and streaming costs are all included.

    python -m benchmarks.fanout --tokens 200 --per-token-ms 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx
import openai

from server.fake_engine import FakeEngineConfig, running_fake_engine
from server.settings import Settings
from tests.server.conftest import running_ponder


def respond_with(tokens: int):  # type: ignore[no-untyped-def]
    def respond(body: dict[str, Any]) -> list[str]:
        text = " ".join(["step"] * (tokens - 1)) + " \\boxed{42}"
        return [text] * int(body.get("n") or 1)

    return respond


def timed(fn: Any, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200, help="tokens per generation")
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = FakeEngineConfig(
        respond=respond_with(args.tokens), latency_per_token=args.per_token_ms / 1000
    )
    messages = [{"role": "user", "content": "What is 6*7?"}]
    with running_fake_engine(config) as fake:
        direct = httpx.Client(base_url=fake.base_url, timeout=60)
        settings = Settings(model="m", engines=(fake.base_url,), engine_model=fake.config.model)

        def one_generation() -> None:
            body = {"model": fake.config.model, "messages": messages, "n": 1}
            direct.post("/chat/completions", json=body).raise_for_status()

        ideal = timed(one_generation, args.repeats)
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)

            def through_ponder(spec: str) -> float:
                def call() -> None:
                    client.chat.completions.create(
                        model="m", messages=messages, extra_body={"scaffold": spec}
                    )  # type: ignore[call-overload]

                return timed(call, args.repeats)

            rows = [
                ("single", through_ponder("single"), ideal, 1),
                ("majority(k=8)", through_ponder("majority(k=8)"), ideal, 8),
                ("gsr(n=8)", through_ponder("gsr(n=8)"), 2 * ideal, 9),
            ]
    print(
        f"{args.tokens} tokens per generation at {args.per_token_ms} ms/token; "
        f"median of {args.repeats}; one direct generation = {ideal * 1000:.0f} ms"
    )
    print(f"{'scaffold':<16}{'ponder':>10}{'ideal':>10}{'ratio':>8}{'sequential':>12}")
    for name, wall, best, sequential_calls in rows:
        print(
            f"{name:<16}{wall * 1000:>8.0f}ms{best * 1000:>8.0f}ms{wall / best:>8.2f}"
            f"{sequential_calls * ideal * 1000:>10.0f}ms"
        )


if __name__ == "__main__":
    main()
