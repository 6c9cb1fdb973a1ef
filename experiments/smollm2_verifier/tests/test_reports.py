"""Each committed verifier report is rebuilt from the committed rows, byte for byte, by the
command experiments/README.md gives for it (its ``report.md`` and ``report.json``; the
plot only as a PNG, its bytes depend on the matplotlib version)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from experiments.smollm2_verifier.__main__ import main

HERE = Path(__file__).resolve().parents[1]
ISSUE20 = HERE.parent / "smollm2_refine" / "runs" / "smollm2-r2"


@pytest.mark.parametrize("name", ["v1", "v2"])
def test_the_committed_report_is_rebuilt_from_its_rows(tmp_path: Path, name: str) -> None:
    committed = HERE / "runs" / name
    if not (committed / "report.md").exists():
        pytest.skip("no committed verifier run")
    run = tmp_path / name
    run.mkdir()
    for part in ("eval", "search"):
        if (committed / part).is_dir():
            shutil.copytree(committed / part, run / part)
    shutil.copy(committed / "eval.jsonl", run / "eval.jsonl")
    main(["report", str(run), "--problems", str(run / "eval.jsonl"), "--issue20", str(ISSUE20)])
    assert (run / "report.md").read_text() == (committed / "report.md").read_text()
    assert (run / "report.json").read_text() == (committed / "report.json").read_text()
    assert (run / "accuracy_vs_tokens.png").read_bytes().startswith(b"\x89PNG")
