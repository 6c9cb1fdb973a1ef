"""PNG plots of a report (matplotlib, headless).

- ``accuracy_vs_tokens.png``: every scaffold on one chart, accuracy against completion
  tokens (left) and all tokens (right) per problem; a dot is the mean over samples, named
  beside it, and a dashed line continues it through maj@k at k times the tokens. Labels
  are placed so that none covers another or a dot (:func:`place_labels`: runs at
  similar cost and accuracy get theirs fanned out, with a leader line to the dot), and
  the legend sits outside the panels.
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
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from scaffolds.dependencies import require

__all__ = ["Label", "place_labels", "plot_accuracy_vs_tokens", "plot_rc_steps", "write_plots"]

OFFSETS = tuple(
    (ring * dx, ring * dy)
    for ring in (5, 12, 22, 34, 48)
    for dx, dy in ((1, 0), (1, 1), (1, -1), (-1, 0), (-1, 1), (-1, -1), (0, 1), (0, -1))
)
"""Where a label may go, in points from its dot: nearest first, around it in 8 ways."""
FONT_SIZE = 7
"""Of a label, in points."""


def _pyplot() -> Any:
    require("eval", "ponder eval's plots", modules=("matplotlib",))
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
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    names: dict[Any, list[Label]] = {ax: [] for ax in axes}  # each scaffold's dot
    ends: dict[Any, list[Label]] = {ax: [] for ax in axes}  # each maj@k line's last point
    points: dict[Any, list[tuple[float, float]]] = {ax: [] for ax in axes}  # every marker
    for ax, field, label in (
        (axes[0], "completion_tokens", "completion tokens per problem"),
        (axes[1], "total_tokens", "prompt + completion tokens per problem"),
    ):
        for index, s in enumerate(rows):
            color = f"C{index % 10}"
            tokens = max(float(s.get(field) or 0.0), 1.0)
            xs, ys = [tokens], [100 * s["accuracy"]]
            ax.scatter(xs, ys, color=color, s=50, zorder=3, label=s["scaffold"])
            names[ax].append(Label(s["scaffold"], tokens, ys[0], color))
            points[ax].append((tokens, ys[0]))
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
                ends[ax].append(Label(f"maj@{k}", tokens * k, 100 * v, color))
                points[ax].extend((tokens * k, 100 * v) for k, v in maj[1:])
        ax.set_xscale("log")
        _readable_log_ticks(ax)
        ax.set_xlabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    for ax in axes:
        ax.set_ylim(-2, 102)  # accuracy is a percentage: never let matplotlib go negative
    axes[1].plot([], [], color="gray", linestyle="--", marker=".", label="maj@k (k x tokens)")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    model, dataset = report.get("model"), report.get("dataset")
    where = f": {model}" if model else ""
    where += f" on {Path(str(dataset)).name}" if dataset else ""
    fig.suptitle(f"Accuracy against compute{where}")
    fig.tight_layout()  # the layout is final before labels are placed in display units
    for ax in axes:
        place_labels(ax, names[ax] + ends[ax], avoid=points[ax])
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class Label(NamedTuple):
    """A text to write beside the point (x, y) of a plot, in its series' color."""

    text: str
    x: float
    y: float
    color: str


