"""The accuracy-vs-tokens plot: its log axes' tick labels never overlap (matplotlib's
own labels minor ticks too when an axis spans about a decade, and they collide)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from clients.eval import plots

pytest.importorskip("matplotlib")


def test_tick_labels_of_both_panels_do_not_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = plots._pyplot()
    figures: list[Any] = []

    class Keeping:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def close(self, fig: Any) -> None:
            figures.append(fig)

    monkeypatch.setattr(plots, "_pyplot", lambda: Keeping())
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
    real.close(fig)
