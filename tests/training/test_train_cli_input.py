"""What ``ponder train`` says about its input, from the real command (none of these
trains): malformed JSON names the file and its line; problems (the eval format) are read
where problems are wanted and refused in one line, naming the fields, where SFT rows are;
an empty dataset exits 2, as ``ponder eval`` does; and when ``data/sft.jsonl`` comes out
empty, the hint names the real cause."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.evalkit import MODEL, write_problems
from tests.ponder_command import run_ponder

_SUM = re.compile(r"(\d{3})\+(\d{3})=")


def _sft(data: Path, tmp_path: Path) -> list[str]:
    return ["train", "sft", "--model", "unused", "--data", str(data), "--out", str(tmp_path / "o")]


def test_sft_on_malformed_json_names_the_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "sft.jsonl"
    good = json.dumps({"prompt": "1+1=", "completion": "2"})
    data.write_text(f'{good}\n\n{good}\n{{"prompt": "2+2=",\n')
    done = run_ponder(_sft(data, tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {data} line 4: invalid JSON (Expecting property name enclosed in double "
        "quotes at column 19)"
    ]


def test_sft_on_a_problems_file_is_refused_in_one_line_naming_the_fields(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "problems.jsonl", 2)
    done = run_ponder(_sft(data, tmp_path))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {data}: row 1 needs prompt and completion"), line
    assert "`ponder train data` turns problems into SFT rows" in line


def test_data_on_an_empty_dataset_exits_2(tmp_path: Path) -> None:
    for name, text in (("empty.jsonl", ""), ("unusable.jsonl", "nonsense\n")):
        data = tmp_path / name
        data.write_text(text)
        args = ["train", "data", str(tmp_path / name.replace(".", "-")), "--dataset", str(data)]
        done = run_ponder([*args, "--engine", "http://127.0.0.1:9/v1", "--model", "m"])
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[-1] == f"error: no usable problems in {data}"
        if text:  # the unreadable line is named, with its file and number
            assert f"{data} line 1: invalid JSON" in done.stderr


def _right_candidates_empty_refines(body: dict[str, Any]) -> list[str]:
    """Each candidate solves the problem; each refinement (its prompt lists candidates)
    comes back empty, as a small model's does when its thinking runs to the limit."""
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    if "Candidate" in prompt:
        return [""] * int(body.get("n") or 1)
    found = _SUM.search(prompt)
    total = int(found.group(1)) + int(found.group(2)) if found else 0
    return [f"Adding up: \\boxed{{{total}}}"] * int(body.get("n") or 1)


def test_data_says_why_sft_rows_are_empty(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "problems.jsonl", 2)  # the eval format: id/problem/answer
    config = FakeEngineConfig(respond=_right_candidates_empty_refines)
    with running_fake_engine(config) as engine:
        done = run_ponder(
            [
                "train",
                "data",
                str(tmp_path / "run"),
                "--dataset",
                str(data),
                "--engine",
                engine.base_url,
                "--model",
                MODEL,
                "--scaffold",
                "gsr(n=2)",
                "--direct-ratio",
                "0.25",
                "--grade-workers",
                "1",
                "--no-progress",
            ]
        )
    assert done.returncode == 0, done.stderr
    assert "2/2 problems traced" in done.stdout
    [hint] = [line for line in done.stderr.splitlines() if line.startswith("no SFT rows")]
    assert "2 of 2 gsr_refine texts came back empty" in hint, hint
    assert "nothing to mix the 4 direct rows into" in hint, hint
    assert "no traced text of this run was" not in hint  # the candidates were right


def test_piped_training_progress_is_train_logs_lines_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under pytest stderr is not a terminal, as when piped: the trainer's progress is
    ``train.log``'s lines (step, percent, ETA) echoed, not a rich bar. No training: the
    callbacks are driven with the trainer's state as it would be."""
    pytest.importorskip("transformers")
    from training.common import TrainSettings, trainer_callbacks

    callbacks = trainer_callbacks(TrainSettings(progress=True), tmp_path)
    assert not any("Rich" in type(c).__name__ for c in callbacks)
    state = SimpleNamespace(global_step=0, max_steps=4, is_world_process_zero=True)
    for callback in callbacks:
        if hasattr(callback, "on_train_begin"):
            callback.on_train_begin(None, state, None)
    state.global_step = 1
    for callback in callbacks:
        callback.on_log(None, state, None, logs={"loss": 1.5})
    lines = capsys.readouterr().err.splitlines()
    assert re.search(
        r"step 1/4 \(25%\)  loss 1\.5000  elapsed \d+:\d\d:\d\d  eta \d+:\d\d:\d\d$", lines[-1]
    ), lines
    assert (tmp_path / "train.log").read_text().splitlines()[-1].endswith(lines[-1][9:])
