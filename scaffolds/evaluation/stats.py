"""Statistics over problems: accuracy with its 95% interval and the one paired difference
(``ponder eval compare`` and the experiments' reports), plus the results table and the
accuracy-vs-tokens plot that the experiments share (``experiments/tiny_models`` and
``experiments/smollm2_refine``).

A condition's scores are ``matrix[seed][problem]`` of 0/1. A problem's score is its mean
over seeds; accuracy is the mean of those with a normal 95% interval (mean +- 1.96 SE
over problems); a paired difference is the same over per-problem differences (same
problems, same seeds). Per-problem scores of one run (``ponder eval``'s mean over a
problem's samples) are a one-row matrix.

>>> s = summarize([[1, 0], [1, 1], [0, 0]])  # 3 seeds x 2 problems
>>> round(s["accuracy"], 3), s["problems"], s["seeds"]
(0.5, 2, 3)
>>> d = paired([[1, 1], [1, 1]], [[0, 0], [1, 1]])
>>> d["diff"], d["problems"]
(0.5, 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scaffolds.dependencies import require

__all__ = [
    "add_pairs",
    "condition_entries",
    "markdown",
    "mean",
    "mean_se",
    "paired",
    "per_problem",
    "plot",
    "rows_of",
    "summarize",
]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def mean_se(values: Sequence[float], z: float = 1.96) -> tuple[float, float, float]:
    """Mean, standard error and half-width of the normal 95% interval."""
    n = len(values)
    center = mean(values)
    if n < 2:
        return center, float("nan"), float("nan")
    var = sum((v - center) ** 2 for v in values) / (n - 1)
    se = math.sqrt(var / n)
    return center, se, z * se


def per_problem(matrix: Sequence[Sequence[float]]) -> list[float]:
    """``matrix[seed][problem]`` -> each problem's mean over seeds.

    >>> per_problem([[1, 0, 1], [0, 0, 1]])
    [0.5, 0.0, 1.0]
    """
    seeds = len(matrix)
    return [sum(column) / seeds for column in zip(*matrix, strict=True)]


def summarize(matrix: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Accuracy with its 95% CI over problems, from ``matrix[seed][problem]`` of 0/1."""
    scores = per_problem(matrix)
    center, se, half = mean_se(scores)
    return {
        "accuracy": center,
        "se": se,
        "ci95": [center - half, center + half],
        "by_seed": [mean(row) for row in matrix],
        "problems": len(scores),
        "seeds": len(matrix),
    }


def paired(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Paired difference ``a - b`` over the same problems (each averaged over its seeds).

    A condition with one run (greedy) is compared through its per-problem score, which
    is what every seed of the other condition is paired with.
    """
    pa, pb = per_problem(a), per_problem(b)
    if len(pa) != len(pb):
        raise ValueError(f"conditions cover different problems ({len(pa)} vs {len(pb)})")
    center, se, half = mean_se([x - y for x, y in zip(pa, pb, strict=True)])
    return {"diff": center, "se": se, "ci95": [center - half, center + half], "problems": len(pa)}


def condition_entries(
    per_seed: Sequence[Mapping[str, Mapping[str, Sequence[float]]]],
) -> dict[str, Any]:
    """A report's entries from ``per_seed[seed][condition]`` = ``{"correct", "completion",
    "prompt"}`` lists (one value per problem): each condition's 0/1 matrix, its summary
    and the mean generated and prompt tokens a problem.

    >>> seed = {"maj": {"correct": [1.0, 0.0], "completion": [10.0, 30.0], "prompt": [5.0, 5.0]}}
    >>> e = condition_entries([seed, seed])["maj"]
    >>> e["summary"]["accuracy"], e["completion_tokens_mean"], e["prompt_tokens_mean"]
    (0.5, 20.0, 5.0)
    """

    def tokens(label: str, kind: str) -> float:
        return mean(per_problem([c[label][kind] for c in per_seed]))

    return {
        label: {
            "correct": [list(c[label]["correct"]) for c in per_seed],
            "summary": summarize([c[label]["correct"] for c in per_seed]),
            "completion_tokens_mean": tokens(label, "completion"),
            "prompt_tokens_mean": tokens(label, "prompt"),
        }
        for label in per_seed[0]
    }


def rows_of(results: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(model, condition, entry) for every evaluated condition."""
    return [(m, c, e) for m, conds in results["models"].items() for c, e in conds.items()]


def add_pairs(results: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> None:
    """Paired differences ``"model/cond - model/cond"``; greedy is paired by problem."""
    out = results.setdefault("paired", {})
    for left, right in pairs:
        (ma, ca), (mb, cb) = left.split("/", 1), right.split("/", 1)
        a = results["models"].get(ma, {}).get(ca)
        b = results["models"].get(mb, {}).get(cb)
        if a is not None and b is not None:
            out[f"{left} - {right}"] = paired(a["correct"], b["correct"])


def markdown(results: Mapping[str, Any]) -> str:
    """The results table and the paired differences, as Markdown."""
    lines = [
        "| model | scaffold | accuracy | 95% CI | per seed | gen tok/prob | prompt tok/prob |",
        "|---|---|---:|---|---|---:|---:|",
    ]
    for model, label, e in rows_of(results):
        s = e["summary"]
        seeds = ", ".join(f"{x:.3f}" for x in s["by_seed"])
        lines.append(
            f"| {model} | {label} | {s['accuracy']:.3f} | [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"
            f" | {seeds} | {e['completion_tokens_mean']:.1f} | {e['prompt_tokens_mean']:.1f} |"
        )
    if results.get("paired"):
        lines += ["", "| paired difference | diff | 95% CI |", "|---|---:|---|"]
        for name, d in results["paired"].items():
            lines.append(
                f"| {name} | {d['diff']:+.3f} | [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] |"
            )
    return "\n".join(lines) + "\n"


def plot(
    results: Mapping[str, Any],
    path: Path,
    *,
    title: str,
    markers: Mapping[str, str] | None = None,
    xticks: Sequence[float] | None = None,
) -> Path:
    """Accuracy against generated tokens per problem (log scale), one point per
    model/scaffold with its 95% CI, a colour per model."""
    require("eval", "the accuracy plot", modules=("matplotlib",))
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colors = {m: f"C{i}" for i, m in enumerate(results["models"])}
    for model, label, e in rows_of(results):
        s = e["summary"]
        x, y = e["completion_tokens_mean"], s["accuracy"]
        err = [[y - s["ci95"][0]], [s["ci95"][1] - y]]
        marker = (markers or {}).get(label, "o")
        ax.errorbar(x, y, yerr=err, fmt=marker, color=colors[model], capsize=3)
        ax.annotate(
            f"{model}/{label}", (x, y), textcoords="offset points", xytext=(5, 3), fontsize=7
        )
    ax.set_xscale("log")
    if xticks:
        ax.set_xticks(list(xticks))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("generated tokens per problem (mean, log scale)")
    ax.set_ylabel("accuracy (95% CI over problems)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` as a PNG (folders made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
