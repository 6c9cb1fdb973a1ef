"""Tables and plots of :mod:`experiments.tiny_models.rc_experiments` results.

>>> steps = {"rc": {"L=8": {"start": [1, 1], "continue": [1, 0], "summary": [0, 0]}}}
>>> print(step_table(steps).splitlines()[-1])
| rc | 8 | 1.000 ±0.000 (n=2) | 0.500 ±0.980 (n=2) | 0.000 ±0.000 (n=2) |
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from scaffolds.evaluation.stats import save_figure, summarize

__all__ = ["error_table", "field_table", "plot", "plot_steps", "step_table"]


def field_table(steps: dict[str, dict[str, dict[str, list[int]]]]) -> str:
    """Accuracy of each part of the chunks (every copy of it in a chunk right)."""
    fields = ("label", "number", "total", "next label", "state total")
    lines = [
        "| model | length | chunk | " + " | ".join(fields) + " |",
        "|---|---:|---|" + "---:|" * len(fields),
    ]
    for model, by_length in steps.items():
        for length, kinds in by_length.items():
            for kind in ("start", "continue"):
                cells = [
                    f"{summarize([kinds[f'{kind} {f}']])['accuracy']:.3f}"
                    if f"{kind} {f}" in kinds
                    else "-"
                    for f in fields
                ]
                lines.append(
                    f"| {model} | {length.removeprefix('L=')} | {kind} | "
                    + " | ".join(cells)
                    + " |"
                )
    return "\n".join(lines) + "\n"


def step_table(steps: dict[str, dict[str, dict[str, list[int]]]]) -> str:
    """Per-step greedy accuracy (with its 95% CI) from
    :func:`experiments.tiny_models.rc_experiments.step_accuracy` results."""
    lines = [
        "| model | length | start chunk | continue chunk | summary |",
        "|---|---:|---|---|---|",
    ]
    for model, by_length in steps.items():
        for length, kinds in by_length.items():
            cells = []
            for kind in ("start", "continue", "summary"):
                s = summarize([kinds[kind]])
                cells.append(
                    f"{s['accuracy']:.3f} ±{s['accuracy'] - s['ci95'][0]:.3f} (n={s['problems']})"
                )
            lines.append(f"| {model} | {length.removeprefix('L=')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def error_table(results: dict[str, Any], label: str) -> str:
    """Where greedy rc (condition ``label``) first went wrong: numbers read before the
    first wrong step."""
    lines = [
        "| model | length | all steps right | first wrong step (numbers read before it: count) |"
    ]
    lines.append("|---|---:|---:|---|")
    for key, conditions in results["models"].items():
        entry = conditions.get(label)
        if entry is None or "first_error" not in entry:
            continue
        errors = entry["first_error"]
        clean = sum(e is None for e in errors)
        where = Counter(f"{e[0]} ({e[1]})" for e in errors if e is not None)
        common = ", ".join(f"{k}: {v}" for k, v in where.most_common(6))
        model, length = key.split(" L=")
        lines.append(f"| {model} | {length} | {clean}/{len(errors)} | {common} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> Path:
    """Accuracy against list length, one line per model/condition, 95% CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    lines: dict[str, list[tuple[int, float, float, float, float]]] = {}
    for key, conditions in results["models"].items():
        model, length = key.split(" L=")
        for label, entry in conditions.items():
            s = entry["summary"]
            point = (int(length), s["accuracy"], *s["ci95"], entry["completion_tokens_mean"])
            lines.setdefault(f"{model}/{label}", []).append(point)
    for i, (name, points) in enumerate(sorted(lines.items())):
        points.sort()
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        err = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
        style = "-" if name.startswith("rc/") else "--"
        left.errorbar(xs, ys, yerr=err, fmt="o" + style, color=f"C{i}", capsize=3, label=name)
        right.errorbar([p[4] for p in points], ys, yerr=err, fmt="o", color=f"C{i}", capsize=3)
    left.axvline(max(results["train_lengths"]), color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("list length (numbers); dotted: longest training list")
    left.set_ylabel("accuracy (95% CI over problems)")
    left.legend(fontsize=7)
    right.set_xscale("log")
    right.set_xlabel("generated tokens per problem (mean, log scale)")
    left.set_title(f"last digit of a list's sum, {results['problems']} test problems per length")
    seeds = f"seeds {results['seeds']}" if results["seeds"] else "greedy only"
    right.set_title(f"accuracy against tokens ({seeds}); grey: chance (0.1)")
    for ax in (left, right):
        ax.axhline(0.1, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_steps(steps: dict[str, dict[str, dict[str, list[int]]]], path: Path) -> Path:
    """Per-step diagnostics against list length: each chunk part's accuracy given a
    correct prompt (all models' lengths pooled into one line per part)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_length: dict[int, dict[str, list[int]]] = {}
    for lengths in steps.values():
        for length, kinds in lengths.items():
            by_length.setdefault(int(length.removeprefix("L=")), {}).update(kinds)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    parts = (
        "start label",
        "start next label",
        "start total",
        "continue label",
        "continue",
        "summary",
    )
    for i, part in enumerate(parts):
        points = sorted(
            (n, summarize([kinds[part]])) for n, kinds in by_length.items() if part in kinds
        )
        xs = [n for n, _ in points]
        ys = [s["accuracy"] for _, s in points]
        err = [
            [y - s["ci95"][0] for y, (_, s) in zip(ys, points, strict=True)],
            [s["ci95"][1] - y for y, (_, s) in zip(ys, points, strict=True)],
        ]
        ax.errorbar(xs, ys, yerr=err, fmt="o-", color=f"C{i}", capsize=3, label=part)
    ax.axvline(8, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("list length (numbers); dotted: longest training list")
    ax.set_ylabel("greedy accuracy given a correct prompt")
    ax.set_title("RC steps of the list-sum model, one step at a time")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
