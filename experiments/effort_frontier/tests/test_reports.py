"""The committed pools are rebuilt from the earlier studies' rows, and the committed report
from the pools, byte for byte, by the commands experiments/README.md gives (the plot only
as a PNG: its bytes depend on the matplotlib version)."""

from __future__ import annotations

from pathlib import Path

from experiments.effort_frontier.__main__ import main

HERE = Path(__file__).resolve().parents[1]


def test_the_pools_are_rebuilt_from_the_earlier_rows(tmp_path: Path) -> None:
    main(["pools", "--out", str(tmp_path)])
    for model in ("base", "gsr"):
        assert (tmp_path / f"{model}.jsonl").read_text() == (
            HERE / "pools" / f"{model}.jsonl"
        ).read_text()


def test_the_committed_report_is_rebuilt_from_the_pools(tmp_path: Path) -> None:
    main(["report", "--out", str(tmp_path)])
    committed = HERE / "results"
    assert (tmp_path / "report.md").read_text() == (committed / "report.md").read_text()
    assert (tmp_path / "report.json").read_text() == (committed / "report.json").read_text()
    assert (tmp_path / "accuracy_vs_tokens.png").read_bytes().startswith(b"\x89PNG")
