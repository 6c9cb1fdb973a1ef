"""Summaries of results: accuracy (mean, pass@k, maj@k) against compute, per scaffold.

Tokens and engine calls are means per sample (one scaffold run answering a problem
once), so they sit on the same footing as the mean accuracy; pass@k and maj@k spend
k samples. pass@k is the unbiased estimator; maj@k votes within each disjoint group of
k consecutive samples of a problem and averages the groups (maj@1 is the mean
accuracy). Failed requests are counted under ``errors`` and left out of every mean.
Runs a time limit the user set cut (``cut_reason`` "time": the server's, or the
client's ``--timeout``) are counted under ``time_cut`` and left out of every accuracy
(never wrong answers); their tokens and latency still count.

RSA's runs (records with ``rounds``) also get RSA's per-round numbers
(:func:`population_metrics`): each round's population mean accuracy (``mean_acc_k``),
majority accuracy and pass@k, averaged over runs.

>>> round(pass_at_k(4, 1, 2), 3), pass_at_k(4, 0, 2), pass_at_k(4, 3, 2)
(0.5, 0.0, 1.0)
>>> percentile([1.0, 2.0, 3.0, 4.0], 50)
2.5
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from scaffolds import terminal
from scaffolds.errors import PonderError
from scaffolds.evaluation.results import Record
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import Adaptive, Majority

__all__ = [
    "markdown_report",
    "pass_at_k",
    "percentile",
    "population_metrics",
    "print_table",
    "summarize",
    "tokens_saved",
    "write_json",
]

Cluster = Callable[[Sequence[str | None]], Awaitable[list[list[int]]]]
"""Groups equivalent answers (largest first), e.g. ``AnswerChecker.cluster``."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples (got {n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile, linearly interpolated; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ks(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n] if n else []


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _by_problem(records: Sequence[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for record in sorted(records, key=lambda r: int(r["sample"])):
        out.setdefault(str(record["id"]), []).append(record)
    return out


async def _maj_at(
    groups: Mapping[str, list[Record]], ks: list[int], cluster: Cluster
) -> dict[str, Any]:
    wins: dict[int, list[float]] = {k: [] for k in ks}
    for records in groups.values():
        graded = [r for r in records if r.get("correct") is not None]
        if not graded:
            continue
        clusters = await cluster([r.get("extracted") for r in graded])
        for k in ks:
            votes = []
            for start in range(0, len(graded) - k + 1, k):  # disjoint groups of k samples
                chunk = [[i for i in c if start <= i < start + k] for c in clusters]
                chunk = sorted((c for c in chunk if c), key=lambda c: (-len(c), c[0]))
                votes.append(float(bool(chunk) and bool(graded[chunk[0][0]]["correct"])))
            if votes:
                wins[k].append(sum(votes) / len(votes))
    return {str(k): _mean(v) for k, v in wins.items() if v}


def _unanswered_apart(clusters: list[list[int]], answers: Sequence[str | None]) -> list[list[int]]:
    """``clusters`` (answered members) plus each unanswered member as a group of its own,
    ordered as RSA's vote meets them: largest first, ties by first member.

    >>> _unanswered_apart([[1, 2]], [None, "4", "4", None])
    [[1, 2], [0], [3]]
    >>> _unanswered_apart([[1]], [None, "4"])
    [[0], [1]]
    """
    alone = [[i] for i, a in enumerate(answers) if a is None or not str(a).strip()]
    return sorted([sorted(c) for c in clusters] + alone, key=lambda c: (-len(c), c[0]))


async def population_metrics(
    records: Sequence[Record], cluster: Cluster
) -> list[dict[str, Any]] | None:
    """Per round of RSA's runs (their ``rounds``: a population's answers and which are
    right), as RSA's eval loop computes them per problem and averages over problems:
    ``mean_acc_k`` the share of the population that is right, ``majority`` whether the
    largest group of equivalent answers is right (ties: the group met first; an
    unanswered member groups with nothing), ``pass_at_k`` whether any member is right;
    ``runs``: the runs that reached the round. None: no record has rounds."""
    runs = [r["rounds"] for r in records if r.get("rounds")]
    if not runs:
        return None
    by_round: dict[int, list[tuple[float, float, float]]] = {}
    for rounds in runs:
        for population in rounds:
            answers, correct = population["answers"], population["correct"]
            if not correct:
                continue
            groups = _unanswered_apart(await cluster(answers), answers)
            majority = float(bool(groups) and correct[groups[0][0]])
            mean = sum(correct) / len(correct)
            by_round.setdefault(int(population["round"]), []).append(
                (mean, majority, float(any(correct)))
            )
    return [
        {
            "round": round_,
            "mean_acc_k": _mean([m for m, _, _ in rows]),
            "majority": _mean([v for _, v, _ in rows]),
            "pass_at_k": _mean([p for _, _, p in rows]),
            "runs": len(rows),
        }
        for round_, rows in sorted(by_round.items())
    ]


def _rc_curve(records: Sequence[Record]) -> list[dict[str, Any]] | None:
    """Accuracy and cumulative completion tokens after each reasoning step, averaged over
    samples; a sample that stopped early keeps its last step's answer and tokens."""
    runs = [r["steps"] for r in records if r.get("steps")]
    runs = [s for s in runs if all(step.get("correct") is not None for step in s)]
    if not runs:
        return None
    curve = []
    for t in range(max(len(s) for s in runs)):
        at = [s[min(t, len(s) - 1)] for s in runs]
        curve.append(
            {
                "step": t + 1,
                "accuracy": _mean([float(bool(step["correct"])) for step in at]),
                "completion_tokens": _mean([float(step["completion_tokens"]) for step in at]),
                "samples": sum(1 for s in runs if len(s) > t),
            }
        )
    return curve


async def summarize_scaffold(
    spec: str, records: Sequence[Record], cluster: Cluster
) -> dict[str, Any]:
    """The summary of one scaffold's records (one per key)."""
    finished = [r for r in records if not r.get("error")]
    good = [r for r in finished if r.get("cut_reason") != "time"]  # what accuracy counts
    groups = _by_problem(good)
    graded = [r for r in good if r.get("correct") is not None]
    per_problem = [
        (len(g), sum(bool(r["correct"]) for r in g))
        for g in ([r for r in rs if r.get("correct") is not None] for rs in groups.values())
        if g
    ]
    n_max = max((n for n, _ in per_problem), default=0)
    ks = _ks(n_max)
    pass_at = {str(k): _mean([pass_at_k(n, c, k) for n, c in per_problem if n >= k]) for k in ks}

    def usage(name: str) -> float | None:
        return _mean([float((r.get("usage") or {}).get(name) or 0) for r in finished])

    latencies = [float(r["latency_s"]) for r in finished if r.get("latency_s") is not None]
    scores = [float(r["score"]) for r in good if r.get("score") is not None]
    return {
        "scaffold": spec,
        "problems": len(groups),
        "samples": len(finished),
        "graded": len(graded),
        "errors": len(records) - len(finished),
        "time_cut": len(finished) - len(good),
        "ungraded": len(good) - len(graded),
        "accuracy": _mean([float(bool(r["correct"])) for r in graded]),
        "pass_at": pass_at,
        "maj_at": await _maj_at(groups, ks, cluster) if ks else {},
        "score_mean": _mean(scores),
        "prompt_tokens": usage("prompt_tokens"),
        "completion_tokens": usage("completion_tokens"),
        "total_tokens": usage("total_tokens"),
        "cached_tokens": usage("cached_tokens"),
        "engine_calls": usage("engine_calls"),
        "latency_s": {
            "p50": percentile(latencies, 50),
            "p90": percentile(latencies, 90),
            "p99": percentile(latencies, 99),
            "mean": _mean(latencies),
            "max": max(latencies, default=None),
        },
        "cut_off": sum(1 for r in good if r.get("cut_short")),
        "no_answer": sum(1 for r in good if not r.get("extracted")),
        "rc_steps": _rc_curve(good),
        "rounds": await population_metrics(good, cluster),
    }


async def summarize(
    records: Sequence[Record],
    cluster: Cluster,
    *,
    scaffolds: Sequence[str] | None = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole report: run info plus one summary per scaffold (in ``scaffolds`` order,
    else first-seen order)."""
    by_spec: dict[str, list[Record]] = {}
    for record in records:
        by_spec.setdefault(str(record["scaffold"]), []).append(record)
    order = list(scaffolds) if scaffolds is not None else list(by_spec)
    rows = [await summarize_scaffold(spec, by_spec.get(spec, []), cluster) for spec in order]
    saved = [saving for a in rows for m in rows if (saving := tokens_saved(a, m)) is not None]
    report = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(info or {}), "scaffolds": rows}
    return {**report, "tokens_saved": saved} if saved else report


def _vote(spec: str) -> tuple[str, int, Any] | None:
    """(kind, samples at most, solver) of an adaptive or majority spec, else None."""
    try:
        strategy = build_strategy(spec)
    except PonderError:
        return None
    if isinstance(strategy, Adaptive):
        return ("adaptive", strategy.max_k, strategy.solver)
    if isinstance(strategy, Majority):
        return ("majority", strategy.k, strategy.solver)
    return None


def tokens_saved(adaptive: Mapping[str, Any], majority: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``adaptive(max_k=K)`` saved against ``majority(k=K)`` (same solver), from
    their summaries: completion tokens per sample and the accuracy of each; None when
    the two are not such a pair.

    >>> a = {"scaffold": "adaptive(max_k=8)", "completion_tokens": 30.0, "accuracy": 0.5}
    >>> m = {"scaffold": "majority(k=8)", "completion_tokens": 80.0, "accuracy": 0.5}
    >>> tokens_saved(a, m)["saved_fraction"], tokens_saved(m, a)
    (0.625, None)
    """
    a, m = _vote(str(adaptive["scaffold"])), _vote(str(majority["scaffold"]))
    if a is None or m is None or a[0] != "adaptive" or m[0] != "majority" or a[1:] != m[1:]:
        return None
    spent, baseline = adaptive["completion_tokens"], majority["completion_tokens"]
    if spent is None or not baseline:
        return None
    return {
        "scaffold": adaptive["scaffold"],
        "against": majority["scaffold"],
        "completion_tokens": spent,
        "baseline_completion_tokens": baseline,
        "saved_tokens": baseline - spent,
        "saved_fraction": (baseline - spent) / baseline,
        "accuracy": adaptive.get("accuracy"),
        "baseline_accuracy": majority.get("accuracy"),
    }


def saved_line(s: Mapping[str, Any]) -> str:
    """One sentence for a :func:`tokens_saved` entry."""
    return (
        f"{s['scaffold']} generated {_pct(s['saved_fraction'])}% fewer completion tokens "
        f"than {s['against']} ({_num(s['completion_tokens'])} vs "
        f"{_num(s['baseline_completion_tokens'])} per sample), at {_pct(s['accuracy'])}% "
        f"accuracy against {_pct(s['baseline_accuracy'])}%"
    )


def write_json(report: Mapping[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


# -- rendering -------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _top(table: Mapping[str, float | None]) -> tuple[str, float | None]:
    if not table:
        return "", None
    k = max(table, key=int)
    return k, table[k]


def _row(s: Mapping[str, Any]) -> list[str]:
    """Cells: scaffold, problems, samples, acc, pass@k, maj@k, prompt/completion tokens,
    calls, latency p50 and p90, cut off, errors, ungraded (samples of problems with no
    answer, or that no grader could grade)."""
    _, pass_k = _top(s["pass_at"])
    _, maj_k = _top(s["maj_at"])
    lat = s["latency_s"]
    return [
        s["scaffold"],
        str(s["problems"]),
        str(s["samples"]),
        _pct(s["accuracy"]),
        _pct(pass_k),
        _pct(maj_k),
        _num(s["prompt_tokens"]),
        _num(s["completion_tokens"]),
        _num(s["engine_calls"], 1),
        _num(lat["p50"], 2),
        _num(lat["p90"], 2),
        str(s["cut_off"]),
        str(s.get("time_cut", 0)),
        str(s["errors"]),
        str(s.get("ungraded", 0)),
    ]


HEADERS = [
    "scaffold",
    "problems",
    "samples",
    "accuracy %",
    "pass@k %",
    "maj@k %",
    "prompt tokens",
    "completion tokens",
    "engine calls",
    "latency p50 s",
    "latency p90 s",
    "cut off",
    "time cut",
    "errors",
    "ungraded",
]
SHORT = ["scaffold", "n", "acc%", "pass%", "maj%", "tok in", "tok out", "calls", "p50 s"]
SHORT += ["cut", "time", "err", "ungraded"]
_TERMINAL = [0, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]  # the columns of _row that SHORT names


def _k_note(report: Mapping[str, Any]) -> str:
    ks = {_top(s["pass_at"])[0] for s in report["scaffolds"] if s["pass_at"]}
    k = f"k = {ks.pop()}" if len(ks) == 1 else "k = each scaffold's samples per problem"
    return (
        f"pass@k and maj@k at {k}; tok in / tok out: prompt / completion tokens per "
        "sample (as in the progress line); calls and latency per sample; time: samples a "
        "time limit cut, left out of accuracy, pass@k and maj@k"
    )


def print_table(report: Mapping[str, Any], console: Console | None = None) -> None:
    """The report as a compact rich table (tokens and calls are per sample)."""
    title = f"{report.get('model', '')} on {report.get('dataset', '')}".strip()
    table = Table(
        title=title or None,
        caption="n = samples; " + _k_note(report),
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
    )
    longest = max((len(s["scaffold"]) for s in report["scaffolds"]), default=8)
    for header in SHORT:
        if header == "scaffold":
            table.add_column(header, min_width=min(longest, 32), overflow="fold")
        else:
            table.add_column(header, justify="right")
    for summary in report["scaffolds"]:
        cells = _row(summary)
        table.add_row(*(cells[i] for i in _TERMINAL))
    console = console or terminal.console()
    console.print(table)
    for saving in report.get("tokens_saved", ()):
        console.print(f"  {saved_line(saving)}")
    for summary in report["scaffolds"]:
        for line in _rounds_lines(summary):
            console.print(f"  {line}")


def _rounds_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per RSA round (as its eval loop prints them: round, mean_acc_k, majority,
    pass@k), under the scaffold's name; none without rounds."""
    rounds = summary.get("rounds") or ()
    lines = [f"{summary['scaffold']} by round (round 0: the first population):"] if rounds else []
    lines += [
        f"round {r['round']}: mean_acc_k {_pct(r['mean_acc_k'])}%, majority "
        f"{_pct(r['majority'])}%, pass@k {_pct(r['pass_at_k'])}% ({r['runs']} runs)"
        for r in rounds
    ]
    return lines


def markdown_report(report: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    """The report as Markdown: the main table, pass@k/maj@k by k, RC steps, plots."""
    lines = ["# Ponder eval report", ""]
    for name in ("model", "base_url", "dataset", "samples", "grader", "answer_format", "created"):
        if report.get(name) is not None:
            lines.append(f"- **{name}**: `{report[name]}`")
        if name == "answer_format" and isinstance(report.get("thinking_markers"), Mapping):
            marks = report["thinking_markers"]
            lines.append(f"- **thinking_markers**: `{marks.get('start')}` … `{marks.get('end')}`")
    lines += ["", _k_note(report).capitalize() + " (one scaffold run answering once).", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += [
        "| " + " | ".join(c.replace("|", "\\|") for c in _row(s)) + " |"
        for s in report["scaffolds"]
    ]
    for s in report["scaffolds"]:
        if len(s["pass_at"]) > 1:
            ks = sorted(s["pass_at"], key=int)
            lines += ["", f"## `{s['scaffold']}`: by k", ""]
            lines += ["| k | pass@k % | maj@k % |", "|---|---|---|"]
            lines += [f"| {k} | {_pct(s['pass_at'][k])} | {_pct(s['maj_at'].get(k))} |" for k in ks]
        if s.get("rc_steps"):
            lines += ["", f"## `{s['scaffold']}`: accuracy after each reasoning step", ""]
            lines += ["| step | accuracy % | completion tokens | samples |", "|---|---|---|---|"]
            lines += [
                f"| {p['step']} | {_pct(p['accuracy'])} | {_num(p['completion_tokens'])} "
                f"| {p['samples']} |"
                for p in s["rc_steps"]
            ]
        if s.get("rounds"):
            lines += ["", f"## `{s['scaffold']}`: each round's population (RSA's metrics)", ""]
            lines += ["Round 0 is the first population; each number is a mean over runs.", ""]
            lines += [
                "| round | mean_acc_k % | majority % | pass@k % | runs |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {r['round']} | {_pct(r['mean_acc_k'])} | {_pct(r['majority'])} "
                f"| {_pct(r['pass_at_k'])} | {r['runs']} |"
                for r in s["rounds"]
            ]
    if report.get("tokens_saved"):
        lines += ["", "## Tokens saved against majority voting", ""]
        lines += [
            "| scaffold | against | completion tokens | majority's | saved % | accuracy % "
            "| majority's accuracy % |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s['scaffold']} | {s['against']} | {_num(s['completion_tokens'])} "
            f"| {_num(s['baseline_completion_tokens'])} | {_pct(s['saved_fraction'])} "
            f"| {_pct(s['accuracy'])} | {_pct(s['baseline_accuracy'])} |"
            for s in report["tokens_saved"]
        ]
    for plot in plots:
        lines += ["", f"![{plot}]({plot})"]
    return "\n".join(lines) + "\n"
