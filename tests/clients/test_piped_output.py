"""Piped output stays readable: ``--help`` is not squeezed into 80 columns when stdout is
not a terminal, and progress is plain lines with a percent and an ETA. ``ponder eval``
warns about a problem with no answer (file and line) and counts its samples as ungraded.

Each runs the real ``ponder`` with stdout and stderr piped (:mod:`tests.ponder_command`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.evalkit import MODEL, ponder_over_fake, write_problems
from tests.ponder_command import run_ponder

PROGRESS_LINE = re.compile(r"^single: \d+/5 \((\d+)%\) elapsed \d+:\d\d:\d\d eta (\S+)")


def test_help_is_laid_out_at_its_natural_width_when_piped() -> None:
    eval_help = run_ponder(["eval", "--help"])
    assert eval_help.returncode == 0, eval_help.stderr
    concurrency = [line for line in eval_help.stdout.splitlines() if "--concurrency" in line]
    assert len(concurrency) == 1  # no box drawing, no description wrapped onto more lines
    assert concurrency[0].rstrip().endswith("else 256, vLLM's default batch)  [x>=1]")
    assert len(concurrency[0]) > 80

    sft_help = run_ponder(["train", "sft", "--help"])
    assert sft_help.returncode == 0, sft_help.stderr
    lines = sft_help.stdout.splitlines()
    assert any(
        line.strip().startswith("Supervised fine-tuning")
        and line.rstrip().endswith("Progress also goes to OUT/train.log.")
        for line in lines
    )
    epochs = next(line for line in lines if line.lstrip().startswith("--epochs"))
    assert epochs.rstrip().endswith("(when --max-steps is -1)  [default: 1.0]")

    top = run_ponder(["--help"])
    assert any(
        line.rstrip().endswith("GRPO with scaffold rollouts.")
        for line in top.stdout.splitlines()
        if line.lstrip().startswith("train")
    )


def test_piped_eval_prints_progress_lines_and_counts_a_problem_without_answer(
    tmp_path: Path,
) -> None:
    data = write_problems(tmp_path / "add.jsonl", 4)
    with data.open("a") as handle:
        handle.write(json.dumps({"id": "unanswered", "problem": "123+456="}) + "\n")
    with ponder_over_fake() as (url, _engine):
        done = run_ponder(
            [
                "eval",
                "--base-url",
                url,
                "--model",
                MODEL,
                "--dataset",
                str(data),
                "-s",
                "single",
                "--concurrency",
                "1",
                "--grade-workers",
                "1",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    warned = [line for line in err if "no answer" in line]
    assert len(warned) == 1 and f"{data} line 5" in warned[0] and "'unanswered'" in warned[0]

    progress = [m for m in map(PROGRESS_LINE.match, err) if m]
    assert len(progress) >= 2, done.stderr  # one per sample here: each passes 5 %
    assert progress[-1].group(1) == "100"
    assert all(m.group(2) != "?" for m in progress)  # an ETA once a sample is done
    assert not any("━" in line for line in err)  # no bar drawn into the pipe

    summary = json.loads((tmp_path / "run" / "report.json").read_text())["scaffolds"][0]
    assert (summary["samples"], summary["graded"], summary["ungraded"]) == (5, 4, 1)
    table = next(line for line in done.stdout.splitlines() if line.lstrip().startswith("single"))
    assert table.split()[-1] == "1"  # the terminal table's "ungraded" column
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "| ungraded |" in markdown
