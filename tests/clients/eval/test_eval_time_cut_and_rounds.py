"""``ponder eval`` counts runs a time limit cut apart from wrong answers, and reports
RSA's per-round numbers (issue 51, findings 1 and 2).

The report's rules on hand-made records, then the whole client against a real Ponder
server on loopback fronting the fake engine (testing/), with a slow call scripted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from clients.eval.pipeline import evaluate
from clients.eval.report import markdown_report, population_metrics, summarize_scaffold
from clients.eval.runner import EvalConfig
from scaffolds.evaluation.answers import cluster_answers
from scaffolds.evaluation.grading import MathGrader
from scaffolds.evaluation.problems import load_problems
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.evalkit import MODEL, read_jsonl, serve_ponder

SLOW_WORDS = 100_000
"""The slow call's length: at 1 ms a token, 100 s, far past the runs' 3 s limit."""


async def by_string(answers: Sequence[str | None]) -> list[list[int]]:
    """Groups equal answers (the report's clustering, without math-verify)."""
    return cluster_answers(answers, verify=False)


def population(round_: int, answers: list[str | None], reference: str) -> dict[str, Any]:
    return {"round": round_, "answers": answers, "correct": [a == reference for a in answers]}


async def test_rsa_rounds_as_rsas_eval_loop_reports_them() -> None:
    """Per round, per problem, as HyperPotatoNeo/RSA eval_loop.py:345-381
    (``evaluate_k_answers_math``, commit 537ec60): ``mean_acc`` is the share of the
    population that is right (:354), ``pass_at_k`` 1 when any member is (:355), and the
    majority is the first-made of the largest clusters (:358-373: ``max`` keeps the first
    of equal counts; clusters are made in member order). A member with no ``\\boxed{}`` is
    extracted as "" (:347), and rewards/math.py:32-40 compares with math-verify, which
    finds "" equal to nothing (``verify(parse("$$"), parse("$$"))`` is False), so an
    unanswered member is a cluster of its own. Over problems each is averaged
    (eval_loop.py:493-507, 531-533: ``mean_acc_k``, ``mean_pass_at_k``,
    ``mean_majority_acc``), once per loop, loop 0 the first population (:655).

    Worked by hand, three members a round:

    - A (reference 4): round 0 [4, 5, -]: mean 1/3, clusters {4} {5} {-} all of one, the
      first {4} is right: majority 1, pass 1. Round 1 [5, 5, 4]: mean 1/3, {5} of two
      wins: majority 0, pass 1.
    - B (reference 7): round 0 [-, 7, 3]: mean 1/3, three clusters of one, the first is
      the unanswered member: majority 0 (a vote that dropped unanswered members would
      say 1), pass 1. Round 1 [7, 7, 7]: 1, 1, 1.
    - C (reference 2): round 0 [1, 1, 3]: 0, 0, 0; no round 1 (its run stopped).

    Round 0 over A, B, C: mean_acc_k (1/3 + 1/3 + 0)/3 = 2/9, majority (1 + 0 + 0)/3 = 1/3,
    pass@k 2/3. Round 1 over A, B: mean_acc_k (1/3 + 1)/2 = 2/3, majority 1/2, pass@k 1.
    """
    records = [
        {"rounds": [population(0, ["4", "5", None], "4"), population(1, ["5", "5", "4"], "4")]},
        {"rounds": [population(0, [None, "7", "3"], "7"), population(1, ["7", "7", "7"], "7")]},
        {"rounds": [population(0, ["1", "1", "3"], "2")]},
        {"scaffold": "no rounds"},
    ]
    rounds = await population_metrics(records, by_string)
    assert rounds is not None
    assert [(r["round"], r["runs"]) for r in rounds] == [(0, 3), (1, 2)]
    assert [r["mean_acc_k"] for r in rounds] == pytest.approx([2 / 9, 2 / 3])
    assert [r["majority"] for r in rounds] == pytest.approx([1 / 3, 1 / 2])
    assert [r["pass_at_k"] for r in rounds] == pytest.approx([2 / 3, 1.0])
    assert await population_metrics([{"scaffold": "single"}], by_string) is None


def record(sample: int, correct: bool, **extra: Any) -> dict[str, Any]:
    fields = {"scaffold": "rc(steps=3)", "id": "p1", "sample": sample, "correct": correct}
    return fields | {"extracted": "4" if correct else "5", "latency_s": 1.0} | extra


async def test_a_time_cut_run_is_counted_apart_never_as_a_wrong_answer() -> None:
    """Two answered runs (one right, one wrong) and two a time limit cut (one with an
    earlier chunk's answer, one with none): accuracy 1/2 over the two, time cut 2, no
    error; the cut runs' latency still counts."""
    records = [
        record(0, True),
        record(1, False),
        record(2, False, cut_short=True, cut_reason="time", latency_s=9.0),
        record(3, False, cut_short=True, cut_reason="time", extracted=None, latency_s=9.0),
    ]
    summary = await summarize_scaffold("rc(steps=3)", records, by_string)
    assert summary["accuracy"] == 0.5
    assert (summary["samples"], summary["graded"], summary["time_cut"]) == (4, 2, 2)
    assert summary["errors"] == 0 and summary["ungraded"] == 0
    assert summary["pass_at"] == {"1": 0.5, "2": 1.0}
    assert summary["latency_s"]["max"] == 9.0
    table = markdown_report({"scaffolds": [summary]})
    assert "| time cut |" in table and "| 2 |" in table


# -- end to end ------------------------------------------------------------------------------
def respond(body: dict[str, Any]) -> list[str]:
    """A slow call for the problem that says SLOW; else RSA's population (a sample
    marked FIRST) or, for a prompt that shows such samples, an aggregation."""
    n = int(body.get("n") or 1)
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    if "SLOW" in prompt:
        return [" word" * SLOW_WORDS] * n
    if "FIRST" in prompt:
        return ["AGG \\boxed{2}"] * n
    return ["FIRST \\boxed{2}", "FIRST \\boxed{3}"][:n] if n == 2 else ["FIRST \\boxed{2}"] * n


@pytest.fixture(scope="module")
def ponder() -> Iterator[tuple[str, FakeEngineHandle]]:
    config = FakeEngineConfig(model=MODEL, respond=respond, latency_per_token=0.001)
    with running_fake_engine(config) as engine, serve_ponder(engine) as url:
        yield url, engine


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def test_eval_counts_time_cut_runs_apart(
    ponder: tuple[str, FakeEngineHandle], tmp_path: Path
) -> None:
    """Under a 3 s limit (the request's budget): "SLOW" gets no answer in time (the
    server's 504 ``deadline_exceeded``), the other problem is answered; both are
    finished samples, neither an error, and accuracy counts only the answered one."""
    url, _ = ponder
    rows = [
        {"id": "fast", "problem": "What is 1+1?", "answer": "2"},
        {"id": "slow", "problem": "SLOW: what is 1+1?", "answer": "2"},
    ]
    problems = load_problems(str(write(tmp_path / "p.jsonl", rows))).problems
    budget = {"budget": {"timeout_s": 3.0}}
    cfg = EvalConfig(url, MODEL, ["single"], tmp_path / "run", max_retries=0, extra_body=budget)
    outcome, report = await evaluate(
        cfg, problems, MathGrader(inline=True, answer_format="boxed"), progress=False
    )
    assert outcome.errors == 0
    records = {r["id"]: r for r in read_jsonl(cfg.results_path)}
    assert records["slow"]["cut_reason"] == "time" and records["slow"]["finish_reason"] == "length"
    assert "504" in records["slow"]["time_cut"]  # the server answered deadline_exceeded
    assert records["fast"]["cut_reason"] is None and records["fast"]["correct"] is True
    [summary] = report["scaffolds"]
    assert (summary["accuracy"], summary["time_cut"], summary["errors"]) == (1.0, 1, 0)


async def test_eval_reports_rsas_rounds(
    ponder: tuple[str, FakeEngineHandle], tmp_path: Path
) -> None:
    """rsa(n=2, k=2, rounds=1): the population answers 2 and 3 (reference 2), round 1's
    aggregations both 2. Round 0: mean_acc_k 1/2, majority 1 (two groups of one, the first
    is 2), pass@k 1; round 1: 1, 1, 1. The eval asks for the trace by itself."""
    url, _ = ponder
    rows = [{"id": "p", "problem": "What is 1+1?", "answer": "2"}]
    problems = load_problems(str(write(tmp_path / "p.jsonl", rows))).problems
    cfg = EvalConfig(url, MODEL, ["rsa(n=2, k=2, rounds=1)"], tmp_path / "run", max_retries=0)
    _, report = await evaluate(
        cfg, problems, MathGrader(inline=True, answer_format="boxed"), progress=False
    )
    [record] = read_jsonl(cfg.results_path)
    assert "trace" not in record  # no --trace: only the rounds are kept
    assert [r["answers"] for r in record["rounds"]] == [["2", "3"], ["2", "2"]]
    rounds = report["scaffolds"][0]["rounds"]
    assert [(r["mean_acc_k"], r["majority"], r["pass_at_k"]) for r in rounds] == [
        (0.5, 1.0, 1.0),
        (1.0, 1.0, 1.0),
    ]
    assert "mean_acc_k %" in (cfg.out_dir / "report.md").read_text()


async def test_the_eval_client_waits_for_a_long_run_by_default(tmp_path: Path) -> None:
    """No read limit (it was 1800 s): a non-streamed run sends nothing until it ends; the
    connection is still given up on when it cannot be opened."""
    from clients.eval.runner import CONNECT_TIMEOUT_S, _Client

    cfg = EvalConfig("http://127.0.0.1:9/v1", MODEL, ["single"], tmp_path)
    assert cfg.timeout_s is None
    client = _Client(cfg)
    try:
        timeout = client.client.timeout
        assert not isinstance(timeout, float | None)
        assert (timeout.read, timeout.connect) == (None, CONNECT_TIMEOUT_S)
    finally:
        await client.aclose()


async def test_compare_leaves_time_cut_runs_out_of_the_paired_count(tmp_path: Path) -> None:
    """Run A: p1 right, p2 cut by time. Run B: p1 right, p2 wrong. The paired count sees
    only p1 (a tie): A's time-cut p2 is neither a loss nor a problem A answered."""
    from clients.eval.compare import compare_runs

    def rows(second: dict[str, Any]) -> list[dict[str, Any]]:
        first = {"scaffold": "single", "id": "p1", "sample": 0, "correct": True, "extracted": "4"}
        return [first | {"response": "4"}, second | {"scaffold": "single", "id": "p2", "sample": 0}]

    cut = {"correct": False, "extracted": None, "response": "", "cut_reason": "time"}
    wrong = {"correct": False, "extracted": "5", "response": "5"}
    a = write(tmp_path / "a.jsonl", rows(cut))
    b = write(tmp_path / "b.jsonl", rows(wrong))
    [pair] = (await compare_runs(a, b, by_string))["pairs"]
    assert (pair["a"]["time_cut"], pair["b"]["time_cut"]) == (1, 0)
    assert (pair["a"]["accuracy"], pair["b"]["accuracy"]) == (1.0, 0.5)
    assert (pair["paired"]["common"], pair["paired"]["tied"]) == (1, 1)
