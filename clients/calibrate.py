"""``ponder calibrate``: measure candidate specs on the user's own problems, mark the
frontier, and write the effort policy and ``auto``'s thresholds that ``ponder serve`` loads.

Two runs of the evaluation loop (``ponder eval``'s own :func:`clients.eval.evaluate`,
nothing evaluated twice), both through the served model:

- ``OUT/specs``: every candidate spec over the problems (``--samples`` runs each), with
  ``ponder eval``'s report and plot;
- ``OUT/pool``: ``single`` ``--pool`` times per problem, the samples ``auto``'s thresholds
  are chosen from by resampling (:func:`simulate`): each setting of the grid runs on
  random orders of each problem's pool, as the scaffold would place the prompt
  (:meth:`scaffolds.strategies.auto.Auto.tier`).

From the specs' rows: accuracy with its 95% interval over problems, the paired difference
of each spec against the most accurate one (:func:`scaffolds.evaluation.stats.paired`),
the frontier (no cheaper spec is as accurate), and the levels
(:func:`choose_levels`): ``minimal`` the cheapest frontier spec, ``high`` the cheapest
frontier spec within ``--tolerance`` of the most accurate, ``low`` and ``medium`` the
frontier specs a third and two thirds of the way between. ``auto`` is the cheapest grid
setting whose resampled accuracy is within ``--tolerance`` of the resampled
``majority(k=max_k)``. Resampling cannot simulate ``auto(hard="refine")`` (a refine
writes a new answer, not one of the pool's samples): ``--auto-refine`` measures it as
one more candidate spec instead (:func:`candidate_specs`). Each level's budget is 8,192
generated tokens per sample of its largest draw (the effort policy's default rule; no cap
below an hour-long run).

Written into ``OUT``: ``calibration.json`` and ``calibration.md`` (every number),
``frontier.png`` (accuracy against generated tokens, the frontier starred),
``effort_policy.yaml`` (the effort policy, :class:`server.model_settings.EffortPolicy`'s
form: level -> spec and budget, ``auto`` with its thresholds in its spec; for
``--effort-policy FILE``) and ``ponder.yaml``, a ``ponder serve --config`` file serving
the model with that policy inline (``reasoning_effort`` and the like select its levels)
and each level as an alias too (``effort-minimal`` ... ``effort-auto``).

>>> rows = {"single": (0.4, 10.0), "majority(k=4)": (0.6, 40.0), "majority(k=8)": (0.65, 80.0),
...         "rsa": (0.5, 200.0)}
>>> frontier(rows)
['single', 'majority(k=4)', 'majority(k=8)']
>>> vote(["3", None, "4", "3"])
'3'
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from scaffolds.spec.build import build_strategy
from scaffolds.strategies.adaptive import leader_probability
from scaffolds.strategies.auto import Auto
from scaffolds.strategies.base import Strategy

if TYPE_CHECKING:
    from scaffolds.evaluation.answers import AnswerFormat

__all__ = [
    "BUDGET_PER_SAMPLE",
    "Sample",
    "calibrate_app",
    "choose_levels",
    "frontier",
    "simulate",
    "vote",
]

BUDGET_PER_SAMPLE = 8192
"""A level's budget: this many generated tokens per sample of its largest draw."""

LEVELS = ("minimal", "low", "medium", "high")


@dataclass(frozen=True)
class Sample:
    """One sample of a problem's pool: its answer (None: none read), whether it was
    graded right, and the tokens it generated.

    >>> Sample("4", True, 12).tokens
    12
    """

    answer: str | None
    correct: bool
    tokens: int