def place_labels(
    ax: Any, labels: Sequence[Label], *, avoid: Sequence[tuple[float, float]] = ()
) -> list[Any]:
    """Annotate ``ax`` with ``labels``, in order, each at the first of :data:`OFFSETS`
    where its box overlaps no label placed before, no marker at a point of ``avoid``
    (data coordinates) and nothing outside the axes (else where it overlaps least); one
    set off further than the nearest ring gets a thin leader line to its point. Call it
    once the figure's layout is final: boxes are measured in display units (the axes'
    autoscaled limits are applied here). Each text is measured once and its box at every
    offset worked out from that (:func:`_box_at`), so trying 40 spots costs no drawing.

    >>> plt = _pyplot()
    >>> fig, ax = plt.subplots()
    >>> _ = ax.scatter([1.0, 1.0], [5.0, 5.0]); _ = ax.set_xlim(0, 2); _ = ax.set_ylim(0, 10)
    >>> first, second = place_labels(ax, [Label("a", 1, 5, "C0"), Label("b", 1, 5, "C1")])
    >>> first.xyann != second.xyann  # the same point: the second label moves on
    True
    >>> plt.close(fig)
    """
    ax.apply_aspect()  # the axes' box as drawn
    _ = ax.viewLim  # reading it applies pending autoscaling, as a draw would
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    inside = (frame.x0, frame.y0, frame.x1, frame.y1)
    radius = renderer.points_to_pixels(4.0)
    taken = [
        (x - radius, y - radius, x + radius, y + radius) for x, y in _to_display(ax, list(avoid))
    ]
    pixels_per_point = renderer.points_to_pixels(1.0)
    sizes: dict[str, tuple[float, float]] = {}
    placed = []
    anchors = _to_display(ax, [(label.x, label.y) for label in labels])
    for label, (x, y) in zip(labels, anchors, strict=True):
        if label.text not in sizes:
            sizes[label.text] = _text_size(ax, label.text, renderer)
        width, height = sizes[label.text]
        best: tuple[float, int, int, tuple[float, float, float, float]] | None = None
        for dx, dy in OFFSETS:
            box = _box_at(
                x + dx * pixels_per_point, y + dy * pixels_per_point, width, height, dx, dy
            )
            cost = sum(_overlap(box, other) for other in taken)
            cost += _overlap(box, box) - _overlap(box, inside)  # what sticks out (0.0 if none)
            if best is None or cost < best[0]:  # the first that fits, else the least
                best = (cost, dx, dy, box)
            if cost <= 0:
                break
        assert best is not None  # OFFSETS is not empty
        _, dx, dy, box = best
        taken.append(box)
        leader = math.hypot(dx, dy) > OFFSETS[0][0] * 1.5
        placed.append(_annotation(ax, label, dx, dy, leader=leader))
    return placed


def _to_display(ax: Any, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Data points of ``ax`` in display units (pixels from the figure's lower left)."""
    if not points:
        return []
    return [(float(x), float(y)) for x, y in ax.transData.transform(points)]


def _text_size(ax: Any, text: str, renderer: Any) -> tuple[float, float]:
    """Width and height, in display units, of ``text`` written as a label of ``ax``."""
    probe = importlib.import_module("matplotlib.text").Text(text=text, fontsize=FONT_SIZE)
    probe.set_figure(ax.figure)
    box = probe.get_window_extent(renderer)
    return float(box.width), float(box.height)


def _box_at(
    x: float, y: float, width: float, height: float, dx: float, dy: float
) -> tuple[float, float, float, float]:
    """The box (x0, y0, x1, y1) of a text of that size anchored at display point (x, y)
    as :func:`_annotation` aligns it for the offset (dx, dy): to the right of the point
    starts there, to the left ends there, straight above or below is centred on it.

    >>> _box_at(100.0, 50.0, 20.0, 10.0, 5, 5)
    (100.0, 50.0, 120.0, 60.0)
    >>> _box_at(100.0, 50.0, 20.0, 10.0, -5, 0)
    (80.0, 45.0, 100.0, 55.0)
    >>> _box_at(100.0, 50.0, 20.0, 10.0, 0, -5)
    (90.0, 40.0, 110.0, 50.0)
    """
    x0 = x if dx > 0 else x - width if dx < 0 else x - width / 2
    y0 = y if dy > 0 else y - height if dy < 0 else y - height / 2
    return (x0, y0, x0 + width, y0 + height)


def _annotation(ax: Any, label: Label, dx: float, dy: float, *, leader: bool = False) -> Any:
    """``label`` written at (dx, dy) points from its point, aligned by the side it lies
    on (see :func:`_box_at`); its leader line, if any, runs from that anchor, the text's
    corner or edge facing the point, straight to the point (not clipped against the
    text's box, which costs a Bezier split per line at every draw)."""
    ha = "left" if dx > 0 else "right" if dx < 0 else "center"
    va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
    anchor = (
        {"left": 0.0, "center": 0.5, "right": 1.0}[ha],
        {"bottom": 0.0, "center": 0.5, "top": 1.0}[va],
    )
    leader_line = {
        "arrowstyle": "-",
        "color": label.color,
        "lw": 0.6,
        "shrinkA": 1,
        "shrinkB": 3,
        "relpos": anchor,
        "patchA": None,
    }
    return ax.annotate(
        label.text,
        (label.x, label.y),
        xytext=(dx, dy),
        textcoords="offset points",
        ha=ha,
        va=va,
        fontsize=FONT_SIZE,
        color=label.color,
        arrowprops=leader_line if leader else None,
    )


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """The area two boxes (x0, y0, x1, y1) share."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0.0) * max(height, 0.0)


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
            ax.annotate(
                str(p["step"]), (x, y), textcoords="offset points", xytext=(3, 4), fontsize=7
            )
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
