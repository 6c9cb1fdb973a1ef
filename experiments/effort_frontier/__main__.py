"""``python -m experiments.effort_frontier pools|report|served-run|served-report`` (see
the package doc).

``pools`` rebuilds ``pools/*.jsonl`` from the two earlier studies' committed rows;
``report`` rebuilds ``results/report.{json,md}`` and the plot from the pools, byte for
byte (seeded resampling). ``served-run`` draws the pools and runs the levels through
served models (:mod:`experiments.effort_frontier.served`), writing ``served/``;
``served-report`` rebuilds ``results/served_report.{json,md}`` and its plot from them
(``--served served served-seed2``: over both seeds, each seed's own and together).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clients.calibrate import Sample, auto_grid, choose_levels, frontier, simulate
from experiments.effort_frontier.served import fixed_specs, read_pool
from scaffolds.evaluation.answers import answers_equal, normalize_answer
from scaffolds.evaluation.problems import load_problems
from scaffolds.evaluation.stats import mean, paired, per_problem, plot, summarize

HERE = Path(__file__).resolve().parent
EXPERIMENTS = HERE.parent
PROBLEMS = EXPERIMENTS / "smollm2_refine" / "runs" / "smollm2-r1" / "eval.jsonl"
SOURCES = {
    "base": [EXPERIMENTS / "smollm2_refine/runs/smollm2-r1/eval/base"],
    "gsr": [
        EXPERIMENTS / "smollm2_refine/runs/smollm2-r2/eval/gsr",
        EXPERIMENTS / "smollm2_verifier/runs/v1/candidates",
    ],
}
"""Each model's pool: the folders of ``seed-S.jsonl`` rows it is drawn from, in order."""
SEEDS = (0, 1, 2)
REPEATS = 10
"""Random orders of each pool (the resampled "seeds")."""
TOLERANCE = 0.01
LEVEL_NAMES = ("minimal", "low", "medium", "high")


def build_pools(out: Path) -> dict[str, Any]:
    """``out/MODEL.jsonl``: per problem its samples' answers, grades and tokens; returns
    how the grades here agree with the source rows' own grade of their first sample."""
    gold = {p.id: p.answer for p in load_problems(PROBLEMS).problems}
    out.mkdir(parents=True, exist_ok=True)
    checks: dict[str, Any] = {}
    for model, folders in SOURCES.items():
        pools: dict[str, list[dict[str, Any]]] = {pid: [] for pid in gold}
        agree = disagree = 0
        for folder in folders:
            for seed in SEEDS:
                for line in (folder / f"seed-{seed}.jsonl").read_text().splitlines():
                    row = json.loads(line)
                    answers = row.get("candidates", row.get("answers"))
                    tokens = row.get("candidate_tokens", row.get("tokens"))
                    truth = str(gold[row["id"]])
                    for i, (answer, spent) in enumerate(zip(answers, tokens, strict=True)):
                        right = bool(answer) and answers_equal(answer, truth, verify=False)
                        theirs = row["single"] if i == 0 and "single" in row else None
                        if theirs is None and "correct" in row:
                            theirs = row["correct"][i]
                        if theirs is not None:
                            agree, disagree = (
                                agree + (theirs == right),
                                disagree + (theirs != right),
                            )
                        norm = normalize_answer(answer) if answer else None
                        pools[row["id"]].append(
                            {"answer": norm or None, "correct": right, "tokens": spent}
                        )
        with (out / f"{model}.jsonl").open("w", encoding="utf-8") as f:
            for pid, samples in pools.items():
                f.write(json.dumps({"id": pid, "samples": samples}) + "\n")
        checks[model] = {"graded_like_the_source": agree, "graded_otherwise": disagree}
    return checks


def _entry(sim: Mapping[str, list[list[float]]]) -> dict[str, Any]:
    return {
        "correct": sim["correct"],
        "summary": summarize(sim["correct"]),
        "completion_tokens_mean": mean(per_problem(sim["tokens"])),
    }


