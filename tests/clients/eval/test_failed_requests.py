"""``ponder eval`` when requests fail: every request failing (an unknown model's 404, an
engine nobody listens on) is exit 1 with one line naming the first error and the count,
not an empty run that exits 0; some failing is recorded and reported as before, with
their count and the first error.

Each runs the real ``ponder`` (:mod:`tests.ponder_command`) against a Ponder server on
loopback over the fake engine, or the fake engine itself.
"""

from __future__ import annotations

from pathlib import Path

from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.evalkit import adder, ponder_over_fake, read_jsonl, write_problems
from tests.ponder_command import error_line, run_ponder

NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens


def _eval(url: str, model: str, data: Path, out: Path, *more: str) -> list[str]:
    return [
        "eval",
        "--base-url",
        url,
        "--model",
        model,
        "--dataset",
        str(data),
        "--concurrency",
        "1",
        "--max-retries",
        "0",
        "--grade-workers",
        "1",
        "--out",
        str(out),
        *more,
    ]


def test_every_request_for_an_unknown_model_failing_exits_1_in_one_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "add.jsonl", 3)
    with ponder_over_fake() as (url, _engine):
        done = run_ponder(_eval(url, "no-such-model", data, tmp_path / "run"))
    last = error_line(done, 1)
    assert last.startswith(f"error: all 3 requests to {url} failed, none succeeded: "), last
    assert "NotFoundError" in last
    assert "no-such-model" in last
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    assert len(records) == 3 and all(r.get("error") for r in records)  # kept: a rerun retries


def test_an_engine_nobody_listens_on_exits_1_in_one_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "add.jsonl", 2)
    done = run_ponder(_eval(NOWHERE, "m", data, tmp_path / "run"))
    last = error_line(done, 1)
    said = f"error: all 2 requests to {NOWHERE} failed, none succeeded: APIConnectionError"
    assert last.startswith(said), last
    assert "ConnectError" in last, last  # the cause, not only the SDK's "Connection error."


def test_some_requests_failing_are_reported_with_their_count(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "add.jsonl", 3)
    with running_fake_engine(FakeEngineConfig(respond=adder)) as engine:
        engine.config.fail_next(400, message="injected refusal")
        done = run_ponder(
            _eval(engine.base_url, "fake-model", data, tmp_path / "run", "-s", "none")
        )
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    assert "0 samples were already done, 2 finished now, 1 failed (rerun to retry)." in (
        "\n".join(err)
    )
    assert err[-1].startswith("warning: 1 of 3 requests failed; the first: BadRequestError"), err
    assert "injected refusal" in err[-1]