def vote(answers: Sequence[str | None]) -> str | None:
    """The most common answer (ties: the earliest), None when none was read."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == top)


def _voted(drawn: Sequence[Sample]) -> tuple[bool, int]:
    winner = vote([s.answer for s in drawn])
    correct = winner is not None and next(s.correct for s in drawn if s.answer == winner)
    return correct, sum(s.tokens for s in drawn)


def _agreement(drawn: Sequence[Sample]) -> float:
    counts = Counter(s.answer for s in drawn if s.answer is not None)
    return max(counts.values(), default=0) / len(drawn)


def run_on(spec: str | Strategy, order: Sequence[Sample]) -> tuple[bool, int]:
    """(correct, generated tokens) of ``spec`` on one order of a problem's pool, as the
    scaffold runs: ``single``, ``majority(k)``, ``auto(...)``, ``adaptive(...)``
    (``rule="beta"`` or ``"esc"``), each over ``single`` samples. The pool must hold the
    spec's largest draw.

    >>> pool = [Sample(a, a == "1", 10) for a in ["1", "1", "2", "1"]]
    >>> run_on("majority(k=3)", pool), run_on("auto(pilot=2, mid_k=2, max_k=4, mid=0.5)", pool)
    ((True, 30), (True, 20))
    """
    strategy = build_strategy(spec) if isinstance(spec, str) else spec
    if isinstance(strategy, Auto) and (strategy.hard, strategy.probe) != ("vote", "agreement"):
        raise ValueError(
            f"cannot resample {strategy}: a refine or a verifier's scores are not in a "
            "pool of single samples (measure it as a candidate spec)"
        )
    need = strategy.max_samples()
    if need > len(order):
        raise ValueError(f"{strategy} draws up to {need} samples; the pool has {len(order)}")
    params = strategy.to_spec()
    name = params["name"]
    if name == "single":
        return _voted(order[:1])
    if name == "majority":
        return _voted(order[: params.get("k", 8)])
    if isinstance(strategy, Auto):
        tier = strategy.tier(_agreement(order[: strategy.pilot]))
        return _voted(order[: strategy.planned(tier)])
    if name == "adaptive":
        return _adaptive(strategy, order)
    raise ValueError(f"cannot resample {strategy} (single, majority, auto and adaptive only)")


def _adaptive(strategy: Any, order: Sequence[Sample]) -> tuple[bool, int]:
    drawn = 0
    for size in strategy.waves():
        window = order[drawn : drawn + size]
        drawn += size
        if strategy.rule == "esc":
            answers = {s.answer for s in window}
            if len(answers) == 1 and None not in answers:
                return window[0].correct, sum(s.tokens for s in order[:drawn])
            continue
        counts = Counter(s.answer for s in order[:drawn] if s.answer is not None)
        unanswered = drawn - sum(counts.values())
        top = sorted([*counts.values(), unanswered], reverse=True)
        v1, v2 = ([c for c in top if c] + [0, 0])[:2]
        if leader_probability(v1, v2) >= strategy.confidence:
            break
    return _voted(order[:drawn])


def simulate(
    spec: str, pools: Mapping[str, Sequence[Sample]], *, repeats: int = 20, seed: int = 0
) -> dict[str, list[list[float]]]:
    """``spec`` resampled on each problem's pool: ``repeats`` random orders of each pool
    (seeded), the 0/1 scores and generated tokens as ``[repeat][problem]`` matrices
    (problems in ``pools``' order), ready for :mod:`scaffolds.evaluation.stats`.

    >>> pools = {"p": [Sample("1", True, 5), Sample("2", False, 5)]}
    >>> simulate("majority(k=2)", pools, repeats=2)["tokens"]
    [[10.0], [10.0]]
    """
    strategy = build_strategy(spec)
    correct: list[list[float]] = []
    tokens: list[list[float]] = []
    for r in range(repeats):
        row_c, row_t = [], []
        for pid, pool in pools.items():
            order = list(pool)
            random.Random(f"{seed}|{r}|{pid}").shuffle(order)
            ok, spent = run_on(strategy, order)
            row_c.append(float(ok))
            row_t.append(float(spent))
        correct.append(row_c)
        tokens.append(row_t)
    return {"correct": correct, "tokens": tokens}


def frontier(rows: Mapping[str, tuple[float, float]]) -> list[str]:
    """The specs no cheaper one matches: ``rows`` is spec -> (accuracy, tokens); in
    order of tokens, each strictly more accurate than every cheaper one."""
    best, out = -math.inf, []
    for spec, (accuracy, _) in sorted(rows.items(), key=lambda kv: (kv[1][1], -kv[1][0])):
        if accuracy > best:
            out.append(spec)
            best = accuracy
    return out


def choose_levels(
    rows: Mapping[str, tuple[float, float]],
    paired_to_best: Mapping[str, float],
    tolerance: float,
) -> dict[str, str]:
    """Level -> spec from the frontier: ``high`` the cheapest frontier spec whose paired
    difference against the most accurate is at least ``-tolerance``; ``minimal`` the
    cheapest; ``low`` and ``medium`` a third and two thirds of the way between.

    >>> rows = {"a": (0.4, 1.0), "b": (0.6, 4.0), "c": (0.64, 8.0), "d": (0.65, 16.0)}
    >>> choose_levels(rows, {"a": -0.25, "b": -0.05, "c": -0.01, "d": 0.0}, 0.01)
    {'minimal': 'a', 'low': 'b', 'medium': 'b', 'high': 'c'}
    """
    front = frontier(rows)
    top = next(i for i, s in enumerate(front) if paired_to_best[s] >= -tolerance)
    pick = [front[round(top * share)] for share in (0.0, 1 / 3, 2 / 3, 1.0)]
    return dict(zip(LEVELS, pick, strict=True))


DEFAULT_SPECS = ("single", "majority(k=4)", "majority(k=8)", "majority(k=16)")
"""The candidate specs measured when none is given."""


def candidate_specs(given: Sequence[str] | None, *, auto_refine: bool = False) -> list[str]:
    """The specs measured: ``given`` (default :data:`DEFAULT_SPECS`), and with
    ``auto_refine`` ``auto(hard="refine")`` too. Resampling cannot simulate a refine (its
    answer is a new generation, not one of the pool's samples), so the grid of ``auto``
    settings stays voting and the refining one is measured like any candidate spec.

    >>> candidate_specs(["single"], auto_refine=True)
    ['single', 'auto(hard="refine")']
    """
    specs = list(given or DEFAULT_SPECS)
    return [*specs, str(Auto(hard="refine"))] if auto_refine else specs


def auto_grid(pool_size: int) -> list[str]:
    """The ``auto`` settings tried: pilots of 2-4, stop at unanimity or 3 of 4, the
    middle tier at a half or 3 of 4, draws of 4 to the pool's size (multiples of 4)."""
    sizes = [k for k in (4, 8, 12, 16, 24, 32) if k <= pool_size] or [pool_size]
    specs = []
    for pilot, stop, mid, mid_k, max_k in itertools.product(
        (2, 3, 4), (1.0, 0.75), (0.5, 0.75), sizes, sizes
    ):
        if pilot <= mid_k <= max_k <= pool_size and mid <= stop:
            specs.append(str(Auto(pilot=pilot, stop=stop, mid=mid, mid_k=mid_k, max_k=max_k)))
    return sorted(set(specs))


# -- the command ----------------------------------------------------------------------------
calibrate_app = typer.Typer(
    help="Measure candidate specs on your problems; write the effort policy and auto's thresholds."
)


def _pools(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Sample]]:
    pools: dict[str, list[Sample]] = {}
    for r in sorted(records, key=lambda r: (str(r["id"]), int(r["sample"]))):
        if r.get("error") or r.get("correct") is None:
            continue
        usage = r.get("usage") or {}
        sample = Sample(
            r.get("extracted"), bool(r["correct"]), int(usage.get("completion_tokens", 0))
        )
        pools.setdefault(str(r["id"]), []).append(sample)
    return pools


def measured(
    records: Sequence[Mapping[str, Any]], specs: Sequence[str], ids: Sequence[str], samples: int
) -> dict[str, Any]:
    """Each spec's ``condition_entries`` over the problems ``ids`` (a sample that failed
    or is missing counts as wrong, with no tokens): ``samples`` rows per spec."""
    from scaffolds.evaluation.stats import condition_entries

    got = {(r["scaffold"], str(r["id"]), int(r["sample"])): r for r in records}
    per_seed: list[dict[str, dict[str, list[float]]]] = []
    for s in range(samples):
        seed: dict[str, dict[str, list[float]]] = {}
        for spec in specs:
            rows = [got.get((spec, pid, s)) or {} for pid in ids]
            usage = [r.get("usage") or {} for r in rows]
            seed[spec] = {
                "correct": [float(bool(r.get("correct")) and not r.get("error")) for r in rows],
                "completion": [float(u.get("completion_tokens", 0)) for u in usage],
                "prompt": [float(u.get("prompt_tokens", 0)) for u in usage],
            }
        per_seed.append(seed)
    return condition_entries(per_seed)


def policy_of(levels: Mapping[str, str], auto: str | None) -> dict[str, dict[str, Any]]:
    """The effort policy: each level's spec and its budget (:data:`BUDGET_PER_SAMPLE`
    per sample of the spec's largest draw), raised where needed so that no level's budget
    falls below a cheaper level's (the policy's rule).

    >>> policy_of({"minimal": "single"}, "auto(max_k=8)")["auto"]
    {'spec': 'auto(max_k=8)', 'budget': 65536}
    >>> p = policy_of({"minimal": "adaptive(max_k=32)", "low": "majority(k=16)"}, None)
    >>> p["minimal"]["budget"], p["low"]["budget"]
    (262144, 262144)
    """
    chosen = {**levels, **({"auto": auto} if auto else {})}
    policy, floor = {}, 0
    for level, spec in chosen.items():
        budget = BUDGET_PER_SAMPLE * build_strategy(spec).max_samples()
        if level != "auto":
            budget = floor = max(budget, floor)
        policy[level] = {"spec": spec, "budget": budget}
    return policy


def _yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


@calibrate_app.callback(invoke_without_command=True)
def calibrate(
    base_url: Annotated[str, typer.Option(help="the Ponder server, e.g. http://host:8000/v1")],
    model: Annotated[str, typer.Option(help="the served model to calibrate")],
    problems: Annotated[str, typer.Option(help="problem file (JSONL id/problem/answer)")],
    out: Annotated[Path, typer.Option(help="output folder (rerun to resume)")],
    spec: Annotated[
        list[str] | None, typer.Option("--spec", "-s", help="candidate spec, repeatable")
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="runs of each spec per problem")] = 1,
    pool: Annotated[
        int, typer.Option(min=0, help="single samples per problem for auto (0: no auto)")
    ] = 16,
    tolerance: Annotated[float, typer.Option(min=0, help="accuracy given up for compute")] = 0.01,
    repeats: Annotated[int, typer.Option(min=1, help="resampled orders of each pool")] = 20,
    engine: Annotated[
        list[str] | None, typer.Option(help="engine URL written into ponder.yaml, repeatable")
    ] = None,
    seed: Annotated[int, typer.Option(help="sample i is sent with seed + i")] = 0,
    limit: Annotated[int | None, typer.Option(min=1, help="first N problems only")] = None,
    grader: Annotated[str, typer.Option(help="math | exact")] = "math",
    answer_format: Annotated[str, typer.Option(help="boxed | lenient")] = "boxed",
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    auto_refine: Annotated[
        bool,
        typer.Option(
            help='also measure auto(hard="refine") as a candidate spec (not resampled: '
            "a refine cannot be simulated from single samples)"
        ),
    ] = False,
) -> None:
    """Run the candidate specs (and a pool of single samples) over PROBLEMS through the
    served MODEL; write the frontier, the effort policy and ponder.yaml into OUT."""
    from clients.eval.cli import make_grader
    from clients.eval.pipeline import evaluate
    from clients.eval.runner import EvalConfig, check_specs
    from scaffolds.dependencies import require
    from scaffolds.evaluation.problems import load_problems
    from scaffolds.evaluation.results import read_results
    from scaffolds.evaluation.stats import add_pairs, markdown, plot

    require("eval", "ponder calibrate", modules=("openai", "matplotlib"))
    if answer_format not in ("boxed", "lenient"):
        raise typer.BadParameter("must be boxed or lenient", param_hint="--answer-format")
    fmt = cast("AnswerFormat", answer_format)
    specs = check_specs(candidate_specs(spec, auto_refine=auto_refine))
    rows = load_problems(problems, limit=limit).problems
    if not rows:
        raise typer.BadParameter(f"no usable problems in {problems}", param_hint="--problems")
    ids = [p.id for p in rows]

    def run(specs_: list[str], n: int, where: Path) -> list[dict[str, Any]]:
        config = EvalConfig(base_url, model, specs_, where, samples=n, seed=seed, answer_format=fmt)
        grade = make_grader(grader, answer_format=fmt, workers=1)
        asyncio.run(evaluate(config, rows, grade, dataset=problems, progress=progress))
        return list(read_results(config.results_path).records)

    entries = measured(run(specs, samples, out / "specs"), specs, ids, samples)
    results: dict[str, Any] = {"models": {model: entries}}
    accuracy = {
        s: (e["summary"]["accuracy"], e["completion_tokens_mean"]) for s, e in entries.items()
    }
    best = max(specs, key=lambda s: (accuracy[s][0], -accuracy[s][1]))
    add_pairs(results, [(f"{model}/{s}", f"{model}/{best}") for s in specs if s != best])
    diffs = {
        s: results["paired"][f"{model}/{s} - {model}/{best}"]["diff"] for s in specs if s != best
    }
    levels = choose_levels(accuracy, {**diffs, best: 0.0}, tolerance)
    front = frontier(accuracy)

    auto_spec: str | None = None
    grid: list[dict[str, Any]] = []
    if pool:
        pools = _pools(run(["single"], pool, out / "pool"))
        pools = {pid: pools[pid] for pid in ids if len(pools.get(pid, ())) >= pool}
        size = min((len(p) for p in pools.values()), default=0)
        if pools and size >= 2:
            majority = simulate(f"majority(k={size})", pools, repeats=repeats, seed=seed)
            target = _mean2(majority["correct"]) - tolerance
            for candidate in auto_grid(size):
                got = simulate(candidate, pools, repeats=repeats, seed=seed)
                grid.append(
                    {
                        "spec": candidate,
                        "accuracy": _mean2(got["correct"]),
                        "completion_tokens": _mean2(got["tokens"]),
                    }
                )
            within = [g for g in grid if g["accuracy"] >= target]
            if within:
                auto_spec = min(within, key=lambda g: g["completion_tokens"])["spec"]
            baseline = {"spec": f"majority(k={size})", "baseline": True}
            baseline["accuracy"] = _mean2(majority["correct"])
            baseline["completion_tokens"] = _mean2(majority["tokens"])
            grid.insert(0, baseline)
    policy = policy_of(levels, auto_spec)
    out.mkdir(parents=True, exist_ok=True)
    markers = {s: ("*" if s in front else "o") for s in specs}
    plot(results, out / "frontier.png", title=f"{model}: accuracy against tokens", markers=markers)
    summary = {
        "model": model,
        "problems": len(ids),
        "samples": samples,
        "best": best,
        "frontier": front,
        "tolerance": tolerance,
        "levels": levels,
        "policy": policy,
        "auto_grid": grid,
        "results": results,
    }
    (out / "calibration.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    lines = [f"# Calibration of {model} on {len(ids)} problems", "", markdown(results), ""]
    lines += [f"Frontier: {', '.join(front)}.", ""]
    lines += [
        f"- {level}: `{entry['spec']}` (budget {entry['budget']})"
        for level, entry in policy.items()
    ]
    (out / "calibration.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "effort_policy.yaml").write_text(_yaml(policy), encoding="utf-8")
    served: dict[str, Any] = {"name": model}
    if engine:
        served["engines"] = list(engine)
    served["effort_policy"] = policy
    served["aliases"] = {f"effort-{level}": entry["spec"] for level, entry in policy.items()}
    (out / "ponder.yaml").write_text(_yaml({"models": [served]}), encoding="utf-8")
    typer.echo(f"frontier: {', '.join(front)}")
    for level, entry in policy.items():
        typer.echo(f"{level}: {entry['spec']} (budget {entry['budget']})")
    typer.echo(f"wrote {out / 'effort_policy.yaml'} and {out / 'ponder.yaml'}")


def _mean2(matrix: Sequence[Sequence[float]]) -> float:
    values = [v for row in matrix for v in row]
    return sum(values) / len(values) if values else float("nan")
