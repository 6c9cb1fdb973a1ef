"""The in-process verifier under concurrent runs: shared forward passes against one call
at a time.

``--calls`` concurrent ``verify()`` calls (the runs of a search or of ``ponder eval``),
each of ``--candidates`` step-by-step arithmetic solutions (2 to 6 steps, so rows differ
in length), scored by :class:`~scaffolds.verifiers.LocalVerifier` on a prepared model
(``smollm2-135m-instruct`` by default; nothing is downloaded: prepare it first with
``ponder models prepare``), four ways:

- ``one-by-one, all logits``: each call alone, every position's logits computed (what
  the verifier did before it batched: one small forward per call);
- ``one-by-one``: each call alone, the last position's logits only;
- ``batched`` at ``max_batch`` 32 and 64: all calls at once, gathered into shared
  forwards.

It prints each way's wall time, rows per second, forward passes, the speed-up over the
first, and the largest score difference from scoring each call alone.

    python -m benchmarks.local_verifier --calls 64 --candidates 4
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

from scaffolds.verifiers import LocalVerifier


def workload(calls: int, candidates: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """``calls`` problems ``a + b + ...``, each with ``candidates`` worked solutions."""
    rng = random.Random(seed)
    out = []
    for _ in range(calls):
        terms = [rng.randint(10, 999) for _ in range(rng.randint(2, 6))]
        problem = f"What is {' + '.join(map(str, terms))}? Put the answer in \\boxed{{}}."
        solutions = []
        for _ in range(candidates):
            total, steps = terms[0], []
            for term in terms[1:]:
                total += term + (rng.choice([0, 0, 0, 1, -10]))
                steps.append(f"Adding {term} to the running total gives {total}.")
            steps.append(f"So the answer is \\boxed{{{total}}}.")
            solutions.append("\n\n".join(steps))
        out.append((problem, solutions))
    return out


def count_forwards(verifier: LocalVerifier, all_logits: bool) -> list[int]:
    loaded = verifier._load()
    if all_logits:
        verifier._loaded = loaded = loaded._replace(extra={})
    forward, rows = loaded.model.forward, []

    def counted(**inputs: Any) -> Any:
        rows.append(len(inputs["input_ids"]))
        return forward(**inputs)

    loaded.model.forward = counted
    return rows


async def measure(
    model: str,
    calls: list[tuple[str, list[str]]],
    *,
    batched: bool,
    max_batch: int,
    all_logits: bool = False,
) -> tuple[float, int, list[tuple[float, ...]]]:
    verifier = LocalVerifier(model, max_batch=max_batch)
    try:
        forwards = count_forwards(verifier, all_logits)
        await verifier.verify(*calls[0])  # warm-up, not timed
        forwards.clear()
        start = time.perf_counter()
        if batched:
            verdicts = await asyncio.gather(*(verifier.verify(p, c) for p, c in calls))
        else:
            verdicts = [await verifier.verify(p, c) for p, c in calls]
        wall = time.perf_counter() - start
    finally:
        await verifier.aclose()
    return wall, len(forwards), [v.scores for v in verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=4)
    args = parser.parse_args()
    model = args.model  # a folder, or a known model's name (LocalVerifier prepares it)
    calls = workload(args.calls, args.candidates)
    rows = args.calls * args.candidates
    ways = [
        ("one-by-one, all logits", False, 32, True),
        ("one-by-one", False, 32, False),
        ("batched, max_batch 32", True, 32, False),
        ("batched, max_batch 64", True, 64, False),
    ]
    print(f"{args.calls} calls x {args.candidates} candidates ({rows} rows), {args.model}")
    print("| way | wall | rows/s | forwards | speed-up | max score diff |")
    print("|---|---:|---:|---:|---:|---:|")
    base_wall, base_scores, started = 0.0, None, time.perf_counter()
    for done, (label, batched, max_batch, all_logits) in enumerate(ways):
        wall, forwards, scores = asyncio.run(
            measure(model, calls, batched=batched, max_batch=max_batch, all_logits=all_logits)
        )
        base_wall, base_scores = base_wall or wall, base_scores or scores
        pairs = zip(scores, base_scores, strict=True)
        diff = max(abs(a - b) for x, y in pairs for a, b in zip(x, y, strict=True))
        print(
            f"| {label} | {wall:.1f} s | {rows / wall:.1f} | {forwards} | "
            f"{base_wall / wall:.2f}x | {diff:.1e} |"
        )
        elapsed = time.perf_counter() - started
        left = len(ways) - done - 1
        if left:
            print(
                f"  ({elapsed:.0f} s so far, about {elapsed / (done + 1) * left:.0f} s left)",
                flush=True,
            )


if __name__ == "__main__":
    main()
