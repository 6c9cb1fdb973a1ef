"""``ponder train data`` when its engine's requests fail: every problem failing (an
unknown model's 404, an engine nobody listens on) is exit 1 with one line naming the
first error and the count, not an empty run that exits 0 with a hint about grading;
some failing is reported as before, with their count of all.

Each runs the real ``ponder`` (:mod:`tests.ponder_command`) against a Ponder server on
loopback over the fake engine, or the fake engine itself.
"""

from __future__ import annotations

from pathlib import Path

from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.evalkit import MODEL, adder, ponder_over_fake, write_problems
from tests.ponder_command import error_line, run_ponder

NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens


def _data(engine: str, model: str, data: Path, run: Path) -> list[str]:
    return [
        "train",
        "data",
        str(run),
        "--dataset",
        str(data),
        "--engine",
        engine,
        "--model",
        model,
        "--scaffold",
        "single",
        "--concurrency",
        "1",
        "--grade-workers",
        "1",
        "--no-progress",
    ]


def test_every_problem_failing_for_an_unknown_model_exits_1_in_one_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "problems.jsonl", 3)
    with ponder_over_fake() as (url, _engine):
        done = run_ponder(_data(url, "no-such-model", data, tmp_path / "run"))
    last = error_line(done, 1)
    assert last.startswith("error: all 3 problems failed, none traced: add-0-0000"), last
    assert "HTTP 404" in last and "no-such-model" in last, last
    assert "no SFT rows" not in done.stderr  # not a grading problem


def test_an_engine_nobody_listens_on_exits_1_in_one_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "problems.jsonl", 1)
    done = run_ponder(_data(NOWHERE, "m", data, tmp_path / "run"))
    last = error_line(done, 1)
    assert last.startswith("error: the problem failed, none traced: add-0-00000"), last
    assert f"could not connect to engine {NOWHERE}" in last, last


def test_some_problems_failing_are_counted_of_all(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "problems.jsonl", 3)
    with running_fake_engine(FakeEngineConfig(respond=adder)) as engine:
        engine.config.fail_next(400, message="injected refusal")
        done = run_ponder(_data(engine.base_url, MODEL, data, tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    assert "2/3 problems traced" in done.stdout
    err = done.stderr.splitlines()
    assert err[-1] == "1 of 3 problems failed; rerun to retry them", err
    assert any(line.startswith("failed add-0-0000") and "injected refusal" in line for line in err)
