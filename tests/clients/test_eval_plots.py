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

pytest.importorskip("matplotlib")


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
        {"scaffold": f"s{i}", "accuracy": 0.2, "completion_tokens": out,
         "total_tokens": out + 200, "maj_at": maj, "rc_steps": None}
        for i, out in enumerate((1200.0, 2500.0, 5000.0))
    ]  # fmt: skip
    assert plots.plot_accuracy_vs_tokens({"scaffolds": rows}, tmp_path / "a.png") is not None
    [fig] = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        labels = [
            t for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
            if t.get_text() and low <= t.get_position()[0] <= high
        ]  # fmt: skip
        assert 1 <= len(labels) <= 8, [t.get_text() for t in labels]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        for left, right in itertools.pairwise(boxes):
            assert left.x1 <= right.x0, [t.get_text() for t in labels]


def test_labels_of_runs_at_similar_cost_and_accuracy_do_not_overlap(
    tmp_path: Path, figures: list[Any]
) -> None:
    """Five runs within 10% of each other's tokens and 3 points of accuracy, all with
    maj@8: every run is named beside its dot in both panels, and no label's box overlaps
    another, a dot, the legend or the panel's edge (written at their points, such labels
    sit on top of each other)."""
    maj = {"1": 0.2, "4": 0.3, "8": 0.35}
    close = [("single", 0.20, 1000.0), ("majority(k=8)", 0.21, 1050.0), ("gsr(n=4)", 0.205, 1100.0),
             ("rc(steps=2)", 0.22, 980.0), ("self_refine", 0.19, 1020.0)]  # fmt: skip
    rows = [
        {"scaffold": name, "accuracy": accuracy, "completion_tokens": tokens,
         "total_tokens": tokens + 300, "maj_at": maj, "rc_steps": None}
        for name, accuracy, tokens in close
    ]  # fmt: skip
    assert plots.plot_accuracy_vs_tokens({"scaffolds": rows}, tmp_path / "a.png") is not None
    [fig] = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.axes[1].get_legend().get_window_extent(renderer)
    for ax in fig.axes:
        texts = ax.texts
        assert sorted(t.get_text() for t in texts) == sorted(
            [*(n for n, _, _ in close), *["maj@8"] * 5]
        )
        boxes = [plots._text_box(t, renderer) for t in texts]
        frame = ax.get_window_extent(renderer)
        dots = [ax.transData.transform((tokens, 100 * acc)) for _, acc, tokens in close]
        for box, text in zip(boxes, texts, strict=True):
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, text.get_text()
            assert not box.overlaps(legend)
            assert not any(box.contains(x, y) for x, y in dots), text.get_text()
        for (a, ta), (b, tb) in itertools.combinations(zip(boxes, texts, strict=True), 2):
            assert not a.overlaps(b), (ta.get_text(), tb.get_text())