def study(model: str, pools: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    """Calibrate on the even problems, then measure everything on the odd ones."""
    ids = list(pools)
    size = min(len(p) for p in pools.values())
    top = min(16, size)
    calib = {pid: pools[pid] for pid in ids[0::2]}
    held = {pid: pools[pid] for pid in ids[1::2]}
    specs = fixed_specs(top)
    baseline = f"majority(k={top})"

    def run(spec: str, on: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
        return _entry(simulate(spec, on, repeats=REPEATS, seed=0))

    # calibration half: the levels and auto's thresholds, as ponder calibrate picks them
    fit = {s: run(s, calib) for s in specs}
    rows = {s: (e["summary"]["accuracy"], e["completion_tokens_mean"]) for s, e in fit.items()}
    best = max(specs, key=lambda s: (rows[s][0], -rows[s][1]))
    diffs = {s: paired(fit[s]["correct"], fit[best]["correct"])["diff"] for s in specs}
    levels = choose_levels(rows, diffs, TOLERANCE)
    target = rows[baseline][0] - TOLERANCE
    grid = []
    for spec in auto_grid(top):
        e = run(spec, calib)
        grid.append((spec, e["summary"]["accuracy"], e["completion_tokens_mean"]))
    within = [g for g in grid if g[1] >= target]
    auto = min(within, key=lambda g: g[2])[0] if within else baseline
    # held-out half: every fixed spec, the default auto and the calibrated one
    conditions = [*specs, auto]
    default_auto = "auto" if size >= 16 else f"auto(max_k={top})"
    if default_auto not in conditions:
        conditions.append(default_auto)
    measured = {c: run(c, held) for c in conditions}
    base_entry = measured[baseline]
    front = frontier(
        {
            s: (measured[s]["summary"]["accuracy"], measured[s]["completion_tokens_mean"])
            for s in specs
        }
    )
    table = []
    for c in conditions:
        e = measured[c]
        tokens = e["completion_tokens_mean"]
        cheaper = [s for s in specs if measured[s]["completion_tokens_mean"] <= tokens + 1e-9]
        best_fixed = max(cheaper, key=lambda s: measured[s]["summary"]["accuracy"], default=None)
        row = {
            "spec": c,
            "levels": [lv for lv in LEVEL_NAMES if levels[lv] == c]
            + (["auto"] if c == auto else []),
            "accuracy": e["summary"]["accuracy"],
            "ci95": e["summary"]["ci95"],
            "completion_tokens": tokens,
            "vs_baseline": paired(e["correct"], base_entry["correct"]),
            "token_share": tokens / base_entry["completion_tokens_mean"],
            "fixed_frontier": c in front,
        }
        if best_fixed is not None and best_fixed != c:
            row["vs_best_fixed_at_equal_tokens"] = {
                "spec": best_fixed,
                **paired(e["correct"], measured[best_fixed]["correct"]),
            }
        table.append(row)
    high = next(r for r in table if r["spec"] == levels["high"])
    goal_high = high["vs_baseline"]["ci95"][0] >= -TOLERANCE and high["token_share"] <= 0.5
    return {
        "model": model,
        "pool": size,
        "problems": {"calibration": len(calib), "held_out": len(held)},
        "repeats": REPEATS,
        "baseline": baseline,
        "calibration": {
            "levels": levels,
            "auto": auto,
            "auto_target": target,
            "fixed": {s: {"accuracy": a, "completion_tokens": t} for s, (a, t) in rows.items()},
            "auto_grid": [{"spec": s, "accuracy": a, "completion_tokens": t} for s, a, t in grid],
        },
        "held_out": table,
        "goal": {
            "high_within_1pt_at_half_tokens": goal_high,
            "high": levels["high"],
            "high_vs_baseline": high["vs_baseline"],
            "high_token_share": high["token_share"],
        },
        "_plot": {c: {k: v for k, v in measured[c].items()} for c in conditions},
    }


def _f(x: float) -> str:
    return f"{x:.3f}"


def _diff(d: Mapping[str, Any]) -> str:
    """A paired difference and its interval: ``+0.010 [-0.002, +0.022]``."""
    return f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"


def markdown(reports: Sequence[Mapping[str, Any]]) -> str:
    lines = ["# Effort levels and auto against fixed specs (resampled; issue 53)", ""]
    for r in reports:
        lines += [
            f"## {r['model']} (pool {r['pool']} samples a problem; calibrated on "
            f"{r['problems']['calibration']} problems, measured on {r['problems']['held_out']}; "
            f"{r['repeats']} resampled orders)",
            "",
            "Levels: "
            + ", ".join(f"{k} = `{v}`" for k, v in r["calibration"]["levels"].items())
            + f"; auto = `{r['calibration']['auto']}`.",
            "",
            f"| spec | level | accuracy | 95% CI | gen tok/prob | tokens / {r['baseline']} "
            f"| - {r['baseline']} [95% CI] | - best fixed spec at <= its tokens [95% CI] |",
            "|---|---|---:|---|---:|---:|---|---|",
        ]
        for row in r["held_out"]:
            d = row["vs_baseline"]
            fixed = row.get("vs_best_fixed_at_equal_tokens")
            at = f"`{fixed['spec']}`: {_diff(fixed)}" if fixed else ""
            star = " (frontier)" if row["fixed_frontier"] else ""
            lines.append(
                f"| `{row['spec']}`{star} | {', '.join(row['levels'])} | {_f(row['accuracy'])} "
                f"| [{_f(row['ci95'][0])}, {_f(row['ci95'][1])}] | {row['completion_tokens']:.1f} "
                f"| {row['token_share']:.2f} | {_diff(d)} | {at} |"
            )
        g = r["goal"]
        verdict = "met" if g["high_within_1pt_at_half_tokens"] else "not met"
        lines += [
            "",
            f"Goal (high within 1 point of {r['baseline']}, paired 95% CI, at no more than half "
            f"its tokens): **{verdict}** (high = `{g['high']}`, "
            f"{_diff(g['high_vs_baseline'])} at {g['high_token_share']:.2f} of its tokens).",
            "",
        ]
    return "\n".join(lines)


def report(pools_dir: Path, out: Path) -> list[dict[str, Any]]:
    reports = [study(model, read_pool(pools_dir / f"{model}.jsonl")) for model in SOURCES]
    out.mkdir(parents=True, exist_ok=True)
    results = {"models": {r["model"]: r.pop("_plot") for r in reports}}
    for entries in results["models"].values():
        for e in entries.values():
            e.pop("correct", None)
    results_for_plot = {
        "models": {
            m: {c: e for c, e in entries.items()} for m, entries in results["models"].items()
        }
    }
    plot(
        results_for_plot, out / "accuracy_vs_tokens.png", title="resampled: accuracy against tokens"
    )
    (out / "report.json").write_text(json.dumps(reports, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(reports), encoding="utf-8")
    return reports


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.effort_frontier")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pools", help="the pools from the earlier studies' rows")
    p.add_argument("--out", type=Path, default=HERE / "pools")
    r = sub.add_parser("report", help="the report from the pools")
    r.add_argument("--pools", type=Path, default=HERE / "pools")
    r.add_argument("--out", type=Path, default=HERE / "results")
    s = sub.add_parser("served-run", help="the pools and levels through served models")
    s.add_argument("--models", nargs="+", default=["gsr", "base"], choices=["gsr", "base"])
    s.add_argument(
        "--steps",
        nargs="+",
        default=["pool", "levels", "fixed"],
        choices=["pool", "levels", "fixed"],
    )
    s.add_argument(
        "--limit", action="append", default=[], help="MODEL=N: its first N problems (by id)"
    )
    s.add_argument("--concurrency", type=int, default=6, help="requests in flight")
    s.add_argument("--out", type=Path, default=HERE / "served")
    s.add_argument("--logs", type=Path, default=Path("/tmp/effort_frontier_served"))
    sr = sub.add_parser("served-report", help="the served run's report from its rows")
    sr.add_argument(
        "--served",
        type=Path,
        nargs="+",
        default=[HERE / "served"],
        help="one folder a seed (served-run's --out); several: the report over them",
    )
    sr.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    if args.command == "served-report":
        from experiments.effort_frontier.served import served_report

        missing = [str(f) for f in args.served if not f.is_dir()]
        if missing:
            parser.error(f"no such folder: {', '.join(missing)}")

        for model, r_ in served_report(args.served, PROBLEMS, args.out).items():
            print(model, r_.get("seeds", ""), json.dumps(r_["problems"]), json.dumps(r_["goal"]))
    elif args.command == "served-run":
        from experiments.effort_frontier.served import served_run

        served_run(
            PROBLEMS,
            args.out,
            models=args.models,
            steps=args.steps,
            limits={m: int(n) for m, n in (item.split("=") for item in args.limit)},
            concurrency=args.concurrency,
            logs=args.logs,
        )
    elif args.command == "pools":
        print(json.dumps(build_pools(args.out)))
    else:
        for r_ in report(args.pools, args.out):
            print(r_["model"], json.dumps(r_["goal"]))


if __name__ == "__main__":
    main()
