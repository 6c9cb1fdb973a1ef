"""``ponder eval`` end to end through its typer app: run, rerun, report, compare."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from clients.eval.cli import eval_app
from tests.evalkit import MODEL, keys, ponder_over_fake, read_jsonl, write_problems


def test_run_rerun_report_and_compare(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "add.jsonl", 5)
    with data.open("a") as handle:
        handle.write("{this line is broken\n")
    cli = CliRunner()
    with ponder_over_fake() as (url, engine):
        base = ["--base-url", url, "--model", MODEL, "--dataset", str(data)]
        args = [*base, "--scaffold", "single", "-s", "majority(k=3)", "--samples", "2"]
        args += ["--seed", "1", "--concurrency", "3", "--grade-workers", "1", "--no-progress"]
        run_a = tmp_path / "a"
        first = cli.invoke(eval_app, [*args, "--out", str(run_a)])
        assert first.exit_code == 0, first.output
        assert "line 6" in first.output and "skipped" in first.output
        assert "majority(k=3)" in first.output  # the summary table
        results = read_jsonl(run_a / "results.jsonl")
        assert len(results) == 5 * 2 * 2 == len(set(keys(results)))

        calls = engine.state.calls
        rerun = cli.invoke(eval_app, [*args, "--out", str(run_a)])
        assert rerun.exit_code == 0, rerun.output
        assert engine.state.calls == calls  # nothing left to do
        assert read_jsonl(run_a / "results.jsonl") == results
        assert "20 samples were already done, 0 finished now" in rerun.output

        run_b = tmp_path / "b"
        other_args = ["-s", "single", "--samples", "2", "--seed", "9", "--no-progress"]
        other = cli.invoke(eval_app, [*base, *other_args, "--out", str(run_b)])
        assert other.exit_code == 0, other.output

    report = json.loads((run_a / "report.json").read_text())
    assert [s["scaffold"] for s in report["scaffolds"]] == ["single", "majority(k=3)"]
    assert report["model"] == MODEL and report["samples"] == 2 and report["problems"] == 5
    markdown = (run_a / "report.md").read_text()
    assert "| single |" in markdown and "![accuracy_vs_tokens.png]" in markdown
    png = (run_a / "accuracy_vs_tokens.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000

    compared = cli.invoke(
        eval_app,
        ["compare", str(run_a / "results.jsonl"), str(run_b), "--json", str(tmp_path / "cmp.json")],
    )
    assert compared.exit_code == 0, compared.output
    assert "paired over 5 problems" in compared.output
    saved = json.loads((tmp_path / "cmp.json").read_text())
    assert [(p["a"] or {}).get("scaffold") for p in saved["pairs"]] == ["single", "majority(k=3)"]
    assert saved["pairs"][1]["b"] is None

    (run_a / "report.md").unlink()
    rebuilt = cli.invoke(eval_app, ["report", str(run_a)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert (run_a / "report.md").is_file()


def test_usage_errors(tmp_path: Path) -> None:
    cli = CliRunner()
    missing = cli.invoke(eval_app, ["--model", "m"])
    assert missing.exit_code == 2 and "missing --base-url, --dataset, --out" in missing.output
    data = write_problems(tmp_path / "add.jsonl", 2)
    common = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", str(tmp_path)]
    bad_spec = cli.invoke(eval_app, [*common, "--dataset", str(data), "-s", "gsr(n=4"])
    assert bad_spec.exit_code == 2 and "gsr(n=4" in bad_spec.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("nonsense\n")
    nothing = cli.invoke(eval_app, [*common, "--dataset", str(empty)])
    assert nothing.exit_code == 2 and "no usable problems" in nothing.output
    judge = cli.invoke(eval_app, [*common, "--dataset", str(data), "--grader", "judge"])
    assert judge.exit_code == 2 and "--judge-url" in judge.output
