"""Two runs side by side: ``ponder eval compare A.jsonl B.jsonl``.

Scaffolds with the same spec are paired (if the runs share none and each holds exactly
one, those two are paired). Each pair shows both summaries and a paired count over the
problems both runs graded: where A's per-problem accuracy is higher, lower, or equal, and
the mean change (:func:`scaffolds.evaluation.stats.paired`, as the experiments report it).
Runs graded in different answer formats are compared, with a warning that says so.

>>> head_to_head({"p": 1.0, "q": 0.0, "r": 0.5}, {"p": 0.5, "q": 0.0, "s": 1.0})
{'common': 2, 'a_better': 1, 'b_better': 0, 'tied': 1, 'mean_delta': -0.25}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clients.eval.report import Cluster, saved_line, summarize_scaffold, tokens_saved
from clients.eval.resume import run_formats
from scaffolds import terminal
from scaffolds.evaluation.results import Record, read_results
from scaffolds.evaluation.stats import paired

__all__ = ["compare_runs", "head_to_head", "print_comparison", "results_file"]


def results_file(path: Path) -> Path:
    """A results file, or ``DIR/results.jsonl`` for an output folder."""
    return path / "results.jsonl" if path.is_dir() else path


def _per_problem(records: Sequence[Record]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for r in records:
        counted = not r.get("error") and r.get("cut_reason") != "time"  # as the report
        if counted and r.get("correct") is not None:
            sums.setdefault(str(r["id"]), []).append(float(bool(r["correct"])))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def head_to_head(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
    """Per-problem accuracies of A and B compared on the problems both have: how often
    each is higher, and the paired mean change B - A (one run's per-problem scores are
    a one-row matrix to :func:`~scaffolds.evaluation.stats.paired`)."""
    common = sorted(set(a) & set(b))
    xs, ys = [a[p] for p in common], [b[p] for p in common]
    pairs = list(zip(xs, ys, strict=True))
    return {
        "common": len(common),
        "a_better": sum(1 for x, y in pairs if y < x),
        "b_better": sum(1 for x, y in pairs if y > x),
        "tied": sum(1 for x, y in pairs if y == x),
        "mean_delta": paired([ys], [xs])["diff"] if common else None,
    }


def _pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[str | None, str | None]]:
    if not set(a) & set(b) and len(a) == 1 and len(b) == 1:
        return [(a[0], b[0])]
    pairs: list[tuple[str | None, str | None]] = [(s, s if s in b else None) for s in a]
    return pairs + [(None, s) for s in b if s not in a]


async def compare_runs(a_path: Path, b_path: Path, cluster: Cluster) -> dict[str, Any]:
    """Summaries of both runs, paired by scaffold, and the answer formats they were
    graded in."""
    loaded = [read_results(results_file(p)) for p in (a_path, b_path)]
    runs = [results.by_scaffold() for results in loaded]
    formats = {side: run_formats(r.records) for side, r in zip("ab", loaded, strict=True)}
    rows = []
    for spec_a, spec_b in _pairs(list(runs[0]), list(runs[1])):
        row: dict[str, Any] = {"a": None, "b": None, "paired": None}
        if spec_a is not None:
            row["a"] = await summarize_scaffold(spec_a, runs[0][spec_a], cluster)
        if spec_b is not None:
            row["b"] = await summarize_scaffold(spec_b, runs[1][spec_b], cluster)
        if spec_a is not None and spec_b is not None:
            row["paired"] = head_to_head(
                _per_problem(runs[0][spec_a]), _per_problem(runs[1][spec_b])
            )
            a, b = row["a"], row["b"]
            row["tokens_saved"] = tokens_saved(a, b) or tokens_saved(b, a)
        rows.append(row)
    return {"a": str(a_path), "b": str(b_path), "answer_format": formats, "pairs": rows}


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{100 * value:.1f}"
    if kind == "int":
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def _top(table: Mapping[str, float | None]) -> tuple[str, float | None]:
    return (max(table, key=int), table[max(table, key=int)]) if table else ("", None)


_METRICS: list[tuple[str, str]] = [
    ("problems", "int"),
    ("samples", "int"),
    ("accuracy %", "pct"),
    ("pass@k %", "pct"),
    ("maj@k %", "pct"),
    ("prompt tok", "int"),
    ("completion tok", "int"),
    ("engine calls", "num"),
    ("latency p50 s", "num"),
    ("latency p90 s", "num"),
    ("cut off", "int"),
    ("time cut", "int"),
    ("errors", "int"),
]


def _values(s: Mapping[str, Any] | None) -> list[Any]:
    if s is None:
        return [None] * len(_METRICS)
    return [
        s["problems"],
        s["samples"],
        s["accuracy"],
        _top(s["pass_at"])[1],
        _top(s["maj_at"])[1],
        s["prompt_tokens"],
        s["completion_tokens"],
        s["engine_calls"],
        s["latency_s"]["p50"],
        s["latency_s"]["p90"],
        s["cut_off"],
        s.get("time_cut", 0),
        s["errors"],
    ]


def print_comparison(result: Mapping[str, Any], console: Console | None = None) -> None:
    """One table per scaffold pair: metric, A, B, B - A."""
    console = console or terminal.console()
    formats = result.get("answer_format") or {}
    if formats.get("a") != formats.get("b"):
        console.print(
            f"[yellow]warning[/yellow]: A was graded answer_format {formats.get('a')!r}, "
            f"B {formats.get('b')!r}: their accuracies count answers differently"
        )
    for row in result["pairs"]:
        a, b = row["a"], row["b"]
        title = f"{(a or {}).get('scaffold', '-')}  vs  {(b or {}).get('scaffold', '-')}"
        table = Table(title=title)
        for name in ("metric", f"A: {result['a']}", f"B: {result['b']}", "B - A"):
            table.add_column(name, justify="left" if name == "metric" else "right")
        for (name, kind), va, vb in zip(_METRICS, _values(a), _values(b), strict=True):
            delta = vb - va if va is not None and vb is not None else None
            table.add_row(name, _fmt(va, kind), _fmt(vb, kind), _fmt(delta, kind))
        console.print(table)
        if row["paired"] and row["paired"]["common"]:
            p = row["paired"]
            console.print(
                f"  paired over {p['common']} problems: A better on {p['a_better']}, "
                f"B better on {p['b_better']}, tied on {p['tied']}; "
                f"mean accuracy change {_fmt(p['mean_delta'], 'pct')} points"
            )
        if row.get("tokens_saved"):
            console.print(f"  {saved_line(row['tokens_saved'])}")
