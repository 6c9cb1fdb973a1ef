"""Fan-out wall time: Ponder's parallel scaffolds against the ideal and against optillm.

A fake OpenAI engine on loopback answers every call with ``--tokens`` tokens at a fixed
per-token latency (parallel sequences do not slow each other, like a batching engine
under light load). The ideal wall time of a scaffold is its sequential depth in
generations: ``majority(k)`` is one generation; ``gsr(n)`` and ``best_of_n(n)`` are one
generation plus one refine or judge generation. Ponder runs behind a real uvicorn server
and is called with the openai SDK, so HTTP, parsing and streaming costs are all
included.

optillm's closest approaches run on the same engine, each against its Ponder
counterpart: ``self_consistency`` (5 samples) vs ``majority(k=5)``, ``bon`` (3 samples,
then a rating call per sample) vs ``best_of_n(n=3)``, and ``moa`` (3 samples, a
critique, a final answer) vs ``gsr(n=3)``. optillm is installed, when missing, into its
own venv under ``.cache/bench-venvs/`` (see :mod:`benchmarks.proxy_overhead`).

    python -m benchmarks.fanout --tokens 200 --per-token-ms 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from benchmarks.harness import Target, ensure_venv, free_port, process, version
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder

MESSAGES = [{"role": "user", "content": "What is 6*7?"}]


@dataclass(frozen=True)
class Row:
    """One scaffold run through one server, against its ideal schedule."""

    name: str
    server: str
    wall: float
    depth: int  # sequential generations in the ideal schedule
    sequential_calls: int  # calls a one-at-a-time client would make


def respond_with(tokens: int) -> Callable[[dict[str, Any]], list[str]]:
    def respond(body: dict[str, Any]) -> list[str]:
        text = " ".join(["step"] * (tokens - 1)) + " \\boxed{42}"
        return [text] * int(body.get("n") or 1)

    return respond


def timed(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def chat_timer(base_url: str, key: str, repeats: int) -> Callable[..., float]:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=600)

    def run(model: str, extra: dict[str, Any] | None = None) -> float:
        return timed(
            lambda: client.chat.completions.create(
                model=model,
                messages=MESSAGES,  # type: ignore[arg-type]
                extra_body=extra,
            ),
            repeats,
        )

    return run


def ponder_rows(engine_url: str, model: str, repeats: int) -> list[Row]:
    settings = Settings(model="m", engines=(engine_url,), engine_model=model)
    plan = [
        ("single", 1, 1),
        ("majority(k=5)", 1, 5),
        ("majority(k=8)", 1, 8),
        ("best_of_n(n=3)", 2, 4),
        ("gsr(n=3)", 2, 4),
        ("gsr(n=8)", 2, 9),
    ]
    with running_ponder(settings) as url:
        run = chat_timer(f"{url}/v1", "x", repeats)
        return [Row(spec, "ponder", run("m", {"scaffold": spec}), d, s) for spec, d, s in plan]


def optillm_rows(engine_url: str, model: str, repeats: int, start_timeout: float) -> list[Row]:
    bin_dir = ensure_venv("optillm", "optillm", [["torch==2.13.0"], ["optillm"]])
    if bin_dir is None:
        print("[optillm] unavailable: install failed")
        return []
    print(f"[optillm] {version(bin_dir, 'optillm')}", flush=True)
    port = free_port()
    target = Target("optillm", f"http://127.0.0.1:{port}/v1")
    cmd = [str(bin_dir / "optillm"), "--base-url", engine_url, "--port", str(port)]
    env = {"OPENAI_API_KEY": "none", "OPTILLM_LOG_CONVERSATIONS": "false"}
    plan = [  # (approach, its ideal depth, sequential calls); see the module docstring
        ("self_consistency", 1, 5),
        ("bon", 2, 4),
        ("moa", 3, 5),
    ]
    with process(cmd, env) as proc:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                print(f"[optillm] exited with {proc.returncode}")
                return []
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                print("[optillm] not ready in time")
                return []
            time.sleep(0.5)
        # A client key without the "sk-" prefix keeps optillm on its one shared client.
        run = chat_timer(target.url, "x", repeats)
        return [Row(a, "optillm", run(f"{a}-{model}"), d, s) for a, d, s in plan]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200, help="tokens per generation")
    parser.add_argument("--per-token-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-optillm", action="store_true", help="measure Ponder only")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    args = parser.parse_args()
    config = FakeEngineConfig(
        respond=respond_with(args.tokens), latency_per_token=args.per_token_ms / 1000
    )
    with running_fake_engine(config) as fake:
        direct = httpx.Client(base_url=fake.base_url, timeout=60)

        def one_generation() -> None:
            body = {"model": fake.config.model, "messages": MESSAGES, "n": 1}
            direct.post("/chat/completions", json=body).raise_for_status()

        ideal = timed(one_generation, args.repeats)
        rows = ponder_rows(fake.base_url, fake.config.model, args.repeats)
        if not args.no_optillm:
            rows += optillm_rows(fake.base_url, fake.config.model, args.repeats, args.start_timeout)
    print(
        f"{args.tokens} tokens per generation at {args.per_token_ms} ms/token; "
        f"median of {args.repeats}; one direct generation = {ideal * 1000:.0f} ms"
    )
    print(f"{'server':<9}{'scaffold':<18}{'wall':>9}{'ideal':>9}{'ratio':>7}{'one-by-one':>12}")
    for row in rows:
        best = row.depth * ideal
        print(
            f"{row.server:<9}{row.name:<18}{row.wall * 1000:>7.0f}ms{best * 1000:>7.0f}ms"
            f"{row.wall / best:>7.2f}{row.sequential_calls * ideal * 1000:>10.0f}ms"
        )
    pairs = [("majority(k=5)", "self_consistency"), ("best_of_n(n=3)", "bon"), ("gsr(n=3)", "moa")]
    walls = {(r.server, r.name): r.wall for r in rows}
    for ours, theirs in pairs:
        if ("optillm", theirs) in walls:
            ratio = walls[("optillm", theirs)] / walls[("ponder", ours)]
            print(f"optillm {theirs} / ponder {ours}: {ratio:.2f}x the wall time")


if __name__ == "__main__":
    main()
