"""CPU per call of pieces of a pass-through request's path, A/B across git revisions.

Some changes save tens of microseconds a request: well below what
:mod:`benchmarks.proxy_overhead` can resolve on a shared 2-core machine, where its CPU per
request moves by 10-20% between rounds. This times each piece alone, in one process per
source tree (the working tree and every ``--baseline`` revision, in turn, ``--rounds``
times), on the CPU clock:

- ``until_disconnect``: the disconnect watch around one run, with a client that stays
  and work that suspends once (as an engine call does); once per request;
- ``batch_engine``: whether the engine takes a list of prompts (``OpenAIEngine``); twice
  per chat request (``Serving._run_all`` and the metered engine's ``takes_prompt_lists``).

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

from benchmarks.harness import ROOT, source_at

PIECES = r"""
import asyncio, json, time
from scaffolds.engines.protocol import batch_engine
from scaffolds.engines.openai_http import OpenAIEngine
from server.runs.disconnect import until_disconnect

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

engine = OpenAIEngine("http://127.0.0.1:9/v1", "m")
print(json.dumps({
    "until_disconnect": asyncio.run(watch(20000)),
    "batch_engine": per_call(lambda: batch_engine(engine), 20000),
}))
"""


def measure(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
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
    args = parser.parse_args()
    revs = [r for r in args.baseline.split(",") if r]
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in [*revs, "this tree"]}
    trees: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        for rev in revs:
            trees[rev] = stack.enter_context(source_at(rev))
        trees["this tree"] = ROOT
        for _ in range(args.rounds):
            for name, tree in trees.items():
                samples[name].append(measure(tree))
    pieces = list(samples["this tree"][0])
    print(f"CPU microseconds per call, median of {args.rounds} rounds")
    print("| source | " + " | ".join(pieces) + " |")
    print("|---|" + "---:|" * len(pieces))
    for name, rounds in samples.items():
        cells = [f"{statistics.median(r[p] for r in rounds):.1f}" for p in pieces]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
