"""Issue 19's scaffolds on the shipped addition model: accuracy against tokens.

``adaptive(max_k=16)`` and ``deepconf(n=16)`` against ``majority(k=16)``, and ``rsa``
against ``majority`` and ``gsr`` at about equal tokens, on the 1M-parameter Qwen2 that
Ponder ships (``scaffolds/models/ponder-addition``, ``compact`` prompts), in process
(LocalEngine, one thread). Same problems (the demo task's test split), same sampling
seeds, temperature 1.0, the statistics of ``experiments.tiny_models.experiments`` (95% CIs over
problems, paired differences on the same problems and seeds)::

    python -m experiments.tiny_models.voting --count 150 --seeds 0 1   # about 4 min
    python -m experiments.tiny_models.voting \
        --report experiments/tiny_models/results/voting_addition.json  # from the rows, seconds

Writes ``results/voting_addition.{json,md,png}`` (``--out``: another folder) and prints
the tables; ``--report`` computes the statistics, table and plot of a results JSON again
from its per-problem rows, byte for byte.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.tiny_models.experiments import Condition, evaluate_model
from experiments.tiny_models.report import RESULTS, plot, restate
from scaffolds.evaluation.addition_task import problems
from scaffolds.evaluation.stats import add_pairs, markdown, per_problem
from scaffolds.models import get_model
from scaffolds.models.prepare import prepare_model

STEM = "voting_addition"
CONDITIONS = (
    Condition("single", "single", 1.0),
    Condition("majority(k=4)", "majority(k=4)", 1.0),
    Condition("majority(k=16)", "majority(k=16)", 1.0),
    Condition("adaptive(max_k=16)", "adaptive(max_k=16, wave=4)", 1.0),
    Condition("deepconf(n=16)", "deepconf(n=16)", 1.0),
    Condition("gsr(n=4)", "gsr(n=4)", 1.0),
    Condition("rsa(n=4,k=2,rounds=1)", "rsa(n=4, k=2, rounds=1)", 1.0),
)
PAIRS = (
    ("m/adaptive(max_k=16)", "m/majority(k=16)"),
    ("m/deepconf(n=16)", "m/majority(k=16)"),
    ("m/majority(k=16)", "m/single"),
    ("m/rsa(n=4,k=2,rounds=1)", "m/majority(k=4)"),
    ("m/rsa(n=4,k=2,rounds=1)", "m/gsr(n=4)"),
)


def save(results: dict[str, Any], folder: Path) -> str:
    """``folder/voting_addition.{json,md,png}``: the rows and statistics, the table with the
    tokens adaptive saved against majority(k=16), the plot. Returns the table."""
    evaluated = results["models"]["m"]
    adaptive, majority = evaluated["adaptive(max_k=16)"], evaluated["majority(k=16)"]
    saved = 1 - sum(per_problem(adaptive["completion_tokens"])) / sum(
        per_problem(majority["completion_tokens"])
    )
    results["adaptive_tokens_saved_vs_majority16"] = round(saved, 4)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{STEM}.json").write_text(json.dumps(results) + "\n")
    table = markdown(results) + f"\nadaptive(max_k=16) generated {saved:.1%} fewer tokens "
    table += "than majority(k=16)\n"
    (folder / f"{STEM}.md").write_text(table)
    plot(results, folder / f"{STEM}.png")
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--problem-seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report", type=Path, metavar="JSON", help="rebuild from its rows")
    args = parser.parse_args(argv)
    if args.report is not None:
        print(save(restate(json.loads(args.report.read_text())), args.out))
        return
    model_dir = prepare_model(get_model("ponder-addition"))
    items = problems("test", args.count, seed=args.problem_seed)
    started = time.monotonic()
    evaluated = asyncio.run(
        evaluate_model("m", model_dir, CONDITIONS, items, args.seeds, concurrency=args.concurrency)
    )
    results = {
        "problems": len(items),
        "seeds": list(args.seeds),
        "models": {"m": evaluated},
        "wall_s": round(time.monotonic() - started, 1),
    }
    add_pairs(results, PAIRS)
    print(save(results, args.out))
    print(f"wall {results['wall_s']} s; wrote {args.out}")


if __name__ == "__main__":
    main()
