"""The accuracy-vs-tokens plot: its log axes' tick labels never overlap (matplotlib's
own labels minor ticks too when an axis spans about a decade, and they collide), nor do
the labels of runs close together."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.eval import plots

Text = pytest.importorskip("matplotlib.text").Text


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures the plots make, kept open (closed after the test)."""
    real = plots._pyplot()
    kept: list[Any] = []

    class Keeping:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def close(self, fig: Any) -> None:
            kept.append(fig)

    monkeypatch.setattr(plots, "_pyplot", lambda: Keeping())
    yield kept
    for fig in kept:
        real.close(fig)


def test_tick_labels_of_both_panels_do_not_overlap(tmp_path: Path, figures: list[Any]) -> None:
    maj = {"1": 0.2, "4": 0.3, "8": 0.35}
    rows = [  # 1,200..40,000 with maj@8: matplotlib's own ticks overlapped here
        {
            "scaffold": f"s{i}",
            "accuracy": 0.2,
            "completion_tokens": out,
            "total_tokens": out + 200,
            "maj_at": maj,
            "rc_steps": None,
        }
        for i, out in enumerate((1200.0, 2500.0, 5000.0))
    ]
    assert plots.plot_accuracy_vs_tokens({"scaffolds": rows}, tmp_path / "a.png") is not None
    [fig] = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        labels = [
            t
            for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
            if t.get_text() and low <= t.get_position()[0] <= high
        ]
        assert 1 <= len(labels) <= 8, [t.get_text() for t in labels]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0, [t.get_text() for t in labels]


CLOSE = [
    ("single", 0.20, 1000.0),
    ("majority(k=8)", 0.21, 1050.0),
    ("gsr(n=4)", 0.205, 1100.0),
    ("rc(steps=2)", 0.22, 980.0),
    ("self_refine", 0.19, 1020.0),
]
"""Five runs within 10% of each other's tokens and 3 points of accuracy."""


def _close_runs_report() -> dict[str, Any]:
    maj = {"1": 0.2, "4": 0.3, "8": 0.35}
    return {
        "scaffolds": [
            {
                "scaffold": name,
                "accuracy": accuracy,
                "completion_tokens": tokens,
                "total_tokens": tokens + 300,
                "maj_at": maj,
                "rc_steps": None,
            }
            for name, accuracy, tokens in CLOSE
        ]
    }


def _text_box(note: Any, renderer: Any) -> Any:
    """An annotation's text alone, as matplotlib draws it (its leader line left out)."""
    note.update_positions(renderer)
    return Text.get_window_extent(note, renderer)


def _assert_labels_apart(fig: Any) -> None:
    """Every run is named beside its dot in both panels, and no label's box overlaps
    another, a dot, the legend or the panel's edge, as drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.axes[1].get_legend().get_window_extent(renderer)
    for ax in fig.axes:
        texts = ax.texts
        assert sorted(t.get_text() for t in texts) == sorted(
            [*(n for n, _, _ in CLOSE), *["maj@8"] * 5]
        )
        boxes = [_text_box(t, renderer) for t in texts]
        frame = ax.get_window_extent(renderer)
        dots = [ax.transData.transform((tokens, 100 * acc)) for _, acc, tokens in CLOSE]
        for box, text in zip(boxes, texts, strict=True):
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, text.get_text()
            assert not box.overlaps(legend)
            assert not any(box.contains(x, y) for x, y in dots), text.get_text()
        for (a, ta), (b, tb) in itertools.combinations(zip(boxes, texts, strict=True), 2):
            assert not a.overlaps(b), (ta.get_text(), tb.get_text())


def test_labels_of_runs_at_similar_cost_and_accuracy_do_not_overlap(
    tmp_path: Path, figures: list[Any]
) -> None:
    """Five runs close together, all with maj@8: their labels are fanned out (written at
    their points, such labels sit on top of each other)."""
    assert plots.plot_accuracy_vs_tokens(_close_runs_report(), tmp_path / "a.png") is not None
    [fig] = figures
    _assert_labels_apart(fig)


def test_the_overlap_check_fails_when_labels_have_one_spot_each(
    tmp_path: Path, figures: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above is not vacuous: with a single spot to choose from, the same five
    runs' labels overlap and it says so."""
    monkeypatch.setattr(plots, "OFFSETS", ((5, 0),))
    assert plots.plot_accuracy_vs_tokens(_close_runs_report(), tmp_path / "a.png") is not None
    [fig] = figures
    with pytest.raises(AssertionError):
        _assert_labels_apart(fig)


@pytest.mark.parametrize("text", ["maj@8", "budget_forcing", "gsr(n=4)"])
def test_the_box_worked_out_for_each_spot_is_the_one_matplotlib_draws(
    text: str, figures: list[Any]
) -> None:
    """place_labels measures a text once and works out its box at each of the 40 spots
    (_box_at): on a log axis, that box is the drawn annotation's to a thousandth of a
    pixel, in every direction and ring."""
    fig, ax = plots._pyplot().subplots(figsize=(6, 4))
    figures.append(fig)
    ax.set_xscale("log")
    ax.set_xlim(100, 10_000)
    ax.set_ylim(-2, 102)
    renderer = fig.canvas.get_renderer()
    width, height = plots._text_size(ax, text, renderer)
    [(x, y)] = plots._to_display(ax, [(1000.0, 40.0)])
    per_point = fig.dpi / 72
    for dx, dy in plots.OFFSETS:
        note = plots._annotation(ax, plots.Label(text, 1000.0, 40.0, "C0"), dx, dy)
        drawn = _text_box(note, renderer)
        worked_out = plots._box_at(x + dx * per_point, y + dy * per_point, width, height, dx, dy)
        assert worked_out == pytest.approx((drawn.x0, drawn.y0, drawn.x1, drawn.y1), abs=1e-3)


def test_labels_are_placed_against_the_limits_matplotlib_autoscales_to(
    figures: list[Any],
) -> None:
    """Called on a fresh axes whose limits matplotlib has yet to autoscale (no draw, no
    layout since the points were added), place_labels still works in the limits it will
    draw with: three labels at one point end up apart and off the dot, as drawn."""
    fig, ax = plots._pyplot().subplots(figsize=(4, 3))
    figures.append(fig)
    ax.scatter([10.0, 20.0], [1.0, 2.0])
    ax.get_xlim()  # limits autoscaled once, then made stale again by more data
    ax.scatter([1000.0], [50.0])
    labels = [plots.Label(text, 1000.0, 50.0, "C0") for text in ("first", "second", "third")]
    notes = plots.place_labels(ax, labels, avoid=[(1000.0, 50.0)])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [_text_box(note, renderer) for note in notes]
    dot = ax.transData.transform((1000.0, 50.0))
    frame = ax.get_window_extent(renderer)
    for box in boxes:
        assert not box.contains(*dot)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
