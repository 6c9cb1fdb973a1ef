"""PNG plots of a report (matplotlib, headless).

- ``accuracy_vs_tokens.png``: every scaffold on one chart, accuracy against completion
  tokens (left) and all tokens (right) per problem; a dot is the mean over samples, a
  dashed line continues it through maj@k at k times the tokens.
- ``rc_steps.png``: for ``rc`` scaffolds, accuracy after each reasoning step against the
  cumulative completion tokens spent (RC's curve).

>>> import tempfile, pathlib
>>> report = {"scaffolds": [{"scaffold": "single", "accuracy": 0.5, "completion_tokens": 90.0,
...     "total_tokens": 120.0, "maj_at": {}, "rc_steps": None}]}
>>> [p.name for p in write_plots(report, pathlib.Path(tempfile.mkdtemp()))]
['accuracy_vs_tokens.png']
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["plot_accuracy_vs_tokens", "plot_rc_steps", "write_plots"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy_vs_tokens(report: Mapping[str, Any], path: Path) -> Path | None:
    """Accuracy against tokens per problem for every scaffold; None if nothing to plot."""
    rows = [s for s in report["scaffolds"] if s.get("accuracy") is not None]
    if not rows:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, field, label in (
        (axes[0], "completion_tokens", "completion tokens per problem"),
        (axes[1], "total_tokens", "prompt + completion tokens per problem"),
    ):
        for index, s in enumerate(rows):
            color = f"C{index % 10}"
            tokens = max(float(s.get(field) or 0.0), 1.0)
            xs, ys = [tokens], [100 * s["accuracy"]]
            ax.scatter(xs, ys, color=color, s=50, zorder=3, label=s["scaffold"])
            maj = sorted(((int(k), v) for k, v in (s.get("maj_at") or {}).items() if v is not None))
            if len(maj) > 1:
                ax.plot(
                    [tokens * k for k, _ in maj],
                    [100 * v for _, v in maj],
                    color=color,
                    linestyle="--",
                    marker=".",
                    alpha=0.7,
                )
                k, v = maj[-1]
                ax.annotate(f"maj@{k}", (tokens * k, 100 * v), fontsize=7, color=color)
        ax.set_xscale("log")
        _readable_log_ticks(ax)
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    for ax in axes:
        ax.set_ylim(-2, 102)  # accuracy is a percentage: never let matplotlib go negative
    axes[0].plot([], [], color="gray", linestyle="--", marker=".", label="maj@k (k x tokens)")
    axes[0].legend(fontsize=8, loc="best")
    model, dataset = report.get("model"), report.get("dataset")
    where = f": {model}" if model else ""
    where += f" on {Path(str(dataset)).name}" if dataset else ""
    fig.suptitle(f"Accuracy against compute{where}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _readable_log_ticks(ax: Any) -> None:
    """At most a few labels on a log axis, at 1-2-5 steps, never the minor ticks' (which
    matplotlib labels, overlapping, when the axis spans less than a decade)."""
    ticker = importlib.import_module("matplotlib.ticker")
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def plot_rc_steps(report: Mapping[str, Any], path: Path) -> Path | None:
    """Accuracy after each RC reasoning step; None if no scaffold has a step curve."""
    rows = [s for s in report["scaffolds"] if s.get("rc_steps")]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    for index, s in enumerate(rows):
        points = s["rc_steps"]
        xs = [max(float(p["completion_tokens"] or 0.0), 1.0) for p in points]
        ys = [100 * float(p["accuracy"] or 0.0) for p in points]
        ax.plot(xs, ys, marker="o", color=f"C{index % 10}", label=s["scaffold"])
        for p, x, y in zip(points, xs, ys, strict=True):
            ax.annotate(str(p["step"]), (x, y), textcoords="offset points", xytext=(3, 4),
                        fontsize=7)  # fmt: skip
    ax.set_xlabel("cumulative completion tokens per problem")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.set_title("Reasoning Cache: accuracy after each reasoning step")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(report: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Every plot that has data, written into ``out_dir``."""
    made = [
        plot_accuracy_vs_tokens(report, out_dir / "accuracy_vs_tokens.png"),
        plot_rc_steps(report, out_dir / "rc_steps.png"),
    ]
    return [p for p in made if p is not None]
