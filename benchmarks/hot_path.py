"""CPU per call of pieces of a pass-through request's path, A/B across git revisions.

Some changes save tens of microseconds a request: well below what
:mod:`benchmarks.proxy_overhead` can resolve on a shared 2-core machine, where its CPU per
request moves by 10-20% between rounds. This times each piece alone, in one process per
source tree (the working tree and every ``--baseline`` revision, in turn, ``--rounds``
times), on the CPU clock:

- ``until_disconnect``: the disconnect watch around one run, with a client that stays
  and work that suspends once (as an engine call does); once per request;
- ``batch_engine``: whether the engine takes a list of prompts (``OpenAIEngine``); twice
  per chat request (``Serving._run_all`` and the metered engine's ``takes_prompt_lists``);
- ``call_aiohttp``, ``call_httpx``: the engine client's own CPU for one chat call
  (``OpenAIEngine.generate``, one at a time, ``--calls`` of them) to the fake engine,
  which runs in a process of its own, over each transport; once per engine call;
- ``body_chat``, ``body_responses``, ``body_messages`` (and ``..._gsr``): the whole
  (non-streamed) body of a finished run as each API writes it, of ``single`` (a thinking
  model's answer) and of ``gsr(n=4)`` (candidates as reasoning); once per request.

    python -m benchmarks.hot_path --baseline 9a37331 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.harness import (
    ENGINE_CODE,
    MODEL,
    ROOT,
    Target,
    free_port,
    process,
    source_at,
    wait_ready,
)

PIECES = r"""
import asyncio, json, os, time
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, SamplingParams, batch_engine
from scaffolds.engines.openai_http import OpenAIEngine
from server.runs.disconnect import until_disconnect
from scaffolds.engines.mock import MockEngine
from server.api.messages.protocol import MessagesRequest
from server.api.messages.serving import MessagesFormat
from server.api.responses.protocol import ResponsesRequest
from server.api.responses.serving import ResponsesFormat
from server.runs.completion import completion_body
from server.runs.handler import Serving
from server.settings import Settings

def per_call(fn, n):
    fn(); start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6

async def watch(n):
    never = asyncio.Event()
    async def receive():
        await never.wait()
    async def work():
        await asyncio.sleep(0)
    start = time.process_time()
    for _ in range(n):
        await until_disconnect(receive, work())
    await asyncio.sleep(0)
    return (time.process_time() - start) / n * 1e6

async def calls(transport, n):
    url, model = os.environ["HOT_PATH_ENGINE"], os.environ["HOT_PATH_MODEL"]
    request = GenerateRequest(chat("What is 6*7?"), SamplingParams(max_tokens=8))
    async with OpenAIEngine(url, model, transport=transport) as engine:
        for _ in range(50):  # connections open, the context window known
            await engine.generate(request)
        start = time.process_time()
        for _ in range(n):
            await engine.generate(request)
        return (time.process_time() - start) / n * 1e6

async def bodies(model, n):
    thinker = MockEngine(lambda r: "<think>2 and 2 make 4.</think>\\boxed{4}")
    serving = Serving.build(Settings(model="m", engines=("http://unused/v1",)),
                            engines={"m": thinker})
    question = [{"role": "user", "content": "2+2?"}]
    responses = ResponsesFormat(None, ResponsesRequest(model=model, input="2+2?", store=False), [])
    messages = MessagesFormat(MessagesRequest(model=model, max_tokens=64, messages=question))
    out = {}
    for name, wire in (("chat", None), ("responses", responses), ("messages", messages)):
        plan = serving.plan("chat", (wire or responses).chat())
        runs = await serving._run_all(plan)
        start = time.process_time()
        for _ in range(n):
            completion_body(plan, runs) if wire is None else await wire.body(plan, runs)
        out[name] = (time.process_time() - start) / n * 1e6
    return out

engine = OpenAIEngine("http://127.0.0.1:9/v1", "m")
n_calls = int(os.environ["HOT_PATH_CALLS"])
single, gsr = asyncio.run(bodies("m", 5000)), asyncio.run(bodies("m+gsr(n=4)", 5000))
print(json.dumps({
    "until_disconnect": asyncio.run(watch(20000)),
    "batch_engine": per_call(lambda: batch_engine(engine), 20000),
    "call_aiohttp": asyncio.run(calls("aiohttp", n_calls)),
    "call_httpx": asyncio.run(calls("httpx", n_calls)),
    **{f"body_{name}": us for name, us in single.items()},
    **{f"body_{name}_gsr": us for name, us in gsr.items()},
}))
"""


def measure(tree: Path, engine: Target, calls: int) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "HOT_PATH_ENGINE": engine.url,
        "HOT_PATH_MODEL": MODEL,
        "HOT_PATH_CALLS": str(calls),
    }
    out = subprocess.run(
        [sys.executable, "-c", PIECES], cwd=tree, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", default="", help="git revisions to compare (A,B)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000, help="engine calls per transport")
    args = parser.parse_args()
    revs = [r for r in args.baseline.split(",") if r]
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in [*revs, "this tree"]}
    trees: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        for rev in revs:
            trees[rev] = stack.enter_context(source_at(rev))
        trees["this tree"] = ROOT
        engine = Target("engine", f"http://127.0.0.1:{free_port()}/v1")
        cmd = [sys.executable, "-c", ENGINE_CODE, engine.port, MODEL]
        proc = stack.enter_context(process(cmd))
        wait_ready(engine, 120, proc)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                samples[name].append(measure(tree, engine, args.calls))
    pieces = list(samples["this tree"][0])
    print(f"CPU microseconds per call, median of {args.rounds} rounds")
    print("| source | " + " | ".join(pieces) + " |")
    print("|---|" + "---:|" * len(pieces))
    for name, rounds in samples.items():
        cells = [f"{statistics.median(r[p] for r in rounds):.1f}" for p in pieces]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
