"""The eval client on rsa and adaptive: runs, and tokens saved against majority(k=max_k)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner

from clients.eval.cli import eval_app
from clients.eval.report import markdown_report, print_table, summarize, tokens_saved
from tests.evalkit import MODEL, ponder_over_fake, read_jsonl, write_problems


async def by_text(answers: Sequence[str | None]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for i, answer in enumerate(answers):
        if answer:
            groups.setdefault(answer, []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def record(spec: str, pid: str, tokens: int, correct: bool) -> dict[str, Any]:
    usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}
    return {
        "scaffold": spec,
        "id": pid,
        "sample": 0,
        "extracted": "1",
        "correct": correct,
        "usage": usage,
    }


async def test_the_report_says_what_adaptive_saved_against_majority_at_max_k() -> None:
    records = [
        record("adaptive(max_k=8)", "p1", 40, True),
        record("adaptive(max_k=8)", "p2", 80, False),
        record("majority(k=8)", "p1", 160, True),
        record("majority(k=8)", "p2", 160, True),
        record("majority(k=4)", "p1", 80, True),  # another k: not the baseline
        record("rsa(n=4, k=2, rounds=1)", "p1", 300, True),
    ]
    report = await summarize(records, by_text)
    [saved] = report["tokens_saved"]
    assert (saved["scaffold"], saved["against"]) == ("adaptive(max_k=8)", "majority(k=8)")
    assert saved["completion_tokens"] == 60 and saved["baseline_completion_tokens"] == 160
    assert saved["saved_fraction"] == 100 / 160
    assert (saved["accuracy"], saved["baseline_accuracy"]) == (0.5, 1.0)
    markdown = markdown_report(report)
    assert "## Tokens saved against majority voting" in markdown
    assert "| adaptive(max_k=8) | majority(k=8) | 60 | 160 | 62.5 | 50.0 | 100.0 |" in markdown
    assert "| rsa(n=4, k=2, rounds=1) |" in markdown
    out = io.StringIO()
    print_table(report, Console(file=out, width=160))
    assert "adaptive(max_k=8) generated 62.5% fewer completion tokens than majority(k=8)" in (
        out.getvalue()
    )


def test_only_a_matching_majority_is_a_baseline() -> None:
    a = {"scaffold": "adaptive(max_k=8, solver=gsr(n=2))", "completion_tokens": 1.0}
    assert tokens_saved(a, {"scaffold": "majority(k=8)", "completion_tokens": 2.0}) is None
    b = {"scaffold": "majority(k=8, solver=gsr(n=2))", "completion_tokens": 2.0}
    assert tokens_saved(a, b) is not None
    assert tokens_saved({"scaffold": "none", "completion_tokens": 1.0}, b) is None


def test_eval_runs_rsa_and_adaptive_and_reports_the_saving(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "add.jsonl", 3)
    cli = CliRunner()
    specs = ["adaptive(max_k=8, wave=4)", "majority(k=8)", "rsa(n=3, k=2, rounds=1)"]
    with ponder_over_fake() as (url, _):
        args = ["--base-url", url, "--model", MODEL, "--dataset", str(data), "--seed", "1"]
        for spec in specs:
            args += ["-s", spec]
        args += ["--grade-workers", "1", "--no-progress", "--out", str(tmp_path / "run")]
        result = cli.invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # the terminal wraps it
    assert "adaptive(max_k=8, wave=4) generated" in said
    assert "fewer completion tokens than majority(k=8)" in said
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert {r["scaffold"] for r in records} == set(specs)
    assert all(not r.get("error") for r in records)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    [saved] = report["tokens_saved"]
    assert saved["against"] == "majority(k=8)"
    assert 0 <= saved["completion_tokens"] <= saved["baseline_completion_tokens"]
    assert "## Tokens saved against majority voting" in (tmp_path / "run" / "report.md").read_text()
    rsa = next(s for s in report["scaffolds"] if s["scaffold"].startswith("rsa"))
    assert rsa["engine_calls"] == 4 and rsa["errors"] == 0


async def test_compare_says_what_adaptive_saved_when_paired_with_majority(tmp_path: Path) -> None:
    from clients.eval.compare import compare_runs, print_comparison

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(record("majority(k=8)", p, 160, True)) + "\n" for p in "xy"))
    b.write_text("".join(json.dumps(record("adaptive(max_k=8)", p, 40, True)) + "\n" for p in "xy"))
    result = await compare_runs(a, b, by_text)
    [pair] = result["pairs"]
    assert pair["tokens_saved"]["saved_fraction"] == 0.75
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=200))
    assert "adaptive(max_k=8) generated 75.0% fewer completion tokens" in out.getvalue()
