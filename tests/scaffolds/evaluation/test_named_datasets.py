"""Benchmarks by name (``--dataset gsm8k``): downloaded once through the Hub's dataset
viewer API (here a stand-in on loopback), cached under PONDER_HOME, read offline after;
offline with no cache, an error that says how to pass a local file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from scaffolds.evaluation.problems import load_problems
from testing.threaded import serving_in_thread

GSM8K = [
    {
        "question": f"Tom has {i} apples and buys 1,000 more. How many?",
        "answer": f"{i} + 1000 = {i + 1000}\n#### {i + 1000:,}",
    }
    for i in range(230)
]


def _viewer(calls: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.get("/rows")
    def rows(dataset: str, config: str, split: str, offset: int, length: int) -> dict[str, Any]:
        calls.append({"dataset": dataset, "config": config, "split": split, "offset": offset})
        page = GSM8K[offset : offset + length]
        return {
            "rows": [{"row_idx": offset + i, "row": row} for i, row in enumerate(page)],
            "num_rows_total": len(GSM8K),
        }

    return app


def test_a_named_benchmark_is_downloaded_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PONDER_HOME", str(tmp_path))
    calls: list[dict[str, Any]] = []
    with serving_in_thread(_viewer(calls)) as url:
        monkeypatch.setenv("PONDER_HF_DATASETS_SERVER", url)
        loaded = load_problems("gsm8k", limit=3)
    assert [c["offset"] for c in calls] == [0, 100, 200]  # 230 rows, 100 a page
    assert {(c["dataset"], c["config"], c["split"]) for c in calls} == {
        ("openai/gsm8k", "main", "test")
    }
    first = loaded.problems[0]
    assert (first.id, first.answer) == ("gsm8k-test-0", "1000")  # after ####, no comma
    assert first.problem.startswith("Tom has 0 apples")
    assert (tmp_path / "datasets" / "gsm8k.jsonl").is_file()
    monkeypatch.setenv("PONDER_HF_DATASETS_SERVER", "http://127.0.0.1:9")  # nothing there
    again = load_problems("gsm8k")
    assert len(again.problems) == 230 and again.problems[229].answer == "1229"
    assert len(calls) == 3


def test_offline_a_named_benchmark_says_how_to_pass_a_local_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PONDER_HOME", str(tmp_path))
    monkeypatch.setenv("PONDER_HF_DATASETS_SERVER", "http://127.0.0.1:9")
    with pytest.raises(ValueError) as caught:
        load_problems("math500")
    message = str(caught.value)
    assert "cannot download 'math500' (HuggingFaceH4/MATH-500, split test)" in message
    assert "--dataset path/to/math500.jsonl" in message
    assert not (tmp_path / "datasets").exists() or not any((tmp_path / "datasets").iterdir())
    with pytest.raises(ValueError, match="or a benchmark by name: gsm8k, math500, aime24"):
        load_problems("gsm8kk")
