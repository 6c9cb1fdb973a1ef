"""Trace collection into a resumable run directory, and the ``ponder train`` commands."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scaffolds.engines.mock import MockEngine
from scaffolds.evaluation.problems import ProblemRow
from training.cli import train_app
from training.collect import collect, read_problems
from training.pipeline import DataReport, make_data
from training.runs import RunConflictError, RunDir, last_checkpoint, read_rows
from training.traces import read_records

runner = CliRunner()


def problems_file(path: Path, count: int = 4) -> Path:
    lines = [
        json.dumps({"id": f"q{i}", "problem": f"{i}+{i}=", "answer": str(2 * i)})
        for i in range(count)
    ]
    path.write_text("\n".join([*lines, "{broken", '{"answer": "no problem"}']) + "\n")
    return path


def test_load_problems_skips_bad_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="training.collect"):
        rows = read_problems(problems_file(tmp_path / "p.jsonl"))
    assert [r.id for r in rows] == ["q0", "q1", "q2", "q3"]
    skipped = [r.getMessage() for r in caplog.records]
    assert [m.split(" ")[1:3] for m in skipped] == [["line", "5:"], ["line", "6:"]]
    assert all(m.endswith("; skipped") for m in skipped)
    assert read_problems(tmp_path / "p.jsonl", limit=2)[-1].answer == "2"


def test_collect_reports_failures_and_keeps_going() -> None:
    def handler(request: object) -> str:
        if "boom" in str(getattr(request, "prompt", "")):
            raise RuntimeError("engine down")
        return "4"

    from scaffolds.strategies import Single

    kept: list[object] = []
    problems = [ProblemRow("a", "2+2="), ProblemRow("b", "boom")]
    stats = asyncio.run(collect(Single(), problems, MockEngine(handler), sink=kept.append))
    assert (stats.done, stats.failed, len(kept)) == (1, 1, 1)
    assert "engine down" in stats.errors[0]


def test_make_data_resumes_and_mixes(tmp_path: Path) -> None:
    engine = MockEngine(
        lambda r: "\\boxed{5}" if "Candidate" in r.prompt_text() else ["\\boxed{5}", "\\boxed{9}"]
    )
    problems = [ProblemRow(f"q{i}", f"{i}+{5 - i}=", "5") for i in range(3)]
    run = RunDir(tmp_path / "run")

    def make(count: int, **options: Any) -> DataReport:
        return asyncio.run(
            make_data(
                run,
                problems[:count],
                engine,
                scaffold="gsr(n=2)",
                progress=False,
                inline_grading=True,
                **options,
            )
        )

    first = make(2)
    assert len(engine.requests) == 4  # 2 problems x (candidates + refine)
    assert first.counts == {"direct": 2, "gsr_refine": 2} and first.sft_rows == 2
    second = make(3, direct_ratio=0.5)
    assert len(engine.requests) == 6  # only the new problem ran
    assert second.records == 3
    refine = read_rows(run.data_dir / "gsr_refine.jsonl")
    assert [r["id"] for r in refine] == ["q0", "q1", "q2"]
    assert all(r["candidates_correct"] == 1 for r in refine)
    assert len(read_rows(run.data_dir / "direct.jsonl")) == 3
    sft = read_rows(run.data_dir / "sft.jsonl")
    assert all(set(r) == {"prompt", "completion"} for r in sft)
    assert len(sft) == 6 and sum(r["prompt"].endswith("=") for r in sft) == 3
    with pytest.raises(RunConflictError):
        asyncio.run(make_data(run, problems, engine, scaffold="rc", progress=False))


def test_cli_data_on_a_local_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = problems_file(tmp_path / "p.jsonl")
    run_dir = tmp_path / "run"
    base = ["data", str(run_dir), "--dataset", str(data), "--engine", f"hf:{tiny_model_dir}"]
    opts = ["--scaffold", "gsr(n=2)", "--prompt-set", "compact", "--max-tokens", "3"]
    opts += ["--no-progress", "--grade-workers", "1", "--threads", "1"]
    result = runner.invoke(train_app, [*base, *opts, "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert "2/2 problems traced" in result.output
    sft_rows = read_rows(run_dir / "data" / "sft.jsonl")
    said = "no SFT rows: a row is kept only when" in " ".join(result.output.split())
    assert said == (not sft_rows)
    records = list(read_records(run_dir / "traces.jsonl"))
    assert [r.id for r in records] == ["q0", "q1"]
    prompts = [e.prompt for e in records[0].events if getattr(e, "type", "") == "step_started"]
    assert prompts[0] == "0+0=" and prompts[1].startswith("0+0=[")  # the compact templates
    result = runner.invoke(train_app, [*base, *opts, "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert [r.id for r in read_records(run_dir / "traces.jsonl")] == ["q0", "q1", "q2"]
    result = runner.invoke(train_app, [*base, "--scaffold", "rc", "--prompt-set", "compact"])
    assert result.exit_code == 2 and "new run dir" in result.output
    result = runner.invoke(train_app, ["status", str(run_dir)])
    assert result.exit_code == 0 and "traces: 3 problems" in result.output


def test_cli_data_on_a_missing_local_model_fails_up_front(tmp_path: Path) -> None:
    data = problems_file(tmp_path / "p.jsonl")
    missing = tmp_path / "no-model"
    args = ["data", str(tmp_path / "run"), "--dataset", str(data), "--engine", f"hf:{missing}"]
    result = runner.invoke(train_app, [*args, "--no-progress"])
    assert result.exit_code == 2 and "cannot load" in result.output
    assert not (tmp_path / "run" / "traces.jsonl").exists()


def test_cli_sft_on_a_file_with_no_rows_says_so_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "sft.jsonl"
    empty.write_text("")
    args = ["sft", "--model", "unused", "--data", str(empty), "--out", str(tmp_path / "out")]
    result = runner.invoke(train_app, [*args, "--no-progress"])
    assert result.exit_code == 2
    assert f"{empty} has no rows to train on" in " ".join(result.output.split())
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3


def test_cli_sft_resumes_from_its_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = tmp_path / "sft.jsonl"
    lines = [{"prompt": f"{i}+1=[{i},{i + 2}]", "completion": str(i + 1)} for i in range(6)]
    rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = tmp_path / "sft"
    args = ["sft", "--model", str(tiny_model_dir), "--data", str(rows), "--out", str(out)]
    args += ["--batch-size", "2", "--save-steps", "1", "--cpu", "--no-progress"]
    args += ["--threads", "1", "--lr", "1e-3", "--max-length", "64"]
    result = runner.invoke(train_app, [*args, "--max-steps", "1", "--prompt-set", "compact"])
    assert result.exit_code == 0, result.output
    assert last_checkpoint(out) == str(out / "checkpoint-1")
    result = runner.invoke(train_app, [*args, "--max-steps", "2", "--prompt-set", "compact"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "final" / "ponder_training.json").read_text())
    assert info["global_step"] == 2 and info["prompt_set"] == "compact"
    assert (out / "final" / "tokenizer.json").exists()
    assert (out / "log.jsonl").exists()


def test_cli_grpo_with_mixed_modes(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = problems_file(tmp_path / "p.jsonl")
    out = tmp_path / "grpo"
    args = ["grpo", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]
    args += ["--mix", "direct=1,gsr_refine=1", "--prompt-set", "compact"]
    args += ["--num-generations", "2", "--batch-size", "4", "--max-completion-length", "4"]
    args += ["--num-candidates", "2", "--context-max-tokens", "3", "--max-steps", "1"]
    args += ["--reward", "correctness", "--reward", "boxed", "--cpu", "--no-progress"]
    args += ["--threads", "1", "--lr", "1e-3"]
    result = runner.invoke(train_app, args)
    assert result.exit_code == 0, result.output
    rows = read_rows(out / "data" / "grpo_rows.jsonl")
    assert sorted(r["mode"] for r in rows) == ["direct", "direct", "gsr_refine", "gsr_refine"]
    traces = (out / "rollouts.jsonl").read_text().splitlines()
    assert len(traces) == 2  # one step, two groups
    assert (out / "final" / "ponder_training.json").exists()
    bad = runner.invoke(train_app, [*args[:7], "--mix", "nope", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown mode" in bad.output


def test_cli_verl_writes_parquet_and_yaml(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    data = problems_file(tmp_path / "p.jsonl")
    out = tmp_path / "verl"
    args = ["verl", "--data", str(data), "--out", str(out), "--mix", "gsr_refine"]
    result = runner.invoke(train_app, args)
    assert result.exit_code == 0, result.output
    from datasets import Dataset

    table = Dataset.from_parquet(str(out / "train.parquet"))
    first = table[0]
    assert first["agent_name"] == "ponder_scaffold"
    assert first["prompt"] == [{"role": "user", "content": "0+0="}]
    assert first["reward_model"]["ground_truth"] == "0"
    assert first["extra_info"]["mode"] == "gsr_refine"
    assert "ponder_scaffold" in (out / "agent_loop.yaml").read_text()
